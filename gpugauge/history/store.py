"""The results history: runs and their results, appended one run per transaction.

:class:`History` is the one way in and out. ``History.open(target)`` takes a SQLite path
(the default :func:`default_path`, beside pytest-benchmark's storage) or a
``postgresql://`` URL, and checks or upgrades the schema (:mod:`gpugauge.history.schema`);
``History.open(target, read_only=True)``, for the commands that only read, creates and
changes nothing and refuses what is not a gpugauge history.
:meth:`History.append` writes a run and all its results in one transaction: a run that is
interrupted, even by SIGKILL, leaves nothing, and a run id already stored adds nothing (so
an import is idempotent). :meth:`History.points` reads one case's metric back in time
order, the input of references and change points; :meth:`History.to_frame` gives every
row as a pandas DataFrame.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from types import TracebackType
from typing import Any

from gpugauge.history.backends import Backend, Tx, open_backend
from gpugauge.history.records import (
    HistoryError,
    MetricRecord,
    Point,
    ResultRecord,
    RunRecord,
    parse_time,
    some,
    time_text,
)
from gpugauge.history.reference import DEFAULT_POLICY, ReferencePolicy
from gpugauge.history.schema import check_schema, ensure_schema
from gpugauge.regress.baselines import KernelShare

DEFAULT_NAME = "gpugauge-history.sqlite"
MIN_PREFIX = 6  # characters a run id's prefix needs (show cuts ids to 13, a session's line to 8)
ENV_VAR = "GPUGAUGE_HISTORY"  # a path or URL that replaces the default (a nightly's secret)


def default_path(storage: Path = Path(".benchmarks")) -> Path:
    """The default history: beside pytest-benchmark's storage folder."""
    return storage / DEFAULT_NAME


def default_target(storage: Path = Path(".benchmarks")) -> str:
    """``$GPUGAUGE_HISTORY`` if set, else :func:`default_path`."""
    return os.environ.get(ENV_VAR) or str(default_path(storage))


_RUN_COLUMNS = (
    "id, time_utc, host, device_class, driver, cuda_runtime, cudnn, torch, git_commit, "
    "flags, argv, profile, source"
)
_RESULT_COLUMNS = (
    "run_id, bench_id, attempt, family, device_class, sm_clock_mhz, power_w, kernels, "
    "verdict, accepted, note"
)
# Each result also keeps its run's host and time (runs never change): judging a case reads
# its keys from one index of results, without a join, however long the history.
_RESULT_WHERE = "host, time_utc"
_METRIC_COLUMNS = (
    "run_id, bench_id, device_class, attempt, metric, median, ci_low, ci_high, n, run_medians, "
    "verdict, reference"
)
_METRIC_KEY = 4  # run_id, bench_id, device_class, attempt: the result a metric row is of


def _marks(columns: str) -> str:
    return ", ".join("?" for _ in columns.split(","))


def _finite(value: float | None, what: str) -> float | None:
    if value is not None and not math.isfinite(value):
        raise HistoryError(f"{what} is {value!r}: the history stores finite numbers only")
    return value


def _run_row(run: RunRecord) -> tuple[Any, ...]:
    return (
        run.id,
        time_text(run.time),
        run.host,
        run.device_class,
        run.driver,
        run.cuda_runtime,
        run.cudnn,
        run.torch,
        run.commit,
        json.dumps(dict(run.flags), sort_keys=True, default=str),
        json.dumps(list(run.argv)),
        run.profile,
        run.source,
    )


def _run_of(row: tuple[Any, ...]) -> RunRecord:
    return RunRecord(
        id=row[0],
        time=parse_time(row[1]),
        host=row[2],
        device_class=row[3],
        driver=row[4],
        cuda_runtime=row[5],
        cudnn=row[6],
        torch=row[7],
        commit=row[8],
        flags=json.loads(row[9]),
        argv=tuple(json.loads(row[10])),
        profile=row[11],
        source=row[12],
    )


def _result_rows(run: RunRecord, r: ResultRecord) -> tuple[tuple[Any, ...], list[tuple[Any, ...]]]:
    run_id = run.id
    where = f"run {run_id}: {r.bench_id}"
    result = (
        run_id,
        r.bench_id,
        r.attempt,
        r.family,
        r.device_class,
        _finite(r.sm_clock_mhz, f"{where}: SM clock"),
        _finite(r.power_w, f"{where}: power"),
        json.dumps([{"name": k.name, "share": k.share} for k in r.kernels]),
        r.verdict,
        int(r.accepted),
        r.note,
        run.host,
        time_text(run.time),
    )
    metrics = [
        (
            run_id,
            r.bench_id,
            r.device_class,
            r.attempt,
            m.metric,
            _finite(m.median, f"{where}: {m.metric} median"),
            _finite(m.ci_low, f"{where}: {m.metric} CI"),
            _finite(m.ci_high, f"{where}: {m.metric} CI"),
            m.n,
            json.dumps([_finite(x, f"{where}: run median") for x in m.run_medians]),
            m.verdict,
            m.reference,
        )
        for m in r.metrics
    ]
    return result, metrics


def _result_of(row: tuple[Any, ...], metrics: tuple[MetricRecord, ...]) -> ResultRecord:
    # row: the result columns after run_id
    return ResultRecord(
        bench_id=row[0],
        family=row[2],
        device_class=row[3],
        metrics=metrics,
        sm_clock_mhz=row[4],
        power_w=row[5],
        kernels=tuple(KernelShare(k["name"], k["share"]) for k in json.loads(row[6])),
        verdict=row[7],
        accepted=bool(row[8]),
        attempt=row[1],
        note=row[9],
    )


def _metric_of(row: tuple[Any, ...]) -> MetricRecord:
    # row: the metric columns after run_id, bench_id, device_class, attempt
    return MetricRecord(
        metric=row[0],
        median=row[1],
        ci_low=row[2],
        ci_high=row[3],
        n=row[4],
        run_medians=tuple(json.loads(row[5])),
        verdict=row[6],
        reference=row[7],
    )


def _judged_keys(rows: Sequence[tuple[Any, ...]], policy: ReferencePolicy) -> set[tuple[str, int]]:
    """(run id, attempt) of the results judging reads, from (host, run, attempt, accepted).

    ``rows`` come by host, then in time order, attempts in order. Per host: the last
    attempt of each run; of those, the first ``policy.runs`` and the last
    ``policy.spread_runs`` accepted, and the last one not accepted.
    """
    kept: set[tuple[str, int]] = set()
    by_host: dict[str, dict[str, tuple[int, bool]]] = {}
    for host, run_id, attempt, ok in rows:
        by_host.setdefault(host, {})[run_id] = (attempt, bool(ok))  # the last attempt stays
    for runs in by_host.values():
        good = [(r, a) for r, (a, ok) in runs.items() if ok]
        bad = [(r, a) for r, (a, ok) in runs.items() if not ok]
        kept.update(good[: policy.runs], good[-policy.spread_runs :], bad[-1:])
    return kept


def _last_attempts(found: Iterable[Point]) -> list[Point]:
    """Per run and device class, the last attempt only (found in attempt order)."""
    last: dict[tuple[str, str], Point] = {}
    for p in found:
        last[(p.run.id, p.result.device_class)] = p
    return list(last.values())


@dataclass(frozen=True)
class Case:
    """One case of the history on one host: how many runs hold it, first and last."""

    bench_id: str
    family: str
    device_class: str
    host: str
    runs: int
    first: datetime
    last: datetime


class History:
    """A results history on SQLite or PostgreSQL; use as a context manager, or close()."""

    def __init__(self, backend: Backend) -> None:
        self._db = backend
        self._windows: dict[int, tuple[dict[str, str], list[str]]] = {}  # see _recent
        self._run_records: dict[str, RunRecord] = {}  # see _points_of
        try:
            if backend.read_only:
                check_schema(backend)
            else:
                ensure_schema(backend)
        except BaseException:
            backend.close()
            raise

    @classmethod
    def open(cls, target: str | Path | None = None, *, read_only: bool = False) -> History:
        """A SQLite path or a ``postgresql://`` URL; None: :func:`default_target`.

        ``read_only``: for reading only; a missing file, or one that is not a gpugauge
        history at this schema version, is a HistoryError, and nothing is created or changed.
        """
        target = default_target() if target is None else target
        return cls(open_backend(target, read_only=read_only))

    @property
    def backend(self) -> str:
        """'sqlite' or 'postgresql'."""
        return self._db.name

    @property
    def file(self) -> Path | None:
        """The SQLite file (None on PostgreSQL)."""
        path = getattr(self._db, "path", None)
        return Path(path) if path is not None else None

    @property
    def where(self) -> str:
        """The history's path or URL (without its password)."""
        return self._db.where

    def close(self) -> None:
        """Close the connection."""
        self._db.close()

    def __enter__(self) -> History:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        err: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def append(self, run: RunRecord, results: Iterable[ResultRecord]) -> bool:
        """Store a run and every result of it in one transaction.

        False (and nothing written) when a run of this id is already stored. Results are
        read inside the transaction: if anything fails or the process dies before the end,
        no part of the run is stored.
        """
        return self.append_runs([(run, results)])[0]

    def append_runs(self, runs: Sequence[tuple[RunRecord, Iterable[ResultRecord]]]) -> list[bool]:
        """Store several runs in one transaction: all of them or, on any error, none.

        Per run, whether it was added (False: a run of its id was already stored). An
        import of several files leaves nothing of the good ones when one cannot be stored.
        """
        self._windows.clear()
        with self._db.transaction() as tx:
            return [self._insert(tx, run, results) for run, results in runs]

    @staticmethod
    def _insert(tx: Tx, run: RunRecord, results: Iterable[ResultRecord]) -> bool:
        added = tx.execute(
            f"INSERT INTO runs ({_RUN_COLUMNS}) VALUES ({_marks(_RUN_COLUMNS)}) "
            "ON CONFLICT (id) DO NOTHING",
            _run_row(run),
        )
        if added != 1:
            return False
        for r in results:
            result, metrics = _result_rows(run, r)
            columns = f"{_RESULT_COLUMNS}, {_RESULT_WHERE}"
            tx.execute(
                f"INSERT INTO results ({columns}) VALUES ({_marks(columns)})",
                result,
            )
            tx.many(
                f"INSERT INTO metrics ({_METRIC_COLUMNS}) VALUES ({_marks(_METRIC_COLUMNS)})",
                metrics,
            )
        return True

    def runs_per_host(self) -> dict[str, int]:
        """How many runs each host has in the history."""
        with self._db.transaction(write=False) as tx:
            return dict(tx.query("SELECT host, COUNT(*) FROM runs GROUP BY host"))

    def bench_ids(self) -> list[str]:
        """Every case id the history holds, sorted (read from an index)."""
        with self._db.transaction(write=False) as tx:
            return sorted(r[0] for r in tx.query("SELECT DISTINCT bench_id FROM results"))

    def has_run(self, run_id: str) -> bool:
        """Whether a run of this id is stored."""
        with self._db.transaction(write=False) as tx:
            return bool(tx.query("SELECT 1 FROM runs WHERE id = ?", (run_id,)))

    def run_id(self, given: str) -> str:
        """The id of the run ``given`` names: its whole id, or a unique prefix of it.

        As git takes a commit: a prefix of :data:`MIN_PREFIX` characters or more that one
        run's id begins with; HistoryError for none, for several (naming them) or for a
        shorter one.
        """
        with self._db.transaction(write=False) as tx:
            if tx.query("SELECT 1 FROM runs WHERE id = ?", (given,)):
                return given
            ids = [r[0] for r in tx.query("SELECT id FROM runs ORDER BY time_utc, id")]
        found = [i for i in ids if i.startswith(given)] if len(given) >= MIN_PREFIX else []
        if len(found) == 1:
            return found[0]
        if len(found) > 1:
            raise HistoryError(
                f"run id {given!r} is ambiguous: {len(found)} runs begin with it "
                f"({some(found)}); give more of it"
            )
        short = len(given) < MIN_PREFIX and any(i.startswith(given) for i in ids)
        why = f"; a prefix needs {MIN_PREFIX} characters or more" if short else ""
        raise HistoryError(f"history {self.where}: no run {given!r}{why}")

    def metrics(self, bench_id: str | None = None) -> list[str]:
        """The metrics the history holds (of one case), sorted."""
        sql, params = "SELECT DISTINCT metric FROM metrics", ()
        if bench_id is not None:
            sql, params = sql + " WHERE bench_id = ?", (bench_id,)
        with self._db.transaction(write=False) as tx:
            return sorted(r[0] for r in tx.query(sql, params))

    def runs(self, host: str | None = None) -> list[RunRecord]:
        """Every run (of one host), oldest first."""
        sql = f"SELECT {_RUN_COLUMNS} FROM runs"
        params: tuple[Any, ...] = ()
        if host is not None:
            sql, params = sql + " WHERE host = ?", (host,)
        with self._db.transaction(write=False) as tx:
            rows = tx.query(sql + " ORDER BY time_utc, id", params)
        return [_run_of(r) for r in rows]

    def cases(self, bench_id: str | None = None) -> list[Case]:
        """Every (case, device class, host) with its run count, by case then host.

        ``bench_id``: that case's only (read through its index, not the whole history).
        """
        where, params = ("WHERE s.bench_id = ? ", (bench_id,)) if bench_id is not None else ("", ())
        with self._db.transaction(write=False) as tx:
            rows = tx.query(
                "SELECT s.bench_id, s.family, s.device_class, r.host, COUNT(DISTINCT r.id), "
                "MIN(r.time_utc), MAX(r.time_utc) FROM results s JOIN runs r ON r.id = s.run_id "
                f"{where}GROUP BY s.bench_id, s.family, s.device_class, r.host "
                "ORDER BY s.bench_id, s.device_class, r.host",
                params,
            )
        return [Case(*r[:5], parse_time(r[5]), parse_time(r[6])) for r in rows]

    @staticmethod
    def _select(
        where: str,
        order: str = "r.time_utc, r.id, s.bench_id, s.attempt, m.metric",
        runs_first: bool = False,
    ) -> str:
        """SELECT of run, result and metric columns (in that order) of the rows ``where`` picks.

        ``runs_first``: the runs are read first (SQLite takes a CROSS JOIN's order as
        given), for a ``where`` that bounds them by host and time: a window of recent runs
        is then found through the runs' index, not through every row of the case.
        """
        run_cols = ", ".join(f"r.{c.strip()}" for c in _RUN_COLUMNS.split(","))
        res_cols = ", ".join(f"s.{c.strip()}" for c in _RESULT_COLUMNS.split(",")[1:])
        met_cols = ", ".join(f"m.{c.strip()}" for c in _METRIC_COLUMNS.split(",")[_METRIC_KEY:])
        joined = (
            "JOIN results s ON s.run_id = m.run_id AND s.bench_id = m.bench_id "
            "AND s.device_class = m.device_class AND s.attempt = m.attempt"
        )
        if runs_first:
            source = f"runs r CROSS JOIN metrics m {joined}"
            where = f"r.id = m.run_id AND {where}" if where else "r.id = m.run_id"
        else:
            source = f"metrics m {joined} JOIN runs r ON r.id = m.run_id"
        return (
            f"SELECT {run_cols}, {res_cols}, {met_cols} FROM {source}"
            f"{' WHERE ' + where if where else ''} ORDER BY {order}"
        )

    def _points_of(self, rows: Iterable[tuple[Any, ...]]) -> Iterator[Point]:
        """Points of rows in :meth:`_select`'s columns; each run's record is built once.

        Runs are kept for the History's life (cleared by a removal): a command that reads
        many cases builds each run once, not once per case.
        """
        nr, ns = len(_RUN_COLUMNS.split(",")), len(_RESULT_COLUMNS.split(",")) - 1
        nm = len(_METRIC_COLUMNS.split(",")) - _METRIC_KEY
        runs = self._run_records
        for row in rows:
            run = runs.get(row[0]) or runs.setdefault(row[0], _run_of(row[:nr]))
            metric = _metric_of(row[nr + ns : nr + ns + nm])
            yield Point(run, _result_of(row[nr : nr + ns], (metric,)), metric)

    def _rows(
        self, where: str, params: tuple[Any, ...], runs_first: bool = False
    ) -> Iterator[Point]:
        """Points of the metric rows that ``where`` selects, oldest run first (streamed)."""
        sql = self._select(where, runs_first=runs_first)
        with self._db.transaction(write=False) as tx:
            yield from self._points_of(tx.stream(sql, params))

    def points(
        self,
        bench_id: str,
        metric: str = "time",
        device_class: str | None = None,
        host: str | None = None,
        *,
        every_attempt: bool = False,
        last: int | None = None,
    ) -> list[Point]:
        """One case's metric over the runs, oldest first; per run its last attempt only.

        ``last``: only from each host's last ``last`` runs (of any case), the window in
        which the commands that read a whole history search for change points
        (:data:`~gpugauge.history.changepoints.RECENT_RUNS`); None: every run.
        """
        where, params = "s.bench_id = ? AND m.metric = ?", [bench_id, metric]
        if device_class is not None:
            where, params = where + " AND s.device_class = ?", [*params, device_class]
        if host is not None:
            where, params = where + " AND r.host = ?", [*params, host]
        if last is not None:
            where, params = self._recent(where, params, last)
        found = list(self._rows(where, tuple(params), runs_first=last is not None))
        if every_attempt:
            return found
        return _last_attempts(found)

    def recent_points(
        self, metrics: Sequence[str], last: int, bench_ids: Sequence[str] | None = None
    ) -> dict[tuple[str, str, str], list[Point]]:
        """Each host's last ``last`` runs, as :meth:`points` per (case, device class, metric).

        Read in one query through the runs' index, for commands that read every case
        (``history changes``, the report): ``bench_ids`` (None: every case) and
        ``metrics`` filter it. Per run, its last attempt only; oldest first.
        """
        names = list(dict.fromkeys(metrics))
        if not names or (bench_ids is not None and not bench_ids):
            return {}
        where = f"m.metric IN ({_marks(','.join(names))})"
        params: list[Any] = list(names)
        if bench_ids is not None:
            ids = list(dict.fromkeys(bench_ids))
            where += f" AND m.bench_id IN ({_marks(','.join(ids))})"
            params += ids
        where, params = self._recent(where, params, last)
        out: dict[tuple[str, str, str], list[Point]] = {}
        for p in self._rows(where, tuple(params), runs_first=True):
            out.setdefault((p.result.bench_id, p.result.device_class, p.metric.metric), []).append(
                p
            )
        return {key: _last_attempts(found) for key, found in out.items()}

    def _recent(self, where: str, params: Sequence[Any], last: int) -> tuple[str, list[Any]]:
        """``where`` narrowed to each host's last ``last`` runs, read from the runs' index.

        A host's window starts at the time of its ``last``-th newest run; a host with fewer
        runs keeps them all. The metric rows are then found from the runs, not the runs
        from the case's every row: a case's recent runs cost the same in any history.
        """
        if last not in self._windows:  # once per command: the runs change only by its writes
            with self._db.transaction(write=False) as tx:
                counts = dict(tx.query("SELECT host, COUNT(*) FROM runs GROUP BY host"))
                starts = dict(
                    tx.query(
                        "SELECT host, time_utc FROM (SELECT host, time_utc, ROW_NUMBER() OVER "
                        "(PARTITION BY host ORDER BY time_utc DESC, id DESC) AS k FROM runs) w "
                        "WHERE k = ?",
                        (int(last),),
                    )
                )
            self._windows[last] = starts, [h for h in sorted(counts) if h not in starts]
        starts, whole = self._windows[last]
        hosts = sorted(starts)
        terms = ["(r.host = ? AND r.time_utc >= ?)"] * len(hosts)
        values: list[Any] = [x for h in hosts for x in (h, starts[h])]
        if whole:
            terms.append(f"r.host IN ({_marks(','.join(whole))})")
            values += whole
        if not terms:
            return where, list(params)
        return f"{where} AND ({' OR '.join(terms)})", [*params, *values]

    def _ranked(
        self, where: str, params: Sequence[Any], ranks: Sequence[tuple[str, int]]
    ) -> list[Point]:
        """Rows ``where`` picks whose run ranks within a bound, per metric and host.

        ``ranks``: (ORDER BY of a run rank, how many runs of it to keep); a row is kept when
        any rank keeps it. The database ranks the case's narrow keys (a window function
        over run, metric, host, time and accepted), and only the rows kept are then read
        whole: a long history costs a sort of its keys, not of every column.
        """
        source = self._select(where).split(" FROM ", 1)[1].split(" ORDER BY ")[0]
        part = "PARTITION BY m.metric, r.host"
        rank_cols = ", ".join(
            f"DENSE_RANK() OVER ({part} ORDER BY {order}) AS k{i}"
            for i, (order, _) in enumerate(ranks)
        )
        test = " OR ".join(f"k{i} <= {int(n)}" for i, (_, n) in enumerate(ranks))
        keys_sql = (
            f"SELECT run_id, metric FROM (SELECT m.run_id AS run_id, m.metric AS metric, "
            f"{rank_cols} FROM {source}) w WHERE {test}"
        )
        with self._db.transaction(write=False) as tx:
            keys = set(tx.query(keys_sql, tuple(params)))
            if not keys:
                return []
            ids = sorted({run_id for run_id, _ in keys})
            full = f"{where} AND m.run_id IN ({_marks(','.join(ids))})"
            rows = tx.query(self._select(full), (*params, *ids))
        return [p for p in self._points_of(rows) if (p.run.id, p.metric.metric) in keys]

    def case_points(
        self,
        bench_id: str,
        device_class: str,
        metrics: Iterable[str],
        policy: ReferencePolicy = DEFAULT_POLICY,
    ) -> dict[str, list[Point]]:
        """Per metric, what judging one case on one device class reads, every host.

        :func:`~gpugauge.history.judge.judge_case` reads a host's accepted results only:
        its first ``policy.runs`` (the anchor's calibration) and its last
        ``policy.spread_runs`` (reference, spread, levels, kernels). Those, and each host's
        latest result that is not accepted, are all that is read (the last attempt of each
        run, as :meth:`points` gives them), however long the history: a night's judging
        takes about the same time in year three as in week one.
        """
        names = list(dict.fromkeys(metrics))
        if not names:
            return {}
        with self._db.transaction(write=False) as tx:
            keys = tx.query(
                "SELECT host, run_id, attempt, accepted FROM results "
                "WHERE bench_id = ? AND device_class = ? ORDER BY host, time_utc, run_id, attempt",
                (bench_id, device_class),
            )
        kept = _judged_keys(keys, policy)
        if not kept:
            return {m: [] for m in names}
        ids = sorted({run_id for run_id, _ in kept})
        where = (
            f"s.bench_id = ? AND s.device_class = ? AND m.metric IN ({_marks(','.join(names))}) "
            f"AND m.run_id IN ({_marks(','.join(ids))})"
        )
        with self._db.transaction(write=False) as tx:
            rows = tx.query(self._select(where), (bench_id, device_class, *names, *ids))
        out: dict[str, list[Point]] = {m: [] for m in names}
        for p in self._points_of(rows):
            if (p.run.id, p.result.attempt) in kept:
                out[p.metric.metric].append(p)
        if any(len(points) != len(kept) for points in out.values()):
            # a kept result lacks a metric: that metric's own first and last runs lie
            # elsewhere, so rank every row of the case for it (exact, slower)
            return self._case_points_ranked(bench_id, device_class, names, policy)
        return out

    def _case_points_ranked(
        self, bench_id: str, device_class: str, names: list[str], policy: ReferencePolicy
    ) -> dict[str, list[Point]]:
        """:meth:`case_points` with the results ranked per metric by the database."""
        last_attempt = (
            "NOT EXISTS (SELECT 1 FROM results s2 WHERE s2.run_id = s.run_id AND "
            "s2.bench_id = s.bench_id AND s2.device_class = s.device_class AND "
            "s2.attempt > s.attempt)"
        )
        where = (
            f"s.bench_id = ? AND s.device_class = ? AND m.metric IN ({_marks(','.join(names))}) "
            f"AND {last_attempt}"
        )
        found = self._ranked(
            where,
            [bench_id, device_class, *names],
            [  # accepted results rank first: the first and last accepted, the last other
                ("s.accepted DESC, r.time_utc, r.id", policy.runs),
                ("s.accepted DESC, r.time_utc DESC, r.id DESC", policy.spread_runs),
                ("s.accepted, r.time_utc DESC, r.id DESC", 1),
            ],
        )
        out: dict[str, list[Point]] = {m: [] for m in names}
        for p in found:
            out[p.metric.metric].append(p)
        return out

    def iter_points(self) -> Iterator[Point]:
        """Every metric of every result, oldest run first, streamed (bounded memory)."""
        return self._rows("", ())

    def all_points(self) -> list[Point]:
        """Every metric of every result, oldest run first."""
        return list(self.iter_points())

    def remove(self, run_ids: Iterable[str]) -> dict[str, int]:
        """Remove whole runs with every result and metric: all of them, or none.

        Per run id, how many results went with it. A run id not stored is a HistoryError
        and removes nothing (ids as :meth:`run_id` resolves them).
        """
        ids = list(dict.fromkeys(run_ids))
        removed: dict[str, int] = {}
        self._windows.clear()
        self._run_records.clear()
        with self._db.transaction() as tx:
            for run_id in ids:
                if not tx.query("SELECT 1 FROM runs WHERE id = ?", (run_id,)):
                    raise HistoryError(f"history {self.where}: no run {run_id!r}")
                removed[run_id] = tx.query(
                    "SELECT COUNT(*) FROM results WHERE run_id = ?", (run_id,)
                )[0][0]
                tx.execute("DELETE FROM metrics WHERE run_id = ?", (run_id,))
                tx.execute("DELETE FROM results WHERE run_id = ?", (run_id,))
                tx.execute("DELETE FROM runs WHERE id = ?", (run_id,))
        return removed

    def accept(self, run_id: str, bench_ids: Iterable[str] = (), accepted: bool = True) -> int:
        """Mark a run's results (all, or those of ``bench_ids``) accepted; how many changed.

        A case id the run does not hold is a HistoryError naming it and what the run holds
        (a typo would otherwise accept nothing and say so only as a count of 0).
        An accepted result may serve as its host's reference: accepting a confirmed,
        intended slowdown lets the host's reference move to it.
        """
        ids = list(bench_ids)
        sql, params = "UPDATE results SET accepted = ? WHERE run_id = ?", [int(accepted), run_id]
        if ids:
            sql += f" AND bench_id IN ({', '.join('?' for _ in ids)})"
            params += ids
        with self._db.transaction() as tx:
            if not tx.query("SELECT 1 FROM runs WHERE id = ?", (run_id,)):
                raise HistoryError(f"history {self.where}: no run {run_id!r}")
            held = sorted(
                r[0]
                for r in tx.query(
                    "SELECT DISTINCT bench_id FROM results WHERE run_id = ?", (run_id,)
                )
            )
            unknown = [i for i in dict.fromkeys(ids) if i not in held]
            if unknown:
                raise HistoryError(
                    f"run {run_id} holds no case {', '.join(map(repr, unknown))}; "
                    f"it holds {some(held)}"
                )
            return tx.execute(sql, params)

    def to_frame(self) -> Any:
        """Every metric row with its result and run, as a pandas DataFrame (one row each)."""
        import pandas as pd

        from gpugauge.history.rows import COLUMNS, flat_row

        return pd.DataFrame([flat_row(p) for p in self.all_points()], columns=list(COLUMNS))
