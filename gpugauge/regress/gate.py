"""The regression gate: current against baseline, metric by metric, with a verdict.

Every metric of the registry that both sides hold is judged on current/baseline, in the
metric's direction. A samples metric (time) is judged on the bootstrap CI of the ratio of
medians: *regressed* only when the whole interval lies beyond the tolerance on the worse
side (above 1 + tolerance for lower-is-better, below 1 - tolerance for higher-is-better),
*improved* (the baseline is stale) when it lies wholly beyond it on the better side,
*unchanged* when it lies wholly inside, and *inconclusive* when it straddles a bound, so
that noise alone never fails a build. The time tolerance is a floor: the change allowed is
derived from the recorded baseline runs (:func:`allowed_change`), because a within-run CI
cannot see run-to-run noise, such as a short GEMM's clocks under the power cap. Value
metrics (a deterministic allocator peak, one long energy window, a count) are judged on
their point ratio against their tolerance. Where both sides recorded their main kernels,
the result's note says which ones differ: a change of algorithm, not of clock or noise.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from gpugauge.measure.stats import ratio_of_medians
from gpugauge.regress.baselines import BaselineStore, Entry, KernelShare
from gpugauge.regress.tolerances import Tolerance, Tolerances
from gpugauge.results.metrics import METRICS, Better, Kind, Metric

MEMORY_SLACK_BYTES = 2 * 2**20  # allocator rounding: never a regression on its own


class Verdict(StrEnum):
    """Outcome of one comparison, worst first."""

    REGRESSED = "regressed"
    INCONCLUSIVE = "inconclusive"
    IMPROVED = "improved"
    UNCHANGED = "unchanged"
    NEW = "new"  # no baseline entry for this benchmark


_ORDER = list(Verdict)


def judge(low: float, high: float, tolerance: float, better: Better = Better.LOWER) -> Verdict:
    """Verdict of a current/baseline ratio known to lie in [low, high]."""
    above, below = low > 1 + tolerance, high < 1 - tolerance
    if above or below:
        worse = above if better is Better.LOWER else below
        return Verdict.REGRESSED if worse else Verdict.IMPROVED
    if low >= 1 - tolerance and high <= 1 + tolerance:
        return Verdict.UNCHANGED
    return Verdict.INCONCLUSIVE


@dataclass(frozen=True)
class MetricCheck:
    """One metric's comparison; ratio is current / baseline (worse above 1 for time)."""

    metric: str
    baseline: float
    current: float
    ratio: float
    ci_low: float
    ci_high: float
    tolerance: float
    verdict: Verdict

    @property
    def allowed(self) -> str:
        """The bound the ratio must keep, in the metric's direction: '<= 1.030'."""
        return METRICS[self.metric].allowed(self.tolerance)

    def describe(self) -> str:
        """'time 1.102x [1.095, 1.110] vs <= 1.030 allowed (regressed)'."""
        interval = (
            "" if self.ci_low == self.ci_high else f" [{self.ci_low:.3f}, {self.ci_high:.3f}]"
        )
        return (
            f"{self.metric} {self.ratio:.3f}x{interval} vs {self.allowed} allowed ({self.verdict})"
        )

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> MetricCheck:
        """Read back :meth:`as_dict` (KeyError, ValueError or TypeError if malformed)."""
        return cls(
            d["metric"],
            *(float(d[k]) for k in ("baseline", "current", "ratio", "ci_low", "ci_high")),
            float(d["tolerance"]),
            Verdict(d["verdict"]),
        )

    def as_dict(self) -> dict[str, Any]:
        """Plain dict for JSON."""
        return {
            **{k: getattr(self, k) for k in self.__dataclass_fields__},
            "verdict": self.verdict.value,
            "better": METRICS[self.metric].better.value,
            "allowed": self.allowed,
        }


@dataclass(frozen=True)
class GateResult:
    """A benchmark's verdict (the worst of its metrics) and each metric's check.

    ``references`` says, per metric, what judged it where that was not the committed class
    baseline alone (the history's host-aware reference); empty for the plain gate.
    """

    id: str
    family: str
    device_class: str
    checks: tuple[MetricCheck, ...]
    note: str = ""
    references: Mapping[str, str] = field(default_factory=dict, hash=False)

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
        worst = "; ".join(c.describe() for c in self.checks if c.verdict is self.verdict)
        said = "; ".join(part for part in (worst, self.note) if part)
        return f"{self.id}: {self.verdict}: {said}"

    @classmethod
    def from_dict(cls, d: dict[str, Any], family: str, device_class: str) -> GateResult:
        """Read back :meth:`as_dict`, stored in a result by the run that judged it."""
        checks = tuple(MetricCheck.from_dict(c) for c in d["checks"])
        refs = {str(k): str(v) for k, v in (d.get("references") or {}).items()}
        return cls(str(d["id"]), family, device_class, checks, str(d.get("note") or ""), refs)

    def as_dict(self) -> dict[str, Any]:
        """Plain dict for JSON."""
        return {
            "id": self.id,
            "verdict": self.verdict.value,
            "note": self.note,
            "checks": [c.as_dict() for c in self.checks],
        } | ({"references": dict(self.references)} if self.references else {})


def _point(m: Metric, current: float, baseline: float, tol: float) -> MetricCheck:
    if abs(current - baseline) <= m.slack:
        ratio, verdict = (current / baseline if baseline else 1.0), Verdict.UNCHANGED
    else:
        ratio = current / baseline if baseline else float("inf")
        verdict = judge(ratio, ratio, tol, m.better)
    return MetricCheck(m.name, baseline, current, ratio, ratio, ratio, tol, verdict)


# How far past the recorded runs' own spread a change must go: the spread of two runs
# underestimates the run-to-run noise, and a new run differs from both.
SPREAD_FACTOR = 2.0
# A baseline of one run shows no run-to-run noise at all: allow this many times the floor.
ONE_RUN_FACTOR = 2.0


def allowed_change(floor: float, baseline: Entry, metric: str) -> float:
    """The relative change a samples metric may show before it counts: the tolerance rule.

    Recorded from two or more runs: ``max(floor, SPREAD_FACTOR x spread)``, the spread
    being max/min - 1 of the runs' medians. From one run: ``ONE_RUN_FACTOR x floor``.
    """
    if len(baseline.run_medians.get(metric, ())) >= 2:
        return max(floor, SPREAD_FACTOR * baseline.run_spread(metric))
    return ONE_RUN_FACTOR * floor


# Recorded runs whose medians lie further apart than this (max/min - 1) do not agree on
# what the build measures: the gate would let SPREAD_FACTOR x this pass unseen (20%). A
# baseline that wide is refused unless asked for (gpugauge baseline --allow-wide-spread):
# two runs 49% apart gave one that allowed 2.03x, saved without a word. Steps the host
# paces are that wide across hosts, and are recorded so on purpose (docs/gate.md).
WIDE_SPREAD = 0.10


def wide_spreads(entries: Iterable[Entry], limit: float = WIDE_SPREAD) -> list[str]:
    """One line per entry and samples metric whose runs' medians lie over ``limit`` apart."""
    out = []
    for e in entries:
        for name, medians in e.run_medians.items():
            spread = e.run_spread(name)
            if spread > limit:
                unit = METRICS[name].unit
                out.append(
                    f"{e.device_class}/{e.family} {e.id!r}: its {len(medians)} runs' {name} "
                    f"medians lie {spread:.0%} apart ({min(medians):.4g} to "
                    f"{max(medians):.4g} {unit}); the gate would allow "
                    f"{1 + SPREAD_FACTOR * spread:.2f}x before calling a regression"
                )
    return out


def _samples(
    m: Metric, current: tuple[float, ...], baseline: Entry, tolerance: float
) -> MetricCheck:
    base = baseline.readings[m.name]
    r = ratio_of_medians(current, base)
    b_med = statistics.median(base)
    allowed = allowed_change(tolerance, baseline, m.name)
    verdict = judge(r.ci_low, r.ci_high, allowed, m.better)
    return MetricCheck(
        m.name, b_med, b_med * r.value, r.value, r.ci_low, r.ci_high, allowed, verdict
    )


def compare(
    current: Entry, baseline: Entry, tolerance: Tolerance, *, same_host: bool = False
) -> GateResult:
    """Judge every metric both entries hold, in registry order.

    A per-host metric is judged only where both were measured on ``same_host``: a committed
    baseline's reading is, as far as the gate knows, another host's. A metric that is not
    ``judged`` (a diagnostic) never is.
    """
    checks = []
    for name, m in METRICS.items():
        if name not in current.readings or name not in baseline.readings:
            continue
        if not m.judged or (m.per_host and not same_host):
            continue
        if m.kind is Kind.SAMPLES:
            checks.append(_samples(m, current.readings[name], baseline, tolerance[name]))
        else:
            cur, base = current.readings[name][0], baseline.readings[name][0]
            checks.append(_point(m, cur, base, tolerance[name]))
    notes = [kernel_change(current.kernels, baseline.kernels)]
    if not checks:
        notes.append("no metric in common with the baseline")
    note = "; ".join(n for n in notes if n)
    return GateResult(current.id, current.family, current.device_class, tuple(checks), note)


def short_kernel(name: str, width: int = 80) -> str:
    """A kernel name without ``void`` and its argument list; at most ``width`` characters."""
    name = name.removeprefix("void ")
    if name.endswith(")"):  # cut the argument list: the '(' that balances the last ')'
        depth = 0
        for i in range(len(name) - 1, -1, -1):
            depth += {")": 1, "(": -1}.get(name[i], 0)
            if depth == 0:
                name = name[:i]
                break
    return name if len(name) <= width else name[: width - 1] + "…"


# A main kernel takes this share of a round's device time: on the H200 the tf32 seed
# conv's layout transform (6%) is one, its memset (0.5%) is not.
MAIN_KERNEL_SHARE = 0.05
# Each side lists its longest kernels only (16): a kernel absent from the other side is
# taken as gone only when it is this much longer than the shortest one listed there, so
# that two kernels of about equal time trading places at the cut say nothing.
LISTED_MARGIN = 1.5


def _not_in(side: tuple[KernelShare, ...], other: tuple[KernelShare, ...]) -> list[str]:
    """Main kernels of ``side`` that ``other`` would have listed had it run them."""
    names = {k.name for k in other}
    cut = min((k.share for k in other), default=0.0)
    return [
        k.name
        for k in side
        if k.share >= MAIN_KERNEL_SHARE and k.name not in names and k.share > LISTED_MARGIN * cut
    ]


def kernel_change(
    current: tuple[KernelShare, ...],
    baseline: tuple[KernelShare, ...],
    other: str = "the baseline's",
) -> str:
    """What main kernels changed from ``other``'s; '' when either side lacks them, or none did."""
    if not current or not baseline:
        return ""
    now = ", ".join(short_kernel(k) for k in _not_in(current, baseline))
    gone = ", ".join(short_kernel(k) for k in _not_in(baseline, current))
    parts = [f"now runs {now}" if now else "", f"no longer {gone}" if gone else ""]
    said = "; ".join(p for p in parts if p)
    return f"main kernels differ from {other}: {said}" if said else ""


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
