"""The history's rows in SQL and back: column lists, records to rows, rows to records.

One place for the shape of the ``runs``, ``results`` and ``metrics`` tables as the store
reads and writes them (:mod:`gpugauge.history.schema` makes the tables), for
:class:`~gpugauge.history.store.History` and its windowed reads
(:mod:`gpugauge.history.windows`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from typing import Any

from gpugauge.history.records import (
    HistoryError,
    MetricRecord,
    Point,
    ResultRecord,
    RunRecord,
    parse_time,
    time_text,
)
from gpugauge.history.reference import ReferencePolicy
from gpugauge.regress.baselines import KernelShare

RUN_COLUMNS = (
    "id, time_utc, host, device_class, driver, cuda_runtime, cudnn, torch, git_commit, "
    "flags, argv, profile, source"
)
RESULT_COLUMNS = (
    "run_id, bench_id, attempt, family, device_class, sm_clock_mhz, power_w, kernels, "
    "verdict, accepted, note"
)
# Each result also keeps its run's host and time (runs never change): judging a case reads
# its keys from one index of results, without a join, however long the history.
RESULT_WHERE = "host, time_utc"
METRIC_COLUMNS = (
    "run_id, bench_id, device_class, attempt, metric, median, ci_low, ci_high, n, run_medians, "
    "verdict, reference"
)
METRIC_KEY = 4  # run_id, bench_id, device_class, attempt: the result a metric row is of


def marks(columns: str) -> str:
    return ", ".join("?" for _ in columns.split(","))


def finite(value: float | None, what: str) -> float | None:
    if value is not None and not math.isfinite(value):
        raise HistoryError(f"{what} is {value!r}: the history stores finite numbers only")
    return value


def run_row(run: RunRecord) -> tuple[Any, ...]:
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


def run_of(row: tuple[Any, ...]) -> RunRecord:
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


def result_rows(run: RunRecord, r: ResultRecord) -> tuple[tuple[Any, ...], list[tuple[Any, ...]]]:
    run_id = run.id
    where = f"run {run_id}: {r.bench_id}"
    result = (
        run_id,
        r.bench_id,
        r.attempt,
        r.family,
        r.device_class,
        finite(r.sm_clock_mhz, f"{where}: SM clock"),
        finite(r.power_w, f"{where}: power"),
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
            finite(m.median, f"{where}: {m.metric} median"),
            finite(m.ci_low, f"{where}: {m.metric} CI"),
            finite(m.ci_high, f"{where}: {m.metric} CI"),
            m.n,
            json.dumps([finite(x, f"{where}: run median") for x in m.run_medians]),
            m.verdict,
            m.reference,
        )
        for m in r.metrics
    ]
    return result, metrics


def result_of(row: tuple[Any, ...], metrics: tuple[MetricRecord, ...]) -> ResultRecord:
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


def metric_of(row: tuple[Any, ...]) -> MetricRecord:
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


def judged_keys(rows: Sequence[tuple[Any, ...]], policy: ReferencePolicy) -> set[tuple[str, int]]:
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


def last_attempts(found: Iterable[Point]) -> list[Point]:
    """Per run and device class, the last attempt only (found in attempt order)."""
    last: dict[tuple[str, str], Point] = {}
    for p in found:
        last[(p.run.id, p.result.device_class)] = p
    return list(last.values())


def select_sql(
    where: str,
    order: str = "r.time_utc, r.id, s.bench_id, s.attempt, m.metric",
    runs_first: bool = False,
    run_ids: bool = False,
) -> str:
    """SELECT of run, result and metric columns (in that order) of the rows ``where`` picks.

    ``runs_first``: the runs are read first (SQLite takes a CROSS JOIN's order as
    given), for a ``where`` that bounds them by host and time: a window of recent runs
    is then found through the runs' index, not through every row of the case.
    ``run_ids``: of the run, its id only (for a reader that read the runs apart: each
    run's 13 columns once, not once per metric row).
    """
    run_cols = "r.id" if run_ids else ", ".join(f"r.{c.strip()}" for c in RUN_COLUMNS.split(","))
    res_cols = ", ".join(f"s.{c.strip()}" for c in RESULT_COLUMNS.split(",")[1:])
    met_cols = ", ".join(f"m.{c.strip()}" for c in METRIC_COLUMNS.split(",")[METRIC_KEY:])
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
