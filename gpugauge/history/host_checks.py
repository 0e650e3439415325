"""A result judged against its host-aware reference, with the class baseline as anchor.

:func:`check_case` gives each metric of a new result a :class:`Judgement`: its
:class:`~gpugauge.history.reference.Reference` (the host's own recent runs, or the class
baseline with the host-to-host spread) and the check of current/reference, judged like the
gate judges (:func:`gpugauge.results.verdicts.verdict_of`): *regressed* only when the
whole CI of the ratio lies beyond the allowed change.

**The anchor.** A rolling window of a host's last N runs moves with the host: a case that
slows 0.3% a night never leaves its window. So where the reference is the host's and a
committed class baseline exists, the result is also judged against that baseline with the
class allowance (the baseline's own allowance plus the host-to-host spread): the
*anchor* check. When the host's window says unchanged but the anchor says regressed, the
slowdown is a drift, and the verdict is *regressed* with a note that says so. A slowdown
that is meant (a new torch that is slower) is acknowledged the way the suite already
acknowledges one: by recording the class baseline again.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from gpugauge.history.records import MetricRecord, Point
from gpugauge.history.reference import (
    DEFAULT_POLICY,
    BaselineRef,
    Reference,
    ReferencePolicy,
    anchor_reference,
    host_reference,
    reference_for,
)
from gpugauge.regress.baselines import Entry, KernelShare
from gpugauge.regress.gate import allowed_change, kernel_change
from gpugauge.regress.tolerances import Tolerance
from gpugauge.results.metrics import METRICS, Kind
from gpugauge.results.verdicts import (
    NEW_HOST_REASON,
    Basis,
    GateResult,
    MetricCheck,
    Verdict,
    point_check,
    verdict_of,
)

# said of a time a class reference finds faster on a new host: the host's pace, not the code
NOT_CLAIMED = (
    "faster than its class on a new host: this host's pace or how it was timed, which the "
    "class cannot tell from the code's, so no improvement is claimed"
)


def accepted(verdict: Verdict | str | None) -> bool:
    """Whether a result with this verdict may serve as a reference for later runs.

    Regressed and inconclusive results are not: a slowdown must not become the reference
    that hides it. Nor is an unjudged one (None: a run without ``--gauge-gate``, a saved run
    imported without verdicts): a newcomer's trial runs, 42% apart, outranked the baseline
    recorded after them and let a 2.27x slowdown pass (issue 49). ``history accept`` makes
    one a reference on purpose. New, unchanged and improved results are references.
    """
    return verdict is not None and verdict not in (Verdict.REGRESSED, Verdict.INCONCLUSIVE)


def check_against(
    current: MetricRecord, median: float, allowed: float, basis: Basis = Basis.HOST_HISTORY
) -> MetricCheck:
    """current/median with the CI of the current median, judged in the metric's direction."""
    m = METRICS[current.metric]
    if median <= 0:  # no ratio to a reference of 0: new amount, as the gate judges it
        return point_check(m.name, 0.0, current.median, allowed, basis)
    ratio = current.median / median
    low, high = current.ci_low / median, current.ci_high / median
    if abs(current.median - median) <= m.slack:
        verdict = Verdict.UNCHANGED
    else:
        verdict = verdict_of(low, high, allowed, m.better)
    return MetricCheck(m.name, median, current.median, ratio, low, high, allowed, verdict, basis)


@dataclass(frozen=True)
class Judgement:
    """One metric judged: its reference, the check against it, and the anchor's check.

    ``anchor`` is the check against the committed class baseline with the class allowance,
    made where the reference is the host's own (a class reference is the baseline already);
    ``note`` says why a check reads other than its ratio alone would (:func:`unclaimed`).
    """

    metric: str
    reference: Reference | None
    check: MetricCheck | None
    anchor: MetricCheck | None = None
    note: str = ""

    @property
    def drift(self) -> bool:
        """The host's window lets it pass, the class baseline does not: a slow drift."""
        return (
            self.check is not None
            and self.anchor is not None
            and self.anchor.verdict is Verdict.REGRESSED
            and self.check.verdict is not Verdict.REGRESSED
        )

    @property
    def verdict(self) -> Verdict:
        """The check's verdict; regressed on a drift; new with no reference."""
        if self.check is None:
            return Verdict.NEW
        return Verdict.REGRESSED if self.drift else self.check.verdict

    def describe(self) -> str:
        """'time 1.031x [1.029, 1.033] vs <= 1.015 allowed (regressed, by host history); …'."""
        if self.check is None or self.reference is None:
            return f"{self.metric}: no reference (new)"
        said = f"{self.check.describe()}; {self.reference.reason}"
        if self.note:
            said += f"; {self.note}"
        if self.drift and self.anchor is not None:
            said += f"; drift past the class baseline: {self.anchor.describe()}"
        return said


@dataclass(frozen=True)
class CaseJudgement:
    """Every metric of one result judged; :attr:`gate` is what the test gets."""

    id: str
    family: str
    device_class: str
    judgements: tuple[Judgement, ...]
    note: str = ""

    @property
    def verdict(self) -> Verdict:
        """The worst metric verdict (the gate's form decides); new where none had a reference."""
        return self.gate.verdict

    @property
    def gate(self) -> GateResult:
        """As the gate's result: per metric the deciding check (the anchor's on a drift)."""
        checks = []
        for j in self.judgements:
            if j.check is None:
                continue
            if j.drift and j.anchor is not None:
                checks.append(j.anchor)
            else:
                checks.append(j.check)
        reasons = "; ".join(
            f"{j.metric}: {j.reference.reason}" for j in self.judgements if j.reference
        )
        drifts = "; ".join(
            f"{j.metric} drifted past the class baseline" for j in self.judgements if j.drift
        )
        notes = "; ".join(f"{j.metric}: {j.note}" for j in self.judgements if j.note)
        note = "; ".join(part for part in (drifts, reasons, notes, self.note) if part)
        return GateResult(
            self.id, self.family, self.device_class, tuple(checks), note, self.references()
        )

    def references(self) -> dict[str, str]:
        """Per metric, what judged it (for :class:`~gpugauge.history.records.MetricRecord`)."""
        return {j.metric: j.reference.reason for j in self.judgements if j.reference}

    def verdicts(self) -> dict[str, str]:
        """Per metric, the verdict (for the stored metric records)."""
        return {j.metric: j.verdict.value for j in self.judgements}

    def message(self) -> str:
        """One line for a failing test: the worst metrics with their references."""
        worst = "; ".join(j.describe() for j in self.judgements if j.verdict is self.verdict)
        said = "; ".join(p for p in (worst, self.note) if p)
        return f"{self.id}: {self.verdict}: {said}"

    def as_dict(self) -> dict[str, Any]:
        """Plain dict for JSON: the gate's form plus each metric's reference."""
        return {
            **self.gate.as_dict(),
            "references": {
                j.metric: {k: getattr(j.reference, k) for k in j.reference.__dataclass_fields__}
                for j in self.judgements
                if j.reference
            },
        }


def baseline_reference(
    baseline: Entry, metric: str, floor: float, current: float | None = None
) -> BaselineRef | None:
    """A class baseline's (median, allowed change, hosts of its runs) of one metric.

    None if it lacks the metric; hosts None where the file does not say (recorded before
    hosts were kept). A value metric's median is its recorded reading nearest ``current``
    (:meth:`~gpugauge.regress.baseline_file.Entry.nearest_reading`), as the gate reads it.
    """
    readings = baseline.readings.get(metric)
    if not readings:
        return None
    if METRICS[metric].kind is Kind.SAMPLES:
        allowed = allowed_change(floor, baseline, metric)
        return statistics.median(readings), allowed, baseline.hosts(metric)
    return baseline.nearest_reading(metric, current), floor, None


def check_metric(
    current: MetricRecord,
    host: str,
    points: Sequence[Point],
    floor: float,
    baseline: BaselineRef | None = None,
    policy: ReferencePolicy = DEFAULT_POLICY,
) -> Judgement:
    """One metric: its reference from ``points`` (one case, one class, all hosts) and checks.

    A per-host metric has the host's own reference or none (new): other hosts' readings and
    the class baseline are no reference for it, and no anchor.
    """
    if METRICS[current.metric].per_host:
        ref = host_reference(points, host, floor, policy)
        baseline = None
    else:
        ref = reference_for(points, host, floor, policy, baseline)
    if ref is None:
        return Judgement(current.metric, None, None)
    check = check_against(current, ref.median, ref.allowed, ref.basis)
    if unclaimed(check, ref):
        return Judgement(
            current.metric, ref, replace(check, verdict=Verdict.UNCHANGED), None, NOT_CLAIMED
        )
    anchor = None
    if ref.kind == "host" and baseline is not None:
        cls = anchor_reference(points, host, ref, baseline, policy)
        anchor = check_against(current, cls.median, cls.allowed, cls.basis)
    return Judgement(current.metric, ref, check, anchor)


def unclaimed(check: MetricCheck, ref: Reference) -> bool:
    """Whether ``check`` is a time a class reference finds faster on a host new to it.

    The twin of a new host's time regression
    (:func:`~gpugauge.judging.judge.regressed_on_new_host`): the class allows a new host
    the host-to-host spread, and a host-paced step lies past it either way (ResNet-18's
    eager step read 7.9-11.7 ms over five H100 hosts, and 0.53x its class baseline inside
    an A/B's blocks on the very host that recorded it). A regression is left to a same-GPU
    A/B; an improvement is not claimed: it reads unchanged, says why, and becomes the
    host's own reference like any accepted run.
    """
    return (
        check.metric == "time"
        and check.verdict is Verdict.IMPROVED
        and ref.kind == "class"
        and ref.reason.startswith(NEW_HOST_REASON)
    )


def check_case(
    bench_id: str,
    family: str,
    device_class: str,
    current: Sequence[MetricRecord],
    *,
    host: str,
    points: Mapping[str, Sequence[Point]],
    tolerance: Tolerance,
    baseline: Entry | None = None,
    kernels: tuple[KernelShare, ...] = (),
    policy: ReferencePolicy = DEFAULT_POLICY,
) -> CaseJudgement:
    """Judge every metric of one result of ``host``.

    ``points`` maps metric names to the case's history on this device class (all hosts,
    :meth:`History.points`); ``baseline`` is the committed class baseline's entry, if any;
    ``kernels`` the result's recorded kernels, compared with the reference's. A metric
    that is not ``judged`` (a diagnostic) gets no judgement.
    """
    judgements = []
    for m in (x for x in current if METRICS[x.metric].judged):
        base = (
            baseline_reference(baseline, m.metric, tolerance[m.metric], m.median)
            if baseline
            else None
        )
        judgements.append(
            check_metric(m, host, points.get(m.metric, ()), tolerance[m.metric], base, policy)
        )
    time = next((j for j in judgements if j.metric == "time" and j.reference), None)
    note = ""
    if time is not None and kernels:
        if time.reference.kind == "host":
            mine = [p for p in points.get("time", ()) if p.host == host and p.accepted]
            theirs = mine[-1].result.kernels if mine else ()
            note = kernel_change(kernels, theirs, "this host's last run's")
        else:
            note = kernel_change(kernels, baseline.kernels if baseline else ())
    return CaseJudgement(bench_id, family, device_class, tuple(judgements), note)
