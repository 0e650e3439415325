"""The one judge: each metric of a result decided by the most sensitive reference it has.

A result's references, in the order they take precedence (:class:`Basis`):

1. a **same-GPU A/B** of the result's build against the build that recorded its class baseline
   (``gpugauge confirm`` runs one where the host's history is too thin; it sees 1%);
2. the **host's own history**, once it holds enough accepted runs of the case (a few times
   the host's night-to-night noise);
3. the **class baseline**: the committed baseline widened by the host-to-host spread where
   the history knows two other hosts of the class, else by nothing where the baseline's
   runs came from two hosts or more, else by a default 5% (or, without a baseline, the
   **class history** of other hosts);
4. with ``--gauge-first-nights N``, a result none of these could judge (a class with no
   baseline yet) is kept as one of the class's first nights, then judged against them.

The class baseline is always asked (it alone judges exact metrics such as an allocator
peak or a count, and a history that stopped answering falls back to it); the history's
check replaces it for the metrics the history judges; an A/B's replaces either for time.
Every check says which reference decided it and what it could see (:class:`MetricCheck`).

:meth:`Judge.decide` takes the whole decision a test acts on (:class:`Decision`): a
regression is measured again and judged again, a time regression on a new host is left to
``gpugauge confirm``, a class's first night passes, and what is left passes or fails.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Protocol

from gpugauge.core.phrasing import joined
from gpugauge.regress.baselines import entry_of
from gpugauge.regress.gate import Gate
from gpugauge.results.measurement import Attempt, Measurement
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

    def passing(self, result: GateResult) -> str:
        """Why a *new* result passes as one of its class's first nights; "" where it does not."""


def merged(primary: GateResult, fallback: GateResult) -> GateResult:
    """``primary``'s checks, with ``fallback``'s for the metrics ``primary`` lacks.

    In the metrics' registry order; each note once.
    """
    have = {c.metric for c in primary.checks}
    checks = (*primary.checks, *(c for c in fallback.checks if c.metric not in have))
    order = list(METRICS)
    checks = tuple(sorted(checks, key=lambda c: order.index(c.metric)))
    return replace(primary, checks=checks, note=joined(primary.note, fallback.note))


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
    earlier = result.references.get(metric, "") if again else ""
    gone = set(earlier.split("; "))  # the earlier check's note, each of its parts
    kept = [n for n in result.note.split("; ") if n not in gone]
    refs = {k: v for k, v in result.references.items() if k != metric}
    refs |= {metric: note} if note else {}
    return replace(result, checks=checks, note=joined(note, was, *kept), references=refs)


class Action(StrEnum):
    """What a test does with its result's verdict."""

    PASS = "pass"
    FAIL = "fail"
    LEFT_TO_CONFIRM = "left to confirm"  # a time regression on a new host: confirm A/Bs it
    FIRST_NIGHT = "first night"  # new, and kept as one of its class's first nights


@dataclass(frozen=True)
class Decision:
    """A result's verdict and what its test does with it.

    ``said``: the failure message, or the note of a result left to confirm or passed as a
    first night; "" for a plain pass. ``attempts``: every measurement judged, oldest first,
    with its verdict (a regression measured again has two); the last one is the result.
    """

    result: GateResult
    action: Action
    said: str
    attempts: tuple[tuple[Measurement, GateResult], ...]

    @property
    def measurement(self) -> Measurement:
        """The measurement the verdict used: the second, where there were two."""
        return self.attempts[-1][0]


def _deciding(r: GateResult) -> str:
    """The checks that decided a verdict, in one phrase."""
    return "; ".join(c.describe() for c in r.checks if c.verdict is r.verdict) or r.note


@dataclass
class Judge:
    """Judges one result at a time against its references (see the module's order).

    ``remeasure``: a regression is measured again before its test fails;
    ``new_host_to_confirm``: a time regression on a host the history cannot judge yet is
    left to ``gpugauge confirm`` (``--gauge-confirm-new-host``); ``require_baselines``: a
    result nothing could judge fails (``--gauge-require-baselines``).
    """

    gate: Gate
    history: HistoryReference | None = None
    first_nights: NewClassReference | None = None
    remeasure: bool = True
    new_host_to_confirm: bool = False
    require_baselines: bool = False

    def judge(self, m: Measurement) -> GateResult:
        """The result's verdict, each metric by the closest reference that judged it."""
        result = plain = self.gate.by_baseline(entry_of(m))
        if self.history is not None:
            by_history = self.history.by_history(m, self.gate)
            result = plain if by_history is None else merged(by_history, plain)
        if self.first_nights is not None:
            result = self.first_nights.by_first_nights(m, result, self.gate)
        return result

    def decide(self, m: Measurement, again: Callable[[], Measurement] | None) -> Decision:
        """The verdict on ``m`` and what its test does with it.

        ``again`` measures the result again (a fresh warm-up); None for a result recorded
        from elsewhere (a worker's, a search). A regression fails only if the second
        measurement regresses too, so one disturbed measurement (a neighbour's job, a clock
        dip) does not fail a night. The second is the result from then on; the first is
        kept in its ``earlier`` attempts.
        """
        first = result = self.judge(m)
        attempts = [(m, first)]
        if first.verdict is Verdict.REGRESSED:
            if again is None or not self.remeasure:
                why = "recorded from elsewhere" if again is None else "--gauge-no-remeasure"
                result = replace(first, note=joined(first.note, f"not measured again ({why})"))
            else:
                second = again()
                if m.timing is not None and second.timing is not None:
                    earlier = (*m.earlier, Attempt.of(m, first.verdict.value))
                    second = replace(second, earlier=earlier)
                judged = self.judge(second)
                said = f"first measurement {first.verdict}: {_deciding(first)}"
                result = replace(judged, note=joined(said, judged.note))
                attempts.append((second, result))
        return Decision(result, *self._action(result), tuple(attempts))

    def _action(self, result: GateResult) -> tuple[Action, str]:
        """What the test does with ``result``, and the line that says so."""
        if self.new_host_to_confirm and regressed_on_new_host(result):
            return Action.LEFT_TO_CONFIRM, (
                f"{result.id}: regressed against its class on a new host: left to "
                "`gpugauge confirm`, which A/Bs it on this GPU (--gauge-confirm-new-host)"
            )
        if result.verdict is Verdict.REGRESSED:
            return Action.FAIL, result.message()
        first_night = "" if self.first_nights is None else self.first_nights.passing(result)
        if first_night:
            return Action.FIRST_NIGHT, f"{result.id}: new, passes: {first_night}"
        if result.verdict is Verdict.NEW and self.require_baselines:
            return Action.FAIL, f"{result.message()} (--gauge-require-baselines)"
        return Action.PASS, ""
