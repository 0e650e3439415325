"""The A/B verdict's rules at their edges, on synthetic pairs: each pins one rule that the
sampled tests (tests/test_ab_rounds.py) pass either way.

Found by mutation testing of gpugauge/ab: a rule changed here (a constant, a comparison, a
condition dropped) left every other fast test passing, yet changes a verdict a team reads.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import replace

import pytest
from scipy import stats

from gpugauge.ab.overruled import clears, undecided_host_paced
from gpugauge.ab.pairs import Block, Pair
from gpugauge.ab.result import CaseAB
from gpugauge.ab.verdict import (
    PROCESS_SD,
    Outcome,
    PairedRatio,
    Schedule,
    across_rounds,
    outcome_of,
    pooled_process_sd,
)
from gpugauge.results.verdicts import GateResult, MetricCheck, Verdict


def _interval(rounds: list[list[float]], level: float, floor: float) -> tuple[float, float]:
    """The docstring's interval, computed apart: Welch-Satterthwaite over the pairs' spread
    within rounds (n - k df) and the processes' between them (the floor, known, or the
    case's own spread over k - 1 df where three rounds or more show more)."""
    k, n = len(rounds), sum(len(r) for r in rounds)
    means = [statistics.fmean(r) for r in rounds]
    within = sum(statistics.variance(r) / len(r) for r in rounds) / k**2
    between, between_df = floor**2 / k, math.inf
    own = statistics.variance(means) / k - within
    if k >= 3 and own > between:
        between, between_df = own, k - 1
    var = within + between
    df = var**2 / (within**2 / (n - k) + between**2 / between_df)
    half = stats.t.ppf(0.5 + level / 2, df) * math.sqrt(var)
    mean = statistics.fmean(means)
    return math.exp(mean - half), math.exp(mean + half)


def test_noisy_pairs_of_two_rounds_count_n_minus_k_degrees_of_freedom() -> None:
    """Two rounds of 4 noisy pairs: the pairs' spread has 6 df, not 7, and the floor's none."""
    rounds = [[0.02, 0.0, 0.015, -0.005], [0.01, 0.03, -0.01, 0.012]]
    r = across_rounds(rounds)
    assert (r.ci_low, r.ci_high) == pytest.approx(_interval(rounds, 0.998, PROCESS_SD), rel=1e-9)


def test_three_rounds_that_spread_widen_the_interval_by_their_own_spread() -> None:
    """``--rounds 3``: three tight rounds at 1.02x, 1.03x and 1.05x. Their means spread far
    more than the 0.3% floor says: the interval is their own spread's, over 2 df, and holds
    1; the floor alone would have called them slower at 1.034x [1.029, 1.039]."""
    rounds = [[m + e for e in (-0.001, 0.001, -0.001, 0.001)] for m in (0.02, 0.03, 0.05)]
    r = across_rounds(rounds)
    assert (r.ci_low, r.ci_high) == pytest.approx(_interval(rounds, 0.998, PROCESS_SD), rel=1e-9)
    assert r.ci_low < 1 < r.ci_high


def test_five_cases_are_enough_to_pool_their_spread_of_processes() -> None:
    """Five cases of two rounds each pool (the largest left out: four kept, 4 df, scaled
    back by the share of a chi-square(1) its largest fifth removes), four do not."""
    q = stats.chi2.ppf(0.8, 1)
    kept_share = stats.chi2.cdf(q, 3) / 0.8
    sd, df = pooled_process_sd([(1e-4, 2)] * 5)
    assert (sd, df) == (pytest.approx(math.sqrt(1e-4 / kept_share), rel=1e-9), 4.0)
    assert pooled_process_sd([(1e-4, 2)] * 4) == (PROCESS_SD, math.inf)


def test_a_spread_of_processes_under_the_floor_is_the_floor() -> None:
    """Ten cases whose processes differ by 0.2% (0.26% scaled for the tenth left out): the
    floor, 0.3% known to infinite df, never a narrower spread than an H200's A/A showed."""
    assert pooled_process_sd([(4e-6, 2)] * 10) == (PROCESS_SD, math.inf)


LO = 1 / 1.01  # 0.990099: the minimum effect's lower bound, not 0.99


@pytest.mark.parametrize(
    ("ratio", "low", "high", "expected"),
    [
        (1.01, 1.005, 1.015, Outcome.SLOWER),  # the ratio "at least" 1 + min_effect
        (1.02, 1.0, 1.04, Outcome.NEED_MORE),  # the interval must lie above 1, not touch it
        (LO, 0.985, 0.995, Outcome.FASTER),  # at most 1 / (1 + min_effect)
        (0.99005, 0.985, 0.995, Outcome.FASTER),  # under 1/1.01, over 0.99: faster
        (0.98, 0.96, 1.0, Outcome.NEED_MORE),  # the interval must lie below 1
        (1.0, LO, 1.01, Outcome.SAME),  # inside [1/1.01, 1.01], its ends included
        (1.0, 0.99005, 1.005, Outcome.NEED_MORE),  # 0.99005 < 1/1.01: not inside
    ],
)
def test_the_verdict_s_bounds_are_those_the_docs_give(
    ratio: float, low: float, high: float, expected: Outcome
) -> None:
    """docs/ab.md: slower needs the interval above 1 and the ratio at least 1.01; faster the
    same below, at most 1/1.01; same, its interval inside [1/1.01, 1.01]."""
    r = PairedRatio(ratio, low, high, 10, 0.95)
    assert outcome_of(r, same=r) is expected


def test_a_round_stops_once_two_standard_errors_cannot_reach_a_verdict() -> None:
    """docs/ab.md's stopping rule: a round stops once 20 pairs could decide nothing, its
    mean moved by two standard errors. An A/A round scattered +-3%: at 4 pairs two SE still
    reach the 20 pairs' half-width (3 more pairs; 1.5 SE would stop it there), and at 7
    they no longer do (2.2 SE would go on)."""
    s = Schedule()
    four = [0.03, -0.03, 0.03, -0.03]
    assert not s.futile(four)
    assert s.more(four) == 3
    seven = [*four, 0.03, -0.03, 0.0]
    assert s.outcome(seven) is Outcome.NEED_MORE
    assert s.futile(seven)
    assert s.more(seven) == 0


def _round(*ratios: float) -> CaseAB:
    """One round of a case, a pair per head/base ratio."""
    pairs = tuple(
        Pair(Block(3.0, 10), Block(3.0 * r, 10), i % 2 == 0) for i, r in enumerate(ratios)
    )
    return CaseAB("c", "t.py::c", pairs)


def test_faster_stands_only_where_every_round_says_faster_too() -> None:
    """A round at 0.97x and one that saw no change (0.989x, its interval holding 1) pool to
    an interval below 1: not faster, since round 2's pairs do not say so (and a "faster"
    of two rounds clears a class regression)."""
    case = _round(0.97, 0.971, 0.969, 0.97, 0.97).with_round(
        _round(0.98, 1.0, 0.975, 1.005, 0.99, 0.985)
    )
    assert case.ratio is not None
    assert case.ratio.ci_high < 1
    assert case.ratio.ratio <= 1 / 1.01
    assert [r.round_outcome for r in case.rounds] == [Outcome.FASTER, Outcome.NEED_MORE]
    assert not case.bimodal
    assert case.outcome is Outcome.NEED_MORE


def test_a_round_cut_short_of_the_first_look_decides_nothing() -> None:
    """A side that failed after 2 pairs: its round reads 1.03x on its own, but under the
    schedule's first look (3 pairs) it says nothing, so the case's slower does not stand."""
    short = _round(1.03, 1.031)
    assert len(short.pairs) < short.schedule.min_pairs
    assert short.round_outcome is Outcome.NEED_MORE
    case = _round(1.03, 1.031, 1.029, 1.03, 1.03).with_round(short)
    assert case.ratio is not None
    assert case.ratio.ci_low > 1.01
    assert case.outcome is Outcome.NEED_MORE


def test_rounds_apart_by_less_than_the_minimum_effect_are_no_two_speeds() -> None:
    """Rounds at 1.000x and 1.0097x, their intervals apart and their outcomes not alike
    (same; need more samples), differ by less than 1%: no two speeds, and the case is
    same (its 95% interval and each round's ratio inside 1%)."""
    case = _round(1.0, 1.0005, 0.9995, 1.0, 1.0).with_round(
        _round(1.0107, 1.0087, 1.0107, 1.0087, 1.0107, 1.0087)
    )
    one, two = (r.round_ratio for r in case.rounds)
    assert one is not None
    assert two is not None
    assert one.ci_high < two.ci_low
    assert [r.round_outcome for r in case.rounds] == [Outcome.SAME, Outcome.NEED_MORE]
    assert case.bimodal == ""
    assert case.outcome is Outcome.SAME


def test_two_speeds_inside_the_minimum_effect_are_never_same() -> None:
    """Rounds at 0.994x and 1.006x, each within 1% of 1, their intervals apart: their 95%
    interval pooled lies inside 1%, but the build runs at two speeds, so the case needs
    more samples, named bimodal (docs/ab.md), rather than same."""
    case = _round(0.994, 0.9945, 0.9935, 0.994, 0.994).with_round(
        _round(*(1.0065 + (-1) ** i * 0.01 for i in range(20)))
    )
    assert case.same_ratio is not None
    assert 1 / 1.01 < case.same_ratio.ci_low < case.same_ratio.ci_high < 1.01
    assert case.bimodal == "0.994x, 1.006x by round"
    assert case.outcome is Outcome.NEED_MORE
    assert case.verdict_text.startswith("need more samples (bimodal across processes")


def test_a_third_round_keeps_the_second() -> None:
    """``--rounds 3``: each round joins the case, none replaces one before it."""
    case = _round(1.03, 1.031, 1.029, 1.03).with_round(_round(1.0, 1.001, 0.999, 1.0))
    case = case.with_round(_round(1.03, 1.031, 1.029, 1.03, 1.03))
    assert case.pairs_text == "4+4+5"
    assert case.outcome is Outcome.NEED_MORE  # round 2 saw no change


def test_a_case_of_one_pair_gives_no_check_to_decide_a_result() -> None:
    """A side that failed after one pair: no interval, so no time check, and confirm leaves
    the result's verdict as it was (overruled.decided) instead of making it inconclusive."""
    case = _round(1.2)
    assert case.outcome is Outcome.NEED_MORE
    assert case.check is None


# a class regression on a new host: 1.17x, allowed 6.5%
CLASS_REGRESSION = GateResult(
    "c", "f", "gpu", (MetricCheck("time", 1.0, 1.17, 1.17, 1.12, 1.22, 0.065, Verdict.REGRESSED),)
)


def test_an_undecided_ab_clears_a_class_regression_only_under_its_allowance() -> None:
    """Rounds at 1.040x and 1.020x, each own interval under 1.065, judged with the A/B's
    pooled spread of processes (2%): the interval over both rounds reaches 1.094, so the
    6.5% regression is not ruled out and stands."""
    case = _round(*(1.04 + (-1) ** i * 0.002 for i in range(8))).with_round(
        _round(*(1.02 + (-1) ** i * 0.02 for i in range(8)))
    )
    case = replace(case, process_sd=(0.02, 9.0))
    assert case.outcome is Outcome.NEED_MORE
    assert all(r.round_ratio is not None and r.round_ratio.ci_high < 1.065 for r in case.rounds)
    assert case.check is not None
    assert 1.065 < case.check.ci_high < 1.13
    assert not clears(CLASS_REGRESSION, case)


def test_a_slower_ab_decides_a_class_regression() -> None:
    """Slower confirms the class's regression: the A/B's verdict replaces the class's."""
    case = _round(1.1, 1.101, 1.099, 1.1).with_round(_round(1.1, 1.101, 1.099, 1.1))
    assert case.outcome is Outcome.SLOWER
    assert clears(CLASS_REGRESSION, case)


def test_a_host_paced_step_stays_regressed_only_where_a_round_reads_it_slower() -> None:
    """undecided_host_paced: no round's own 99.8% interval may lie above 1. A round 7.5%
    faster on its own beside a scattered one sees no slowdown: inconclusive. A round 7.5%
    slower on its own does, though the two rounds pooled hold 1: the regression stands."""
    scattered = _round(1.1, 0.9, 1.2, 0.85, 1.05, 0.95, 1.25, 0.8, 1.0, 1.15)
    faster = _round(0.92, 0.93, 0.92, 0.93)
    slower = _round(1.08, 1.07, 1.08, 1.07)
    fast_own, slow_own = faster.round_ratio, slower.round_ratio
    assert fast_own is not None
    assert slow_own is not None
    assert fast_own.ci_high < 1 < slow_own.ci_low
    assert undecided_host_paced(CLASS_REGRESSION, faster.with_round(scattered))
    both = slower.with_round(scattered)
    assert both.same_ratio is not None
    assert both.same_ratio.ci_low <= 1  # pooled, no slowdown seen: only the round's own
    assert not undecided_host_paced(CLASS_REGRESSION, both)
    assert undecided_host_paced(CLASS_REGRESSION, scattered.with_round(scattered))


def test_a_host_paced_slowdown_seen_at_95_percent_stands() -> None:
    """A host-paced step about 9% slower, so scattered that each round's own 99.8%
    interval holds 1, and so does the 99.8% one over both rounds: its 95% interval over
    both lies above 1, and that is the one the rule reads. The regression stands."""
    one = (1.25, 0.95, 1.2, 0.95, 1.2, 1.0, 1.15, 1.0)
    case = _round(*one).with_round(_round(*one))
    assert case.ratio is not None
    assert case.same_ratio is not None
    assert case.ratio.ci_low < 1 < case.same_ratio.ci_low
    assert case.outcome is Outcome.NEED_MORE
    assert not undecided_host_paced(CLASS_REGRESSION, case)
