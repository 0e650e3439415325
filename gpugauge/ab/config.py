"""What an A/B compares, and how hard: the configuration one run of the coordinator takes."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from gpugauge.ab.verdict import Schedule

# SM clocks of a pair's two blocks this far apart (relative) are measured again: as far as
# ``gpugauge check timer`` lets clocks explain a difference (CLOCKS_APART_AT_MOST)
CLOCKS_APART = 0.05
MAX_REMEASURE = 3


def round_folder(out: Path, k: int) -> Path:
    """Where round ``k`` writes its sides' logs and saved runs: ``out``, then ``out/round-k``."""
    return out if k == 1 else out / f"round-{k}"


@dataclass(frozen=True)
class ABConfig:
    """What to compare, and how hard.

    ``pytest_args`` select the cases for both sides (``-k``, ``-m``, paths, ``--profile``);
    ``side_args`` adds arguments to one side only (by side name). ``block_s`` is a block's
    timed seconds, ``rewarm_s`` the warm-up of every block after a call's first.
    """

    pytest_args: tuple[str, ...]
    out: Path
    side_args: dict[str, tuple[str, ...]] = field(default_factory=dict)
    schedule: Schedule = field(default_factory=Schedule)
    block_s: float = 0.25
    rewarm_s: float = 0.1
    min_rounds: int = 3
    clocks_apart: float = CLOCKS_APART
    max_remeasure: int = MAX_REMEASURE
    profile: str | None = None  # the benchmarks' --gauge-profile (older sides: --profile)
    budget_s: float | None = None  # start no test after this many seconds; None: no limit
    # each node id's wall seconds in a run of its own (a gated run's): with a budget, a test
    # expected to end past it is not started (a later, cheaper one may be)
    alone_s: dict[str, float] = field(default_factory=dict)
    # the process in base's place starts first, and its block goes first in a test's first
    # pair
    base_starts: bool = True
    # each build runs in the other's place: head's in the process the coordinator and the
    # worker call base, and back (every other round); cases read head over base
    exchanged: bool = False
    # both sides set a test up at once, not in turn: a later round's tests are known to
    # reach their timed call on both (a first round's may have nothing to pair: a search)
    setups_together: bool = False

    def __post_init__(self) -> None:
        if not self.block_s > 0 or not self.rewarm_s >= 0 or self.min_rounds < 1:
            raise ValueError(f"block_s > 0, rewarm_s >= 0 and min_rounds >= 1: {self}")

    def expected_s(self, nodeid: str) -> float:
        """What an A/B of ``nodeid`` is expected to cost, s (0 where its run is unknown).

        In one round, each side runs the test (its extras skipped), then the first look's
        pairs of blocks. A rough guard: 31 one-round A/Bs of a nightly on an H200 cost
        0.24-1.8 times it, less where the gated run did extras (docs/ab.md). A later round
        starts a test only where it fits what is left, so a case the deadline cuts short
        is judged by fewer rounds, and says so.
        """
        alone = self.alone_s.get(nodeid)
        if alone is None:
            return 0.0
        return 2 * alone + 2 * self.schedule.min_pairs * (self.block_s + self.rewarm_s)

    def fits(self, nodeids: Iterable[str], left: float, start_s: float = 0.0) -> bool:
        """Whether an A/B of ``nodeids`` may start with ``left`` seconds to go.

        Some test of them must be expected to end in time after the A/B's own start of
        ``start_s`` seconds; an A/B that could start none still costs its start.
        """
        return left > start_s and any(self.expected_s(i) + start_s <= left for i in nodeids)
