"""Command-line basics every command shares: argument types, choices, the history's variable.

Argument types reject bad values at parse time with argparse's message, which names the
option: every number must be finite and within its range (a budget of ``inf`` or 1e308 s
overflows the clock arithmetic; ``--gauge-min-rounds 99999999999`` never ends), and a path must
not be empty (``""`` would mean the current folder). The standard library only: the plugin
declares its options with these in every pytest run of an environment.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

DEVICE_CHOICES = ("auto", "cpu", "cuda", "all")
REGIMES = ("sustained", "burst")
HISTORY_ENV_VAR = "GPUGAUGE_HISTORY"  # a path or URL that replaces the default (a nightly's secret)


# Upper bounds of the numeric options. A result keeps every round, so a million rounds is
# already tens of megabytes of JSON; a day of timing or warm-up per benchmark, or a week of
# a whole run, is past any job's limit, and far below where the clock arithmetic overflows.
MAX_ROUNDS = 1_000_000
MAX_BENCH_S = 86_400.0
MAX_RUN_S = 7 * 86_400.0
# The most first nights a class may have: from this many accepted runs on, a host's own
# history judges a case by itself (gpugauge.history.reference.ReferencePolicy.runs; a test
# holds the two equal), so a longer count would name nights that are already judged.
MAX_FIRST_NIGHTS = 5
# The least energy window, s: NVML's energy counter and power readings update every
# 20-100 ms, so a shorter window reads a handful of updates (gpugauge.measure.energy)
MIN_WINDOW_S = 1.0


def number(
    kind: type,
    low: float,
    what: str,
    inclusive: bool = True,
    high: float = math.inf,
    below_high: bool = False,
) -> Callable[[str], Any]:
    """An argparse type: a finite ``kind`` from ``low`` (or above it) to ``high`` (or below it).

    ``inclusive``: ``low`` itself is allowed; ``below_high``: ``high`` itself is not.
    """

    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except (ValueError, OverflowError):
            raise argparse.ArgumentTypeError(f"{text!r} is not {what}") from None
        if (
            not math.isfinite(value)
            or value < low
            or (not inclusive and value == low)
            or value > high
            or (below_high and value == high)
        ):
            raise argparse.ArgumentTypeError(f"{text!r} is not {what}")
        return value

    parse.__name__ = what
    return parse


positive_int = number(int, 1, f"a whole number >= 1 (at most {MAX_ROUNDS})", high=MAX_ROUNDS)
count = number(int, 0, f"a whole number >= 0 (at most {MAX_ROUNDS})", high=MAX_ROUNDS)
seconds = number(float, 0, f"a number of seconds >= 0 (at most {MAX_BENCH_S:g})", high=MAX_BENCH_S)
positive_seconds = number(
    float, 0, f"a number of seconds > 0 (at most {MAX_BENCH_S:g})", False, MAX_BENCH_S
)
run_seconds = number(float, 0, f"a number of seconds > 0 (at most {MAX_RUN_S:g})", False, MAX_RUN_S)
fraction = number(
    float, 0, "a fraction > 0 and < 1 (0.01 means ±1%)", inclusive=False, high=1, below_high=True
)
first_nights = number(
    int, 2, f"a whole number of nights from 2 to {MAX_FIRST_NIGHTS}", high=MAX_FIRST_NIGHTS
)


def path_option(text: str) -> Path:
    """An argparse type: a path that is not empty (an empty one would mean the current folder)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("an empty path (it would mean the current folder)")
    return Path(text)
