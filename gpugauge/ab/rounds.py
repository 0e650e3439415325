"""An A/B's rounds of fresh processes: its one idea of repetition.

A round is one pair of fresh processes, one per build, run by a
:class:`~gpugauge.ab.runner.Coordinator`. Two processes of one build can differ by 1-3% of
their own (where each put its memory, which kernel cuDNN chose), so an A/B runs several
rounds, the builds' places swapped from round to round, and judges each case from every
round's pairs, as asv times each benchmark in several processes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

from gpugauge.ab.claims import Claims, Stopped
from gpugauge.ab.config import ABConfig, round_folder
from gpugauge.ab.launch import Note
from gpugauge.ab.result import ABReport, other_side
from gpugauge.ab.runner import Coordinator
from gpugauge.ab.sides import Checkout
from gpugauge.core.phrasing import plural


def cheapest_first(nodeids: Sequence[str], report: ABReport) -> tuple[str, ...]:
    """``nodeids`` by their cost in ``report``'s round, cheapest first (ties as given).

    A later round in this order, cut by a deadline, leaves the fewest results undecided:
    on an H200 one layer_fit split cost what fifteen layer cases did.
    """
    cost = {c.nodeid: c.wall_s for c in report.cases}
    return tuple(sorted(nodeids, key=lambda i: cost.get(i, 0.0)))


def run_sides(
    cfg: ABConfig,
    sides: dict[str, Checkout],
    note: Note = print,
    cwd: Path | None = None,
    next_round: Callable[[Sequence[str]], ABConfig] | None = None,
    later: Callable[[Sequence[str]], Sequence[str]] | None = None,
    claims: Claims | None = None,
) -> ABReport:
    """Run an A/B over two prepared checkouts in rounds of fresh processes (:class:`Coordinator`).

    Round 1 runs the selection; each later round (``next_round``: the configuration for a
    selection of node ids) runs the tests round 1 paired that ``later`` keeps (asked once,
    after round 1, however many rounds; the others are not judged; None keeps them all),
    the cheapest first, in
    a fresh pair of processes with the builds' places swapped from round to round (the
    process in base's place still sets a test up first: whatever that order does to a
    process now falls on the other build), within the same time budget. The verdict
    comes from every round's pairs (:attr:`CaseAB.outcome`), judged with the spread of
    processes the A/B's own rounds showed (:meth:`ABReport.pooled`), as asv times each
    benchmark in several processes. ``claims``: the A/B is one GPU's of several
    (:mod:`gpugauge.ab.gpus`); round 1 runs the tests this GPU takes, the later rounds those
    of them it paired.
    """
    report = Coordinator(cfg, sides, note, cwd, claims).run()
    total = cfg.schedule.rounds
    # asked with one round too: a case this A/B is not to judge must not read slower in its
    # table while the command's exit status leaves it out (a review, 2026-12-07)
    ids = tuple(report.paired_ids if later is None else later(report.paired_ids))
    report = report.leaving(set(report.paired_ids) - set(ids))  # judged elsewhere
    ids = cheapest_first(ids, report)
    # each test's cost from round 1 where the budget knew none, so that a later round starts
    # no test expected to end past the deadline: half its paired wall seconds as its own
    # (Budget.expected_s counts both sides)
    budget = cfg.budget.with_costs({c.nodeid: c.wall_s / 2 for c in report.cases if c.wall_s})
    for k in range(2, total + 1):
        if next_round is None or not ids:
            break
        if claims is not None and claims.stop.is_set():  # another GPU stopped or broke
            raise Stopped(f"stopped before round {k}")
        # a round that could start none of its tests still costs its start
        if not budget.fits(ids):
            note(f"  round {k} of {total}: the time budget is spent; not started")
            break
        exchanged = cfg.exchanged != (k % 2 == 0)  # each build in the other's place
        in_base_place = "head" if exchanged else "base"
        starts = in_base_place if cfg.base_starts else other_side(in_base_place)
        note(
            f"  round {k} of {total}: {plural(len(ids), 'test')} in a fresh pair of processes, "
            f"{starts}'s build started first (the rounds so far took {report.wall_s:.0f} s)"
        )
        this_round = replace(
            next_round(ids),
            out=round_folder(cfg.out, k),
            exchanged=exchanged,
            budget=budget,
            round=k,
        )
        report = report.with_round(Coordinator(this_round, sides, note, cwd, claims).run())
    return report.pooled()
