"""An A/B's time budget on the command line: ``--time-budget S`` and ``--deadline T``.

Both start no test past their limit (the tests left are skipped, said so); a deadline is
a CI job's own end, folded into a budget of what is left when the A/B starts.
"""

from __future__ import annotations

import argparse
import time

from gpugauge.flags import number

# a Unix time, s: 870 (a budget, not a time) or a time in ms would stop every test or none
_unix_time = number(float, 1e9, "a Unix time in seconds, as `date +%s` gives it", high=1e10)


def add_budget(p: argparse.ArgumentParser, what: str) -> None:
    """Add ``--time-budget S`` (seconds); ``what`` says what becomes of the tests left."""
    p.add_argument(
        "--time-budget",
        type=number(float, 0.0, "a number of seconds >= 0"),
        default=None,
        metavar="S",
        help=f"start no test after S seconds: the tests left are skipped, {what}",
    )
    p.add_argument(
        "--deadline",
        type=_unix_time,
        default=None,
        metavar="T",
        help="start no test after Unix time T, as --time-budget (the smaller one counts), "
        "nor one expected to end after it where its cost is known (confirm: twice its "
        "seconds in the gated run): a CI job's own end, e.g. its start + 870 s for a "
        "15-minute nightly whose report takes the rest",
    )


def fold_deadline(args: argparse.Namespace) -> None:
    """``--deadline T`` becomes a time budget of what is left until T (the smaller counts)."""
    if getattr(args, "deadline", None) is None:
        return
    left = max(0.0, args.deadline - time.time())
    args.time_budget = left if args.time_budget is None else min(args.time_budget, left)
