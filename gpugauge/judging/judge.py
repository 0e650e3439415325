"""The one judge: each metric of a result decided by the most sensitive reference it has.

A result's references, in the order they take precedence (:class:`Basis`):

1. a **same-GPU A/B** of the result's build against the build its class baseline accepted
   (``gpugauge confirm`` runs one where the host's history is too thin; it sees 1%);
2. the **host's own history**, once it holds enough accepted runs of the case (a few times
   the host's night-to-night noise);
3. the **class baseline**: the committed baseline widened by the host-to-host spread where
   the history knows the class's hosts, else the baseline's own allowance (or, without a
   baseline, the **class history** of other hosts);
4. with ``--gauge-first-nights N``, a result none of these could judge (a class with no
   baseline yet) is kept as one of the class's first nights, then judged against them.

The class baseline is always asked (it alone judges exact metrics such as an allocator
peak or a count, and a history that stopped answering falls back to it); the history's
check replaces it for the metrics the history judges; an A/B's replaces either for time.
Every check says which reference decided it and what it could see (:class:`MetricCheck`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Protocol

from gpugauge.regress.baselines import entry_of
from gpugauge.regress.gate import Gate
from gpugauge.results.measurement import Measurement
from gpugauge.results.metrics import METRICS
from gpugauge.results.verdicts import NEW_HOST_REASON, Basis, GateResult, MetricCheck, Verdict

_PRECEDENCE = list(Basis)


class HistoryReference(Protocol):
    """A reference that knows the host (:class:`gpugauge.judging.tracking.Tracker`)."""

    def by_history(self, m: Measurement, gate: Gate) -> GateResult | None:
        """The result judged by the history; None where it cannot judge it."""


class NewClassReference(Protocol):
    """A class's first runs, for a result nothing else could judge (``--gauge-first-nights``).

    :class:`gpugauge.judging.first_nights.FirstNights` is one.
    """

    def by_first_nights(self, m: Measurement, result: GateResult, gate: Gate) -> GateResult:
        """``result`` unchanged unless it is *new*; a new one kept or judged, and said so."""


def merged(primary: GateResult, fallback: GateResult) -> GateResult:
    """``primary``'s checks, with ``fallback``'s for the metrics ``primary`` lacks.

    In the metrics' registry order; each note once.
    """
    have = {c.metric for c in primary.checks}
    checks = (*primary.checks, *(c for c in fallback.checks if c.metric not in have))
    order = list(METRICS)
    checks = tuple(sorted(checks, key=lambda c: order.index(c.metric)))
    notes = dict.fromkeys(n for n in (primary.note, fallback.note) if n)
    return replace(primary, checks=checks, note="; ".join(notes))


def regressed_on_new_host(result: GateResult) -> bool:
    """Whether ``result`` regressed where only a same-GPU A/B can tell the host from the code.

    Only its time regressed, against the committed class baseline (the commit that wrote it
    is the A/B's reference), on a host the history knows too few runs of: the allowance is
    the baseline's plus a guess at the host-to-host spread, and a host-paced step can differ
    from host to host by far more (ResNet-18's eager step read 7.9-11.7 ms over five H100
    hosts). ``gpugauge confirm`` A/Bs such a result.
    """
    worse = [c for c in result.checks if c.verdict is Verdict.REGRESSED]
    if not worse or any(c.metric != "time" for c in worse):
        return False
    (time,) = worse
    reason = str(result.references.get("time", ""))
    return time.basis is Basis.CLASS_BASELINE and reason.startswith(NEW_HOST_REASON)


def overruled(result: GateResult, check: MetricCheck, note: str = "") -> GateResult:
    """``result`` with ``check`` deciding its metric, where its basis takes precedence.

    The check it replaces is said in the note ('was time 1.031x ... by class baseline'), so
    that the result keeps what every reference found, and ``note`` becomes the metric's
    entry in ``references``. A check of the same basis is a newer look by the same
    reference: it replaces the earlier one and that one's ``note``, so deciding again
    (``gpugauge confirm`` run twice) leaves one note per reference, not one per run.
    """
    metric = check.metric
    old = result.check(metric)
    if old is not None and _PRECEDENCE.index(old.basis) < _PRECEDENCE.index(check.basis):
        return result  # a closer reference decided it already
    checks = tuple(check if c.metric == metric else c for c in result.checks)
    if old is None:
        checks = (*checks, check)
    again = old is not None and old.basis is check.basis
    was = f"was {old.describe()}" if old is not None and not again else ""
    earlier = result.references.get(metric) if again else None
    kept = [n for n in result.note.split("; ") if n and n != earlier]
    notes = dict.fromkeys(n for n in (note, was, *kept) if n)
    refs = {k: v for k, v in result.references.items() if k != metric}
    refs |= {metric: note} if note else {}
    return replace(result, checks=checks, note="; ".join(notes), references=refs)


@dataclass
class Judge:
    """Judges one result at a time against its references (see the module's order)."""

    gate: Gate
    history: HistoryReference | None = None
    first_nights: NewClassReference | None = None

    def judge(self, m: Measurement) -> GateResult:
        """The result's verdict, each metric by the closest reference that judged it."""
        result = plain = self.gate.by_baseline(entry_of(m))
        if self.history is not None:
            by_history = self.history.by_history(m, self.gate)
            result = plain if by_history is None else merged(by_history, plain)
        if self.first_nights is not None:
            result = self.first_nights.by_first_nights(m, result, self.gate)
        return result
