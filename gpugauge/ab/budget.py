"""An A/B's time budget: one :class:`Budget` value, from ``--time-budget`` and ``--deadline``.

A budget is an instant on this process's monotonic clock after which no test starts, nor
one expected to end after it (each test's cost known from a run of its own: a gated run's
seconds, or round 1's). ``gpugauge ab`` and ``confirm`` build one from their command line
and pass it to every round and every A/B they run: what is left is always the distance to
the same instant, never a count kept by each caller.
"""

from __future__ import annotations

import argparse
import math
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from gpugauge.ab.result import AB_SKIP
from gpugauge.core.arguments import number

# a test's skip reason where the budget was spent before it, or would be before it ended
BUDGET_SPENT = f"{AB_SKIP}its time budget was spent before this test"
BUDGET_SHORT = f"{AB_SKIP}its time budget would run out before this test ended"


def left_for_time(status: str) -> bool:
    """Whether a side's status for a test (``skipped: ...``) says the budget left it out.

    A case's status is text in ab.json, written by :meth:`Budget.why_not`: this reads it
    back, so that no other module matches those words.
    """
    return BUDGET_SPENT in status or BUDGET_SHORT in status


# a round's start and end beside its tests, s, before an A/B has shown its own: two sides'
# start-up and end, as measured on an H200 (docs/lab/gpu-runs.md)
ROUND_START_S = 15.0

# a Unix time, s: 870 (a budget, not a time) or a time in ms would stop every test or none
_unix_time = number(float, 1e9, "a Unix time in seconds, as `date +%s` gives it", high=1e10)


@dataclass(frozen=True)
class Budget:
    """Until when an A/B starts tests, and what each one is expected to cost.

    ``ends``: a :func:`time.monotonic` instant (None: no limit). ``test_s``: each node id's
    wall seconds in a run of its own (a gated run's). ``first_look_s``: what the first look's
    pairs of blocks cost, s. A test's expected cost in one round is both sides running it,
    extras skipped, plus its first look: 31 one-round A/Bs of a nightly on an H200 cost
    0.24-1.8 times it, less where the gated run did extras (docs/lab/ab-evidence.md).
    """

    ends: float | None = None
    test_s: Mapping[str, float] = field(default_factory=dict, compare=False)
    first_look_s: float = 0.0

    @classmethod
    def of(cls, seconds: float | None = None, unix_deadline: float | None = None) -> Budget:
        """The budget of ``seconds`` from now, or until ``unix_deadline``: the sooner counts."""
        now, limits = time.monotonic(), []
        if seconds is not None:
            limits.append(now + max(seconds, 0.0))
        if unix_deadline is not None:
            limits.append(now + max(unix_deadline - time.time(), 0.0))
        return cls(min(limits) if limits else None)

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> Budget:
        """The budget ``--time-budget`` and ``--deadline`` give (none where neither is)."""
        return cls.of(getattr(args, "time_budget", None), getattr(args, "deadline", None))

    def left(self) -> float:
        """Seconds until it ends (infinite without a limit; 0 once spent)."""
        return math.inf if self.ends is None else max(self.ends - time.monotonic(), 0.0)

    def expected_s(self, nodeid: str) -> float:
        """What one round's A/B of ``nodeid`` is expected to cost, s (0 where unknown)."""
        alone = self.test_s.get(nodeid)
        return 0.0 if alone is None else 2 * alone + self.first_look_s

    def with_costs(self, test_s: Mapping[str, float]) -> Budget:
        """The budget with these tests' costs (s, as :attr:`test_s`) where it knew none."""
        return replace(self, test_s={**test_s, **self.test_s})

    def expected_ab_s(self, nodeids: Sequence[str], rounds: int, start_s: float) -> float:
        """What an A/B of ``nodeids`` is expected to cost, s: each round's tests and its start.

        A test's cost per round is :meth:`expected_s`; a round's start is what the last A/B
        cost beside its tests, or :data:`ROUND_START_S` before one.
        """
        start = start_s or ROUND_START_S
        return rounds * (sum(self.expected_s(i) for i in nodeids) + start)

    def why_not(self, nodeid: str = "") -> str:
        """Why ``nodeid`` may not start now ('' where it may): spent, or too short for it."""
        if self.ends is None:
            return ""
        left = self.ends - time.monotonic()
        if left <= 0:
            return BUDGET_SPENT
        expected = self.expected_s(nodeid)
        if expected > left:
            return f"{BUDGET_SHORT} (about {expected:.0f} s; {left:.0f} s left)"
        return ""

    def fits(self, nodeids: Iterable[str], start_s: float = 0.0) -> bool:
        """Whether an A/B (or a round) of ``nodeids`` may start now.

        Some test of them must be expected to end in time after its own start of
        ``start_s`` seconds; one that could start none still costs its start.
        """
        left = self.left()
        return left > start_s and any(self.expected_s(i) + start_s <= left for i in nodeids)


def add_budget(p: argparse.ArgumentParser, what: str) -> None:
    """Add ``--time-budget S`` and ``--deadline T``; ``what``: what becomes of the tests left."""
    p.add_argument(
        "--time-budget",
        type=number(float, 0.0, "a number of seconds >= 0"),
        default=None,
        metavar="S",
        help="start no test after S seconds, nor one expected to end after them where its "
        f"cost is known (from confirm's gated run, or from round 1): the tests left are "
        f"skipped, {what}",
    )
    p.add_argument(
        "--deadline",
        type=_unix_time,
        default=None,
        metavar="T",
        help="start no test after Unix time T, nor one expected to end after it, as "
        "--time-budget (the sooner counts): a CI job's own end, e.g. its start + 870 s for "
        "a 15-minute nightly whose report takes the rest",
    )
