"""Bounded reads of a long history: what judging uses, and each host's recent runs.

A mixin of :class:`~gpugauge.history.store.History`. Judging a case reads each host's first
and last accepted results of it (:meth:`Windows.case_points`), and the commands that read
every case (``history changes``, the report) each host's recent runs
(:meth:`Windows.recent_points`): a night's judging and a report cost about the same in
year three as in week one (docs/history.md, "Scale").
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from gpugauge.history.backends import Backend
from gpugauge.history.columns import (
    RUN_COLUMNS,
    judged_keys,
    last_attempts,
    marks,
    run_of,
    select_sql,
    stored_text,
)
from gpugauge.history.records import Point, RunRecord
from gpugauge.history.reference import DEFAULT_POLICY, ReferencePolicy


class Windows:
    """Windowed reads.

    The class using it gives ``_db``, ``_windows``, ``_run_records`` and the row readers.
    """

    _db: Backend
    _windows: dict[int, tuple[dict[str, str], list[str]]]
    _run_records: dict[str, RunRecord]

    def _points_of(self, rows: Iterable[tuple[Any, ...]], run_ids: bool = False) -> Iterator[Point]:
        raise NotImplementedError

    def _rows(
        self, where: str, params: tuple[Any, ...], runs_first: bool = False
    ) -> Iterator[Point]:
        raise NotImplementedError

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
        where = f"m.metric IN ({marks(','.join(names))})"
        params: list[Any] = list(names)
        if bench_ids is not None:
            ids = list(dict.fromkeys(bench_ids))
            where += f" AND m.bench_id IN ({marks(','.join(ids))})"
            params += ids
        window, values = self._window(last)
        out: dict[tuple[str, str, str], list[Point]] = {}
        with self._db.transaction(write=False) as tx:
            # the window's runs once, then each metric row with its run's id only
            for row in tx.query(f"SELECT {RUN_COLUMNS} FROM runs r WHERE {window}", values):
                if row[0] not in self._run_records:
                    self._run_records[row[0]] = run_of(row)
            sql = select_sql(f"{where} AND {window}", runs_first=True, run_ids=True)
            for p in self._points_of(tx.stream(sql, (*params, *values)), run_ids=True):
                key = (p.result.bench_id, p.result.device_class, p.metric.metric)
                out.setdefault(key, []).append(p)
        return {key: last_attempts(found) for key, found in out.items()}

    def _window(self, last: int) -> tuple[str, list[Any]]:
        """The condition on runs ``r`` of each host's last ``last`` runs, and its values."""
        where, values = self._recent("", [], last)
        return where or "1 = 1", values

    def _recent(self, where: str, params: Sequence[Any], last: int) -> tuple[str, list[Any]]:
        """``where`` narrowed to each host's last ``last`` runs, read from the runs' index.

        A host's window starts at the time of its ``last``-th newest run; a host with fewer
        runs keeps them all. The metric rows are then found from the runs, not the runs
        from the case's every row: a case's recent runs cost the same in any history.
        """
        if last not in self._windows:  # once per command: the runs change only by its writes
            with self._db.transaction(write=False) as tx:
                counts = dict(tx.query("SELECT host, COUNT(*) FROM runs GROUP BY host"))
                for host in counts:
                    stored_text(host, f"host {host!r}", "runs.host")
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
            terms.append(f"r.host IN ({marks(','.join(whole))})")
            values += whole
        if not terms:
            return where, list(params)
        within = f"({' OR '.join(terms)})"
        return f"{where} AND {within}" if where else within, [*params, *values]

    def _ranked(
        self, where: str, params: Sequence[Any], ranks: Sequence[tuple[str, int]]
    ) -> list[Point]:
        """Rows ``where`` picks whose run ranks within a bound, per metric and host.

        ``ranks``: (ORDER BY of a run rank, how many runs of it to keep); a row is kept when
        any rank keeps it. The database ranks the case's narrow keys (a window function
        over run, metric, host, time and accepted), and only the rows kept are then read
        whole: a long history costs a sort of its keys, not of every column.
        """
        source = select_sql(where).split(" FROM ", 1)[1].split(" ORDER BY ")[0]
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
            full = f"{where} AND m.run_id IN ({marks(','.join(ids))})"
            rows = tx.query(select_sql(full), (*params, *ids))
        return [p for p in self._points_of(rows) if (p.run.id, p.metric.metric) in keys]

    def case_points(
        self,
        bench_id: str,
        device_class: str,
        metrics: Iterable[str],
        policy: ReferencePolicy = DEFAULT_POLICY,
    ) -> dict[str, list[Point]]:
        """Per metric, what judging one case on one device class reads, every host.

        :func:`~gpugauge.history.host_checks.check_case` reads a host's accepted results only:
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
        kept = judged_keys(keys, policy)
        if not kept:
            return {m: [] for m in names}
        ids = sorted({run_id for run_id, _ in kept})
        where = (
            f"s.bench_id = ? AND s.device_class = ? AND m.metric IN ({marks(','.join(names))}) "
            f"AND m.run_id IN ({marks(','.join(ids))})"
        )
        with self._db.transaction(write=False) as tx:
            rows = tx.query(select_sql(where), (bench_id, device_class, *names, *ids))
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
            f"s.bench_id = ? AND s.device_class = ? AND m.metric IN ({marks(','.join(names))}) "
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
