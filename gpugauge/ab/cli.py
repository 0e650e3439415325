"""Command line of ``gpugauge ab``, ``bisect`` and ``confirm`` (``python -m gpugauge``).

    gpugauge ab BASE [HEAD] [-k EXPR] [-m MARKEXPR] [--profile P] [-- PYTEST_ARG ...]
    gpugauge bisect GOOD BAD [-k EXPR] [-m MARKEXPR] [--profile P] [-- PYTEST_ARG ...]
    gpugauge confirm RUN.json [--floor 0.01]

BASE, HEAD, GOOD and BAD are git refs of the benchmark checkout, or ``WORKTREE`` for the
working tree as it is (HEAD's default). Exit status: 0 nothing slower (bisect: a culprit
verified; confirm: no result of the run regressed); 1 a case slower (bisect: no culprit
verified), a side that did not end well, or (ab) a case head stopped timing or nothing
compared; 2 bad input; 130 interrupted. Confirm's
command is :mod:`gpugauge.ab.confirm_command`, the A/B they share :mod:`gpugauge.ab.command`.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from gpugauge.ab.bisect import BisectResult, bisect, render_bisect
from gpugauge.ab.budget import Budget, add_budget, left_for_time
from gpugauge.ab.command import (
    EXIT_FAILED,
    EXIT_OK,
    guarded,
    owning,
    run_ab,
    say,
    side_args_of,
)
from gpugauge.ab.config import ABConfig
from gpugauge.ab.confirm_command import confirm_command
from gpugauge.ab.gpus import parse_gpus
from gpugauge.ab.launch import SIDE_SETTINGS
from gpugauge.ab.render import terminal
from gpugauge.ab.result import AB_JSON, AB_MD, ABReport
from gpugauge.ab.sides import WORKING_TREE, SideError, repo_root
from gpugauge.ab.verdict import MIN_EFFECT, Schedule
from gpugauge.check.cli import fraction_quoting
from gpugauge.core.arguments import number, path_option
from gpugauge.results.files import atomic_write_text
from gpugauge.runtime.options import ADAPTIVE_FIELDS, POLICY_OPTIONS

AB_OUT = Path("reports") / "ab"
BISECT_TXT = "bisect.txt"


# a block's seconds of timed rounds, and a case's most block pairs (no fewer than its first
# look takes)
_seconds = number(float, 0, "a number of seconds > 0 (at most 60)", inclusive=False, high=60)
_pairs = number(int, Schedule().min_pairs, f"a whole number of pairs >= {Schedule().min_pairs}")
_rounds = number(int, 1, "a whole number of rounds >= 1 (at most 10)", high=10)


DEFAULT_BENCHES = "benches"


def _benches(text: str) -> str:
    """--benches: a folder named that is not there is a typo, not 'run what pytest finds'.

    Dropped, a mistyped folder had both sides run the project's configured tests (the
    harness's own 1,817) as benchmarks, for up to an hour (a review, 2026-12-06).
    """
    if not text.strip():
        raise argparse.ArgumentTypeError("an empty path (pytest would run what it finds here)")
    if text != DEFAULT_BENCHES and not Path(text).exists():
        raise argparse.ArgumentTypeError(f"{text}: no such folder here (cwd {Path.cwd()})")
    return text


def _shared(p: argparse.ArgumentParser) -> None:
    """The options ``ab``, ``bisect`` and ``confirm`` share: the selection and how hard to look."""
    p.add_argument("-k", dest="select", default=None, metavar="EXPR", help="pytest -k")
    p.add_argument("-m", dest="markers", default=None, metavar="MARKEXPR", help="pytest -m")
    p.add_argument(
        "--profile",
        choices=("smoke", "seed", "full"),
        default=None,
        help="the benchmarks' profile on both sides (default: the suite's own, smoke "
        "without a GPU and seed with one; confirm without --measure: the gated run's)",
    )
    p.add_argument(
        "--benches",
        default=DEFAULT_BENCHES,
        type=_benches,
        metavar="PATH",
        help="the benchmarks' folder, run where no path is given after -- (default: "
        "benches, where there is one); a project whose benchmarks live elsewhere names "
        "their folder here (one that is not there is bad input)",
    )
    p.add_argument(
        "--out",
        type=path_option,
        default=AB_OUT,
        help=f"folder for the sides' logs and saved runs and ab.json; bisect adds {BISECT_TXT} "
        f"and a folder per step (default {AB_OUT})",
    )
    p.add_argument(
        "--min-effect",
        type=fraction_quoting(MIN_EFFECT),
        default=MIN_EFFECT,
        help=f"smallest change called slower or faster (default {MIN_EFFECT:g} = 1%%)",
    )
    p.add_argument(
        "--max-pairs",
        type=_pairs,
        default=Schedule().max_pairs,
        help=f"most block pairs a case gets in each round (default {Schedule().max_pairs})",
    )
    p.add_argument(
        "--block-time",
        type=_seconds,
        default=ABConfig((), Path()).block_s,
        help="seconds of timed rounds in one block (default %(default)s)",
    )
    p.add_argument(
        "--rounds",
        type=_rounds,
        default=Schedule().rounds,
        metavar="K",
        help="rounds of fresh processes, the builds' places swapped from round to round; "
        "the verdict comes from every round's pairs, and slower or faster stands only where "
        "every round says so (default %(default)s; 1 decides from one pair of processes, "
        "which can differ by 1-3%% of their own)",
    )
    p.add_argument("--base-python", default=None, help="the base side's Python (default: this)")
    p.add_argument("--head-python", default=None, help="the head side's Python (default: this)")
    p.add_argument(
        "--base-args", default="", metavar="ARGS", help="more pytest arguments for base only"
    )
    p.add_argument(
        "--head-args",
        default="",
        metavar="ARGS",
        help="more pytest arguments for head only (e.g. '-p gpugauge.check.slowdown "
        "--gauge-inject-slowdown-ms 0.1')",
    )
    p.add_argument(
        "pytest_args", nargs="*", metavar="-- PYTEST_ARG", help="passed to both sides' pytest"
    )


def _gpus_arg(text: str) -> tuple[str, ...]:
    try:
        return parse_gpus(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def _add_gpus(p: argparse.ArgumentParser) -> None:
    """``--gpus``: spread the tests over a host's GPUs, each with its own pair of processes."""
    p.add_argument(
        "--gpus",
        type=_gpus_arg,
        default=(),
        metavar="LIST",
        help="spread the tests over these GPUs: CUDA indices as this process sees them "
        "(within CUDA_VISIBLE_DEVICES where set), UUIDs, or all. Each GPU runs its own pair "
        "of processes, and each case is paired on one GPU; logs in --out/gpu-<GPU> "
        "(default: one pair of processes, on the GPUs this process sees). On a host with no "
        "NVIDIA driver the names pass as given, and each pair runs the CPU cases",
    )


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Add ``ab``, ``bisect`` and ``confirm`` to a subparsers object."""
    ab = sub.add_parser(
        "ab",
        help="compare two builds on one device (this GPU, else the CPU; --gpus: one GPU per "
        "case): alternating blocks, a paired verdict per case",
        description="Run the selected benchmarks of two builds (git refs of this checkout, "
        "or WORKTREE) on this machine at once, each in its own process, one at a time on its "
        "GPU (else its CPU) in alternating blocks, and give each case a verdict from the "
        "paired log-ratios: "
        "slower, faster, same or need more samples. Writes ab.json and ab.md under --out "
        "(and appends the Markdown to $GITHUB_STEP_SUMMARY when set). Exit status: 0 "
        "nothing slower; 1 a case slower, a side failed, head made no timing call base made, "
        "or no case was paired (its time budget aside); 2 bad input; 130 interrupted.",
    )
    ab.add_argument("base", metavar="BASE", help="git ref of the base build, or WORKTREE")
    ab.add_argument(
        "head",
        metavar="HEAD",
        nargs="?",
        default=WORKING_TREE,
        help="git ref of the build under test (default: WORKTREE, the working tree)",
    )
    _shared(ab)
    _add_gpus(ab)
    add_budget(ab, "said so in the table")
    ab.set_defaults(func=ab_command)
    bis = sub.add_parser(
        "bisect",
        help="find the first commit whose cases are slower than GOOD's, by A/Bs on this device "
        "(or, with --gpus, these GPUs)",
        description="A/B GOOD against BAD to find the cases BAD made slower, then search the "
        "first-parent commits between them, each an A/B against GOOD on this device, and verify "
        "the culprit by an A/B of its parent against it. Exit status: 0 a culprit verified, "
        "1 none, 2 bad input, 130 interrupted.",
    )
    conf = sub.add_parser(
        "confirm",
        help="A/B a gated run's results against the commit that recorded their baselines",
        description="For every GPU-busy result of 0.1 ms or more of a saved gated run, "
        "every other result that passed with a time ratio above 1 + --floor, and on a new "
        "host every result that regressed in its time alone against its class baseline, "
        "run an A/B on this device: the commit that last wrote its class baseline against "
        "the working tree. The A/B's verdict becomes the "
        "result's: written into RUN.json (and its saved gate table), and kept with its pairs "
        "in the results history the run was added to. Exit status: 0 no result of the run "
        "regressed after the A/Bs, 1 one did (an A/B found it slower, or none cleared it) "
        "or the base commit left a result owed an A/B unpaired by its own doing, or (with "
        "--measure) the gated run's pytest failed, 2 bad input, 130 interrupted.",
    )
    conf.add_argument(
        "run",
        type=path_option,
        metavar="RUN.json",
        help="a gated run's saved JSON (with --measure: where the gated run is saved)",
    )
    conf.add_argument(
        "--measure",
        action="store_true",
        help="run the gated suite itself as the head side of the A/B's first round, "
        "against the commit that recorded this host's baselines, and save it as RUN.json: "
        "each case is timed in four processes (round 1: the gated run and the base's; "
        "round 2: two more), not five (the gated run, then two rounds of two). Select its "
        "cases as for an A/B (-m, -k, --profile, --benches); give the "
        "gated run's own options with --gated-args",
    )
    conf.add_argument(
        "--gated-args",
        default="",
        metavar="ARGS",
        help="with --measure: the gated run's own pytest options, for round 1's head side "
        "alone (e.g. '--gauge-gate --gauge-require-baselines --benchmark-autosave'): the "
        "base side, an older commit, may not know them. One option alone is written "
        "--gated-args=--gauge-gate",
    )
    conf.add_argument(
        "--floor",
        type=fraction_quoting(MIN_EFFECT),
        default=MIN_EFFECT,
        help="a passed result is confirmed where its time ratio is above 1 + FLOOR "
        f"(default {MIN_EFFECT:g}: {1 + MIN_EFFECT:g}x)",
    )
    conf.add_argument(
        "--baselines-dir", type=path_option, default=Path("baselines"), help="default: baselines"
    )
    conf.add_argument(
        "--storage",
        type=path_option,
        default=Path(".benchmarks"),
        help="pytest-benchmark's storage, whose autosaved copy of the run is rewritten too "
        "(default: .benchmarks)",
    )
    conf.add_argument(
        "--history",
        metavar="PATH|URL",
        help="the results history the run was added to, where the A/Bs are kept: a SQLite "
        "file or a postgresql:// URL (default: $GPUGAUGE_HISTORY, else "
        "gpugauge-history.sqlite in --storage, as pytest's run found it)",
    )
    _shared(conf)
    add_budget(
        conf,
        "their results keep the class reference's verdict, said so (regressed results "
        "first, then device-paced ones, each the cheapest first; a measured night's round 2 "
        "goes cheapest first)",
    )
    conf.set_defaults(func=confirm_command)
    bis.add_argument("good", metavar="GOOD", help="a git ref whose cases are not slower")
    bis.add_argument("bad", metavar="BAD", help="a later git ref whose cases are slower")
    _shared(bis)
    _add_gpus(bis)
    add_budget(bis, "and the search ends, naming the commits still suspect")
    bis.set_defaults(func=bisect_command)


def _budget(args: argparse.Namespace) -> Budget:
    """The command's one budget; a ValueError (bad input) where no test could start in it."""
    budget = Budget.from_args(args)
    if budget.left() <= 0:
        raise ValueError(
            "the time budget is spent before the first test (--time-budget 0, or a --deadline "
            "already past): nothing to A/B, and --out is left as it was"
        )
    return budget


def _sides_options() -> tuple[str, ...]:
    """The pytest options a side of an A/B would take and ignore: given, each is a mistake.

    Those the A/B turns off on its sides (:data:`~gpugauge.ab.launch.SIDE_SETTINGS`: the gate
    and what goes with it, the history, energy windows) and those each block's timing
    replaces (:func:`~gpugauge.ab.worker.block_policy`: when a case's rounds stop).
    """
    off = [
        "--" + dest.replace("_", "-")
        for dests, value in SIDE_SETTINGS
        if not value
        for dest in dests
        if dest.startswith("gauge_")
    ]
    return (*off, *(POLICY_OPTIONS[f] for f in ("rounds", *ADAPTIVE_FIELDS)))


def check_sides_args(args: argparse.Namespace) -> None:
    """SideError (bad input) where ``--``, --base-args or --head-args name such an option.

    An option sweep (2026-12-06): ``-- --gauge-gate --gauge-energy-window 3`` ran an A/B
    with neither, and said nothing.
    """
    given = [*args.pytest_args, *(a for side in side_args_of(args).values() for a in side)]
    named = [o for o in _sides_options() if any(t == o or t.startswith(o + "=") for t in given)]
    if named:
        raise SideError(
            f"{', '.join(named)}: an A/B's sides run without {'it' if len(named) == 1 else 'them'} "
            "(it compares times in blocks of its own, ungated: `gpugauge confirm` gates a run's "
            "results); drop them from the sides' arguments"
        )


def ab_command(args: argparse.Namespace) -> int:
    """``gpugauge ab``."""

    def body() -> int:
        check_sides_args(args)
        budget = _budget(args)
        with owning(args.out):
            report = run_ab(args, args.base, args.head, args.out, budget=budget)
        print("\n" + terminal(report))
        print(f"wrote {args.out / AB_JSON} and {args.out / AB_MD}")
        # a job that compared nothing must not pass, unless its own time budget said so
        said = [v for c in report.cases for v in c.status.values()]
        budgeted = any(left_for_time(v) for v in said)
        compared = budgeted or any(c.every_pair for c in report.cases)
        if not compared:
            print("gpugauge ab: nothing was compared: no case was timed by both builds")
        return EXIT_FAILED if report.slower or report.problems or not compared else EXIT_OK

    return guarded("ab", body)


def bisect_command(args: argparse.Namespace) -> int:
    """``gpugauge bisect``."""

    def body() -> int:
        check_sides_args(args)
        top = repo_root(Path.cwd())
        budget = _budget(args)  # one for every A/B of the search

        def compare(base: str, head: str, ids: Sequence[str] | None, step: str) -> ABReport:
            report = run_ab(args, base, head, args.out / step, ids, budget)
            print(terminal(report), flush=True)
            return report

        so_far: list[BisectResult] = []

        def keep(result: BisectResult) -> None:
            """bisect.txt after every step: whatever ends the search, what it learnt stays."""
            so_far[:] = [result]
            atomic_write_text(args.out / BISECT_TXT, render_bisect(result) + "\n")

        with owning(args.out):
            try:
                result = bisect(
                    top, args.good, args.bad, compare, note=say, progress=keep, budget=budget
                )
            except BaseException as err:
                if so_far:
                    why = str(err).splitlines()[0] if str(err) else "interrupted"
                    keep(replace(so_far[0], reason=f"the search stopped: {why}"))
                    print(f"gpugauge bisect: what it found so far is in {args.out / BISECT_TXT}")
                raise
            keep(result)
        print("\n" + render_bisect(result))
        return EXIT_OK if result.verified else EXIT_FAILED

    return guarded("bisect", body)
