"""What an A/B compares, and how hard: the configuration one run of the coordinator takes."""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path

from gpugauge.ab.budget import Budget
from gpugauge.ab.result import AB_JSON, AB_MD
from gpugauge.ab.verdict import Schedule

SETUP_MEMO = "setup-memo"  # the A/B's folder of each build's setup answers, under --out


def round_folder(out: Path, k: int) -> Path:
    """Where round ``k`` writes its sides' logs and saved runs: ``out``, then ``out/round-k``."""
    return out if k == 1 else out / f"round-{k}"


def forget_earlier(out: Path) -> None:
    """An earlier A/B's records in ``out``, removed once this one has tests to run.

    Its ab.json and ab.md would be read as this A/B's, and its later rounds' folders would
    lie beside this one's. An A/B refused before (a selection of no test, a ref or a
    Python that cannot run) leaves them as they were; one that breaks before (a side that
    ends before it connects) removes them all the same: they must not pass for its own.
    """
    for stale in (AB_JSON, AB_MD):
        (out / stale).unlink(missing_ok=True)
    for folder in out.glob("round-*"):
        if folder.is_dir():
            shutil.rmtree(folder)


@dataclass(frozen=True)
class ABConfig:
    """What to compare, and how hard.

    ``pytest_args`` select the cases for both sides (``-k``, ``-m``, paths, ``--profile``);
    ``side_args`` adds arguments to one side only (by side name). ``block_s`` is a block's
    timed seconds, ``rewarm_s`` the warm-up of every block after a call's first (at least
    one round: the other side has just run the same work, so the GPU's clock is where this
    side's was, and one round brings back its caches), and
    ``first_warm_s`` the least warm-up of a call's first block on the side that goes first:
    the case's settling decides the rest (its policy's own minimum, 1 s at ``--profile
    seed``, would cost each side a second per test; the GPU has just run the last test's
    blocks). The other side's first block follows it on a warm GPU: ``rewarm_s``, then its
    own settling.
    """

    pytest_args: tuple[str, ...]
    out: Path
    side_args: dict[str, tuple[str, ...]] = field(default_factory=dict)
    schedule: Schedule = field(default_factory=Schedule)
    block_s: float = 0.15
    rewarm_s: float = 0.02
    first_warm_s: float = 0.3
    # fewest timed rounds (calls of the callable, not rounds of processes) in one block
    min_rounds: int = 3
    profile: str | None = None  # the benchmarks' --gauge-profile (older sides: --profile)
    budget: Budget = field(default_factory=Budget)  # when to stop starting tests
    # the process in base's place starts first, and its block goes first in a test's first
    # pair
    base_starts: bool = True
    # each build runs in the other's place: head's in the process the coordinator and the
    # worker call base, and back (every other round); cases read head over base
    exchanged: bool = False
    round: int = 1  # which of the schedule's rounds this run of the coordinator is
    # head's process runs as its command line says: no side settings, every test kept (the
    # gated run as round 1's head side, ``gpugauge confirm --measure``)
    head_as_is: bool = False
    # the command picks, after round 1, which of its paired tests the A/B judges (confirm
    # --measure's results that ask for one): round 1 cannot yet say a case's verdict
    picked: bool = False
    # where each build keeps its setup answers for its later rounds' processes (a folder
    # per build under it: gpugauge.runtime.setup_memo); None: each process works them out
    memo: Path | None = None
    # the one GPU both sides see (CUDA_VISIBLE_DEVICES: an index or a UUID), where the A/B
    # spreads over several (gpugauge.ab.gpus); None: the GPUs this process sees
    gpu: str | None = None

    def __post_init__(self) -> None:
        warm_ok = self.rewarm_s >= 0 and self.first_warm_s >= 0
        if not self.block_s > 0 or not warm_ok or self.min_rounds < 1:
            raise ValueError(
                f"block_s > 0, rewarm_s >= 0, first_warm_s >= 0 and min_rounds >= 1: {self}"
            )

    @property
    def gpus(self) -> tuple[str, ...]:
        """The GPUs its report names: its one GPU where the A/B spreads over several."""
        return () if self.gpu is None else (self.gpu,)

    @property
    def first_look_s(self) -> float:
        """What a case's first look costs in blocks, s: both sides' min_pairs blocks."""
        return 2 * self.schedule.min_pairs * (self.block_s + self.rewarm_s)
