"""The regression gate: current against baseline, metric by metric, with a verdict.

Time is judged on the bootstrap CI of current/baseline median: *regressed* only when the
whole interval lies above 1 + tolerance, *improved* (the baseline is stale) when it lies
wholly below 1 - tolerance, *unchanged* when it lies wholly inside, and *inconclusive*
when it straddles a bound, so that noise alone never fails a build. Where the baseline was
recorded from several runs, the tolerance widens to the spread of their medians: a
within-run CI cannot see run-to-run noise, such as a short GEMM's clocks under the power
cap. Memory (a deterministic allocator peak) and energy (one long window) are judged on
their point ratio.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from gpugauge.measure.stats import ratio_of_medians
from gpugauge.regress.baselines import BaselineStore, Entry
from gpugauge.regress.tolerances import Tolerance, Tolerances

MEMORY_SLACK_BYTES = 2 * 2**20  # allocator rounding: never a regression on its own


class Verdict(StrEnum):
    """Outcome of one comparison, worst first."""

    REGRESSED = "regressed"
    INCONCLUSIVE = "inconclusive"
    IMPROVED = "improved"
    UNCHANGED = "unchanged"
    NEW = "new"  # no baseline entry for this benchmark


_ORDER = list(Verdict)


def judge(low: float, high: float, tolerance: float) -> Verdict:
    """Verdict of a current/baseline ratio known to lie in [low, high]."""
    if low > 1 + tolerance:
        return Verdict.REGRESSED
    if high < 1 - tolerance:
        return Verdict.IMPROVED
    if low >= 1 - tolerance and high <= 1 + tolerance:
        return Verdict.UNCHANGED
    return Verdict.INCONCLUSIVE


@dataclass(frozen=True)
class MetricCheck:
    """One metric's comparison; ratio is current / baseline (above 1: worse)."""

    metric: str
    baseline: float
    current: float
    ratio: float
    ci_low: float
    ci_high: float
    tolerance: float
    verdict: Verdict

    def describe(self) -> str:
        """'time 1.102x [1.095, 1.110] > 1.030 allowed'."""
        interval = (
            "" if self.ci_low == self.ci_high else f" [{self.ci_low:.3f}, {self.ci_high:.3f}]"
        )
        return (
            f"{self.metric} {self.ratio:.3f}x{interval} vs {1 + self.tolerance:.3f} allowed "
            f"({self.verdict})"
        )

    def as_dict(self) -> dict[str, Any]:
        """Plain dict for JSON."""
        return {
            **{k: getattr(self, k) for k in self.__dataclass_fields__},
            "verdict": self.verdict.value,
        }


@dataclass(frozen=True)
class GateResult:
    """A benchmark's verdict (the worst of its metrics) and each metric's check."""

    id: str
    family: str
    device_class: str
    checks: tuple[MetricCheck, ...]
    note: str = ""

    @property
    def verdict(self) -> Verdict:
        """Worst metric verdict; NEW where nothing could be compared."""
        if not self.checks:
            return Verdict.NEW
        return min((c.verdict for c in self.checks), key=_ORDER.index)

    def check(self, metric: str) -> MetricCheck | None:
        """The check of one metric, if it was compared."""
        return next((c for c in self.checks if c.metric == metric), None)

    def message(self) -> str:
        """One line for a failing test or a table."""
        worst = [c.describe() for c in self.checks if c.verdict is self.verdict]
        return f"{self.id}: {self.verdict}: " + ("; ".join(worst) or self.note)

    def as_dict(self) -> dict[str, Any]:
        """Plain dict for JSON."""
        return {
            "id": self.id,
            "verdict": self.verdict.value,
            "note": self.note,
            "checks": [c.as_dict() for c in self.checks],
        }


def _point(
    metric: str, current: float, baseline: float, tol: float, slack: float = 0.0
) -> MetricCheck:
    if abs(current - baseline) <= slack:
        ratio, verdict = (current / baseline if baseline else 1.0), Verdict.UNCHANGED
    else:
        ratio = current / baseline if baseline else float("inf")
        verdict = judge(ratio, ratio, tol)
    return MetricCheck(metric, baseline, current, ratio, ratio, ratio, tol, verdict)


def compare(current: Entry, baseline: Entry, tolerance: Tolerance) -> GateResult:
    """Judge every metric both entries have."""
    r = ratio_of_medians(current.time_ms, baseline.time_ms)
    b_med = statistics.median(baseline.time_ms)
    # identical runs of the baseline already differed by run_spread: never call less a change
    allowed = max(tolerance.time, baseline.run_spread)
    checks = [
        MetricCheck(
            "time",
            b_med,
            b_med * r.value,
            r.value,
            r.ci_low,
            r.ci_high,
            allowed,
            judge(r.ci_low, r.ci_high, allowed),
        )
    ]
    if current.peak_bytes is not None and baseline.peak_bytes is not None:
        checks.append(
            _point(
                "memory",
                current.peak_bytes,
                baseline.peak_bytes,
                tolerance.memory,
                MEMORY_SLACK_BYTES,
            )
        )
    if current.energy_j is not None and baseline.energy_j is not None:
        checks.append(_point("energy", current.energy_j, baseline.energy_j, tolerance.energy))
    return GateResult(current.id, current.family, current.device_class, tuple(checks))


class Gate:
    """Baselines plus tolerances: judges one entry at a time."""

    def __init__(self, store: BaselineStore, tolerances: Tolerances) -> None:
        self.store = store
        self.tolerances = tolerances

    def judge(self, current: Entry) -> GateResult:
        """Compare with the stored baseline of the same device class, or say why not."""
        stored = self.store.load(current.device_class, current.family)
        where = self.store.path(current.device_class, current.family)
        if stored is None:
            return GateResult(
                current.id,
                current.family,
                current.device_class,
                (),
                f"no baseline for device class {current.device_class} ({where})",
            )
        if current.id not in stored:
            return GateResult(
                current.id, current.family, current.device_class, (), f"not in {where}"
            )
        tol = self.tolerances.for_benchmark(current.family, current.id)
        return compare(current, stored[current.id], tol)

    def missing(self, device_cls: str, family: str, seen: set[str]) -> list[str]:
        """Baseline ids of a family that this run did not measure."""
        stored = self.store.load(device_cls, family) or {}
        return sorted(set(stored) - seen)
