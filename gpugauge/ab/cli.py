"""Command line of ``gpugauge ab`` and ``gpugauge bisect`` (subcommands of ``python -m gpugauge``).

    gpugauge ab BASE [HEAD] [-k EXPR] [-m MARKEXPR] [--profile P] [-- PYTEST_ARG ...]
    gpugauge bisect GOOD BAD [-k EXPR] [-m MARKEXPR] [--profile P] [-- PYTEST_ARG ...]
    gpugauge confirm RUN.json [--floor 0.01]

BASE, HEAD, GOOD and BAD are git refs of the benchmark checkout, or ``WORKTREE`` for the
working tree as it is (HEAD's default). Exit status: 0 nothing slower (bisect: a culprit
confirmed); 1 a case slower (bisect: no culprit confirmed), or a side that did not end
well; 2 bad input; 130 interrupted.
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from gpugauge.ab.bisect import bisect, render_bisect
from gpugauge.ab.budget import add_budget, fold_deadline
from gpugauge.ab.config import ABConfig
from gpugauge.ab.render import terminal, write_report
from gpugauge.ab.result import AB_JSON, AB_MD, ABReport
from gpugauge.ab.runner import ABError, run_sides
from gpugauge.ab.sides import WORKING_TREE, SideError, SideSpec, checkouts, repo_root
from gpugauge.ab.verdict import MIN_EFFECT, Schedule
from gpugauge.check.cli import fraction
from gpugauge.check.runs import sigterm_as_interrupt
from gpugauge.flags import number
from gpugauge.phrasing import plural
from gpugauge.results.files import atomic_write_text, make_dir, read_json

if TYPE_CHECKING:
    from gpugauge.ab.settle import Settled

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT, EXIT_INTERRUPTED = 0, 1, 2, 130
DEFAULT_OUT = Path("reports") / "ab"
FRESH = "fresh"  # under --out: the repeats in fresh processes (fresh/, then fresh-3/)


# a block's seconds of rounds, and a case's most block pairs (a paired test needs two)
_seconds = number(float, 0, "a number of seconds > 0 (at most 60)", inclusive=False, high=60)
_pairs = number(int, 2, "a whole number of pairs >= 2")


def _shared(p: argparse.ArgumentParser) -> None:
    """The options ``ab`` and ``bisect`` share: the selection and how hard to look."""
    p.add_argument("-k", dest="select", default=None, metavar="EXPR", help="pytest -k")
    p.add_argument("-m", dest="markers", default=None, metavar="MARKEXPR", help="pytest -m")
    p.add_argument(
        "--profile",
        choices=("smoke", "seed", "full"),
        default=None,
        help="the benchmarks' profile (default: theirs)",
    )
    p.add_argument(
        "--benches",
        default="benches",
        metavar="PATH",
        help="the benchmarks' folder, run where no path is given after -- (default: benches)",
    )
    p.add_argument(
        "--out",
        type=Path,
        default=DEFAULT_OUT,
        help=f"folder for the sides' logs and saved runs and ab.json (default {DEFAULT_OUT})",
    )
    p.add_argument(
        "--min-effect",
        type=fraction(MIN_EFFECT),
        default=MIN_EFFECT,
        help=f"smallest change called slower or faster (default {MIN_EFFECT:g} = 1%%)",
    )
    p.add_argument(
        "--max-pairs",
        type=_pairs,
        default=Schedule().max_pairs,
        help=f"most block pairs a case gets (default {Schedule().max_pairs})",
    )
    p.add_argument(
        "--block-time",
        type=_seconds,
        default=ABConfig((), Path()).block_s,
        help="seconds of rounds in one block (default %(default)s)",
    )
    p.add_argument(
        "--no-repeat",
        action="store_true",
        help="decide from one pair of processes (default: A/B a slower or faster case again "
        "in a fresh pair, each build in the other's place, and an effect under twice "
        "--min-effect in a third; the verdict stands if every pair agrees)",
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


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Add ``ab`` and ``bisect`` to a subparsers object."""
    ab = sub.add_parser(
        "ab",
        help="compare two builds on this GPU: alternating blocks, a paired verdict per case",
        description="Run the selected benchmarks of two builds (git refs of this checkout, "
        "or WORKTREE) on this GPU at once, each in its own process, one at a time on the GPU "
        "in alternating blocks, and give each case a verdict from the paired log-ratios: "
        "slower, faster, same or need more samples. Writes ab.json and ab.md under --out "
        "(and appends the Markdown to $GITHUB_STEP_SUMMARY when set). Exit status: 0 "
        "nothing slower, 1 a case slower or a side failed, 2 bad input, 130 interrupted.",
    )
    ab.add_argument("base", metavar="BASE", help="git ref of the reference build, or WORKTREE")
    ab.add_argument(
        "head",
        metavar="HEAD",
        nargs="?",
        default=WORKING_TREE,
        help="git ref of the build under test (default: WORKTREE, the working tree)",
    )
    _shared(ab)
    add_budget(ab, "said so in the table")
    ab.set_defaults(func=ab_command)
    bis = sub.add_parser(
        "bisect",
        help="find the first commit whose cases are slower than GOOD's, by A/Bs on this GPU",
        description="A/B GOOD against BAD to find the cases BAD made slower, then search the "
        "first-parent commits between them, each an A/B against GOOD on this GPU, and confirm "
        "the culprit by an A/B of its parent against it. Exit status: 0 a culprit confirmed, "
        "1 none, 2 bad input, 130 interrupted.",
    )
    conf = sub.add_parser(
        "confirm",
        help="A/B a gated run's new-host results against the commit that accepted their baselines",
        description="For every result of a saved gated run that passed against a class "
        "reference (a host with too little history) with a time ratio above 1 + --floor, "
        "run an A/B on this GPU: the commit that last wrote its class baseline against the "
        "working tree. The A/B's verdict becomes the result's: written into RUN.json (and "
        "its saved gate table), and kept with every pair in the results history the run "
        "was added to. A case the A/B finds slower fails (exit 1). Exit status: 0 nothing "
        "slower or nothing to confirm, 1 a case slower, 2 bad input, 130 interrupted.",
    )
    conf.add_argument("run", type=Path, metavar="RUN.json", help="a gated run's saved JSON")
    conf.add_argument(
        "--floor",
        type=fraction(MIN_EFFECT),
        default=MIN_EFFECT,
        help=f"time ratio above which a passed result is confirmed (default {MIN_EFFECT:g})",
    )
    conf.add_argument(
        "--baselines-dir", type=Path, default=Path("baselines"), help="default: baselines"
    )
    conf.add_argument(
        "--storage",
        type=Path,
        default=Path(".benchmarks"),
        help="pytest-benchmark's storage, whose autosaved copy of the run is rewritten too "
        "(default: .benchmarks)",
    )
    conf.add_argument(
        "--history",
        help="the results history the run was added to, where the A/Bs are kept "
        "(default: $GPUGAUGE_HISTORY, else .benchmarks/gpugauge-history.sqlite)",
    )
    _shared(conf)
    add_budget(
        conf,
        "their results keep the class reference's verdict, said so (device-paced results "
        "first, the cheapest first)",
    )
    conf.set_defaults(func=confirm_command)
    bis.add_argument("good", metavar="GOOD", help="a git ref whose cases are not slower")
    bis.add_argument("bad", metavar="BAD", help="a later git ref whose cases are slower")
    _shared(bis)
    bis.set_defaults(func=bisect_command)


def selection(args: argparse.Namespace, ids: Sequence[str] | None = None) -> tuple[str, ...]:
    """Both sides' pytest arguments: -k, -m, the rest, and the node ids ``ids`` if given.

    The profile goes to the sides by option dest (:class:`~gpugauge.ab.config.ABConfig`), as
    its option's name differs between older and newer commits.
    """
    out: list[str] = []
    if args.select:
        out += ["-k", args.select]
    if args.markers:
        out += ["-m", args.markers]
    given = [*args.pytest_args, *(ids or ())]
    paths = [a for a in given if Path(a.split("::")[0]).exists()]
    where = () if paths or not Path(args.benches).exists() else (args.benches,)
    return (*where, *out, *given)


def config_of(args: argparse.Namespace, out: Path, ids: Sequence[str] | None = None) -> ABConfig:
    """The A/B's configuration from the command line."""
    try:
        side_args = {"base": shlex.split(args.base_args), "head": shlex.split(args.head_args)}
    except ValueError as err:
        raise SideError(f"--base-args/--head-args: {err}") from None
    return ABConfig(
        selection(args, ids),
        out,
        side_args={k: tuple(v) for k, v in side_args.items()},
        schedule=replace(Schedule(), min_effect=args.min_effect, max_pairs=args.max_pairs),
        block_s=args.block_time,
        profile=args.profile,
        budget_s=getattr(args, "time_budget", None),
        alone_s=getattr(args, "alone_s", None) or {},
        repeat=not args.no_repeat,
    )


def run_ab(
    args: argparse.Namespace, base: str, head: str, out: Path, ids: Sequence[str] | None = None
) -> ABReport:
    """One A/B of two refs with this command line's selection and settings."""
    here = Path.cwd()
    top = repo_root(here)
    specs = [
        SideSpec("base", base, args.base_python or sys.executable),
        SideSpec("head", head, args.head_python or sys.executable),
    ]
    cfg = config_of(args, make_dir(out, "--out"), ids)
    for stale in (AB_JSON, AB_MD):  # an earlier A/B's, read as this one's if this one broke
        (out / stale).unlink(missing_ok=True)
    print(f"gpugauge ab: {base} against {head}; logs and saved runs in {out}", flush=True)
    with checkouts(top, specs) as sides:
        rel = here.resolve().relative_to(top.resolve())
        again = lambda ids: config_of(args, out / FRESH, ids)  # noqa: E731
        report = run_sides(cfg, sides, _say, rel if str(rel) != "." else None, again)
    write_report(report, out)
    return report


def _say(line: str) -> None:
    print(line, flush=True)


def _guarded(name: str, body: Callable[[], int]) -> int:
    """Run ``body()``; its errors as one line and an exit status (interrupted: 130)."""
    try:
        with sigterm_as_interrupt():
            return body()
    except KeyboardInterrupt:
        print(
            f"\ngpugauge {name}: interrupted; both sides stopped, worktrees removed",
            file=sys.stderr,
        )
        return EXIT_INTERRUPTED
    except (SideError, ValueError, OSError) as err:
        print(f"gpugauge {name}: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except ABError as err:
        print(f"gpugauge {name}: {err}", file=sys.stderr)
        return EXIT_FAILED


def ab_command(args: argparse.Namespace) -> int:
    """``gpugauge ab``."""

    def body() -> int:
        fold_deadline(args)
        report = run_ab(args, args.base, args.head, args.out)
        print("\n" + terminal(report))
        print(f"wrote {args.out / AB_JSON} and {args.out / AB_MD}")
        return EXIT_FAILED if report.slower or report.problems else EXIT_OK

    return _guarded("ab", body)


def bisect_command(args: argparse.Namespace) -> int:
    """``gpugauge bisect``."""

    def body() -> int:
        top = repo_root(Path.cwd())

        def compare(base: str, head: str, ids: Sequence[str] | None, step: str) -> ABReport:
            report = run_ab(args, base, head, args.out / step, ids)
            print(terminal(report), flush=True)
            return report

        result = bisect(top, args.good, args.bad, compare, note=_say)
        text = render_bisect(result)
        print("\n" + text)
        atomic_write_text(make_dir(args.out, "--out") / "bisect.txt", text + "\n")
        return EXIT_OK if result.confirmed else EXIT_FAILED

    return _guarded("bisect", body)


def _history_of(args: argparse.Namespace) -> tuple[str, str] | None:
    """(history, run id) where the A/Bs are to be kept; None where the run was in none.

    Asked before any A/B: a ``--history`` given that cannot keep them is bad input (exit 2);
    the default one is only said (a run file copied from the nightly to a workstation is
    confirmed there without its history).
    """
    from gpugauge.ab.settle import history_problem
    from gpugauge.history.store import default_target

    run_id = (read_json(args.run).get("gpugauge") or {}).get("history_run_id")
    if not isinstance(run_id, str):
        return None
    target = args.history or default_target()
    problem = history_problem(target, run_id)
    if problem is None:
        return target, run_id
    if args.history:
        raise ValueError(f"--history: the A/Bs could not be kept there: {problem}")
    print(f"gpugauge confirm: the A/Bs will not be kept in a history: {problem}", file=sys.stderr)
    return None


def _keep(where: tuple[str, str] | None, settled: Sequence[Settled], injected: set[str]) -> None:
    """Keep the A/Bs in the run's history, but not of ``injected`` results (never in it)."""
    from gpugauge.ab.settle import kept
    from gpugauge.history.records import HistoryError
    from gpugauge.history.targets import redact

    left = [s.result.id for s in settled if s.result.id in injected]
    if left and where is not None:
        print(
            f"gpugauge confirm: {plural(len(left), 'A/B')} of results with injected work not "
            "kept in the history, which holds no such result (they measure the injection)"
        )
    settled = [s for s in settled if s.result.id not in injected]
    if not settled or where is None:
        return
    target, run_id = where
    try:
        n = kept(target, run_id, settled)
    except (HistoryError, OSError) as err:
        print(f"gpugauge confirm: the A/Bs were not kept in the history: {err}", file=sys.stderr)
        return
    print(f"gpugauge confirm: {plural(n, 'A/B')} kept with run {run_id} in {redact(target)}")


def confirm_command(args: argparse.Namespace) -> int:
    """``gpugauge confirm``."""
    from gpugauge.ab.confirm import borderline, by_reference, in_order
    from gpugauge.ab.settle import (
        check_rewritable,
        copies,
        decided,
        still_regressed,
        write_verdicts,
    )
    from gpugauge.history.capture import injected
    from gpugauge.results.runs import load_run

    def verdict(status: int) -> int:
        """EXIT_FAILED where a result of the run is still regressed: the job's say."""
        still = still_regressed(args.run)
        if still:
            print(f"gpugauge confirm: regressed after the A/Bs: {', '.join(still)}")
        return EXIT_FAILED if still else status

    def body() -> int:
        cases = borderline(args.run, args.floor)
        if not cases:
            print(
                f"gpugauge confirm: nothing to confirm in {args.run}: no result judged against "
                f"a class reference on a new host reads above {1 + args.floor:.3f}x"
            )
            return verdict(EXIT_OK)
        check_rewritable(args.run)
        history = _history_of(args)
        print(
            f"gpugauge confirm: {plural(len(cases), 'result')} to confirm: "
            + ", ".join(f"{c.id} {c.ratio:.3f}x ({c.lost_ms:.3g} ms lost)" for c in cases)
        )
        run = load_run(args.run)
        if args.profile is None:
            args.profile = run.profile
        with_injection = {m.id for m in run.measurements if injected(m)}
        given = list(args.pytest_args)
        args.alone_s = {c.nodeid: c.test_s for c in cases if c.test_s is not None}
        status = EXIT_OK
        fold_deadline(args)
        budget, t0 = args.time_budget, time.monotonic()
        groups = by_reference(repo_root(Path.cwd()), args.baselines_dir, cases)
        for ref, ordered in in_order(groups):  # regressed, device-paced, cheapest first
            if budget is not None:  # what is left of it, for this reference's A/B
                args.time_budget = budget - (time.monotonic() - t0)
                if args.time_budget <= 0:  # an A/B that starts no test still costs its start
                    print(
                        f"gpugauge confirm: the time budget was spent: not A/B'd against "
                        f"{ref[:10]}, {plural(len(ordered), 'result')} keep the class "
                        f"reference's verdict: {', '.join(c.id for c in ordered)}"
                    )
                    continue
            args.pytest_args = [*given, *(c.nodeid for c in ordered)]
            report = run_ab(args, ref, WORKING_TREE, args.out / ref[:10])
            print("\n" + terminal(report))
            # the history first: a stop between the two writes leaves the file undecided,
            # and confirm run again decides it (the history's A/B is replaced, not doubled)
            settled = decided(args.run, ref, report, write=False)
            _keep(history, settled, with_injection)
            if settled:
                write_verdicts(args.run, settled)
                for copy in copies(args.run, args.storage):
                    write_verdicts(copy, settled)
                    print(f"gpugauge confirm: {copy} (pytest-benchmark's copy) says so too")
            for s in settled:
                print(f"  {s.result.message()}")
            unsettled = [c.id for c in ordered if c.id not in {s.result.id for s in settled}]
            if unsettled:
                print(
                    f"gpugauge confirm: {plural(len(unsettled), 'result')} not decided by an "
                    f"A/B keep the class reference's verdict: {', '.join(unsettled)}"
                )
            if report.slower or report.problems:
                status = EXIT_FAILED
        return verdict(status)

    return _guarded("confirm", body)
