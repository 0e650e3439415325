"""Two callables timed in alternating blocks: a comparison that the host's drift cannot sway.

Two cases timed in two tests, one after the other, on a host whose speed drifts with its
other work (a shared VM's memory bandwidth, its caches), can read a ratio 30% apart from
one run to the next, each with a tight interval: the drift fell between the tests. Timed
in blocks that alternate, the two share it, and the ratio of each pair's block medians
cancels it, as the same-GPU A/B does for two builds. On a two-core VM (docs/method.md),
VGG-16's swapped/normal inference read 0.97-1.26x over three runs timed apart, and
0.99-1.03x paired.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass, replace

from gpugauge.measure.stats import Ratio, ratio_of_pairs
from gpugauge.measure.timing import RoundClock, TimingPolicy, measure

PAIRS = 8  # pairs of blocks: a 95% t-interval of 7 degrees of freedom
BLOCK_S = 0.3  # a block's timed seconds (host time; at least two rounds)


@dataclass(frozen=True)
class PairedReference:
    """The result a case is compared with: its id, and how to build its round.

    The round is a callable that needs no setup, built only where the case's rounds are
    host-timed. ``candidate``, where given, builds the case's own round anew for the pairs,
    beside the reference's: on a two-core VM a VGG-16 training model that had run its own
    timing ran 10% slower than one built just then (2026-12-06), and paired against a
    fresh reference that age read as a 5% slowdown of the swap.
    """

    id: str
    build: Callable[[], Callable[[], object]]
    candidate: Callable[[], Callable[[], object]] | None = None


@dataclass(frozen=True)
class PairedBlocks:
    """``reference`` over ``candidate`` from paired blocks.

    Each pair's log-ratio of block medians (raw), and the seconds of timed rounds and
    warm-up they took; the ratio and its CI derive from the log-ratios.
    """

    log_ratios: tuple[float, ...]
    timed_s: float
    warmup_s: float

    @property
    def ratio(self) -> Ratio:
        """exp(mean log-ratio): reference time / candidate time, with its 95% CI."""
        return ratio_of_pairs(self.log_ratios)

    def as_dict(self) -> dict[str, object]:
        """Plain dict for JSON: the ratio and the pairs it came from."""
        return {
            **self.ratio.as_dict(),
            "pairs": len(self.log_ratios),
            "log_ratios": list(self.log_ratios),
        }


def _block(policy: TimingPolicy, first: bool) -> TimingPolicy:
    """The case's policy, made to time one block of :data:`BLOCK_S` seconds.

    A callable's first block warms up one round (the other has just run in between);
    later ones none: the blocks before them ran the same work.
    """
    return replace(
        policy,
        rounds=None,
        min_rounds=2,
        min_time_s=BLOCK_S,
        target_ci=0.5,  # stop at the block's time, however wide its own CI
        budget_s=max(4 * BLOCK_S, 1.0),
        warmup_rounds=1 if first else 0,
        warmup_s=0.0,
        settle=0.0,
        idle_s=0.0,
    )


def paired_blocks(
    reference: Callable[[], object],
    candidate: Callable[[], object],
    policy: TimingPolicy,
    clock: RoundClock,
    pairs: int = PAIRS,
) -> PairedBlocks:
    """Time ``reference`` and ``candidate`` in ``pairs`` pairs of alternating blocks.

    Each is one whole round, needing no setup. The order alternates from pair to pair, so
    that going first favours neither. Every block is timed by the suite's one timing
    primitive.
    """
    logs: list[float] = []
    timed = warm = 0.0
    for i in range(pairs):
        medians: dict[str, float] = {}
        order = (("ref", reference), ("cand", candidate))
        for name, fn in order if i % 2 == 0 else order[::-1]:
            t = measure(fn, _block(policy, first=i == 0), clock)
            medians[name] = statistics.median(t.device_ms)
            timed += t.timed_s
            warm += t.warmup_s
        logs.append(math.log(medians["ref"] / medians["cand"]))
    return PairedBlocks(tuple(logs), timed, warm)
