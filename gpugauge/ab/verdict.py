"""The A/B verdict: paired blocks within a round, rounds of fresh processes across.

Each pair is one block of side A and one of side B, timed back to back on the same GPU
(order alternated from pair to pair), and gives one log-ratio ``ln(median_B / median_A)``.
Host-to-host differences, the card's temperature and a slow drift of its clock are shared
by the two blocks of a pair and cancel in the ratio, which is why an A/B sees a 3% change
on a host it has never seen, where a comparison with another host's baseline cannot.

A *round* is one pair of fresh processes, one per build; an A/B runs several, the builds'
places swapped from round to round (asv's ``rounds``). Two processes of one build can
differ by 1-3% in every pair of blocks alike (where each put its memory, which kernels
its cuDNN chose), and no number of pairs from one round can see it: the process is a
level of variance. So the ratio B/A is the mean of the rounds' mean log-ratios, and its
Student-t interval counts both the pairs' spread and the rounds' (:func:`across_rounds`,
with a floor ``process_sd`` per round). Then:

* **slower** (faster): the interval lies wholly above 1 (below 1), the ratio is at least
  ``1 + min_effect`` (at most ``1 / (1 + min_effect)``), and every round's own pairs say
  so too;
* **same**: the interval at ``same_level`` (95%, where two rounds or more paired; else
  at ``level``) lies wholly inside ``[1 / (1 + min_effect), 1 + min_effect]``, and so
  does every round's own ratio;
* **need more samples**: anything else, and a case whose rounds read two speeds (their
  own intervals apart by more than the minimum effect): *bimodal across processes*.

Within a round, pairs are added by one stopping rule (:class:`Schedule`): 3 pairs, then 3
more per look up to 20, at 99.8% per look for slower and faster, 95% for same. Over many
seeds of synthetic A/Bs of two rounds with a random offset per process, this keeps the
false-alarm rate under 1%, and calls a 3% change slower at 0.3% noise a pair where
processes differ by 0.4% or less
(tests/test_ab_rounds.py measures both; docs/lab/ab-evidence.md has the table).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from gpugauge.measure.stats import ratio_of_pairs, t_quantile
from gpugauge.results.verdicts import Verdict

LEVEL = 0.998  # two-sided, per look: what "slower" and "faster" need
# two-sided, per look: what "same" needs of two rounds or more, its interval inside the
# minimum effect. Calling a 1% change "same" misses a change but raises no false alarm, so
# it needs no 99.8% against many cases; still, "same" passes a result and makes it a
# reference. In synthetic A/Bs of two rounds, a change of exactly the minimum effect read
# "same" in about 3% of cases, a 1.2% change in 0.2-0.5%, and an A/A round at 0.5% noise a
# pair took 6 pairs instead of 10.6 (tests/test_ab_rounds.py)
SAME_LEVEL = 0.95
MIN_EFFECT = 0.01  # a change smaller than 1% is not reported as slower or faster
# how far a round's mean log-ratio may yet move, in standard errors, when the stopping rule
# asks whether max_pairs pairs could still decide it (:meth:`Schedule.futile`)
REACH_SE = 2.0
# The floor of one round's spread from its processes alone (log-ratio SD): two processes
# of one build on an H200 read 0.993-1.004x on every device-paced case of an A/A
# (docs/lab/ab-evidence.md), and an A/B's own rounds raise it where its cases spread more.
PROCESS_SD = 0.003


class Outcome(StrEnum):
    """What an A/B says of B against A: its table's words for the one verdict vocabulary.

    Each is a label of a :class:`~gpugauge.results.verdicts.Verdict` (:attr:`verdict`), the
    words every reference's results use; an A/B says "slower", not "regressed", because it
    compares two builds, not a result against a baseline.
    """

    SLOWER = "slower"
    FASTER = "faster"
    SAME = "same"
    NEED_MORE = "need more samples"

    @property
    def verdict(self) -> Verdict:
        """The verdict this outcome is a label of."""
        return {
            Outcome.SLOWER: Verdict.REGRESSED,
            Outcome.FASTER: Verdict.IMPROVED,
            Outcome.SAME: Verdict.UNCHANGED,
            Outcome.NEED_MORE: Verdict.INCONCLUSIVE,
        }[self]


@dataclass(frozen=True)
class PairedRatio:
    """B/A from ``n`` pairs: ``ratio`` = exp(mean log-ratio), its CI at ``level``."""

    ratio: float
    ci_low: float
    ci_high: float
    n: int
    level: float
    rounds: int = 1

    @property
    def has_interval(self) -> bool:
        """A spread, hence an interval: more pairs than rounds (two or more in some round).

        Two rounds of one pair each have no spread within a round, and
        :func:`across_rounds` gives them an unbounded interval: no interval, as one pair.
        """
        return self.n > self.rounds


def paired_ratio(log_ratios: Sequence[float], level: float = LEVEL) -> PairedRatio:
    """B/A and its t-interval from the pairs' log-ratios ``ln(B/A)``.

    One pair has no interval: its CI is infinitely wide, so it decides nothing.
    """
    n = len(log_ratios)
    if n == 0:
        raise ValueError("no pairs")
    if not all(math.isfinite(x) for x in log_ratios):
        raise ValueError(f"log-ratios must be finite: {list(log_ratios)}")
    r = ratio_of_pairs(log_ratios, level)
    return PairedRatio(r.value, r.ci_low, r.ci_high, n, level)


def across_rounds(
    rounds: Sequence[Sequence[float]],
    level: float = LEVEL,
    process_sd: float = PROCESS_SD,
    process_df: float = math.inf,
) -> PairedRatio:
    """B/A over rounds of fresh processes, each a list of its pairs' log-ratios ``ln(B/A)``.

    The mean of the rounds' means, with a t-interval whose variance is the pairs' within
    each round plus the processes' between rounds: ``process_sd`` squared per round (known
    to ``process_df`` degrees of freedom: infinite for a floor), or the case's own spread
    where three rounds or more show more. The degrees of freedom are Welch-Satterthwaite's
    over the two parts; no interval under two pairs in some round and one in every other.
    """
    rs = [list(r) for r in rounds if r]
    if not rs:
        raise ValueError("no pairs")
    for r in rs:
        if not all(math.isfinite(x) for x in r):
            raise ValueError(f"log-ratios must be finite: {r}")
    k, n = len(rs), sum(len(r) for r in rs)
    means = [statistics.fmean(r) for r in rs]
    mean = statistics.fmean(means)
    if n - k < 1:
        return PairedRatio(math.exp(mean), 0.0, math.inf, n, level, k)
    within = sum(statistics.variance(r) / len(r) for r in rs if len(r) > 1) / k**2
    between, between_df = process_sd**2 / k, process_df
    if k >= 3:  # two degrees of freedom or more: the case's own spread of processes
        own = statistics.variance(means) / k - within
        if own > between:
            between, between_df = own, k - 1
    var = within + between
    spread = sum(v**2 / d for v, d in ((within, n - k), (between, between_df)) if v > 0)
    df = min(var**2 / spread, 1e6) if spread > 0 else 1e6  # 1e6: as good as known
    half = t_quantile(0.5 + level / 2, df) * math.sqrt(var)
    return PairedRatio(math.exp(mean), math.exp(mean - half), math.exp(mean + half), n, level, k)


def pooled_process_sd(
    spreads: Sequence[tuple[float, int]], floor: float = PROCESS_SD
) -> tuple[float, float]:
    """One A/B's spread of a round from its processes, pooled over its cases: (SD, df).

    ``spreads`` holds, per case of two rounds or more, the variance of its rounds' means
    beyond what its pairs explain, and its number of rounds. The largest are left out: a
    bimodal case or a wandering clock must not widen every case's interval (an H200 A/A's
    mean was twice its trimmed mean; in an A/B of twelve cases, two at 1x in one process
    and 2x in the next left a 2x slowdown of both rounds at "need more samples"). Left out
    are the largest tenth, at least the largest one, and every case far beyond the median
    (:func:`far_beyond`), up to half of them. The mean of the rest is scaled back by what
    trimming a chi-square's largest share removes. Under five cases, or below ``floor``,
    the floor, taken as known (infinite df).
    """
    from scipy import special

    used = sorted((v, k) for v, k in spreads if k >= 2)
    if len(used) < 5:
        return floor, math.inf
    cut = min(max(len(used) // 10, 1, far_beyond(used)), len(used) // 2)
    keep = used[: len(used) - cut]
    df = statistics.fmean(k for _, k in keep) - 1
    q = special.chdtri(df, 1 - len(keep) / len(used))
    kept_share = special.chdtr(df + 2, q) / (len(keep) / len(used))
    var = statistics.fmean(v for v, _ in keep) / kept_share
    if var <= floor**2:
        return floor, math.inf
    return math.sqrt(var), float(sum(k - 1 for _, k in keep))


FAR_P = 1e-3  # a spread past its chi-square's upper 0.1% point, by the median's scale


def far_beyond(spreads: Sequence[tuple[float, int]]) -> int:
    """How many spreads lie beyond what a chi-square draw of the others' scale reaches.

    The scale is the median's, which half the cases may exceed without moving it: one
    bimodal case or five leave it where the others put it. A spread is far beyond where it
    exceeds the median by more than the chi-square's upper ``FAR_P`` point exceeds its
    median (23.8 times for two rounds).
    """
    from scipy import special

    df = statistics.fmean(k for _, k in spreads) - 1
    median = statistics.median(v for v, _ in spreads)
    limit = median * special.chdtri(df, FAR_P) / special.chdtri(df, 0.5)
    return sum(v > limit for v, _ in spreads)


def outcome_of(r: PairedRatio, min_effect: float = MIN_EFFECT, *, same: PairedRatio) -> Outcome:
    """The outcome of one look at the pairs (see the module's rules).

    ``r`` decides slower and faster; ``same``, the same pairs' interval at the schedule's
    ``same_level``, decides same (``r`` itself to judge same at ``r``'s level).
    """
    if not r.has_interval:
        return Outcome.NEED_MORE
    hi_bound, lo_bound = 1 + min_effect, 1 / (1 + min_effect)
    if r.ci_low > 1 and r.ratio >= hi_bound:
        return Outcome.SLOWER
    if r.ci_high < 1 and r.ratio <= lo_bound:
        return Outcome.FASTER
    if same.ci_low >= lo_bound and same.ci_high <= hi_bound:
        return Outcome.SAME
    return Outcome.NEED_MORE


@dataclass(frozen=True)
class Schedule:
    """How much evidence: rounds of fresh processes, and pairs of blocks in each round.

    ``rounds`` pairs of processes; in each, ``min_pairs`` pairs first, then ``step`` more
    per look, up to ``max_pairs``.

    ``process_sd`` is the floor of a round's spread from its processes alone (log-ratio
    SD); an A/B's own rounds raise it (:func:`pooled_process_sd`).
    """

    min_pairs: int = 3
    step: int = 3
    max_pairs: int = 20
    min_effect: float = MIN_EFFECT
    level: float = LEVEL
    rounds: int = 2
    same_level: float = SAME_LEVEL
    process_sd: float = PROCESS_SD

    def __post_init__(self) -> None:
        if not 2 <= self.min_pairs <= self.max_pairs:
            raise ValueError(f"need 2 <= min_pairs <= max_pairs: {self}")
        if self.step < 1:
            raise ValueError(f"step must be >= 1: {self}")
        if not 0 < self.min_effect < 1:
            raise ValueError(f"min_effect must be in (0, 1): {self.min_effect}")
        if not 0.5 < self.same_level <= self.level < 1:
            raise ValueError(f"need 0.5 < same_level <= level < 1: {self}")
        if self.rounds < 1:
            raise ValueError(f"rounds must be >= 1: {self.rounds}")
        if not 0 <= self.process_sd < 0.5:
            raise ValueError(f"process_sd must be in [0, 0.5): {self.process_sd}")

    @property
    def round_same_level(self) -> float:
        """The level a round's own "same" needs: ``same_level``, or ``level`` in one round.

        One pair of processes judges "same" at ``level`` (:attr:`CaseAB.same_ratio`), so a
        one-round A/B stops its pairs at that level too: stopped at 95%, its case's line
        said same and its table "need more samples" (a review, 2026-12-06).
        """
        return self.same_level if self.rounds > 1 else self.level

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
        """Whether ``max_pairs`` pairs could decide nothing, at this spread and this mean.

        At ``max_pairs`` the interval's half-width would be ``half`` (this spread). The mean
        may yet move by :data:`REACH_SE` standard errors either way. Slower (faster) stays
        in reach while the mean so moved could clear both ``half`` and the minimum effect;
        same, while it could lie within the minimum effect by ``half``. Neither: more pairs
        only cost time. A case on the edge of a 1% effect stays in reach, and so does a 2x
        slowdown of a host-paced step (issue 49). In synthetic rounds this stopped A/As at
        3% noise a pair after 13 pairs instead of 20, and caught 2-3% changes as often as
        before (docs/lab/ab-evidence.md); at 2% noise a 95% "same" stays in reach of 20
        pairs, and rounds take 16. 1.5 standard errors doubled the false alarms of two
        rounds at 2% noise and 0.8% between processes.
        """
        n = len(log_ratios)
        if n < 3:
            return False
        spread = statistics.stdev(log_ratios)
        se_max = spread / math.sqrt(self.max_pairs)
        half = t_quantile(0.5 + self.level / 2, self.max_pairs - 1) * se_max
        half_same = t_quantile(0.5 + self.round_same_level / 2, self.max_pairs - 1) * se_max
        mean = abs(statistics.fmean(log_ratios))
        reach = REACH_SE * spread / math.sqrt(n)
        bound = math.log1p(self.min_effect)
        changed = mean + reach >= max(half, bound)
        same = max(mean - reach, 0.0) + half_same <= bound
        return not (changed or same)

    def outcome(self, log_ratios: Sequence[float]) -> Outcome:
        """The outcome of the pairs so far."""
        same = paired_ratio(log_ratios, self.round_same_level)
        return outcome_of(paired_ratio(log_ratios, self.level), self.min_effect, same=same)
