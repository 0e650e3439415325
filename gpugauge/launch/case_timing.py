"""A rank's timing of its case's result: the one call of the primitive an A/B pairs there.

In pytest a case's result is timed by ``gauge.measure``; in a torchrun rank, by
:func:`time_rank_case`. ``gpugauge ab`` tells the two apart from the other calls of the
primitive in a rank (an all-reduce reference, a probe) by the module that makes the call:
this one (``CASE_CALLERS`` of :mod:`gpugauge.ab.worker`). Every rank of a launch must make
the same calls, with the same policy: an A/B gives them all the same counts of rounds.
"""

from __future__ import annotations

from collections.abc import Callable

from gpugauge.measure import timing


def time_rank_case(
    fn: Callable[[], object], policy: timing.TimingPolicy, clock: timing.RoundClock
) -> timing.Timing:
    """Time the case's rounds of ``fn``: :func:`gpugauge.measure.timing.measure`, marked."""
    return timing.measure(fn, policy, clock)
