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

from gpugauge.core.json_records import finite_number
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
from gpugauge.results.metrics import METRICS

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
    where = f"run {row[0]}"
    for i, name in enumerate(_RUN_NAMES):
        if i != 1:  # the time: parse_time names what it is
            stored_text(row[i], where, f"runs.{name}", name in _RUN_NULLABLE)
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
        flags=_json(row[9], dict, where, "runs.flags"),
        argv=tuple(_json(row[10], list, where, "runs.argv")),
        profile=row[11],
        source=row[12],
    )


_RUN_NAMES = [c.strip() for c in RUN_COLUMNS.split(",")]
_RESULT_NAMES = [c.strip() for c in RESULT_COLUMNS.split(",")]
_RUN_NULLABLE = {"driver", "cuda_runtime", "cudnn", "torch", "git_commit", "profile"}


def _damaged(where: str, column: str, value: Any, kind: str) -> HistoryError:
    """A stored cell that no gpugauge wrote (a hand edit, another tool, a damaged copy)."""
    shown = repr(value) if len(repr(value)) <= 60 else repr(value)[:57] + "..."
    return HistoryError(
        f"{where}: its stored {column} is {shown}, not {kind}; the history was changed "
        "outside gpugauge: remove that run (gpugauge history remove RUN)"
    )


def stored_text(value: Any, where: str, column: str, nullable: bool = False) -> Any:
    if not isinstance(value, str) and not (nullable and value is None):
        raise _damaged(where, column, value, "text")
    return value


def _number(value: Any, where: str, column: str, nullable: bool = False) -> Any:
    if value is None and nullable:
        return value
    if not finite_number(value):
        raise _damaged(where, column, value, "a finite number")
    return value


def _integer(value: Any, where: str, column: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _damaged(where, column, value, "an integer")
    return value


def _json(value: Any, kind: type, where: str, column: str) -> Any:
    """``value`` parsed as JSON of type ``kind`` (a dict or a list)."""
    try:
        data = json.loads(value) if isinstance(value, str) else None
    except (ValueError, RecursionError):
        data = None
    if not isinstance(data, kind):
        raise _damaged(where, column, value, f"a JSON {'object' if kind is dict else 'list'}")
    return data


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
    where = f"case {row[0]!r}" if isinstance(row[0], str) else "a result"
    for i in (0, 2, 3, 9):
        stored_text(row[i], where, f"results.{_RESULT_NAMES[i + 1]}")
    stored_text(row[7], where, "results.verdict", nullable=True)
    kernels = _json(row[6], list, where, "results.kernels")
    if not all(
        isinstance(k, dict) and isinstance(k.get("name"), str) and finite_number(k.get("share"))
        for k in kernels
    ):
        raise _damaged(where, "results.kernels", row[6], "a list of kernels' names and shares")
    return ResultRecord(
        bench_id=row[0],
        family=row[2],
        device_class=row[3],
        metrics=metrics,
        sm_clock_mhz=_number(row[4], where, "results.sm_clock_mhz", nullable=True),
        power_w=_number(row[5], where, "results.power_w", nullable=True),
        kernels=tuple(KernelShare(k["name"], k["share"]) for k in kernels),
        verdict=row[7],
        accepted=bool(_integer(row[8], where, "results.accepted")),
        attempt=_integer(row[1], where, "results.attempt"),
        note=row[9],
    )


def metric_of(row: tuple[Any, ...]) -> MetricRecord:
    # row: the metric columns after run_id, bench_id, device_class, attempt
    name = row[0]
    where = f"metric {name!r}" if isinstance(name, str) else "a metric"
    if name not in METRICS:
        raise _damaged(where, "metrics.metric", name, f"a metric ({', '.join(METRICS)})")
    medians = _json(row[5], list, where, "metrics.run_medians")
    if not all(finite_number(x) for x in medians):
        raise _damaged(where, "metrics.run_medians", row[5], "a list of finite numbers")
    return MetricRecord(
        metric=name,
        median=_number(row[1], where, "metrics.median"),
        ci_low=_number(row[2], where, "metrics.ci_low"),
        ci_high=_number(row[3], where, "metrics.ci_high"),
        n=_integer(row[4], where, "metrics.n"),
        run_medians=tuple(medians),
        verdict=stored_text(row[6], where, "metrics.verdict", nullable=True),
        reference=stored_text(row[7], where, "metrics.reference"),
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
