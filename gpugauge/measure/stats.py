"""Statistics over raw samples: the summaries are derived here, the samples stay the truth.

All functions take plain sequences of floats (any unit) and return values in that unit.
Confidence intervals are percentile bootstraps with a fixed seed, so the same samples
always give the same interval; the CI of one median over 1000 or more samples comes from
order statistics instead, which is exact, distribution-free and cheap.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

CI_LEVEL = 0.95
RESAMPLES = 2000
_SEED = 20261122
# Fewer samples than this have no interval: one sample's bootstrap "CI" is the sample
# itself, zero wide, which reads as perfect precision where nothing is known of the spread.
MIN_CI_N = 2


@dataclass(frozen=True)
class Summary:
    """Order statistics, moments and a bootstrap CI of the median of one sample set."""

    n: int
    min: float
    max: float
    median: float
    mean: float
    stdev: float
    q1: float
    q3: float
    ci_low: float
    ci_high: float
    ci_level: float
    outliers_low: int
    outliers_high: int

    @property
    def has_interval(self) -> bool:
        """Whether there are samples enough (:data:`MIN_CI_N`) for a CI and a CV to be shown."""
        return self.n >= MIN_CI_N

    @property
    def iqr(self) -> float:
        """Inter-quartile range, q3 - q1."""
        return self.q3 - self.q1

    @property
    def cv(self) -> float:
        """Coefficient of variation, stdev / mean (0 for a constant sample)."""
        return self.stdev / self.mean if self.mean else 0.0

    @property
    def ci_rel_halfwidth(self) -> float:
        """Half the CI's width relative to the median: 0.01 means the median is known to ±1%."""
        return (self.ci_high - self.ci_low) / 2 / self.median if self.median else float("inf")

    @property
    def outliers(self) -> int:
        """Samples beyond Tukey's fences (1.5 IQR past the quartiles); counted, never dropped."""
        return self.outliers_low + self.outliers_high

    def as_dict(self) -> dict[str, float | int]:
        """Flat dict with the derived fields included, for JSON."""
        return {
            **{k: getattr(self, k) for k in self.__dataclass_fields__},
            "iqr": self.iqr,
            "cv": self.cv,
            "ci_rel_halfwidth": self.ci_rel_halfwidth,
            "outliers": self.outliers,
        }


def _array(samples: Sequence[float]) -> np.ndarray:
    a = np.asarray(samples, dtype=np.float64)
    if a.ndim != 1 or a.size == 0:
        raise ValueError("statistics need a non-empty 1-D sequence of samples")
    if not np.all(np.isfinite(a)):
        raise ValueError("samples contain NaN or infinity")
    return a


# Above this many samples the CI of the median comes from order statistics (exact and
# distribution-free, O(n log n)); the bootstrap's resamples x n medians would keep the
# host busy for seconds between timed batches while the GPU idles.
ORDER_STAT_MIN_N = 1000
_CHUNK = 250  # bootstrap resamples drawn at once: bounds memory at 250 x n floats


def _bootstrap_medians(a: np.ndarray, resamples: int, rng: np.random.Generator) -> np.ndarray:
    out = []
    for start in range(0, resamples, _CHUNK):
        idx = rng.integers(0, a.size, size=(min(_CHUNK, resamples - start), a.size))
        out.append(np.median(a[idx], axis=1))
    return np.concatenate(out)


def order_statistic_ci(
    samples: Sequence[float] | np.ndarray, level: float = CI_LEVEL
) -> tuple[float, float]:
    """The median's CI between two order statistics, from a Binomial(n, 1/2) count.

    The count of samples below the median is Binomial(n, 1/2); the ranks ``n/2 ± z√n/2``
    hold the median with probability ``level`` (the normal approximation, n large).
    """
    a = _array(samples)
    n = a.size
    z = float(NormalDist().inv_cdf(0.5 + level / 2))
    half = z * math.sqrt(n) / 2
    lo = max(math.floor(n / 2 - half), 0)
    hi = min(math.ceil(n / 2 + half), n - 1)
    part = np.partition(a, (lo, hi))
    return float(part[lo]), float(part[hi])


def median_ci(
    samples: Sequence[float], level: float = CI_LEVEL, resamples: int = RESAMPLES
) -> tuple[float, float]:
    """Confidence interval of the median: percentile bootstrap, order statistics for large n."""
    a = _array(samples)
    if a.size == 1:
        return float(a[0]), float(a[0])
    if a.size >= ORDER_STAT_MIN_N:
        return order_statistic_ci(a, level)
    meds = _bootstrap_medians(a, resamples, np.random.default_rng(_SEED))
    tail = (1 - level) / 2 * 100
    lo, hi = np.percentile(meds, [tail, 100 - tail])
    return float(lo), float(hi)


def summarize(
    samples: Sequence[float], level: float = CI_LEVEL, resamples: int = RESAMPLES
) -> Summary:
    """Summarize samples: every statistic the result schema reports."""
    a = _array(samples)
    q1, med, q3 = (float(x) for x in np.percentile(a, [25, 50, 75]))
    iqr = q3 - q1
    lo, hi = median_ci(a, level, resamples)
    return Summary(
        n=int(a.size),
        min=float(a.min()),
        max=float(a.max()),
        median=med,
        mean=float(a.mean()),
        stdev=float(a.std(ddof=1)) if a.size > 1 else 0.0,
        q1=q1,
        q3=q3,
        ci_low=lo,
        ci_high=hi,
        ci_level=level,
        outliers_low=int(np.sum(a < q1 - 1.5 * iqr)),
        outliers_high=int(np.sum(a > q3 + 1.5 * iqr)),
    )


@dataclass(frozen=True)
class Ratio:
    """median(numerator) / median(denominator) with a bootstrap CI."""

    value: float
    ci_low: float
    ci_high: float
    ci_level: float

    def as_dict(self) -> dict[str, float]:
        """Plain dict for JSON."""
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def ratio_of_medians(
    numerator: Sequence[float],
    denominator: Sequence[float],
    level: float = CI_LEVEL,
    resamples: int = RESAMPLES,
) -> Ratio:
    """Ratio of the medians of two independent sample sets, CI by resampling each set.

    Used for speedups (baseline time / candidate time) and, in the gate, current/baseline.
    """
    a, b = _array(numerator), _array(denominator)
    rng = np.random.default_rng(_SEED)
    ratios = _bootstrap_medians(a, resamples, rng) / _bootstrap_medians(b, resamples, rng)
    tail = (1 - level) / 2 * 100
    lo, hi = np.percentile(ratios, [tail, 100 - tail])
    return Ratio(float(np.median(a) / np.median(b)), float(lo), float(hi), level)


def t_quantile(p: float, df: float) -> float:
    """Student's t quantile, for the interval of a mean of ``df + 1`` values.

    ``scipy.special.stdtrit``, what ``scipy.stats.t.ppf`` calls, without importing
    ``scipy.stats`` (0.6 s).
    """
    from scipy import special

    return float(special.stdtrit(df, p))


def ratio_of_pairs(log_ratios: Sequence[float], level: float = CI_LEVEL) -> Ratio:
    """exp(mean) of paired log-ratios, with a Student-t CI: a ratio from paired blocks.

    Each value is one pair's ``ln(a / b)`` of two blocks timed back to back, so whatever
    drifts slowly (the host's other work, its clock) is shared by both and cancels.
    Under two pairs the CI is unbounded.
    """
    n = len(log_ratios)
    if n == 0 or not all(math.isfinite(x) for x in log_ratios):
        raise ValueError(f"need finite log-ratios: {list(log_ratios)}")
    mean = statistics.fmean(log_ratios)
    if n < MIN_CI_N:
        return Ratio(math.exp(mean), 0.0, math.inf, level)
    half = t_quantile(0.5 + level / 2, n - 1) * statistics.stdev(log_ratios) / math.sqrt(n)
    return Ratio(math.exp(mean), math.exp(mean - half), math.exp(mean + half), level)
