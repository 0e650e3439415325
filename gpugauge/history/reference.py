"""Host-aware references: what a new result of a case is judged against, and why.

A host that has run the case often enough is its own reference: the median of its last
``runs`` (N, default 5) accepted medians, allowed to move by
``max(floor, spread_factor x spread)``: ``floor`` is the metric's tolerance, ``spread``
the run-to-run noise (:func:`run_spread`: a robust standard deviation of successive
differences, pooled over the class's hosts and widened for a short history).
A host with fewer runs is judged against the device class: the committed class baseline's
median (else the median of the other hosts' levels), allowed ``class allowance + host
spread``, the host spread being max/min - 1 of the other hosts' levels (each the median
of its last N accepted medians). Where the history holds fewer than two other hosts, it is
none if the baseline's runs came from two hosts or more, else
:attr:`ReferencePolicy.default_host_spread`. The host being judged never counts in its own
host spread: a slow new host cannot widen the allowance that judges it.

Why these numbers (tests/test_history_synthetic.py measures them over 200 seeds; they are
in docs/history.md): five runs give a median steady to about half the run-to-run noise;
``spread_factor`` 3 on the widened spread kept false alarms at 0/1000 at 0.5% noise and
0.7% at 1% noise, while the 1.5% floor caught a 3% step within two nights in 97.5% of
histories at 0.5% noise, where 4 and 5 caught it in 92% and 70% (400 seeds, ten nights
of history).
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, replace

from gpugauge.history.records import Point
from gpugauge.regress.gate import SPREAD_FACTOR, WIDE_SPREAD
from gpugauge.results.verdicts import HOST_REASON, NEW_HOST_REASON, Basis


@dataclass(frozen=True)
class ReferencePolicy:
    """How many runs make a host's reference, and how far past its spread a change must go."""

    runs: int = 5  # N: accepted runs of a case that make a host its own reference
    spread_runs: int = 20  # accepted runs whose spread sets the host's allowance (>= runs)
    spread_factor: float = 3.0  # k: allowed change = max(floor, k x robust spread)
    default_host_spread: float = 0.05  # used with fewer than 2 other hosts: 5%

    def __post_init__(self) -> None:
        if self.runs < 2 or self.spread_runs < self.runs:
            raise ValueError("a reference needs runs >= 2 and spread_runs >= runs")
        if self.spread_factor <= 0 or not 0 <= self.default_host_spread < 1:
            raise ValueError("spread_factor must be > 0 and default_host_spread in [0, 1)")


DEFAULT_POLICY = ReferencePolicy()
# a committed class baseline as a reference: (median, allowed change[, hosts of its runs])
BaselineRef = tuple[float, float] | tuple[float, float, int | None]


@dataclass(frozen=True)
class Reference:
    """What a result is judged against: a median and the relative change it may show.

    ``kind`` is 'host' (the host's own recent runs) or 'class' (the device class's
    baseline); ``allowed`` is relative (0.015: 1.5%); ``spread`` is the host's run-to-run
    spread (host) or the host-to-host spread (class); ``n_runs`` and ``hosts`` count what
    the reference was made of; ``reason`` says it in words.
    """

    kind: str
    median: float
    allowed: float
    n_runs: int
    hosts: int
    reason: str
    spread: float = 0.0
    basis: Basis = Basis.CLASS_BASELINE


SMALL_SAMPLE_QUANTILE = 0.995


def small_sample_factor(n: int) -> float:
    """How much wider a bound is when the spread is estimated from ``n`` differences.

    Student's t over the normal quantile at :data:`SMALL_SAMPLE_QUANTILE` with n - 1
    degrees of freedom: 2.27 for 4 differences (5 runs), 1.79 for 5, 1.11 for 20. From
    ``scipy.special`` (what ``scipy.stats.t.ppf`` and ``norm.ppf`` call): importing
    ``scipy.stats`` took 0.6 s of every report and every gated session.
    """
    from scipy import special

    q = SMALL_SAMPLE_QUANTILE
    return float(special.stdtrit(max(n - 1, 1), q) / special.ndtri(q))


def accepted_of(points: Sequence[Point], host: str) -> list[float]:
    """The accepted medians of one host, oldest first."""
    return [p.median for p in points if p.host == host and p.accepted]


def host_levels(
    points: Sequence[Point], policy: ReferencePolicy, exclude: str | None = None
) -> dict[str, float]:
    """Each host's level: the median of its last ``runs`` accepted medians."""
    hosts = sorted({p.host for p in points if p.host != exclude})
    levels = {}
    for h in hosts:
        mine = accepted_of(points, h)[-policy.runs :]
        if mine:
            levels[h] = statistics.median(mine)
    return levels


def host_spread(levels: dict[str, float]) -> float | None:
    """max/min - 1 of the hosts' levels; None for fewer than two hosts."""
    if len(levels) < 2 or min(levels.values()) <= 0:
        return None
    return max(levels.values()) / min(levels.values()) - 1


# Fewer pooled differences than this give no noise estimate worth widening: Student's t
# with 1 degree of freedom is 24.7x the normal quantile (3 first nights 20% and 37% apart
# allowed 6.72x), and one difference read a spread of 0.0% (issue 49). The default
# reference's 5 runs give 4.
MIN_DIFFERENCES = 4


def pooled_differences(points: Sequence[Point], policy: ReferencePolicy) -> list[float]:
    """Successive log-differences of each host's last ``spread_runs`` accepted medians."""
    diffs: list[float] = []
    for h in sorted({p.host for p in points}):
        theirs = [v for v in accepted_of(points, h)[-policy.spread_runs :] if v > 0]
        diffs += [math.log(b / a) for a, b in itertools.pairwise(theirs)]
    return diffs


def run_spread(points: Sequence[Point], host: str, policy: ReferencePolicy) -> tuple[float, int]:
    """Run-to-run spread for judging ``host``, widened for the runs it was estimated from.

    From successive differences of each host's last ``spread_runs`` accepted medians (in
    logs), pooled over the class's hosts (a case's run-to-run noise is mostly the case's
    and the device's, and the pool knows it from more runs): 1.4826 x their median
    absolute deviation / sqrt(2), a standard deviation for normal noise that a drift or a
    step barely moves, times :func:`small_sample_factor` of the differences' count. Also
    returns the count of this host's runs in it.
    """
    mine = accepted_of(points, host)[-policy.spread_runs :]
    diffs = pooled_differences(points, policy)
    if len(diffs) < 2:
        return 0.0, len(mine)
    mid = statistics.median(diffs)
    mad = statistics.median(abs(d - mid) for d in diffs)
    return 1.4826 * mad / math.sqrt(2) * small_sample_factor(len(diffs)), len(mine)


def host_reference(
    points: Sequence[Point], host: str, floor: float, policy: ReferencePolicy
) -> Reference | None:
    """The host's own reference, or None while it has fewer than ``policy.runs`` runs.

    With fewer than :data:`MIN_DIFFERENCES` pooled differences (a class's first nights:
    2 to 4 runs), no noise estimate is made: the runs are allowed what a baseline recorded
    from them allows (the gate's ``SPREAD_FACTOR`` x their range, at least ``floor``), which
    is what ``gpugauge baseline --from-history`` would commit from them.
    """
    mine = accepted_of(points, host)
    if len(mine) < policy.runs:
        return None
    window = mine[-policy.runs :]
    said = f"{HOST_REASON}: last {policy.runs} runs"
    if len(pooled_differences(points, policy)) >= MIN_DIFFERENCES:
        spread, _ = run_spread(points, host, policy)
        allowed = max(floor, policy.spread_factor * spread)
        said += f", spread {spread:.1%}"
    else:
        low = min(window)
        spread = max(window) / low - 1 if low > 0 else 0.0
        allowed = max(floor, SPREAD_FACTOR * spread)
        said += (
            f", range {spread:.1%} (too few runs for a noise estimate: allowed "
            f"{SPREAD_FACTOR:g} x range, as a baseline of them)"
        )
        if spread > WIDE_SPREAD:
            said += (
                f", and baseline --from-history would refuse these runs (over {WIDE_SPREAD:.0%} "
                "apart) without --allow-wide-spread"
            )
    return Reference(
        kind="host",
        median=statistics.median(window),
        allowed=allowed,
        n_runs=policy.runs,
        hosts=1,
        reason=said,
        spread=spread,
        basis=Basis.HOST_HISTORY,
    )


def class_reference(
    points: Sequence[Point],
    host: str,
    floor: float,
    policy: ReferencePolicy,
    baseline: BaselineRef | None = None,
) -> Reference | None:
    """The device class's reference for a host without enough history of its own.

    ``baseline`` is the committed class baseline's (median, allowed change[, hosts]);
    without one the class's center is the median of the other hosts' levels, allowed
    ``floor``. Either way the host-to-host spread is added to the allowance: the history's
    (two other hosts or more), else none where the baseline's own runs came from two hosts
    or more (its allowance, from its runs' spread, spans hosts already), else
    :attr:`ReferencePolicy.default_host_spread`. None where neither exists.
    """
    levels = host_levels(points, policy, exclude=host)
    spread = host_spread(levels)
    said = f"{spread:.1%} ({len(levels)} hosts)" if spread is not None else None
    base_hosts = baseline[2] if baseline is not None and len(baseline) > 2 else None
    if spread is None and base_hosts is not None and base_hosts >= 2:
        spread = 0.0
        said = f"in the baseline's allowance (its runs came from {base_hosts} hosts)"
    if spread is None:
        spread = policy.default_host_spread
        said = f"{spread:.1%} (default: {len(levels)} other host{'s' * (len(levels) != 1)})"
    have = len(accepted_of(points, host))
    new = f"{NEW_HOST_REASON} ({have} of {policy.runs} runs)"
    if baseline is not None:
        median, allowed = baseline[0], baseline[1]
        return Reference(
            kind="class",
            median=median,
            allowed=allowed + spread,
            n_runs=0,
            hosts=len(levels),
            reason=f"{new}: class baseline, host spread {said}",
            spread=spread,
        )
    if not levels:
        return None
    return Reference(
        kind="class",
        median=statistics.median(levels.values()),
        allowed=floor + spread,
        n_runs=sum(min(len(accepted_of(points, h)), policy.runs) for h in levels),
        hosts=len(levels),
        reason=f"{new}: class history of other hosts, host spread {said}",
        spread=spread,
        basis=Basis.CLASS_HISTORY,
    )


def reference_for(
    points: Sequence[Point],
    host: str,
    floor: float,
    policy: ReferencePolicy = DEFAULT_POLICY,
    baseline: BaselineRef | None = None,
) -> Reference | None:
    """The host's own reference once it has ``policy.runs`` accepted runs, else the class's.

    ``points`` are one case's metric on one device class, all hosts (:meth:`History.points`);
    ``floor`` the metric's tolerance; ``baseline`` the committed class baseline's median
    and allowed change. None: nothing to judge against (the verdict is *new*). A host's
    window never allows more than the committed baseline does: a noisy window must not
    let through what the baseline would fail (issue 49: 2.27x against 1.055x).
    """
    ref = host_reference(points, host, floor, policy)
    if ref is None:
        return class_reference(points, host, floor, policy, baseline)
    if baseline is not None and ref.allowed > baseline[1]:
        cap = baseline[1]
        return replace(
            ref, allowed=cap, reason=f"{ref.reason}, capped at the class baseline's {cap:.1%}"
        )
    return ref


def anchor_reference(
    points: Sequence[Point],
    host: str,
    host_ref: Reference,
    baseline: BaselineRef,
    policy: ReferencePolicy = DEFAULT_POLICY,
) -> Reference:
    """The committed class baseline as an anchor against slow drift, for a host with history.

    Allowed: the wider of the baseline's and the host's own allowance, plus the class's
    host spread, measured over the other hosts' levels, the baseline's, and this host's
    *calibration* (the median of its first accepted runs, fixed once made): an offset the
    host had from its start is no drift, a move away from it is.
    """
    median, allowed = baseline[0], baseline[1]
    levels = host_levels(points, policy, exclude=host)
    first = accepted_of(points, host)[: policy.runs]
    if first:
        levels[host] = statistics.median(first)
    levels[" baseline"] = median  # the host the baseline was recorded on
    spread = host_spread(levels) or 0.0
    return Reference(
        kind="class",
        median=median,
        allowed=max(allowed, host_ref.allowed) + spread,
        n_runs=0,
        hosts=len(levels) - 1,
        reason=f"class baseline as anchor, host spread {spread:.1%}",
        spread=spread,
    )
