"""A pytest session's link to the results history: judge each result, then append the run.

The gate judges a result against the committed class baseline. With a history
(:mod:`gpugauge.history`), a :class:`Tracker` offers the judge
(:class:`gpugauge.judging.judge.Judge`) a reference that knows the host: the host's own
recent accepted runs once it has them, else the class baseline widened by the measured
host-to-host spread, with the baseline kept as an anchor against slow drift
(:func:`gpugauge.history.host_checks.check_case`). Every result is kept, a regressed first
measurement and its re-measurement both, and the session's run is appended in one
transaction at its end, so an interrupted session leaves no half run in the history.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from gpugauge.core.phrasing import plural
from gpugauge.history.backends import out_of_reach
from gpugauge.history.capture import (
    host_id,
    metric_records,
    new_run_id,
    result_record,
    run_record,
)
from gpugauge.history.host_checks import check_case
from gpugauge.history.records import (
    HistoryError,
    HistoryUnavailable,
    MetricRecord,
    Point,
    ResultRecord,
)
from gpugauge.history.reference import DEFAULT_POLICY, ReferencePolicy
from gpugauge.history.store import ENV_VAR, History, default_path
from gpugauge.history.targets import is_local
from gpugauge.regress.baselines import Entry, kernel_shares
from gpugauge.regress.gate import Gate
from gpugauge.results.benchmark_storage import storage_folder
from gpugauge.results.measurement import Measurement, injected
from gpugauge.results.metrics import METRICS, Kind
from gpugauge.results.verdicts import GateResult


def judged_here(m: Measurement) -> list[MetricRecord]:
    """The metrics of ``m`` the history judges: samples (time) and per-host ones.

    A peak or a count is deterministic and keeps the class baseline's exact check.
    """
    return [
        x
        for x in metric_records(m)
        if METRICS[x.metric].kind is Kind.SAMPLES or METRICS[x.metric].per_host
    ]


def target_of(config: pytest.Config) -> str | None:
    """Where this session's history lives, or None when it is turned off."""
    if config.getoption("gauge_no_history", False):  # it turns off a history addopts names too
        return None
    given = config.getoption("gauge_history", None)
    if given is not None:
        if not str(given).strip():
            raise pytest.UsageError("--gauge-history '': give a file path or a postgresql:// URL")
        return str(given)
    # beside pytest-benchmark's file storage, where the report looks for it too; another
    # storage backend (elasticsearch) has no folder: then the default one
    folder = storage_folder(config) or Path(".benchmarks")
    return os.environ.get(ENV_VAR) or str(default_path(folder))


@dataclass
class Tracker:
    """Judges results with the history and keeps them for one append at the session's end.

    ``target`` is a SQLite path or a PostgreSQL URL; :func:`open_tracker` opens the history
    when gpugauge starts in the session, so that a bad one stops the run before it measures.
    """

    target: str
    profile: str
    run_id: str = field(default_factory=new_run_id)
    records: list[ResultRecord] = field(default_factory=list)
    left_out: int = 0  # results with injected work, never appended
    lost: str | None = None  # why the history stopped answering mid-session, or None
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

    def by_history(self, m: Measurement, gate: Gate) -> GateResult | None:
        """The result judged against its host-aware reference; None where the history cannot.

        None where nothing of the case is known (no history and no baseline: new) or the
        history stopped answering: a history gone mid-session (a shared server, a failing
        disk) fails no test, and :attr:`lost` says why (one line at the session's end).

        A host the history holds nothing of is judged against the class baseline widened by
        the class's host-to-host spread (measured from the history's hosts, else a stated
        default): a new runner is not red on day one for being a slower host. Only samples
        metrics (time) and per-host metrics are judged here; a peak or a count is
        deterministic and keeps the class baseline's exact check
        (:class:`gpugauge.judging.judge.Judge` merges the two).
        """
        if self.lost is not None:
            return None
        metrics = judged_here(m)
        try:
            points = self.history.case_points(m.id, m.device_class, [x.metric for x in metrics])
        except (HistoryError, OSError) as err:  # a server gone, a disk failing: not a test's
            self.lost = str(err)
            return None
        stored = gate.store.load(m.device_class, m.spec.family) or {}
        if not any(points.values()) and m.id not in stored:
            return None  # nothing to judge against: new
        return self.judged(m, gate, metrics, points, baseline=stored.get(m.id))

    def judged(
        self,
        m: Measurement,
        gate: Gate,
        metrics: Sequence[MetricRecord],
        points: Mapping[str, Sequence[Point]],
        *,
        baseline: Entry | None = None,
        policy: ReferencePolicy = DEFAULT_POLICY,
    ) -> GateResult:
        """``metrics`` of ``m`` judged on this host against ``points`` (its case's history)."""
        return check_case(
            m.id,
            m.spec.family,
            m.device_class,
            metrics,
            host=self.host,
            points=points,
            tolerance=gate.tolerances.for_benchmark(m.spec.family, m.id),
            baseline=baseline,
            kernels=kernel_shares(m.extra.get("kernels")),
            policy=policy,
        ).gate

    def keep(self, attempts: Sequence[tuple[Measurement, GateResult | None]]) -> None:
        """Keep a result's measurements (a first one and its re-measurement), oldest first.

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
        """Append the run and every kept result in one transaction; a line saying where.

        A history :attr:`lost` mid-session is not tried again: the line says so, and that
        the results were judged against the class baseline alone.
        """
        if self.lost is not None:
            return (
                f"history unavailable since mid-session ({self.lost}): later results were "
                "judged against the class baseline alone, and the run was NOT appended (its "
                "saved run can be added later: python -m gpugauge history import RUN.json)"
            )
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
        """Close the history if it was opened (one that went away closes quietly)."""
        if self._history is not None:
            with contextlib.suppress(HistoryError, OSError):
                self._history.close()
            self._history = None


def open_tracker(target: str, profile: str) -> tuple[Tracker | None, str]:
    """The session's tracker, its history opened now; or None and the line that says why.

    A history out of reach (a disk too full for SQLite's -shm, a server that does not
    answer) must not stop a nightly before it measures: the session goes on without it.
    A bad path or URL is raised (HistoryError, OSError): the caller's usage error.
    """
    tracker = Tracker(target, profile)
    try:
        tracker.open()
    except (HistoryUnavailable, OSError) as err:
        if isinstance(err, OSError) and not out_of_reach(err):
            raise
        tracker.close()
        return None, (
            f"history NOT used: {err}; the run goes on without it (a gate judges against "
            "the class baseline alone) and is not appended (its saved run can be added "
            "later: python -m gpugauge history import RUN.json)"
        )
    return tracker, ""


__all__ = [
    "HistoryError",
    "HistoryUnavailable",
    "Tracker",
    "open_tracker",
    "target_of",
]
