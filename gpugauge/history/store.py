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
import os
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from types import TracebackType
from typing import Any

from gpugauge.core.arguments import HISTORY_ENV_VAR
from gpugauge.history.backends import Backend, Tx, open_backend
from gpugauge.history.columns import (
    METRIC_COLUMNS,
    METRIC_KEY,
    RESULT_COLUMNS,
    RESULT_WHERE,
    RUN_COLUMNS,
    last_attempts,
    marks,
    metric_of,
    result_of,
    result_rows,
    run_of,
    run_row,
    select_sql,
    stored_text,
)
from gpugauge.history.records import (
    ABRecord,
    HistoryError,
    Point,
    ResultRecord,
    RunRecord,
    ab_records,
    parse_time,
    some,
)
from gpugauge.history.schema import check_schema, ensure_schema
from gpugauge.history.windows import Windows

DEFAULT_NAME = "gpugauge-history.sqlite"
MIN_PREFIX = 6  # characters a run id's prefix needs (show cuts ids to 13, a session's line to 8)
ENV_VAR = HISTORY_ENV_VAR  # a path or URL that replaces the default (a nightly's secret)


def default_path(storage: Path = Path(".benchmarks")) -> Path:
    """The default history: in pytest-benchmark's storage folder."""
    return storage / DEFAULT_NAME


def default_target(storage: Path = Path(".benchmarks")) -> str:
    """``$GPUGAUGE_HISTORY`` if set, else :func:`default_path`."""
    return os.environ.get(ENV_VAR) or str(default_path(storage))


@dataclass(frozen=True)
class Case:
    """One case of the history on one host: how many runs hold it, first and last.

    ``first`` or ``last`` is None where that run's stored time cannot be read (named by
    :meth:`History.cases` in its ``skip``): the case is still listed.
    """

    bench_id: str
    family: str
    device_class: str
    host: str
    runs: int
    first: datetime | None
    last: datetime | None


CASE_COLUMNS = ("results.bench_id", "results.family", "results.device_class", "runs.host")


class History(Windows):
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
                backend.schema_checked()
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
            f"INSERT INTO runs ({RUN_COLUMNS}) VALUES ({marks(RUN_COLUMNS)}) "
            "ON CONFLICT (id) DO NOTHING",
            run_row(run),
        )
        if added != 1:
            return False
        for r in results:
            result, metrics = result_rows(run, r)
            columns = f"{RESULT_COLUMNS}, {RESULT_WHERE}"
            tx.execute(
                f"INSERT INTO results ({columns}) VALUES ({marks(columns)})",
                result,
            )
            tx.many(
                f"INSERT INTO metrics ({METRIC_COLUMNS}) VALUES ({marks(METRIC_COLUMNS)})",
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
        sql = f"SELECT {RUN_COLUMNS} FROM runs"
        params: tuple[Any, ...] = ()
        if host is not None:
            sql, params = sql + " WHERE host = ?", (host,)
        with self._db.transaction(write=False) as tx:
            rows = tx.query(sql + " ORDER BY time_utc, id", params)
        return [run_of(r) for r in rows]

    def cases(self, bench_id: str | None = None, skip: list[str] | None = None) -> list[Case]:
        """Every (case, device class, host) with its run count, by case then host.

        ``bench_id``: that case's only (read through its index, not the whole history). A
        stored run time that cannot be read is an error, or, given ``skip``, named there and
        read as None: one bad row never ends a listing of many.
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

        def when(text: str) -> datetime | None:
            try:
                return parse_time(text)
            except HistoryError as err:
                if skip is None:
                    raise
                if str(err) not in skip:
                    skip.append(str(err))
                return None

        for r in rows:
            for value, column in zip(r[:4], CASE_COLUMNS, strict=True):
                stored_text(value, f"case {r[0]!r}", column)
        return [Case(*r[:5], when(r[5]), when(r[6])) for r in rows]

    def _points_of(self, rows: Iterable[tuple[Any, ...]], run_ids: bool = False) -> Iterator[Point]:
        """Points of rows in :func:`select_sql`'s columns; each run's record is built once.

        Runs are kept for the History's life (cleared by a removal): a command that reads
        many cases builds each run once, not once per case. ``run_ids``: the rows hold
        only the run's id, and its record was read before
        (:meth:`~gpugauge.history.windows.Windows.recent_points` reads them first).
        """
        nr, ns = 1 if run_ids else len(RUN_COLUMNS.split(",")), len(RESULT_COLUMNS.split(",")) - 1
        nm = len(METRIC_COLUMNS.split(",")) - METRIC_KEY
        runs = self._run_records
        for row in rows:
            run = runs.get(row[0]) or runs.setdefault(row[0], run_of(row[:nr]))
            try:
                metric = metric_of(row[nr + ns : nr + ns + nm])
                found = result_of(row[nr : nr + ns], (metric,))
            except HistoryError as err:  # a cell changed outside gpugauge: name its run
                raise HistoryError(f"run {row[0]}: {err}") from None
            yield Point(run, found, metric)

    def _rows(
        self, where: str, params: tuple[Any, ...], runs_first: bool = False
    ) -> Iterator[Point]:
        """Points of the metric rows that ``where`` selects, oldest run first (streamed)."""
        sql = select_sql(where, runs_first=runs_first)
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
        return last_attempts(found)

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
                tx.execute("DELETE FROM ab_cases WHERE run_id = ?", (run_id,))
                tx.execute("DELETE FROM metrics WHERE run_id = ?", (run_id,))
                tx.execute("DELETE FROM results WHERE run_id = ?", (run_id,))
                tx.execute("DELETE FROM runs WHERE id = ?", (run_id,))
        return removed

    def accept(self, run_id: str, bench_ids: Iterable[str] = (), accepted: bool = True) -> int:
        """Mark a run's results (all, or those of ``bench_ids``) accepted; how many they are.

        A case id the run does not hold is a HistoryError naming it and what the run holds
        (a typo would otherwise accept nothing and say so only as a count of 0).
        An accepted result may serve as its host's reference: accepting an intended
        slowdown lets the host's reference move to it.
        """
        ids = list(bench_ids)
        where, params = "WHERE run_id = ?", [run_id]
        if ids:
            where += f" AND bench_id IN ({', '.join('?' for _ in ids)})"
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
            tx.execute(f"UPDATE results SET accepted = ? {where}", [int(accepted), *params])
            return len(
                tx.query(f"SELECT DISTINCT bench_id, device_class FROM results {where}", params)
            )

    def record_ab(
        self,
        case: ABRecord,
        *,
        result_verdict: str,
        accepted: bool,
        reference: str,
        note: str | None = None,
    ) -> None:
        """Keep the same-GPU A/B that decided one result of a stored run, with its pairs.

        In one transaction: the A/B (one row per run and case; a second A/B of the case
        replaces the first), and the verdict it gave, on the result's last attempt (with
        ``note``, the result's note as the run file now says it, where given) and its time
        metric, which then says which reference decided it. A run or case the history does
        not hold is a HistoryError.
        """
        run_id = case.run_id
        key = (run_id, case.bench_id, case.device_class)
        where = "run_id = ? AND bench_id = ? AND device_class = ?"
        self._windows.clear()
        with self._db.transaction() as tx:
            found = tx.query(f"SELECT MAX(attempt) FROM results WHERE {where}", key)
            if not found or found[0][0] is None:
                raise HistoryError(
                    f"history {self.where}: run {run_id!r} holds no result "
                    f"{case.bench_id!r} on {case.device_class}"
                )
            attempt = found[0][0]
            tx.execute(f"DELETE FROM ab_cases WHERE {where}", key)
            tx.execute(
                "INSERT INTO ab_cases (run_id, bench_id, device_class, base_commit, verdict, "
                "ratio, ci_low, ci_high, min_effect, pairs) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    *key,
                    case.base_commit,
                    case.verdict,
                    case.ratio,
                    case.ci_low,
                    case.ci_high,
                    case.min_effect,
                    json.dumps(case.pairs),
                ),
            )
            tx.execute(
                f"UPDATE results SET verdict = ?, accepted = ? WHERE {where} AND attempt = ?",
                (result_verdict, int(accepted), *key, attempt),
            )
            if note is not None:
                tx.execute(
                    f"UPDATE results SET note = ? WHERE {where} AND attempt = ?",
                    (note, *key, attempt),
                )
            tx.execute(
                f"UPDATE metrics SET verdict = ?, reference = ? WHERE {where} AND attempt = ? "
                "AND metric = 'time'",
                (case.verdict, reference, *key, attempt),
            )

    def ab_cases(self, run_id: str | None = None, skip: list[str] | None = None) -> list[ABRecord]:
        """The A/Bs kept, in run and case order; a bad row is an error, or named in ``skip``."""
        sql = (
            "SELECT run_id, bench_id, device_class, base_commit, verdict, ratio, ci_low, "
            "ci_high, min_effect, pairs FROM ab_cases"
        )
        params: tuple[str, ...] = ()
        if run_id is not None:
            sql, params = sql + " WHERE run_id = ?", (run_id,)
        with self._db.transaction(write=False) as tx:
            rows = tx.query(sql + " ORDER BY run_id, bench_id, device_class", params)
        return ab_records(rows, skip, f"history {self.where}")

    def to_frame(self) -> Any:
        """Every metric row with its result and run, as a pandas DataFrame (one row each)."""
        import pandas as pd

        from gpugauge.history.rows import COLUMNS, flat_row

        return pd.DataFrame([flat_row(p) for p in self.all_points()], columns=list(COLUMNS))
