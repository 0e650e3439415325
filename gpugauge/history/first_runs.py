"""Class baselines from the history: a new device class's first runs, made committable.

``python -m gpugauge baseline --from-history CLASS --runs N`` writes
``baselines/<CLASS>/<family>.json`` for every case of the class the history holds and no
committed baseline does, from each case's first N accepted runs (oldest first): the runs a
class's first nights recorded (``--gauge-first-nights``, :mod:`gpugauge.judging.first_nights`).
A nightly's checkout does not outlive the night, its history does
(``GPUGAUGE_HISTORY``), so this needs no saved run files.

The history keeps each metric's median, its CI and n per result, not the rounds: a samples
metric's entry holds its central run's median as its one sample, with every run's median
and host beside it (``run_medians``, ``run_hosts``), so its allowance comes from the
run-to-run spread as for a baseline recorded from saved runs
(:func:`~gpugauge.regress.baselines.combine_runs` combines them, the same writer writes
them). Results with injected work never join the history, so none is taken; regressed or
inconclusive ones are not accepted, so none is taken either. A case with a committed
baseline is left as it is (re-record it from saved runs: ``gpugauge baseline RUN.json ...``).
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from gpugauge.core.arguments import number
from gpugauge.history.records import HistoryError, Point, RunRecord, some, time_text
from gpugauge.history.store import History, default_target
from gpugauge.regress.baselines import (
    BaselineError,
    BaselineStore,
    Entry,
    combine_runs,
    entry_problem,
    with_host,
)


@dataclass(frozen=True)
class FromHistory:
    """What the history gives a class: entries to write, and the runs they came from.

    ``kept``: the cases left alone (``family/id``), a committed baseline holds them already.
    """

    entries: tuple[Entry, ...]
    recorded_from: tuple[str, ...]
    kept: tuple[str, ...]


@dataclass(frozen=True)
class _Run:
    """One accepted result of a case: its run and its readings (one per metric)."""

    run: RunRecord
    points: tuple[Point, ...]


def _accepted_runs(history: History, bench_id: str, device_class: str) -> list[_Run]:
    """The case's accepted results on the class, one per run, oldest first."""
    by_run: dict[str, list[Point]] = {}
    for metric in history.metrics(bench_id):
        for p in history.points(bench_id, metric, device_class=device_class):
            if p.accepted:
                by_run.setdefault(p.run.id, []).append(p)
    runs = [_Run(ps[0].run, tuple(ps)) for ps in by_run.values()]
    return sorted(runs, key=lambda r: (r.run.time, r.run.id))


def _entry(run: _Run, bench_id: str, family: str, device_class: str) -> Entry:
    """One run's readings as a one-run baseline entry, with its host."""
    readings = {p.metric.metric: (p.metric.median,) for p in run.points}
    kernels = run.points[0].result.kernels
    e = Entry(bench_id, family, device_class, readings, kernels=kernels)
    return with_host(e, run.run.host)


def _run_line(history: History, run: RunRecord) -> str:
    """How ``recorded_from`` names a run of the history."""
    return f"history {history.where}: run {run.id[:13]} ({time_text(run.time)[:16]}Z, {run.host})"


def first_runs(history: History, device_class: str, runs: int, store: BaselineStore) -> FromHistory:
    """Each case's first ``runs`` accepted runs on ``device_class``, as baseline entries.

    HistoryError for a class the history holds nothing of (naming those it holds);
    BaselineError, before anything is written, for cases with fewer runs (each named,
    with its count), or when every case of the class has a committed baseline already.
    """
    if runs < 2:
        raise BaselineError(f"--runs {runs}: a baseline needs two runs or more")
    cases = history.cases()
    mine = sorted({(c.family, c.bench_id) for c in cases if c.device_class == device_class})
    if not mine:
        held = sorted({c.device_class for c in cases})
        raise HistoryError(
            f"history {history.where}: no results of device class {device_class!r}; "
            f"it holds {some(held)}"
        )
    entries: list[Entry] = []
    used: dict[str, RunRecord] = {}
    kept: list[str] = []
    short: list[str] = []
    for family, bench_id in mine:
        if bench_id in (store.load(device_class, family) or {}):
            kept.append(f"{family}/{bench_id}")
            continue
        found = _accepted_runs(history, bench_id, device_class)
        if len(found) < runs:
            short.append(f"{family}/{bench_id} ({len(found)} of {runs})")
            continue
        one_each = [_entry(r, bench_id, family, device_class) for r in found[:runs]]
        for e in one_each:
            problem = entry_problem(e)
            if problem:
                raise BaselineError(f"{family}/{bench_id} cannot be a baseline: {problem}")
        entries += combine_runs([[e] for e in one_each])
        used.update((r.run.id, r.run) for r in found[:runs])
    if short:
        raise BaselineError(
            f"refused, nothing written: {len(short)} case(s) of {device_class} have fewer "
            f"than {runs} accepted runs in history {history.where}: {some(short)}; let more "
            "nights run, or pass a smaller --runs (2 or more)"
        )
    if not entries:
        raise BaselineError(
            f"nothing to write: every case of {device_class} in the history has a committed "
            f"baseline in {store.root} already ({some(kept)}); re-record those from saved "
            "runs: python -m gpugauge baseline RUN1.json RUN2.json"
        )
    order = sorted(used.values(), key=lambda r: (r.time, r.id))
    return FromHistory(
        tuple(entries), tuple(_run_line(history, r) for r in order), tuple(sorted(kept))
    )


DEFAULT_RUNS = 5  # the history's own reference size (ReferencePolicy.runs)
_runs = number(int, 2, "a whole number of runs >= 2 (at most 1000)", high=1000)


def _target(text: str) -> str:
    """An argparse type: a SQLite path or a database URL, not empty."""
    if not text.strip():
        raise argparse.ArgumentTypeError("'': give a SQLite file path or a postgresql:// URL")
    return text


def add_from_history_arguments(parser: argparse.ArgumentParser) -> None:
    """``gpugauge baseline``'s options for a class's first runs in the history."""
    parser.add_argument(
        "--from-history",
        metavar="CLASS",
        default=None,
        help="instead of saved runs: device class CLASS's first runs in the results history "
        "(a new class's first nights, pytest --gauge-first-nights), for each of its cases "
        "with no committed baseline; the history keeps each run's medians, not its rounds",
    )
    parser.add_argument(
        "--runs",
        dest="first_runs",
        metavar="N",
        type=_runs,
        default=None,
        help=f"with --from-history: each case's first N accepted runs (default {DEFAULT_RUNS}); "
        "a case with fewer is named and nothing is written",
    )
    parser.add_argument(
        "--history",
        metavar="PATH|URL",
        type=_target,
        default=None,
        help="with --from-history: the results history, read only (default: "
        "$GPUGAUGE_HISTORY, else .benchmarks/gpugauge-history.sqlite)",
    )


def from_history(args: argparse.Namespace, store: BaselineStore) -> FromHistory:
    """What ``gpugauge baseline --from-history CLASS`` writes; the history opened read-only."""
    target = args.history or default_target()
    with History.open(target, read_only=True) as history:
        return first_runs(history, args.from_history, args.first_runs or DEFAULT_RUNS, store)
