"""A pytest session's link to the results history: judge each result, then append the run.

The gate judges a result against the committed class baseline. With a history
(:mod:`gpugauge.history`), a :class:`Tracker` judges it instead against what knows the
host: the host's own recent accepted runs once it has them, else the class baseline widened
by the measured host-to-host spread, with the baseline kept as an anchor against slow drift
(:func:`gpugauge.history.judge.judge_case`). Every result is kept, a regressed first
measurement and its confirmation both, and the session's run is appended in one
transaction at its end, so an interrupted session leaves no half run in the history.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest

from gpugauge.history.capture import (
    host_id,
    injected,
    metric_records,
    new_run_id,
    result_record,
    run_record,
)
from gpugauge.history.judge import judge_case
from gpugauge.history.records import HistoryError, ResultRecord
from gpugauge.history.store import ENV_VAR, History, default_path
from gpugauge.history.targets import is_local
from gpugauge.regress.baselines import entry_of, kernel_shares
from gpugauge.regress.gate import Gate, GateResult
from gpugauge.results.benchmark_storage import storage_folder
from gpugauge.results.measurement import Measurement
from gpugauge.results.metrics import METRICS, Kind
from gpugauge.words import plural


def add_options(group: Any) -> None:
    """The history's options, in the gpugauge group."""
    group.addoption(
        "--history",
        metavar="PATH|URL",
        default=None,
        help=(
            "results history: a SQLite file or a postgresql:// URL that several runners "
            f"share (default: ${ENV_VAR}, else gpugauge-history.sqlite beside "
            "pytest-benchmark's storage). Every measured run is appended; with --gate, "
            "each result is judged against its host's own history once it has one"
        ),
    )
    group.addoption(
        "--no-history",
        action="store_true",
        default=False,
        help="neither read nor append the results history",
    )
    group.addoption(
        "--no-confirm",
        action="store_true",
        default=False,
        help=(
            "fail a regressed result at once; by default it is measured again (a fresh "
            "warm-up) and fails only if the second measurement regresses too"
        ),
    )


def target_of(config: pytest.Config) -> str | None:
    """Where this session's history lives, or None when it is turned off."""
    if config.getoption("no_history", False):
        return None
    given = config.getoption("history", None)
    if given is not None:
        if not str(given).strip():
            raise pytest.UsageError("--history '': give a file path or a postgresql:// URL")
        return str(given)
    # beside pytest-benchmark's file storage, where the report looks for it too; another
    # storage backend (elasticsearch) has no folder: then the default one
    folder = storage_folder(config) or Path(".benchmarks")
    return os.environ.get(ENV_VAR) or str(default_path(folder))


@dataclass
class Tracker:
    """Judges results with the history and keeps them for one append at the session's end.

    ``target`` is a SQLite path or a PostgreSQL URL; the history is opened on first use,
    so a run that measures nothing never creates one.
    """

    target: str
    profile: str
    run_id: str = field(default_factory=new_run_id)
    records: list[ResultRecord] = field(default_factory=list)
    left_out: int = 0  # results with injected work, never appended
    _history: History | None = None
    _host: str | None = None

    @property
    def history(self) -> History:
        """The history, opened once (HistoryError says why it cannot be)."""
        if self._history is None:
            target = self.target
            if is_local(target):  # not a URL or a libpq key=value string
                Path(target).parent.mkdir(parents=True, exist_ok=True)
            self._history = History.open(target)
        return self._history

    @property
    def host(self) -> str:
        """The run's host: the first GPU's NVML UUID, else the hostname."""
        if self._host is None:
            self._host = host_id(0)
        return self._host

    def open(self) -> None:
        """Open the history now (HistoryError or OSError if it cannot be)."""
        _ = self.history

    def judge(self, m: Measurement, gate: Gate) -> GateResult:
        """The result's verdict: against its host-aware reference, else the plain gate's.

        A host the history holds nothing of is judged against the class baseline widened by
        the class's host-to-host spread (measured from the history's hosts, else a stated
        default): a new runner is not red on day one for being a slower host (run 59: a
        fresh H100 read linear-fwdbwd-tf32 at 1.022x and 1.030x of another host's baseline).
        """
        plain = gate.judge(entry_of(m))
        # samples metrics (time) move from host to host and night to night, and a per-host
        # metric is judged by its host's history alone; a peak or a count is deterministic
        # and keeps the gate's exact check against the baseline
        metrics = [
            x
            for x in metric_records(m)
            if METRICS[x.metric].kind is Kind.SAMPLES or METRICS[x.metric].per_host
        ]
        points = self.history.case_points(m.id, m.device_class, [x.metric for x in metrics])
        stored = gate.store.load(m.device_class, m.spec.family) or {}
        if not any(points.values()) and m.id not in stored:
            return plain  # nothing to judge against: new
        judged = judge_case(
            m.id,
            m.spec.family,
            m.device_class,
            metrics,
            host=self.host,
            points=points,
            tolerance=gate.tolerances.for_benchmark(m.spec.family, m.id),
            baseline=stored.get(m.id),
            kernels=kernel_shares(m.extra.get("kernels")),
        ).gate
        by_history = {c.metric for c in judged.checks}
        checks = (*judged.checks, *(c for c in plain.checks if c.metric not in by_history))
        order = list(METRICS)
        checks = tuple(sorted(checks, key=lambda c: order.index(c.metric)))
        notes = dict.fromkeys(n for n in (judged.note, plain.note) if n)  # once each
        return replace(judged, checks=checks, note="; ".join(notes))

    def keep(self, attempts: Sequence[tuple[Measurement, GateResult | None]]) -> None:
        """Keep a result's measurements (a first one and its confirmation), oldest first.

        A measurement with injected work (``gpugauge check``'s slowdown) is not kept: it
        measures the injection, and in the history it would be a step of the case.
        """
        if any(injected(m) for m, _ in attempts):
            self.left_out += 1
            return
        earlier: dict[str, list[float]] = {}
        for i, (m, judged) in enumerate(attempts, start=1):
            self.records.append(result_record(m, judged, attempt=i, earlier=dict(earlier)))
            if m.timing is not None:
                earlier.setdefault("time", []).append(m.summary.median)

    def append(self, fingerprint: dict[str, Any], device_class: str) -> str:
        """Append the run and every kept result in one transaction; a line saying where."""
        skipped = (
            f"history: {plural(self.left_out, 'result')} with injected work not appended "
            "(they measure the injection, not the build)"
            if self.left_out
            else ""
        )
        if not self.records:
            return skipped
        run = run_record(
            fingerprint,
            host=self.host,
            device_class=device_class,
            run_id=self.run_id,
            argv=sys.argv,
            profile=self.profile,
        )
        self.history.append(run, self.records)
        said = (
            f"history: {plural(len(self.records), 'result')} of run {self.run_id[:8]} on host "
            f"{self.host} appended to {self.history.where}"
        )
        return "; ".join(x for x in (said, skipped) if x)

    def close(self) -> None:
        """Close the history if it was opened."""
        if self._history is not None:
            self._history.close()
            self._history = None


__all__ = ["HistoryError", "Tracker", "add_options", "target_of"]
