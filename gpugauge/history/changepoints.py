"""Change points: when a case's level moved over its history, by how much, and what changed.

Per host, the series is the log of each run's median (last attempt per run), in time
order. Per device class, each host's offset is taken out first (its median log level
over its runs inside each segment found so far, twice over), so that a host joining or
leaving is not a step. On that series PELT (:mod:`gpugauge.history.pelt`: ruptures'
algorithm in numpy; l2 cost, every run a candidate,
segments of at least ``min_size`` runs) finds candidates with a penalty of
``penalty x log(n)`` on the series in units of its noise (the noise: a robust standard
deviation of successive differences, which steps barely move). Each candidate is then
tested the way Apache Otava tests E-divisive candidates: Student's t-test on the runs
between its neighbours (equal variances: a step moves a benchmark's level, not its noise),
dropping the weakest failing candidate and re-testing until all pass at ``alpha``, and a
step must also be at least ``min_change``. Its size is after/before with the t interval of
the difference of mean logs.

What differs is read off the runs either side: fingerprint fields (torch, CUDA, cuDNN,
driver, flags, the suite's commit) whose value after the step was never seen in the
``context`` runs before it, main kernels (a 5% share of a round or more) that appeared or
went, and SM clock (2% or more) and power (3% or more) medians that moved.
"""

from __future__ import annotations

import itertools
import math
import shlex
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np

from gpugauge.history.differences import what_changed
from gpugauge.history.pelt import noise, pelt_many
from gpugauge.history.records import Point
from gpugauge.results.metrics import METRICS

# The runs of each host that the commands reading a whole history (``history changes``,
# the report's trends and Changes) read and search for change points: its last
# RECENT_RUNS runs, two months of nights. They cost the same in year three as in month
# two; an older step is found with ``history changes --last N`` or ``history show ID``.
RECENT_RUNS = 60


@dataclass(frozen=True)
class DetectionPolicy:
    """How change points are found and tested."""

    penalty: float = 3.0  # x log(n), on the series in units of its noise
    min_size: int = 2  # runs a segment needs (a step is seen after two nights)
    alpha: float = 0.001  # a candidate's t-test p-value must be below this
    min_change: float = 0.01  # smaller steps are not reported (relative)
    noise_floor: float = 0.001  # the noise taken is never below this (relative)
    context: int = 5  # runs either side compared for what differs


DEFAULT_DETECTION = DetectionPolicy()


def _infinite(v: object) -> bool:
    """Whether ``v`` is a float strict JSON cannot hold (a ratio from zero)."""
    return isinstance(v, float) and not math.isfinite(v)


@dataclass(frozen=True)
class ChangePoint:
    """A step in one case's metric: the first run at the new level and what came with it.

    ``ratio`` is after/before (above 1: the metric rose; for time, slower), with its CI
    (95%) and the t-test's ``p_value``; ``before`` and ``after`` are the medians of the
    segments either side (host offsets taken out for a class); ``changes`` says what
    differs between the runs either side, most telling first.
    """

    bench_id: str
    metric: str
    scope: str  # 'host GPU-…' or 'class nvidia-h100-80gb-hbm3'
    run_id: str
    time: datetime
    index: int  # position of the run in the series
    before: float
    after: float
    ratio: float
    ci_low: float
    ci_high: float
    p_value: float
    n_before: int
    n_after: int
    changes: tuple[str, ...] = ()
    commit: str | None = None  # the suite's commit at the step's first run
    commit_before: str | None = None  # the suite's commit at the last run before the step

    def bisect_command(self) -> str | None:
        """The ``gpugauge bisect`` that finds the commit behind a slowdown, or None.

        Offered for a metric that rose (for time: slower) between two runs of different,
        known commits.
        """
        if self.metric != "time" or not self.ratio > 1:
            return None
        if not self.commit or not self.commit_before or self.commit == self.commit_before:
            return None
        pick = ["--", self.bench_id] if "::" in self.bench_id else ["-k", self.bench_id]
        return shlex.join(["gpugauge", "bisect", self.commit_before, self.commit, *pick])

    @property
    def magnitude(self) -> float:
        """|log ratio|: how far the step moved; infinite for a step from or to zero."""
        if not math.isfinite(self.ratio) or self.ratio <= 0:
            return math.inf
        return abs(math.log(self.ratio))

    def size(self) -> str:
        """'1.031x [1.025, 1.037]', or 'from 0 to 1.541e+08' for a step from or to zero."""
        if self.magnitude == math.inf:
            return f"from {self.before:.4g} to {self.after:.4g}"
        return f"{self.ratio:.3f}x [{self.ci_low:.3f}, {self.ci_high:.3f}]"

    def mark(self) -> str:
        """The size in short, for a mark on a trend: '1.031x', or :meth:`size` from or to 0."""
        return f"{self.ratio:.3f}x" if self.magnitude < math.inf else self.size()

    def describe(self) -> str:
        """One line: 'linear-fwd: time 1.031x [1.025, 1.037] from 2026-11-20 run ab12 …'."""
        what = "; ".join(self.changes) if self.changes else "no recorded difference"
        return (
            f"{self.bench_id}: {self.metric} {self.size()} from {self.time:%Y-%m-%d %H:%M} "
            f"run {self.run_id} ({self.scope}, {self.n_before} runs before, "
            f"{self.n_after} after, p={self.p_value:.1g}): {what}"
        )

    def as_dict(self) -> dict[str, Any]:
        """Plain dict for JSON."""
        out = {k: getattr(self, k) for k in self.__dataclass_fields__}
        # strict JSON has no infinity: a step up from zero has no ratio
        out = {k: None if _infinite(v) else v for k, v in out.items()}
        return {**out, "time": self.time.isoformat(), "changes": list(self.changes)}


def _candidates(xs: Sequence[np.ndarray], policy: DetectionPolicy) -> list[list[int]]:
    """PELT's breakpoints on each series in units of its noise (the end excluded).

    The series are searched together (:func:`pelt_many`): a report's or ``history
    changes``' hundreds of series cost about what a few do.
    """
    zs = [(x - np.median(x)) / noise(x, policy.noise_floor) for x in xs]
    found = pelt_many(zs, [policy.penalty * math.log(x.size) for x in xs], policy.min_size)
    return [[b for b in ends if b < x.size] for x, ends in zip(xs, found, strict=True)]


def _ttest(before: np.ndarray, after: np.ndarray) -> tuple[float, float, float, float]:
    """Student's t-test of two samples of logs: p, difference of means, its CI (95%).

    ``scipy.stats.ttest_ind(after, before, equal_var=True)``'s statistic and two-sided p,
    computed directly with Student's t distribution (``scipy.special.stdtr``): the
    tests run thousands of these over a history, and the wrapper's checks cost
    nearly all of the time.
    """
    from scipy import special

    d = float(after.mean() - before.mean())
    df = before.size + after.size - 2
    pooled = (((before - before.mean()) ** 2).sum() + ((after - after.mean()) ** 2).sum()) / df
    se = math.sqrt(pooled * (1 / before.size + 1 / after.size))
    if se == 0:  # constant either side: any difference is certain
        return (0.0 if d else 1.0), d, d, d
    p = float(2 * special.stdtr(df, -abs(d / se)))
    half = float(special.stdtrit(df, 0.975)) * se
    return p, d, d - half, d + half


def _significant(
    x: np.ndarray, candidates: list[int], policy: DetectionPolicy
) -> list[tuple[int, float, float, float, float]]:
    """Candidates that pass the t-test against their neighbours, with p, d and its CI.

    A test depends only on a candidate and its two neighbours, so each (start, step, end)
    is tested once: dropping a candidate re-tests its two neighbours, not every one.
    """
    kept = sorted(candidates)
    tests: dict[tuple[int, int, int], tuple[float, float, float, float]] = {}
    while kept:
        bounds = [0, *kept, x.size]
        tested = []
        for i, b in enumerate(kept):
            key = (bounds[i], b, bounds[i + 2])
            if key not in tests:
                tests[key] = _ttest(x[bounds[i] : b], x[b : bounds[i + 2]])
            p, d, lo, hi = tests[key]
            ok = p < policy.alpha and abs(math.expm1(d)) >= policy.min_change
            tested.append((ok, p, b, d, lo, hi))
        failing = [t for t in tested if not t[0]]
        if not failing:
            return [(b, p, d, lo, hi) for _, p, b, d, lo, hi in tested]
        weakest = max(failing, key=lambda t: (t[1], -abs(t[3])))
        kept.remove(weakest[2])
    return []


def _offsets(x: np.ndarray, hosts: list[str], cuts: list[int]) -> np.ndarray:
    """Each run's host offset: the host's median of x minus its segment's level."""
    bounds = [0, *cuts, x.size]
    level = np.empty_like(x)
    for a, b in itertools.pairwise(bounds):
        level[a:b] = np.median(x[a:b])
    resid = x - level
    by_host: dict[str, list[float]] = {}
    for h, r in zip(hosts, resid, strict=True):
        by_host.setdefault(h, []).append(float(r))
    off = {h: statistics.median(v) for h, v in by_host.items()}
    return np.array([off[h] for h in hosts])


def _held_steps(pts: Sequence[Point], scope: str, policy: DetectionPolicy) -> list[ChangePoint]:
    """Steps of an exact metric (a peak, a count): no statistics, only the values.

    Runs of the same value (within the metric's slack, or ``min_change`` relative; any
    change from or to zero counts) form blocks; a block of ``min_size`` runs or more is a
    level, a shorter one a blip that belongs to the segment it falls in. A step is the first
    run of a level whose value differs from the level before it; runs before the first
    level belong to it (they hold no level to compare with). Logs
    cannot take the zero that an in-place op's extra memory is: a layer made not in place
    moved relu-fwd from 0 to 154 MB.
    """
    slack = METRICS[pts[0].metric.metric].slack if pts else 0.0

    def same(a: float, b: float) -> bool:
        if abs(b - a) <= slack:
            return True
        return a > 0 and b > 0 and abs(b / a - 1) < policy.min_change

    blocks: list[list[int]] = []  # [first run, runs] of equal values
    for i, v in enumerate(p.median for p in pts):
        if blocks and same(pts[blocks[-1][0]].median, v):
            blocks[-1][1] += 1
        else:
            blocks.append([i, 1])
    levels = [pts[first].median for first, runs in blocks if runs >= policy.min_size]
    firsts = [first for first, runs in blocks if runs >= policy.min_size]
    starts, level_of = [0], levels[:1]  # each segment's first run and value; blips join in
    for first, value in zip(firsts[1:], levels[1:], strict=True):
        if not same(level_of[-1], value):
            starts.append(first)
            level_of.append(value)
    out = []
    for k in range(1, len(starts)):
        start, b = starts[k - 1], starts[k]
        end = starts[k + 1] if k + 1 < len(starts) else len(pts)
        before, after = level_of[k - 1], level_of[k]
        ratio = after / before if before else math.inf
        out.append(
            _point_at(
                pts,
                (start, b, end),
                scope,
                policy,
                before=before,
                after=after,
                ratio=ratio,
                ci_low=ratio,
                ci_high=ratio,
                p_value=0.0,
            )
        )
    return out


def _point_at(
    pts: Sequence[Point],
    bounds: tuple[int, int, int],
    scope: str,
    policy: DetectionPolicy,
    **size: float,
) -> ChangePoint:
    """The step at run ``b`` between the segments [start, b) and [b, end), with its size."""
    start, b, end = bounds
    seg_before, seg_after = pts[start:b], pts[b:end]
    return ChangePoint(
        bench_id=pts[b].result.bench_id,
        metric=pts[b].metric.metric,
        scope=scope,
        run_id=pts[b].run.id,
        time=pts[b].run.time,
        index=b,
        n_before=len(seg_before),
        n_after=len(seg_after),
        changes=what_changed(seg_before[-policy.context :], seg_after[: policy.context]),
        commit=pts[b].run.commit,
        commit_before=pts[b - 1].run.commit if b > 0 else None,
        **size,  # type: ignore[arg-type]
    )


def detect(
    points: Sequence[Point], scope: str, policy: DetectionPolicy = DEFAULT_DETECTION
) -> list[ChangePoint]:
    """Significant steps of one series (one case and metric; one host, or a class).

    ``points`` are in time order; with several hosts their offsets are taken out first.
    An exact metric (memory, a count) has no noise to model: its steps are the values
    that change and hold (:func:`_held_steps`), per host only (see :func:`case_changes`).
    """
    return detect_many([(points, scope)], policy)[0]


def detect_many(
    series: Sequence[tuple[Sequence[Point], str]], policy: DetectionPolicy = DEFAULT_DETECTION
) -> list[list[ChangePoint]]:
    """:func:`detect` of each (points, scope), every series searched together."""
    out: list[list[ChangePoint]] = [[] for _ in series]
    noisy: dict[int, tuple[list[Point], np.ndarray, list[str]]] = {}
    for i, (points, scope) in enumerate(series):
        if points and METRICS[points[0].metric.metric].exact:
            out[i] = (
                _held_steps(points, scope, policy) if len(points) >= 2 * policy.min_size else []
            )
            continue
        pts = [p for p in points if p.median > 0]
        if len(pts) >= 2 * policy.min_size:
            noisy[i] = (pts, np.log([p.median for p in pts]), [p.host for p in pts])
    several = {i for i, (_, _, hosts) in noisy.items() if len(set(hosts)) > 1}
    # over a class, host offsets from the whole series, then from the segments found; with
    # none found, the same offsets would find the same
    adjusted = {
        i: x - _offsets(x, hosts, []) if i in several else x for i, (_, x, hosts) in noisy.items()
    }
    found = _search(adjusted, policy)
    again = {i: [b for b, *_ in found[i]] for i in several if found[i]}
    for i, cuts in again.items():
        adjusted[i] = noisy[i][1] - _offsets(noisy[i][1], noisy[i][2], cuts)
    found.update(_search({i: adjusted[i] for i in again}, policy))
    for i, (pts, _, _) in noisy.items():
        x, steps = adjusted[i], found[i]
        bounds = [0, *(b for b, *_ in steps), len(pts)]
        for k, (b, p, d, lo, hi) in enumerate(steps):
            out[i].append(
                _point_at(
                    pts,
                    (bounds[k], b, bounds[k + 2]),
                    series[i][1],
                    policy,
                    before=float(np.exp(np.median(x[bounds[k] : b]))),
                    after=float(np.exp(np.median(x[b : bounds[k + 2]]))),
                    ratio=math.exp(d),
                    ci_low=math.exp(lo),
                    ci_high=math.exp(hi),
                    p_value=p,
                )
            )
    return out


def _search(
    xs: dict[int, np.ndarray], policy: DetectionPolicy
) -> dict[int, list[tuple[int, float, float, float, float]]]:
    """Significant steps of each series, by key (:func:`_candidates`, :func:`_significant`)."""
    found = _candidates(list(xs.values()), policy)
    return {i: _significant(x, c, policy) for (i, x), c in zip(xs.items(), found, strict=True)}


def case_changes(
    points: Sequence[Point], policy: DetectionPolicy = DEFAULT_DETECTION
) -> list[ChangePoint]:
    """Steps of one case's metric on one device class: per host, then over the class.

    The class series is searched only where it holds two or more hosts (with one it is
    that host's series), and for metrics with noise only.
    """
    return changes_of_cases([points], policy)[0]


def changes_of_cases(
    cases: Sequence[Sequence[Point]], policy: DetectionPolicy = DEFAULT_DETECTION
) -> list[list[ChangePoint]]:
    """:func:`case_changes` of each case, every series of every case searched together."""
    series: list[tuple[int, Sequence[Point], str]] = []
    for c, points in enumerate(cases):
        hosts = sorted({p.host for p in points})
        series += [(c, [p for p in points if p.host == h], f"host {h}") for h in hosts]
        # an exact metric differs between hosts only where their software does, and the
        # host offsets that make a class series comparable are a noisy metric's
        exact = bool(points) and METRICS[points[0].metric.metric].exact
        if len(hosts) > 1 and points and not exact:
            series.append((c, points, f"class {points[0].result.device_class}"))
    out: list[list[ChangePoint]] = [[] for _ in cases]
    found = detect_many([(pts, scope) for _, pts, scope in series], policy)
    for (c, _, _), steps in zip(series, found, strict=True):
        out[c] += steps
    return out
