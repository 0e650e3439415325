"""What an A/B measures: one block of each side, timed back to back, as a pair.

A :class:`Block` is one side's turn on the GPU (its median timed round, SM clock and power); a
:class:`Pair` is one block of each side and the order they ran in, whose log-ratio is one
sample of the verdict (:mod:`gpugauge.ab.result`). Raw, as the workers reported them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Block:
    """One side's block: median timed round (ms), timed rounds, SM clock (MHz), power (W).

    ``timed_s`` and ``warmup_s`` are the wall seconds of its timed batches and of its
    warm-up, ``wall_s`` of its whole call of the timing primitive (None from a worker that
    did not say): what the A/B's efficiency line adds up.
    """

    median_ms: float
    rounds: int
    sm_clock_mhz: float | None = None
    power_w: float | None = None
    timed_s: float | None = None
    warmup_s: float | None = None
    wall_s: float | None = None

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Block:
        """From a worker's ``block_done`` message or :meth:`as_dict`."""
        median = float(d["median_ms"])
        if not math.isfinite(median) or median <= 0:
            raise ValueError(f"a block's median must be a positive time, not {median!r}")
        clock, power = d.get("sm_clock_mhz"), d.get("power_w")
        seconds = {k: _seconds(d, k) for k in ("timed_s", "warmup_s", "wall_s")}
        return cls(
            median,
            int(d["rounds"]),
            None if clock is None else float(clock),
            None if power is None else float(power),
            **seconds,
        )

    def as_dict(self) -> dict[str, Any]:
        """Plain dict for JSON."""
        return {
            "median_ms": self.median_ms,
            "rounds": self.rounds,
            "sm_clock_mhz": self.sm_clock_mhz,
            "power_w": self.power_w,
            "timed_s": self.timed_s,
            "warmup_s": self.warmup_s,
            "wall_s": self.wall_s,
        }


def _seconds(d: dict[str, Any], key: str) -> float | None:
    """A block's seconds under ``key``: None where absent, else a finite time >= 0."""
    value = d.get(key)
    if value is None:
        return None
    seconds = float(value)
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError(f"a block's {key} must be a time in seconds, not {value!r}")
    return seconds


@dataclass(frozen=True)
class Pair:
    """A block of base and one of head, back to back; ``base_first`` says in which order."""

    base: Block
    head: Block
    base_first: bool

    @property
    def log_ratio(self) -> float:
        """ln(head / base) of the two blocks' medians."""
        return math.log(self.head.median_ms / self.base.median_ms)

    def as_dict(self) -> dict[str, Any]:
        """Plain dict for JSON."""
        return {
            "base": self.base.as_dict(),
            "head": self.head.as_dict(),
            "base_first": self.base_first,
            "log_ratio": self.log_ratio,
        }
