"""The A/B verdict: a paired test on the log-ratios of alternating blocks.

Each pair is one block of side A and one of side B, timed back to back on the same GPU
(order alternated from pair to pair), and gives one log-ratio ``ln(median_B / median_A)``.
Host-to-host differences, the card's temperature and a slow drift of its clock are shared
by the two blocks of a pair and cancel in the ratio, which is why an A/B sees a 3% change
on a host it has never seen, where a comparison with another host's baseline cannot.

The ratio B/A is ``exp(mean log-ratio)`` with a Student-t interval of the mean. Then:

* **slower** (faster): the interval lies wholly above 1 (below 1) *and* the ratio is at
  least ``1 + min_effect`` (at most ``1 / (1 + min_effect)``): significant and worth
  reporting;
* **same**: the interval lies wholly inside ``[1 / (1 + min_effect), 1 + min_effect]``;
* **need more samples**: anything else; the runner adds pairs, up to a cap.

The level is 99.8% at each look, so that the runner's adaptive schedule (5 pairs, then 3
more per look up to 20: six looks) keeps the false-alarm rate under 1% over many seeds of
synthetic pairs at any noise, while a 3% change is called slower in 5 pairs at 0.3% noise a
pair and in about 11 at 2% (tests/test_ab_verdict.py measures both).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

LEVEL = 0.998  # two-sided, per look
MIN_EFFECT = 0.01  # a change smaller than 1% is not reported as slower or faster
# a case whose CI could not shrink below this many minimum effects by max_pairs stops early
FUTILE = 4.0


class Outcome(StrEnum):
    """What an A/B says of B against A."""

    SLOWER = "slower"
    FASTER = "faster"
    SAME = "same"
    NEED_MORE = "need more samples"


@dataclass(frozen=True)
class PairedRatio:
    """B/A from ``n`` pairs: ``ratio`` = exp(mean log-ratio), its CI at ``level``."""

    ratio: float
    ci_low: float
    ci_high: float
    n: int
    level: float

    @property
    def has_interval(self) -> bool:
        """Two pairs or more: a spread, hence an interval."""
        return self.n >= 2


def t_quantile(p: float, df: int) -> float:
    """Student's t quantile, for the interval of a mean of ``df + 1`` values.

    ``scipy.special.stdtrit``, what ``scipy.stats.t.ppf`` calls, without importing
    ``scipy.stats`` (0.6 s).
    """
    from scipy import special

    return float(special.stdtrit(df, p))


def paired_ratio(log_ratios: Sequence[float], level: float = LEVEL) -> PairedRatio:
    """B/A and its t-interval from the pairs' log-ratios ``ln(B/A)``.

    One pair has no interval: its CI is infinitely wide, so it decides nothing.
    """
    n = len(log_ratios)
    if n == 0:
        raise ValueError("no pairs")
    if not all(math.isfinite(x) for x in log_ratios):
        raise ValueError(f"log-ratios must be finite: {list(log_ratios)}")
    mean = statistics.fmean(log_ratios)
    if n < 2:
        return PairedRatio(math.exp(mean), 0.0, math.inf, n, level)
    half = t_quantile(0.5 + level / 2, n - 1) * statistics.stdev(log_ratios) / math.sqrt(n)
    return PairedRatio(math.exp(mean), math.exp(mean - half), math.exp(mean + half), n, level)


def decide(r: PairedRatio, min_effect: float = MIN_EFFECT) -> Outcome:
    """The outcome of one look at the pairs (see the module's rules)."""
    if not r.has_interval:
        return Outcome.NEED_MORE
    hi_bound, lo_bound = 1 + min_effect, 1 / (1 + min_effect)
    if r.ci_low > 1 and r.ratio >= hi_bound:
        return Outcome.SLOWER
    if r.ci_high < 1 and r.ratio <= lo_bound:
        return Outcome.FASTER
    if r.ci_low >= lo_bound and r.ci_high <= hi_bound:
        return Outcome.SAME
    return Outcome.NEED_MORE


@dataclass(frozen=True)
class Schedule:
    """How many pairs: ``min_pairs`` first, then ``step`` more per look, up to ``max_pairs``."""

    min_pairs: int = 5
    step: int = 3
    max_pairs: int = 20
    min_effect: float = MIN_EFFECT
    level: float = LEVEL

    def __post_init__(self) -> None:
        if not 2 <= self.min_pairs <= self.max_pairs:
            raise ValueError(f"need 2 <= min_pairs <= max_pairs: {self}")
        if self.step < 1:
            raise ValueError(f"step must be >= 1: {self}")
        if not 0 < self.min_effect < 1:
            raise ValueError(f"min_effect must be in (0, 1): {self.min_effect}")
        if not 0.5 < self.level < 1:
            raise ValueError(f"level must be in (0.5, 1): {self.level}")

    def more(self, log_ratios: Sequence[float]) -> int:
        """How many pairs to add now: 0 once decided, at the cap, or past hope (:meth:`futile`)."""
        n = len(log_ratios)
        if n < self.min_pairs:
            return self.min_pairs - n
        if n >= self.max_pairs or self.outcome(log_ratios) is not Outcome.NEED_MORE:
            return 0
        if self.futile(log_ratios):
            return 0
        return min(self.step, self.max_pairs - n)

    def futile(self, log_ratios: Sequence[float]) -> bool:
        """Whether even ``max_pairs`` pairs could not narrow the CI to decide.

        True when, at this spread, the CI's half-width at ``max_pairs`` would still exceed
        :data:`FUTILE` minimum effects: a case whose blocks scatter this much (a step
        paced by the host's dispatch) stays 'need more samples', and more pairs only cost
        time.
        """
        n = len(log_ratios)
        if n < 3:
            return False
        spread = statistics.stdev(log_ratios)
        half = t_quantile(0.5 + self.level / 2, self.max_pairs - 1) * spread
        return half / math.sqrt(self.max_pairs) > FUTILE * math.log1p(self.min_effect)

    def outcome(self, log_ratios: Sequence[float]) -> Outcome:
        """The outcome of the pairs so far."""
        return decide(paired_ratio(log_ratios, self.level), self.min_effect)
