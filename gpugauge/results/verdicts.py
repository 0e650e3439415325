"""Verdicts, whatever judged them: class baseline, host history or same-GPU A/B.

A metric's :class:`MetricCheck` holds current/reference with its interval, the change the
reference allows, the verdict, and its :class:`Basis`: which reference decided it. The
allowed change is also the check's sensitivity, the smallest change it can call: a class
baseline on a new host allows its runs' spread plus the host-to-host spread (6.5% on an
H100 with an empty history), the host's own history a few times its night-to-night noise,
and a same-GPU A/B its minimum effect (1%). A :class:`GateResult` is one result's checks,
its verdict the worst of them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, TypeVar

from gpugauge.measure.stats import CI_LEVEL
from gpugauge.results.metrics import METRICS, Better

HOST_REASON = "host history"  # how a host reference's reason begins (a verdict's references)
NEW_HOST_REASON = "new host"  # how a class reference's reason begins on a host too new for one


class Basis(StrEnum):
    """Which reference decided a check, in the order of precedence (an A/B counts first)."""

    SAME_GPU_AB = "same-GPU A/B"
    HOST_HISTORY = "host history"
    CLASS_BASELINE = "class baseline"
    CLASS_HISTORY = "class history"  # other hosts' runs of a class without a baseline
    SAVED_RUN = "saved run"  # another run named for the comparison (report --against)


class Verdict(StrEnum):
    """Outcome of one comparison, worst first."""

    REGRESSED = "regressed"
    INCONCLUSIVE = "inconclusive"
    IMPROVED = "improved"
    UNCHANGED = "unchanged"
    NEW = "new"  # no baseline entry for this benchmark


_ORDER = list(Verdict)
_E = TypeVar("_E", bound=StrEnum)


def _one_of(kind: type[_E], value: Any, what: str) -> _E:
    """``value`` as a member of ``kind``; ValueError naming ``what`` and the choices."""
    try:
        return kind(value)
    except (ValueError, TypeError):
        choices = ", ".join(m.value for m in kind)
        raise ValueError(f"{what} {value!r} is not one of: {choices}") from None


def verdict_of(low: float, high: float, tolerance: float, better: Better = Better.LOWER) -> Verdict:
    """Verdict of a current/reference ratio known to lie in [low, high], against a tolerance.

    Regressed or improved only where the whole interval lies past the tolerance: the rule of
    the class baseline and the host history (an A/B's is :func:`gpugauge.ab.verdict.outcome_of`).
    """
    above, below = low > 1 + tolerance, high < 1 - tolerance
    if above or below:
        worse = above if better is Better.LOWER else below
        return Verdict.REGRESSED if worse else Verdict.IMPROVED
    if low >= 1 - tolerance and high <= 1 + tolerance:
        return Verdict.UNCHANGED
    return Verdict.INCONCLUSIVE


_NUMBERS = ("baseline", "current", "ratio", "ci_low", "ci_high", "tolerance")
_RATIOS = ("ratio", "ci_low", "ci_high")


def _bad_level(metric: str, level: Any) -> str:
    return f"{metric}'s level must be a number in (0, 1), not {level!r}"


def _is_number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


@dataclass(frozen=True)
class MetricCheck:
    """One metric's comparison; ratio is current / reference (worse above 1 for time).

    ``tolerance`` is the relative change the reference allows, which is also how small a
    change this check can call (its sensitivity); ``basis`` which reference it was;
    ``level`` the confidence of [ci_low, ci_high]: 95%, or the level a same-GPU A/B decided
    at (99.8%, and 95% for "same" over two rounds or more).
    """

    metric: str
    baseline: float
    current: float
    ratio: float
    ci_low: float
    ci_high: float
    tolerance: float
    verdict: Verdict
    basis: Basis = Basis.CLASS_BASELINE
    level: float = CI_LEVEL

    def __post_init__(self) -> None:
        if not 0 < self.level < 1:
            raise ValueError(_bad_level(self.metric, self.level))

    @property
    def interval_text(self) -> str:
        """'[1.021, 1.040]'; '99.8% [1.021, 1.040]' at another level than 95%; '' if zero-wide."""
        if self.ci_low == self.ci_high:
            return ""
        level = "" if self.level == CI_LEVEL else f"{self.level * 100:.3g}% "
        return f"{level}[{self.ci_low:.3f}, {self.ci_high:.3f}]"

    @property
    def from_none(self) -> bool:
        """The reference read 0 and this reads more: no ratio, an amount (``new``).

        Its ratio is infinite in memory and null in JSON; it is judged on the amount
        against the metric's absolute ``slack`` (:func:`point_check`).
        """
        return self.baseline == 0 and self.current != 0

    @property
    def allowed(self) -> str:
        """The bound the ratio must keep, in the metric's direction: '<= 1.030'.

        For a check :attr:`from_none`, the amount: '<= 2097152 bytes new'.
        """
        m = METRICS[self.metric]
        if self.from_none:
            return f"<= {m.slack:.6g} {m.unit} new"
        return m.allowed(self.tolerance)

    def describe(self) -> str:
        """'time 1.102x [1.095, 1.110] vs <= 1.030 allowed (regressed, by class baseline)'.

        From a reference of 0: 'new memory: 104857600 bytes where the reference had none,
        vs <= 2097152 bytes new allowed (regressed, by class baseline)'.
        """
        if self.from_none:
            unit = METRICS[self.metric].unit
            return (
                f"new {self.metric}: {self.current:.6g} {unit} where the reference had none, "
                f"vs {self.allowed} allowed ({self.verdict}, by {self.basis})"
            )
        interval = f" {self.interval_text}" if self.interval_text else ""
        return (
            f"{self.metric} {self.ratio:.3f}x{interval} vs {self.allowed} allowed "
            f"({self.verdict}, by {self.basis})"
        )

    @classmethod
    def from_dict(cls, d: Any) -> MetricCheck:
        """Read back :meth:`as_dict`; ValueError naming the field where it is malformed.

        A check saved before checks named their basis was the class baseline's. A check
        from a reference of 0 (:attr:`from_none`) has no ratio: null, as :meth:`as_dict`
        writes it, or the infinity an older gpugauge wrote, is read as that.
        """
        if not isinstance(d, dict):
            raise ValueError(f"a check must be an object, not {type(d).__name__}")
        metric = d.get("metric")
        if not isinstance(metric, str) or metric not in METRICS:
            raise ValueError(f"metric {metric!r} is not one of: {', '.join(METRICS)}")
        numbers = []
        for k in _NUMBERS:
            v = d.get(k)
            if k not in d:
                raise ValueError(f"{metric}'s check has no {k}")
            none = k in _RATIOS and numbers[0] == 0 and numbers[1] != 0
            if none and (v is None or (_is_number(v) and not math.isnan(v))):
                numbers.append(math.inf)  # from none: no ratio, whatever was written
                continue
            if not _is_number(v) or not math.isfinite(v):
                said = " (or null, its reference being 0)" if none else ""
                raise ValueError(f"{metric}'s {k} must be a finite number{said}, not {v!r}")
            numbers.append(float(v))
        level = d.get("level", CI_LEVEL)  # a check saved before checks named their level: 95%
        if not _is_number(level):
            raise ValueError(_bad_level(metric, level))
        return cls(
            metric,
            *numbers,
            _one_of(Verdict, d.get("verdict"), f"{metric}'s verdict"),
            _one_of(Basis, d.get("basis", Basis.CLASS_BASELINE.value), f"{metric}'s basis"),
            float(level),
        )

    def as_dict(self) -> dict[str, Any]:
        """Plain dict for JSON: every number finite; a ratio from a reference of 0 null."""
        return {
            **{k: getattr(self, k) for k in self.__dataclass_fields__},
            **({k: None for k in _RATIOS} if self.from_none else {}),
            "verdict": self.verdict.value,
            "basis": self.basis.value,
            "better": METRICS[self.metric].better.value,
            "allowed": self.allowed,
        }


def point_check(
    metric: str,
    reference: float,
    current: float,
    tolerance: float,
    basis: Basis = Basis.CLASS_BASELINE,
) -> MetricCheck:
    """One reading against one reference value, judged in the metric's direction.

    Within the metric's ``slack`` (an absolute amount) it is unchanged. From a reference
    of 0 there is no ratio: a reading beyond the slack is *new* amount (new memory where
    the baseline allocated none, a count that was 0), worse for a lower-is-better metric,
    better otherwise; the check holds an infinite ratio (:attr:`MetricCheck.from_none`).
    Else the ratio is judged against ``tolerance``.
    """
    m = METRICS[metric]
    within = abs(current - reference) <= m.slack
    if reference == 0:
        ratio = 1.0 if current == 0 else math.inf
        if within:
            verdict = Verdict.UNCHANGED
        else:
            verdict = Verdict.REGRESSED if m.better is Better.LOWER else Verdict.IMPROVED
    else:
        ratio = current / reference
        verdict = Verdict.UNCHANGED if within else verdict_of(ratio, ratio, tolerance, m.better)
    return MetricCheck(metric, reference, current, ratio, ratio, ratio, tolerance, verdict, basis)


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
    def from_dict(cls, d: Any, family: str, device_class: str) -> GateResult:
        """Read back :meth:`as_dict`, stored in a result by the run that judged it.

        ValueError naming the field where it is malformed (a run file's reader,
        :func:`gpugauge.results.runs.load_run`, names the file and the result).
        """
        if not isinstance(d, dict):
            raise ValueError(f"must be an object, not {type(d).__name__}")
        if not isinstance(d.get("id"), str) or not d["id"]:
            raise ValueError(f"id must be a non-empty string, not {d.get('id')!r}")
        checks, refs, note = d.get("checks"), d.get("references") or {}, d.get("note") or ""
        if not isinstance(checks, list):
            raise ValueError(f"checks must be a list, not {type(checks).__name__}")
        if not isinstance(refs, dict) or not all(isinstance(v, str) for v in refs.values()):
            raise ValueError("references must be an object of strings")
        if not isinstance(note, str):
            raise ValueError(f"note must be a string, not {type(note).__name__}")
        read = []
        for i, c in enumerate(checks):
            try:
                read.append(MetricCheck.from_dict(c))
            except ValueError as err:
                raise ValueError(f"checks[{i}]: {err}") from None
        return cls(d["id"], family, device_class, tuple(read), note, refs)

    def as_dict(self) -> dict[str, Any]:
        """Plain dict for JSON."""
        return {
            "id": self.id,
            "verdict": self.verdict.value,
            "note": self.note,
            "checks": [c.as_dict() for c in self.checks],
        } | ({"references": dict(self.references)} if self.references else {})
