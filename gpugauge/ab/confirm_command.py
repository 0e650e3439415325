"""``gpugauge confirm RUN.json``: the command that A/Bs the results of a gated run no A/B decided.

What it selects and in what order is :mod:`gpugauge.ab.confirm`'s; how a verdict is written
back, :mod:`gpugauge.ab.overruled`'s. Here: one A/B per reference commit and tier, within the
deadline, each verdict written into the run file, its copies and its history, and an exit
status that is the job's (1 while a result of the run is still regressed).
"""

from __future__ import annotations

import argparse
import shlex
import subprocess
import sys
from collections.abc import Collection, Sequence
from dataclasses import replace
from pathlib import Path

from gpugauge.ab.budget import Budget
from gpugauge.ab.command import (
    EXIT_FAILED,
    EXIT_OK,
    config_of,
    guarded,
    owning,
    run_ab,
    selection,
)
from gpugauge.ab.confirm import Borderline, borderline, by_reference, in_order
from gpugauge.ab.measured import (
    baselines_commit,
    check_new,
    gate_summary,
    gpu_names,
    host_classes,
    keep_gated_run,
)
from gpugauge.ab.overruled import (
    Overruled,
    check_rewritable,
    copies,
    decided,
    history_problem,
    kept,
    still_regressed,
    write_verdicts,
)
from gpugauge.ab.render import terminal
from gpugauge.ab.result import AB_SKIP, ABReport, CaseAB
from gpugauge.ab.sides import WORKING_TREE, SideError, repo_root
from gpugauge.ab.verdict import Outcome
from gpugauge.core.phrasing import duration, plural
from gpugauge.history.records import HistoryError
from gpugauge.history.store import default_target
from gpugauge.history.targets import redact
from gpugauge.results.files import read_json
from gpugauge.results.measurement import injected
from gpugauge.results.runs import SavedRun, load_run, say_refused


def _history_of(args: argparse.Namespace) -> tuple[str, str] | None:
    """(history, run id) where the A/Bs are to be kept; None where the run was in none.

    Asked before any A/B: a ``--history`` given that cannot keep them is bad input (exit 2);
    the default one is only said (a run file copied from the nightly to a workstation is
    confirmed there without its history).
    """
    run_id = (read_json(args.run).get("gpugauge") or {}).get("history_run_id")
    if not isinstance(run_id, str):
        return None
    target = args.history or default_target(args.storage)  # the run's, as pytest found it
    problem = history_problem(target, run_id)
    if problem is None:
        return target, run_id
    if args.history:
        raise ValueError(f"--history: the A/Bs could not be kept there: {problem}")
    print(f"gpugauge confirm: the A/Bs will not be kept in a history: {problem}", file=sys.stderr)
    return None


def _keep(
    where: tuple[str, str] | None, overruled: Sequence[Overruled], injected: set[str]
) -> None:
    """Keep the A/Bs in the run's history, but not of ``injected`` results (never in it)."""
    left = [s.result.id for s in overruled if s.result.id in injected]
    if left and where is not None:
        print(
            f"gpugauge confirm: {plural(len(left), 'A/B')} of results with injected work not "
            "kept in the history, which holds no such result (they measure the injection)"
        )
    overruled = [s for s in overruled if s.result.id not in injected]
    if not overruled or where is None:
        return
    target, run_id = where
    try:
        n = kept(target, run_id, overruled)
    except (HistoryError, OSError) as err:
        print(f"gpugauge confirm: the A/Bs were not kept in the history: {err}", file=sys.stderr)
        return
    print(f"gpugauge confirm: {plural(n, 'A/B')} kept with run {run_id} in {redact(target)}")


def apply_ab(
    args: argparse.Namespace,
    ref: str,
    report: ABReport,
    ordered: Sequence[Borderline],
    where: tuple[str, str] | None,
    with_injection: set[str],
) -> bool:
    """The A/B's verdicts of ``ordered`` made theirs: history, run file, its copies; True: slower.

    The history first: a stop between the two writes leaves the file undecided, and confirm
    run again decides it (the history's A/B is replaced, not doubled).
    """
    mine = {c.nodeid for c in ordered}
    report = replace(report, cases=tuple(c for c in report.cases if c.nodeid in mine))
    overruled = decided(args.run, ref, report, write=False)
    _keep(where, overruled, with_injection)
    if overruled:
        write_verdicts(args.run, overruled)
        for copy in copies(args.run, args.storage):
            try:  # a copy: the run file and the history hold the verdicts already
                write_verdicts(copy, overruled)
            except (OSError, ValueError) as err:
                print(
                    f"gpugauge confirm: warning: pytest-benchmark's copy {copy} not "
                    f"rewritten ({err}); {args.run} holds the verdicts",
                    file=sys.stderr,
                )
                continue
            print(f"gpugauge confirm: {copy} (pytest-benchmark's copy) says so too")
    for s in overruled:
        print(f"  {s.result.message()}")
    undecided = [c.id for c in ordered if c.id not in {s.result.id for s in overruled}]
    if undecided:
        print(
            f"gpugauge confirm: {plural(len(undecided), 'result')} not decided by an "
            f"A/B keep the class reference's verdict: {', '.join(undecided)}"
        )
    for problem in report.problems:  # a result it could not A/B keeps its verdict
        print(f"gpugauge confirm: {problem}")
    return bool(report.slower)


def measured_night(args: argparse.Namespace, budget: Budget) -> tuple[int, set[str]]:
    """``--measure``: the gated run as round 1's head side; its status, the nodes it A/B'd.

    Against the commit that recorded most of this host's baselines
    (:func:`~gpugauge.ab.measured.baselines_commit`); where none did, the gated run runs
    alone, as the plain pytest command would.
    """
    top = repo_root(Path.cwd())
    ref = baselines_commit(top, args.baselines_dir, host_classes(gpu_names()))
    if ref is None:
        print(
            "gpugauge confirm: no committed baseline of this host's device classes: the "
            "gated run runs alone, with nothing to A/B against",
            flush=True,
        )
        return (EXIT_FAILED if subprocess.run(gated_alone(args)).returncode else EXIT_OK), set()
    owed: list[Borderline] = []  # the results of the gated run this reference should pair
    chosen: list[Borderline] = []  # those round 1 paired: the results this A/B decides

    def later(paired: Sequence[str]) -> list[str]:
        """After round 1: RUN.json saved, and the results it leaves to this A/B chosen.

        Those round 1 paired against this reference; one whose baseline another commit
        recorded, or that round 1 could not pair, gets an A/B of its own afterwards.
        """
        keep_gated_run(args.out / "head.json", args.run)
        print("\n" + gate_summary(args.out / "head.log"), flush=True)
        cases = by_reference(top, args.baselines_dir, borderline(args.run, args.floor))
        owed[:] = cases.get(ref, [])
        chosen[:] = [c for c in owed if c.nodeid in paired]
        return [c.nodeid for c in chosen]

    print(
        f"gpugauge confirm: the gated run is round 1's head side, against {ref[:10]} (the "
        "commit that recorded this host's baselines)",
        flush=True,
    )
    with owning(args.out):
        report = run_ab(
            args,
            ref,
            WORKING_TREE,
            args.out,
            budget=budget,
            gated=gated_args(args),
            later=later,
        )
    print("\n" + terminal(report))
    where = _history_of(args)
    injected_ids = {m.id for m in load_run(args.run).measurements if injected(m)}
    slower = apply_ab(args, ref, report, chosen, where, injected_ids)
    gated_failed = report.head.exit_code not in (0, None)
    if gated_failed:
        print(
            "gpugauge confirm: the gated run's pytest ended with exit status "
            f"{report.head.exit_code} (log: {args.out / 'head.log'})"
        )
    broken = reference_failed(ref, report, {c.nodeid for c in owed}, args.out / "base.log")
    status = EXIT_FAILED if slower or gated_failed or broken else EXIT_OK
    return status, {c.nodeid for c in chosen}


def check_asked(args: argparse.Namespace) -> None:
    """SideError (bad input) for options that this confirm would run without.

    Without ``--measure`` confirm A/Bs every result of RUN.json an A/B is owed: ``-k``,
    ``-m`` and ``--gated-args`` choose what a measured night runs, and were ignored (an
    option sweep, 2026-12-06: ``-k`` had rewritten a result it left out). With it, the
    gated run needs ``--gauge-gate``: else the night was measured, then refused.
    """
    if not args.measure:
        given = [o for o, v in (("-k", args.select), ("-m", args.markers)) if v]
        given += ["--gated-args"] if args.gated_args else []
        if given:
            raise SideError(
                f"{' and '.join(given)} choose what --measure runs; without it confirm A/Bs "
                f"every result of {args.run} that is owed an A/B: add --measure, or drop them"
            )
        return
    asked = [*head_args(args), *args.pytest_args]
    if "--gauge-gate" not in asked:
        raise SideError(
            "--measure runs the gated suite, and no --gauge-gate was given for it: confirm "
            "A/Bs a gate's verdicts (give it in --gated-args, e.g. --gated-args=--gauge-gate)"
        )


def check_gated(run: SavedRun, path: Path) -> None:
    """SideError (bad input) where RUN holds results but no gate verdicts: nothing to confirm.

    confirm A/Bs what a gate decided; a run without ``--gauge-gate`` has no verdict to
    confirm, which "nothing to confirm" would hide.
    """
    if run.measurements and not run.verdicts and not run.refused_verdicts:
        raise SideError(
            f"{path} holds {plural(len(run.measurements), 'result')} but no gate verdicts: it "
            "was run without --gauge-gate. confirm A/Bs a gated run's results: run pytest "
            "with --gauge-gate (with --measure, in --gated-args), or use gpugauge ab to "
            "compare two builds"
        )


def reference_lost(report: ABReport, owed: Collection[str]) -> list[str]:
    """The tests of ``owed`` the A/B left undecided by the reference's doing: 'id (why)'.

    ``owed``: the node ids of the results this A/B was to decide (``borderline``'s, whose
    class baseline this reference recorded). A case decided (slower, faster, same) is not
    lost, whatever happened after its pairs. One left undecided is lost where, in any
    round, the reference failed it (after some pairs too: a failure cut the round short),
    or paired nothing because it lacked the test (or its pytest ended before it),
    skipped it for a reason of its own build (both sides share one GPU, so a device it
    lacks is no reason), or made no timing call to pair. The A/B's own skips (its budget
    spent, a test marked untimed) are not its doing.
    """
    lost = []
    for c in report.cases:
        if c.nodeid not in owed or c.outcome in (Outcome.SLOWER, Outcome.FASTER, Outcome.SAME):
            continue
        why = next((w for r in c.rounds if (w := _lost_in(r))), "")
        if why:
            lost.append(f"{c.id} ({why})")
    return lost


def _lost_in(r: CaseAB) -> str:
    """Why the reference lost one round of an owed case ('' where it did not)."""
    base = r.status.get("base")
    if base == "failed":
        return "failed there"
    if r.pairs or r.status.get("head") != "passed":
        return ""
    if base is None or base == "?":
        return "not run there"
    if base.startswith("skipped: ") and not base.startswith(f"skipped: {AB_SKIP}"):
        return f"{base} there"
    if r.timed_alone == "head":
        return "no timing call there"
    return ""


def head_failed(report: ABReport, owed: Collection[str]) -> list[str]:
    """The tests of ``owed`` the working tree failed in a round of the A/B: 'id (round k)'.

    The code under test failed the test in a fresh process: the night fails, whatever the
    reference's pairs said.
    """
    return [
        f"{c.id} (round {k})"
        for c in report.cases
        if c.nodeid in owed
        for k, r in enumerate(c.rounds, 1)
        if r.status.get("head") == "failed"
    ]


def reference_failed(ref: str, report: ABReport, owed: Collection[str], log: Path) -> bool:
    """Whether a test of ``owed`` went undecided by a side's failure or the reference's doing.

    Such a result keeps only its class verdict, which passes a 3% slowdown on a new host,
    so the night fails rather than pass it unjudged (:func:`reference_lost`). A test the
    working tree failed fails it too (:func:`head_failed`). Says which, and why.
    """
    lost, failed = reference_lost(report, owed), head_failed(report, owed)
    if failed:
        print(
            f"gpugauge confirm: the working tree failed {plural(len(failed), 'result')} "
            f"this A/B was to decide: {', '.join(failed)} (log: {log.with_name('head.log')} "
            "and its rounds'); the night fails"
        )
    if lost:
        print(
            f"gpugauge confirm: the base commit {ref[:10]} left "
            f"{plural(len(lost), 'result')} this A/B was to decide undecided: "
            f"{', '.join(lost)} (its pytest's exit status: {report.base.exit_code}; log: "
            f"{log}). Such a result keeps only its class verdict, so the night fails. Record "
            "this host's class baselines at a commit that runs these tests (gpugauge "
            "baseline RUN1 RUN2) and commit them"
        )
    return bool(lost or failed)


def gated_alone(args: argparse.Namespace) -> list[str]:
    """The gated run's command line where it runs alone: the selection, its profile, its options.

    An A/B hands its sides the profile by option dest; a plain pytest needs the option.
    """
    profile = ["--gauge-profile", args.profile] if args.profile else []
    return [
        sys.executable,
        "-m",
        "pytest",
        *selection(args),
        *profile,
        *head_args(args),
        f"--benchmark-json={args.run}",
    ]


def gated_args(args: argparse.Namespace) -> list[str]:
    """``--gated-args``, split as a shell would; SideError for one that does not split."""
    try:
        return shlex.split(args.gated_args)
    except ValueError as err:
        raise SideError(f"--gated-args: {err}") from None


def head_args(args: argparse.Namespace) -> list[str]:
    """The gated run's own pytest options: ``--head-args`` and ``--gated-args``."""
    try:
        return [*shlex.split(args.head_args), *gated_args(args)]
    except ValueError as err:
        raise SideError(f"--head-args: {err}") from None


def confirm_command(args: argparse.Namespace) -> int:
    """``gpugauge confirm``."""

    def verdict(status: int) -> int:
        """EXIT_FAILED where a result of the run is still regressed: the job's say."""
        still = still_regressed(args.run)
        if still:
            print(f"gpugauge confirm: regressed after the A/Bs: {', '.join(still)}")
        return EXIT_FAILED if still else status

    def body() -> int:
        # one budget for every A/B of the run
        budget = config_of(args, args.out, budget=Budget.from_args(args)).budget
        check_asked(args)
        status, measured = EXIT_OK, set()
        if args.measure:
            check_new(args.run)
            status, measured = measured_night(args, budget)
        run = load_run(args.run)  # read once: nothing rewrites it before the A/Bs
        check_gated(run, args.run)
        cases = [c for c in borderline(args.run, args.floor) if c.nodeid not in measured]
        if not cases:
            say_refused(run, "gpugauge confirm")  # still_regressed counts them
            if not measured:
                print(
                    f"gpugauge confirm: nothing to confirm in {args.run}: no result is "
                    f"GPU-busy or passed above {1 + args.floor:.3f}x, and none on a new "
                    "host regressed in its time alone"
                )
            return verdict(status)
        check_rewritable(args.run)
        history = _history_of(args)
        print(
            f"gpugauge confirm: {plural(len(cases), 'result')} to confirm: "
            + ", ".join(f"{c.id} {c.ratio:.3f}x ({c.lost_ms:.3g} ms lost)" for c in cases)
        )
        say_refused(run, "gpugauge confirm")  # the others are confirmed all the same
        if args.profile is None:
            args.profile = run.profile
        with_injection = {m.id for m in run.measurements if injected(m)}
        # each test's cost known from the gated run
        budget = budget.with_costs({c.nodeid: c.test_s for c in cases if c.test_s})
        groups = by_reference(repo_root(Path.cwd()), args.baselines_dir, cases)
        seen: dict[str, int] = {}
        start_s = 0.0  # what an A/B costs beside its tests (its sides' start and end), s

        def one(ref: str, ordered: list[Borderline]) -> None:
            """One A/B of ``ordered`` against ``ref``, within what is left of the budget."""
            nonlocal status, start_s
            ids = ids_of(ordered)
            # an A/B costs its start before any test: as much as the last one's did
            if not budget.fits(ids, start_s):
                print(
                    f"gpugauge confirm: the time budget was spent: not A/B'd against "
                    f"{ref[:10]}, {plural(len(ordered), 'result')} keep the class "
                    f"reference's verdict: {', '.join(c.id for c in ordered)}"
                )
                return
            seen[ref] = n = seen.get(ref, 0) + 1  # one reference's tiers in A/Bs of their own
            out = args.out / (ref[:10] if n == 1 else f"{ref[:10]}-{n}")
            report = run_ab(args, ref, WORKING_TREE, out, ids, budget)
            print("\n" + terminal(report))
            start_s = max(start_s, report.rest_s)
            slower = apply_ab(args, ref, report, ordered, history, with_injection)
            owed = {c.nodeid for c in ordered}
            if reference_failed(ref, report, owed, out / "base.log") or slower:
                status = EXIT_FAILED

        with owning(args.out):
            order = list(in_order(groups))  # regressed, device-paced, cheapest first
            for k, (ref, ordered) in enumerate(order):
                # the A/Bs left, each at the start the last one cost
                cost = [budget.expected_ab_s(ids_of(g), args.rounds, start_s) for _, g in order[k:]]
                print(
                    f"gpugauge confirm: A/B {k + 1} of {len(order)}, against {ref[:10]}: "
                    f"about {duration(cost[0])} expected, {duration(sum(cost))} for "
                    f"{'it' if k + 1 == len(order) else 'all left'}"
                )
                one(ref, ordered)
        return verdict(status)

    return guarded("confirm", body)


def ids_of(cases: Sequence[Borderline]) -> list[str]:
    """The node ids an A/B of these results runs."""
    return [c.nodeid for c in cases]
