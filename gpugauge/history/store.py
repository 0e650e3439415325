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

from gpugauge.flags import HISTORY_ENV_VAR
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
from gpugauge.history.schema import check_schema, ensure_schema
from gpugauge.regress.baselines import KernelShare

DEFAULT_NAME = "gpugauge-history.sqlite"
MIN_PREFIX = 6  # characters a run id's prefix needs (show cuts ids to 13, a session's line to 8)
ENV_VAR = HISTORY_ENV_VAR  # a path or URL that replaces the default (a nightly's secret)


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
_METRIC_COLUMNS = (
    "run_id, bench_id, attempt, metric, median, ci_low, ci_high, n, run_medians, verdict, reference"
)


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


def _result_rows(run_id: str, r: ResultRecord) -> tuple[tuple[Any, ...], list[tuple[Any, ...]]]:
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
    )
    metrics = [
        (
            run_id,
            r.bench_id,
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
    # row: the metric columns after run_id, bench_id, attempt
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
            result, metrics = _result_rows(run.id, r)
            tx.execute(
                f"INSERT INTO results ({_RESULT_COLUMNS}) VALUES ({_marks(_RESULT_COLUMNS)})",
                result,
            )
            tx.many(
                f"INSERT INTO metrics ({_METRIC_COLUMNS}) VALUES ({_marks(_METRIC_COLUMNS)})",
                metrics,
            )
        return True

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

    def cases(self) -> list[Case]:
        """Every (case, device class, host) with its run count, by case then host."""
        with self._db.transaction(write=False) as tx:
            rows = tx.query(
                "SELECT s.bench_id, s.family, s.device_class, r.host, COUNT(DISTINCT r.id), "
                "MIN(r.time_utc), MAX(r.time_utc) FROM results s JOIN runs r ON r.id = s.run_id "
                "GROUP BY s.bench_id, s.family, s.device_class, r.host "
                "ORDER BY s.bench_id, s.device_class, r.host"
            )
        return [Case(*r[:5], parse_time(r[5]), parse_time(r[6])) for r in rows]

    def _rows(self, where: str, params: tuple[Any, ...]) -> Iterator[Point]:
        """Points of the metric rows that ``where`` selects, oldest run first."""
        run_cols = ", ".join(f"r.{c.strip()}" for c in _RUN_COLUMNS.split(","))
        res_cols = ", ".join(f"s.{c.strip()}" for c in _RESULT_COLUMNS.split(",")[1:])
        met_cols = ", ".join(f"m.{c.strip()}" for c in _METRIC_COLUMNS.split(",")[3:])
        sql = (
            f"SELECT {run_cols}, {res_cols}, {met_cols} FROM metrics m "
            "JOIN results s ON s.run_id = m.run_id AND s.bench_id = m.bench_id "
            "AND s.attempt = m.attempt JOIN runs r ON r.id = m.run_id"
            f"{' WHERE ' + where if where else ''} "
            "ORDER BY r.time_utc, r.id, s.bench_id, s.attempt, m.metric"
        )
        with self._db.transaction(write=False) as tx:
            rows = tx.query(sql, params)
        nr, ns = len(_RUN_COLUMNS.split(",")), len(_RESULT_COLUMNS.split(",")) - 1
        runs: dict[str, RunRecord] = {}
        for row in rows:
            run = runs.get(row[0]) or runs.setdefault(row[0], _run_of(row[:nr]))
            metric = _metric_of(row[nr + ns :])
            yield Point(run, _result_of(row[nr : nr + ns], (metric,)), metric)

    def points(
        self,
        bench_id: str,
        metric: str = "time",
        device_class: str | None = None,
        host: str | None = None,
        *,
        every_attempt: bool = False,
    ) -> list[Point]:
        """One case's metric over the runs, oldest first; per run its last attempt only."""
        where, params = "s.bench_id = ? AND m.metric = ?", [bench_id, metric]
        if device_class is not None:
            where, params = where + " AND s.device_class = ?", [*params, device_class]
        if host is not None:
            where, params = where + " AND r.host = ?", [*params, host]
        found = list(self._rows(where, tuple(params)))
        if every_attempt:
            return found
        last: dict[tuple[str, str], Point] = {}
        for p in found:  # attempts in order: the last one stays
            last[(p.run.id, p.result.device_class)] = p
        return list(last.values())

    def case_points(
        self, bench_id: str, device_class: str, metrics: Iterable[str]
    ) -> dict[str, list[Point]]:
        """Per metric, one case's points on one device class, every host (for judging)."""
        return {m: self.points(bench_id, m, device_class) for m in metrics}

    def all_points(self) -> list[Point]:
        """Every metric of every result, oldest run first."""
        return list(self._rows("", ()))

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
