import math

import numpy as np
import pytest

from gpugauge.measure.stats import median_ci, ratio_of_medians, summarize


def test_summary_of_known_samples() -> None:
    s = summarize([1.0, 2.0, 3.0, 4.0, 100.0])
    assert s.n == 5
    assert (s.min, s.max, s.median) == (1.0, 100.0, 3.0)
    assert s.mean == pytest.approx(22.0)
    assert s.stdev == pytest.approx(np.std([1, 2, 3, 4, 100], ddof=1))
    assert (s.q1, s.q3) == (2.0, 4.0)
    assert s.iqr == 2.0
    assert s.cv == pytest.approx(s.stdev / 22.0)
    # 100 is past q3 + 1.5 IQR = 7: counted, and still part of every statistic.
    assert (s.outliers_low, s.outliers_high, s.outliers) == (0, 1, 1)


def test_constant_samples_have_a_zero_width_ci() -> None:
    s = summarize([5.0] * 20)
    assert (s.ci_low, s.ci_high, s.cv, s.ci_rel_halfwidth) == (5.0, 5.0, 0.0, 0.0)


def test_ci_brackets_the_median_and_narrows_with_more_samples() -> None:
    rng = np.random.default_rng(1)
    few = rng.normal(10, 1, 20)
    many = rng.normal(10, 1, 2000)
    lo, hi = median_ci(few)
    assert lo <= np.median(few) <= hi
    assert summarize(many).ci_rel_halfwidth < summarize(few).ci_rel_halfwidth / 4


def test_ci_coverage_is_near_nominal() -> None:
    rng = np.random.default_rng(2)
    hits = sum(
        lo <= 10.0 <= hi
        for lo, hi in (median_ci(rng.normal(10, 1, 50), resamples=500) for _ in range(200))
    )
    assert 0.88 <= hits / 200 <= 0.995


def test_same_samples_same_interval() -> None:
    data = list(np.random.default_rng(3).normal(5, 1, 40))
    assert median_ci(data) == median_ci(data)


def test_ratio_of_medians() -> None:
    rng = np.random.default_rng(4)
    slow, fast = rng.normal(100, 1, 200), rng.normal(80, 1, 200)
    r = ratio_of_medians(slow, fast)
    assert r.value == pytest.approx(np.median(slow) / np.median(fast))
    assert r.ci_low < r.value < r.ci_high
    assert r.ci_low > 1.2
    assert r.ci_high < 1.3


@pytest.mark.parametrize("bad", [[], [1.0, math.nan], [[1.0, 2.0]], [math.inf]])
def test_bad_samples_are_rejected(bad: list) -> None:
    with pytest.raises(ValueError, match="samples"):
        summarize(bad)


def test_large_samples_use_order_statistics_that_agree_with_the_bootstrap() -> None:
    rng = np.random.default_rng(0)
    a = rng.lognormal(0, 0.1, 5000)
    lo, hi = median_ci(a)
    boot = np.median(a[rng.integers(0, a.size, size=(1000, a.size))], axis=1)
    b_lo, b_hi = np.percentile(boot, [2.5, 97.5])
    assert lo == pytest.approx(b_lo, rel=2e-3)
    assert hi == pytest.approx(b_hi, rel=2e-3)
    assert lo < np.median(a) < hi
