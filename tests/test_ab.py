"""gpugauge ab and bisect: the paired verdict, its false-alarm rate, and real A/Bs of a toy repo.

The A/Bs here run two real pytest processes over git worktrees of a throw-away repository
whose benchmark is a host spin (CPU, host-timed): one commit adds a sleep to every round.
"""

from __future__ import annotations

import copy
import json
import math
import os
import random
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from gpugauge.ab.bisect import bisect, render_bisect
from gpugauge.ab.budget import BUDGET_SPENT
from gpugauge.ab.pairs import Block, Pair
from gpugauge.ab.render import markdown, summary_line, terminal
from gpugauge.ab.result import ABReport, CaseAB, SideInfo
from gpugauge.ab.sides import PREFIX, SideError, SideSpec, checkouts, resolve_ref
from gpugauge.ab.verdict import Outcome, Schedule, outcome_of, paired_ratio
from tests.fakes import time_gate

ROOT = Path(__file__).resolve().parents[1]

# --- the verdict ---------------------------------------------------------------------


def test_paired_ratio_is_the_geometric_mean_with_a_t_interval() -> None:
    logs = [math.log(1.03), math.log(1.031), math.log(1.029), math.log(1.030)]
    r = paired_ratio(logs, level=0.95)
    assert r.ratio == pytest.approx(1.03, rel=1e-4)
    assert r.ci_low < 1.03 < r.ci_high
    assert r.ci_high / r.ci_low < 1.003
    one = paired_ratio([0.1])
    assert not one.has_interval
    assert outcome_of(one, same=one) is Outcome.NEED_MORE
    with pytest.raises(ValueError, match="finite"):
        paired_ratio([math.nan, 0.0])


@pytest.mark.parametrize(
    ("logs", "expected"),
    [
        ([0.03, 0.031, 0.029, 0.03, 0.03], Outcome.SLOWER),
        ([-0.03, -0.031, -0.029, -0.03, -0.03], Outcome.FASTER),
        ([0.001, -0.001, 0.0, 0.0005, -0.0005], Outcome.SAME),
        # significant, but under the minimum effect and not inside it: more pairs
        ([0.006, 0.010, 0.007, 0.009, 0.008], Outcome.NEED_MORE),
        # an effect worth reporting, but the interval crosses 1
        ([0.05, -0.02, 0.08, -0.01, 0.06], Outcome.NEED_MORE),
    ],
)
def test_decide(logs: list[float], expected: Outcome) -> None:
    r = paired_ratio(logs)
    assert outcome_of(r, same=r) is expected


def _simulate(schedule: Schedule, effect: float, sigma: float, rng: random.Random) -> Outcome:
    logs: list[float] = []
    while k := schedule.more(logs):
        logs += [rng.gauss(math.log1p(effect), sigma) for _ in range(k)]
    return schedule.outcome(logs)


@pytest.mark.parametrize("sigma", [0.002, 0.005, 0.01, 0.02, 0.05, 0.2])
def test_false_alarms_of_one_round_stay_near_one_percent_over_many_seeds(sigma: float) -> None:
    """A/A pairs at any noise, through one round's adaptive schedule: <= 1.5% slower or faster.

    One round is ``--rounds 1``; an A/B's default two rounds must agree, which keeps its
    false alarms far under 1% (tests/test_ab_rounds.py).
    """
    rng = random.Random(20261127 + int(sigma * 1e4))
    n = 1500
    wrong = sum(
        _simulate(Schedule(), 0.0, sigma, rng) in (Outcome.SLOWER, Outcome.FASTER) for _ in range(n)
    )
    assert wrong / n <= 0.015


@pytest.mark.parametrize(("sigma", "caught"), [(0.003, 1.0), (0.01, 0.99), (0.02, 0.95)])
def test_three_percent_is_caught(sigma: float, caught: float) -> None:
    rng = random.Random(7)
    n = 400
    hits = sum(_simulate(Schedule(), 0.03, sigma, rng) is Outcome.SLOWER for _ in range(n))
    assert hits / n >= caught


def test_a_host_paced_case_stops_early_instead_of_spending_every_pair() -> None:
    rng = random.Random(3)
    logs: list[float] = []
    s = Schedule()
    while k := s.more(logs):
        logs += [rng.gauss(0, 0.3) for _ in range(k)]
    assert len(logs) < s.max_pairs
    assert s.outcome(logs) is Outcome.NEED_MORE


def test_schedule_refuses_nonsense() -> None:
    with pytest.raises(ValueError, match="min_pairs"):
        Schedule(min_pairs=1)
    with pytest.raises(ValueError, match="min_effect"):
        Schedule(min_effect=0)


# --- the report ----------------------------------------------------------------------


def _report(cases: tuple[CaseAB, ...]) -> ABReport:
    side = SideInfo("base", "HEAD~1", "a" * 40, "python3", "/x/gpugauge")
    return ABReport(
        side,
        SideInfo("head", "HEAD", "b" * 40, "python3", "/y/gpugauge"),
        cases,
        "NVIDIA H100",
        12.0,
    )


def _pairs(ratio: float, n: int = 5) -> tuple[Pair, ...]:
    return tuple(
        Pair(
            Block(10.0, 20, 1755.0),
            Block(10.0 * ratio * (1 + 0.001 * (i % 2)), 20, 1755.0),
            i % 2 == 0,
        )
        for i in range(n)
    )


def test_a_call_s_first_block_warms_up_until_settled_not_for_the_case_s_full_second() -> None:
    """The GPU ran the last test's blocks moments ago: settling decides, from 0.3 s."""
    from gpugauge.ab.worker import block_policy
    from gpugauge.runtime.options import PROFILE_POLICIES

    seed = PROFILE_POLICIES["seed"]
    order = {"block_s": 0.25, "rewarm_s": 0.1, "min_rounds": 3, "first_warm_s": 0.3}
    first = block_policy(seed, order, first=True)
    assert first.warmup_s == 0.3 < seed.warmup_s
    assert (first.settle, first.max_warmup_s) == (seed.settle, seed.max_warmup_s)
    assert block_policy(seed, {**order, "first_warm_s": 5.0}, True).warmup_s == seed.warmup_s
    # an order from a coordinator that does not send it: the case's own warm-up
    old = {k: v for k, v in order.items() if k != "first_warm_s"}
    assert block_policy(seed, old, first=True).warmup_s == seed.warmup_s
    later = block_policy(seed, order, first=False)
    assert later.warmup_s == later.max_warmup_s == later.warmup_batch_s == 0.1
    assert later.settle == 0.0


def test_only_a_test_s_first_block_warms_up_from_the_first_warm_up_floor() -> None:
    """Both setups left the GPU idle before the test's first block; the other side's first
    block runs right after it, on a warm GPU: it warms up from ``rewarm_s``."""
    from types import SimpleNamespace

    from gpugauge.ab.config import ABConfig
    from gpugauge.ab.runner import Coordinator

    orders: list[tuple[str, bool, float]] = []

    class Recorded(Coordinator):
        def _block(
            self, side: object, first: bool, first_warm_s: float, rounds: int | None = None
        ) -> Block:
            orders.append((side.name, first, first_warm_s))  # type: ignore[attr-defined]
            return Block(1.0, 10)

    cfg = ABConfig((), Path("unused"), first_warm_s=0.3, rewarm_s=0.02)
    base, head = SimpleNamespace(name="base"), SimpleNamespace(name="head")
    pairs = Recorded(cfg, {})._blocks(base, head, base_starts=False)  # type: ignore[arg-type]
    assert len(pairs) == cfg.schedule.min_pairs
    assert orders[:3] == [("head", True, 0.3), ("base", True, 0.02), ("base", False, 0.02)]
    assert {w for _, _, w in orders[1:]} == {0.02}


def test_blocks_after_the_first_pair_time_one_count_of_rounds_on_both_sides() -> None:
    """A block timed for 0.15 s overshot by doubling batches (0.206 s on an H200 night):
    after the first pair both sides time the rounds that fit 0.15 s at the slower pace."""
    from types import SimpleNamespace

    from gpugauge.ab.config import ABConfig
    from gpugauge.ab.runner import Coordinator, block_rounds
    from gpugauge.ab.worker import block_policy
    from gpugauge.runtime.options import PROFILE_POLICIES

    sent: list[tuple[str, int | None]] = []

    class Recorded(Coordinator):
        def _block(
            self, side: object, first: bool, first_warm_s: float, rounds: int | None = None
        ) -> Block:
            sent.append((side.name, rounds))  # type: ignore[attr-defined]
            pace = 0.2 / 387 if side.name == "base" else 0.21 / 387  # type: ignore[attr-defined]
            if rounds is None:  # timed for block_s: small batches, each with its overhead
                return Block(0.1, 387, timed_s=1.4 * 387 * pace)
            return Block(0.1, rounds, timed_s=rounds * pace)

    cfg = ABConfig((), Path("unused"), block_s=0.15, min_rounds=3)
    sides = SimpleNamespace(name="base"), SimpleNamespace(name="head")
    Recorded(cfg, {})._blocks(*sides, base_starts=True)  # type: ignore[arg-type]
    assert sent[:2] == [("base", None), ("head", None)]
    first_guess = round(0.15 / (1.4 * 0.21 / 387))  # the first pair's pace, overstated
    assert sent[2:4] == [("head", first_guess), ("base", first_guess)]
    assert {n for _, n in sent[4:]} == {round(0.15 / (0.21 / 387))}  # 276, both sides
    # a side that said no seconds at all: blocks keep timing for block_s
    assert block_rounds(Pair(Block(1.0, 10), Block(1.0, 10), True), 0.15, 3) is None
    # one too old to say its timed seconds: its whole call's
    old = Block(1.0, 100, wall_s=0.2)
    assert block_rounds(Pair(old, old, True), 0.15, 3) == 75
    slow = Block(80.0, 3, timed_s=0.24)
    assert block_rounds(Pair(slow, slow, True), 0.15, 3) == 3
    # seconds it cannot have spent (under its median round): the median's pace, and at
    # most four times the last count
    wrong = Block(0.5, 10, timed_s=1e-9)
    assert block_rounds(Pair(wrong, wrong, True), 0.15, 3) == 40
    seed = PROFILE_POLICIES["seed"]
    order = {"block_s": 0.15, "rewarm_s": 0.02, "min_rounds": 3, "rounds": 276}
    assert block_policy(seed, order, first=False).rounds == 276
    assert block_policy(seed, order, first=True).rounds is None


def test_a_block_order_carries_the_count_of_rounds() -> None:
    """What the coordinator sends a side: the count where it has one, none for a first
    block."""
    from gpugauge.ab.config import ABConfig
    from gpugauge.ab.runner import Coordinator

    class Side:
        name = build = "base"

        def __init__(self) -> None:
            self.sent: list[dict] = []

        def send(self, message: dict) -> None:
            self.sent.append(message)

        def expect(self, *ops: str) -> dict:
            return {"op": "block_done", "median_ms": 1.0, "rounds": 5}

    side, coordinator = Side(), Coordinator(ABConfig((), Path("unused")), {})
    coordinator._block(side, True, 0.3)  # type: ignore[arg-type]
    coordinator._block(side, False, 0.02, 88)  # type: ignore[arg-type]
    assert "rounds" not in side.sent[0]
    assert side.sent[1]["rounds"] == 88


def test_a_block_s_seconds_are_read_back_and_a_bad_one_refused() -> None:
    b = Block(1.0, 10, timed_s=0.25, warmup_s=0.1, wall_s=0.4)
    assert Block.from_dict(b.as_dict()) == b
    assert Block.from_dict({"median_ms": 1.0, "rounds": 10}).timed_s is None  # an old worker
    with pytest.raises(ValueError, match="warmup_s"):
        Block.from_dict({"median_ms": 1.0, "rounds": 10, "warmup_s": -1})


def test_the_sides_line_names_the_working_tree_in_full() -> None:
    from gpugauge.ab.render import sides_line

    base = SideInfo("base", "HEAD", "a" * 40, "python3", "/x")
    head = SideInfo("head", "WORKTREE", None, "python3", "/y")
    line = sides_line(ABReport(base, head, (), "cpu", 1.0))
    assert line == "base HEAD (aaaaaaaaaa) against head WORKTREE (working tree) on cpu"


def test_the_efficiency_line_counts_timed_rounds_and_warm_up_as_a_gated_run_does() -> None:
    def pairs(timed: float | None) -> tuple[Pair, ...]:
        block = Block(1.0, 10, timed_s=timed, warmup_s=None if timed is None else 0.1)
        return tuple(Pair(block, block, i % 2 == 0) for i in range(4))

    side = SideInfo("base", "a", "a" * 40, "python3", "/x")
    case = CaseAB("c", "t::c", pairs(0.25), phases={"blocks": 3.0})
    line = terminal(ABReport(side, side, (case,), "cpu", 6.0)).splitlines()[-1]
    # 8 blocks: 2 s timed, 0.8 s of warm-up, of 6 s
    assert line.startswith("efficiency: timed rounds 2 s and warm-up 1 s of 6 s (47%)")
    assert line.endswith("the A/B cost 3.0x its timed rounds")
    old = CaseAB("c", "t::c", pairs(None), phases={"blocks": 3.0})
    line = terminal(ABReport(side, side, (old,), "cpu", 6.0)).splitlines()[-1]
    assert line.startswith("efficiency: paired blocks 3 s of 6 s (50%)")
    # a gated run's result it times alone is timing work too (run 111: 84 s of 279 s)
    alone = CaseAB("r", "t::r", calls=0, phases={"alone": 1.5})
    line = terminal(ABReport(side, side, (old, alone), "cpu", 6.0)).splitlines()[-1]
    assert line.startswith("efficiency: paired blocks 3 s and calls timed alone 2 s of 6 s (75%)")
    # an A/B that timed nothing (every test skipped) has no cost to state
    none = terminal(ABReport(side, side, (alone,), "cpu", 6.0)).splitlines()[-1]
    assert "inf" not in none
    assert "the A/B cost" not in none


def test_the_cost_line_says_what_lies_outside_the_tests() -> None:
    from gpugauge.ab.render import cost_line

    side = SideInfo("base", "a", "a" * 40, "python3", "/x")
    one = CaseAB("c", "t::c", _pairs(1.0), wall_s=5.0, phases={"setup": 1.0, "blocks": 3.0})
    two = CaseAB("c", "t::c", _pairs(1.0), wall_s=4.5, phases={"setup": 1.0, "blocks": 3.0})
    search = CaseAB("s", "t::s", only="head", calls=0, wall_s=4.0)  # untimed, gated side
    first = ABReport(side, side, (one, search), "cpu", 20.0, start_s=6.0, end_s=3.0)
    report = first.with_round(ABReport(side, side, (two,), "cpu", 15.0, start_s=5.0, end_s=2.0))
    assert report.between_s == pytest.approx(1.5)  # each round's case, outside its phases
    assert report.only_s == 4.0
    assert cost_line(report) == (
        "time: setups 2 s, paired blocks 6 s, sides' start 11 s, tests one side ran alone "
        "4 s, between tests 2 s, sides' end 5 s, the rest 6 s"
    )
    assert report.as_dict()["start_s"] == 11.0


def test_report_renders_worst_first_and_escapes_markdown() -> None:
    cases = (
        CaseAB("same-case", "t.py::t[same-case]", _pairs(1.0)),
        CaseAB("slow|case", "t.py::t[slow|case]", _pairs(1.05), kernels="same kernels"),
        CaseAB("gone", "t.py::t[gone]", only="base", status={"base": "passed"}),
    )
    report = _report(cases)
    text = terminal(report)
    lines = text.splitlines()
    assert lines.index(next(x for x in lines if x.startswith("slow|case"))) < lines.index(
        next(x for x in lines if x.startswith("same-case"))
    )
    assert "on base only (passed)" in text
    assert "3 cases: 1 slower, 0 faster, 1 same, 0 need more samples, 1 on one side only" in text
    md = markdown(report)
    assert "slow\\|case" in md
    # "same" at 95% over two rounds; one round alone judges it at the 99.8% of slower
    assert "'same' needs its 95.0% interval within 1.0% (99.8% where one round" in text
    one = replace(report, schedule=Schedule(rounds=1))
    assert "'same' needs its 99.8% interval within 1.0% " in terminal(one).replace("\n", " ")
    assert "same needs its 99.8% interval within 1.0%." in markdown(one)
    data = report.as_dict()
    assert data["counts"]["slower"] == 1
    assert data["cases"][1]["pairs"][0]["log_ratio"] == pytest.approx(math.log(1.05))
    json.dumps(data)  # plain JSON


def test_a_summary_counts_every_case_once() -> None:
    """A test that fails on one side, or that neither side timed, is counted too: four
    rows had read "4 cases: 2 slower, 0 faster, 0 same, 0 need more samples" (a review,
    2026-12-07)."""
    failed = {"base": "passed", "head": "failed"}
    cases = (
        CaseAB("a", "t.py::t[a]", _pairs(1.05)),
        CaseAB("b", "t.py::t[b]", _pairs(1.05)),
        CaseAB("c", "t.py::t[c]", status={"base": "passed", "head": "passed"}),
        CaseAB("d", "t.py::t[d]", status=failed),
        CaseAB("e", "t.py::t[e]", only="base", status={"base": "passed"}),
        CaseAB("f", "t.py::t[f]", _pairs(1.0)),
    )
    report = _report(cases).leaving({"t.py::t[f]"})
    counts = report.as_dict()["counts"]
    assert sum(counts.values()) == len(cases)
    assert counts["not paired"] == 2
    said = summary_line(report)
    assert said.startswith(
        "6 cases: 2 slower, 0 faster, 0 same, 0 need more samples, 1 on one side only, "
        "1 not judged (round 1 only), 2 not paired; "
    )


class _Scripted:
    """A side for the coordinator: blocks of scripted (ms, SM clock MHz), a passing test."""

    def __init__(self, name: str, blocks: list[tuple[float, float]]) -> None:
        self.name, self.blocks = name, iter(blocks)
        self.build = name
        self.last: dict = {}

    def send(self, message: dict) -> None:
        self.last = message

    def expect(self, *ops: str) -> dict:
        if self.last["op"] == "go":  # its setup done, at its one timing call
            return {"op": "measure"}
        if self.last["op"] == "skip":
            return {"op": "done", "outcome": f"skipped: {self.last['reason']}"}
        return {"op": "done", "outcome": "passed"}


def _scripted_coordinator(**cfg: Any) -> Any:
    """A coordinator whose every block is its side's next scripted (ms, SM clock MHz)."""
    from gpugauge.ab.config import ABConfig
    from gpugauge.ab.runner import Coordinator

    class Scripted(Coordinator):
        def _block(self, side, first, first_warm_s, rounds=None):
            ms, mhz = next(side.blocks)
            return Block(ms, 20, mhz)

    return Scripted(ABConfig((), Path("unused"), **cfg), {}, note=lambda _: None)


def _scripted_case(base: list, head: list, schedule: Schedule | None = None) -> CaseAB:
    """One paired test of two scripted sides, as the coordinator ends it."""
    coordinator = _scripted_coordinator(schedule=schedule or Schedule())
    return coordinator._paired(_Scripted("base", base), _Scripted("head", head), "t.py::t[c]")


class _Logged(_Scripted):
    """A scripted side that logs every order it gets and every answer it gives."""

    def __init__(self, name: str, blocks: list[tuple[float, float]], log: list[str]) -> None:
        super().__init__(name, blocks)
        self.log = log

    def send(self, message: dict) -> None:
        super().send(message)
        self.log.append(f"{self.name}<-{message['op']}")

    def expect(self, *ops: str) -> dict:
        said = super().expect(*ops)
        self.log.append(f"{self.name}->{said['op']}")
        return said


@pytest.mark.parametrize(
    ("launched", "as_is", "together"),
    [(True, False, True), (False, False, False), (True, True, False)],
)
def test_a_launched_test_s_sides_get_go_and_end_at_once_unless_one_is_a_gated_run(
    launched: bool, as_is: bool, together: bool
) -> None:
    log: list[str] = []
    blocks = [(10.0, 1980.0)] * 4
    base, head = _Logged("base", blocks, log), _Logged("head", blocks, log)
    coordinator = _scripted_coordinator(head_as_is=as_is)
    coordinator._launched = {"t.py::t[c]"} if launched else set()
    coordinator._paired(base, head, "t.py::t[c]")
    both = ["base<-go", "head<-go", "base->measure", "head->measure"]
    in_turn = ["base<-go", "base->measure", "head<-go", "head->measure"]
    assert log[:4] == (both if together else in_turn)
    ends = ["base<-end", "head<-end", "base->done", "head->done"]
    assert (log[-4:] == ends) == together, log[-4:]


@pytest.mark.parametrize("launched", [False, True])
def test_a_gated_run_that_times_a_test_the_other_side_skips_says_why_it_has_no_pairs(
    launched: bool,
) -> None:
    # the other side skipped it (untimed here): not "made no such call"
    blocks = [(10.0, 1980.0)] * 4
    coordinator = _scripted_coordinator(head_as_is=True)
    coordinator._untimed = {"t.py::t[c]"}
    coordinator._launched = {"t.py::t[c]"} if launched else set()
    case = coordinator._paired(_Scripted("base", blocks), _Scripted("head", blocks), "t.py::t[c]")
    assert not case.pairs
    assert case.timed_alone == ""
    assert "made no such call" not in case.unpaired_reason, case.unpaired_reason


def test_a_side_that_injects_work_sets_its_launches_up_alone() -> None:
    from gpugauge.ab.runner import launched_ids

    marked = {"base": {"launched": ["a", "b"]}, "head": {"launched": ["b"]}}
    assert launched_ids(marked) == {"a", "b"}
    assert launched_ids({**marked, "head": {"launched": ["b"], "injects": True}}) == set()
    assert launched_ids({"base": {}, "head": {}}) == set()  # sides from before the marker


def _scripted_pairs(base: list, head: list) -> tuple[Pair, ...]:
    coordinator = _scripted_coordinator()
    return coordinator._blocks(_Scripted("base", base), _Scripted("head", head), True)


def test_a_test_expected_to_end_past_the_budget_is_not_started() -> None:
    """confirm's deadline: run 90's split A/B (98 s) started 17 s before it and ran past it."""
    from gpugauge.ab.budget import BUDGET_SHORT, Budget
    from gpugauge.ab.config import ABConfig
    from gpugauge.ab.runner import Coordinator

    alone = {"t.py::split": 35.0, "t.py::conv": 2.3}
    cfg = ABConfig((), Path("unused"))
    budget = Budget(time.monotonic() + 20.0, alone, cfg.first_look_s)
    first_look = 2 * cfg.schedule.min_pairs * (cfg.block_s + cfg.rewarm_s)  # both sides
    assert budget.expected_s("t.py::split") == pytest.approx(2 * 35.0 + first_look)
    assert budget.expected_s("t.py::other") == 0.0  # no run of its own known: only the budget
    coordinator = Coordinator(replace(cfg, budget=budget), {}, note=lambda _: None)
    split = [_Scripted("base", []), _Scripted("head", [])]
    case = coordinator._paired(*split, "t.py::split")
    assert case.pairs == ()
    assert all(side.last["op"] == "skip" for side in split)
    expected = f"{BUDGET_SHORT} (about {2 * 35.0 + first_look:.0f} s; "
    assert split[0].last["reason"].startswith(expected)
    assert budget.why_not("t.py::conv") == ""  # a cheaper one after it still starts
    assert budget.fits(["t.py::split", "t.py::conv"])
    assert not budget.fits(["t.py::split"])
    spent = replace(budget, ends=time.monotonic() - 1.0)
    assert spent.why_not("t.py::conv") == BUDGET_SPENT
    assert not spent.fits(["t.py::conv"])
    # a side's status says so, as ab.json keeps it: what lets an A/B that paired nothing
    # for its budget alone exit 0
    from gpugauge.ab.budget import left_for_time

    said = [f"skipped: {split[0].last['reason']}", f"skipped: {BUDGET_SPENT}"]
    assert all(left_for_time(s) for s in said)
    assert not left_for_time("skipped: gpugauge ab: marked untimed, nothing to pair")


def test_a_spent_budget_skips_no_test_of_a_gated_run() -> None:
    """confirm --measure: the gated run is the night's result; only its pairing stops."""
    from gpugauge.ab.budget import Budget
    from gpugauge.ab.config import ABConfig
    from gpugauge.ab.runner import Coordinator

    spent = Budget(time.monotonic() - 1.0)
    cfg = replace(ABConfig((), Path("unused")), budget=spent, head_as_is=True)
    base, head = _Scripted("base", []), _Scripted("head", [])
    case = Coordinator(cfg, {}, note=lambda _: None)._paired(base, head, "t.py::t[c]")
    assert base.last["op"] == "skip"
    assert head.last["op"] == "solo"  # set up, then timed alone, as without an A/B
    assert case.pairs == ()
    plain = replace(cfg, head_as_is=False)
    base, head = _Scripted("base", []), _Scripted("head", [])
    Coordinator(plain, {}, note=lambda _: None)._paired(base, head, "t.py::t[c]")
    assert head.last["op"] == base.last["op"] == "skip"


class _Untimed(_Scripted):
    """A side whose test makes no timing call (a memory search): set up, it is done."""

    def expect(self, *ops: str) -> dict:
        if self.last["op"] == "go":
            return {"op": "done", "outcome": "passed"}
        return super().expect(*ops)


def test_both_sides_run_a_test_the_first_ran_with_nothing_to_pair() -> None:
    """Run 110's memory searches are marked untimed now; an unmarked test runs on both sides.

    A build that stopped timing a test must show whichever side goes first: skipping the
    second side's run hid a reference that made no timing call (a review, 2026-12-06).
    """
    from gpugauge.ab.config import ABConfig
    from gpugauge.ab.result import NOTHING_TO_PAIR
    from gpugauge.ab.runner import Coordinator

    for cfg in (replace(ABConfig((), Path("unused")), head_as_is=True), ABConfig((), Path("u"))):
        coordinator = Coordinator(cfg, {}, note=lambda _: None)
        base, head = _Untimed("base", []), _Untimed("head", [])
        case = coordinator._paired(base, head, "t.py::t[fit]")  # base's setup goes first
        assert base.last["op"] == "go"
        assert head.last["op"] == "go"
        assert case.unpaired_reason == NOTHING_TO_PAIR


def test_a_test_either_side_marks_untimed_is_skipped_by_the_other_never_by_a_gated_run() -> None:
    """A reference from before the marker runs its search unmarked: it is told to skip it."""
    from gpugauge.ab.config import ABConfig
    from gpugauge.ab.result import NOTHING_TO_PAIR, UNTIMED_SKIPPED
    from gpugauge.ab.runner import Coordinator

    gated = replace(ABConfig((), Path("unused")), head_as_is=True)
    coordinator = Coordinator(gated, {}, note=lambda _: None)
    coordinator._untimed = {"t.py::t[fit]"}  # as the head side's "collected" says
    base, head = _Untimed("base", []), _Untimed("head", [])
    case = coordinator._paired(base, head, "t.py::t[fit]")
    assert base.last == {"op": "skip", "reason": UNTIMED_SKIPPED}
    assert head.last["op"] == "go"
    assert case.unpaired_reason == NOTHING_TO_PAIR
    plain = Coordinator(ABConfig((), Path("unused")), {}, note=lambda _: None)
    plain._untimed = {"t.py::t[fit]"}
    lone = _Untimed("base", [])
    assert plain._alone(lone, "t.py::t[fit]").startswith("skipped: ")  # on one side only
    assert lone.last == {"op": "skip", "reason": UNTIMED_SKIPPED}


def test_a_case_round_two_leaves_out_is_not_judged_by_its_one_round() -> None:
    """Run 110's A/B table read '1 slower' for a 0.094 ms result the night never judged."""
    from gpugauge.ab.render import terminal
    from gpugauge.ab.result import NOT_JUDGED

    left = CaseAB("linear", "t.py::t[linear]", _pairs(1.011, 4))
    kept = CaseAB("conv", "t.py::t[conv]", _pairs(1.0, 4))
    report = _report((left, kept)).leaving({"t.py::t[linear]"})
    case = report.cases[0]
    assert case.outcome is None
    assert case.verdict_text == NOT_JUDGED
    assert case.as_dict()["judged"] is False
    assert report.count(Outcome.SLOWER) == 0
    said = terminal(report)
    assert "0 slower" in said
    assert "1 not judged (round 1 only)" in said
    assert f"{case.ratio.ratio:.3f}x" in said  # its pairs are kept and shown
    assert report.cases[1].outcome is not None


def test_every_pair_counts_whatever_its_clocks() -> None:
    """Run 116: linear-fwd-bf16 read 1.06x in every pair at SM clocks 1758-1965 MHz, and the
    old rule stopped both its rounds "clocks unstable"; counted, the first look decides."""
    steady = [(10.0, 1980.0)] * 40
    wandering = [(10.6, 1780.0) if i % 2 else (10.6, 1980.0) for i in range(40)]
    case = _scripted_case(steady, wandering)
    assert (case.outcome, len(case.pairs)) == (Outcome.SLOWER, Schedule().min_pairs)
    assert [p.head.sm_clock_mhz for p in case.pairs] == [1980.0, 1780.0, 1980.0][: len(case.pairs)]
    # an A/A whose clocks wander: as noisy as its pairs are, never slower for its clocks
    same = _scripted_case(steady, [(10.0, 1780.0) if i % 2 else (10.0, 1980.0) for i in range(40)])
    assert same.outcome is Outcome.SAME


def test_a_case_s_ratio_is_computed_once_for_ab_json_s_rewrites(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # ab.json is rewritten after every case with every case so far: on a 93-case A/B,
    # recomputing each case's interval every time cost seconds of the GPU's idle time
    import gpugauge.ab.result as result

    calls = []
    real = result.paired_ratio
    monkeypatch.setattr(result, "paired_ratio", lambda *a, **k: calls.append(1) or real(*a, **k))
    cases = tuple(CaseAB(f"c{i}", f"t.py::t[c{i}]", _pairs(1.0 + i / 100)) for i in range(4))
    _report(cases).as_dict()
    assert len(calls) == 2 * len(cases)  # each case's interval at both levels, once
    for _ in range(2):
        _report(cases).as_dict()
    assert len(calls) == 2 * len(cases)


def test_deadline_and_time_budget_make_one_budget_the_sooner_counting() -> None:
    from gpugauge.ab.budget import Budget
    from gpugauge.cli import build_parser

    def left(*given: str) -> float:
        args = build_parser().parse_args(["confirm", "run.json", *given])
        return Budget.from_args(args).left()

    now = time.time()
    assert left() == math.inf
    assert left("--deadline", str(now - 60)) == 0.0  # passed: no test starts
    assert 590 < left("--deadline", str(now + 600)) <= 600
    assert 29 < left("--deadline", str(now + 600), "--time-budget", "30") <= 30  # the sooner
    # a budget given as a deadline (840), or a time in milliseconds, is bad input: it
    # would start no test at all, or never stop
    for wrong in ("840", "0", str(now * 1000), "nan"):
        with pytest.raises(SystemExit):
            build_parser().parse_args(["ab", "HEAD", "--deadline", wrong])


def test_max_pairs_below_the_first_look_is_refused_by_the_command_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A case's first look takes the schedule's first pairs: fewer is refused where the
    option is read, saying why, not later by the schedule."""
    from gpugauge.cli import build_parser

    least = Schedule().min_pairs
    assert build_parser().parse_args(["ab", "HEAD", "--max-pairs", str(least)]).max_pairs == least
    with pytest.raises(SystemExit):
        build_parser().parse_args(["ab", "HEAD", "--max-pairs", str(least - 1)])
    assert f"a whole number of pairs >= {least}" in capsys.readouterr().err


# --- real A/Bs of a toy repository ---------------------------------------------------

# the toys' one piece of work: a busy wait of ``ms`` on the host clock
# on the thread's CPU time: a CPU round's clock leaves out the time the thread waited for a
# core, so a spin on the wall clock would read shorter whenever another process took it
SPIN = """\
def spin(ms):
    end = time.thread_time() + ms / 1e3
    while time.thread_time() < end:
        pass
"""

BENCH = (
    """\
import os
import time

import pytest


@pytest.mark.untimed
def test_count():
    # an A/B runs no test marked untimed, but for a side run as is (confirm --measure)
    as_is = os.environ.get("GPUGAUGE_AB_AS_IS")
    assert as_is or "GPUGAUGE_AB_ADDRESS" not in os.environ, "an untimed test in an A/B"


"""
    + SPIN
    + """

def work():
    spin(3.0){extra}


def test_spin(gauge):
    gauge(work)
"""
)


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args], check=True, capture_output=True, text=True
    ).stdout.strip()


def _commit(repo: Path, extra: str, message: str) -> str:
    (repo / "test_toy.py").write_text(BENCH.format(extra=extra))
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", message)
    return _git(repo, "rev-parse", "HEAD")


def new_repo(repo: Path) -> Path:
    """An empty git repository at ``repo``, with a committer and pytest's cache off."""
    repo.mkdir()
    _git(repo, "init", "-q")
    _git(repo, "config", "user.email", "t@example.com")
    _git(repo, "config", "user.name", "t")
    (repo / "pytest.ini").write_text("[pytest]\naddopts = -p no:cacheprovider\n")
    return repo


@pytest.fixture
def toy(tmp_path: Path) -> Path:
    repo = new_repo(tmp_path / "toy")
    _commit(repo, "", "spin")
    return repo


def _ab(
    repo: Path, *args: str, out: Path, timeout: float = 600, tmp: Path | None = None
) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TMPDIR": str(tmp or out.parent)}
    return subprocess.run(
        [sys.executable, "-m", "gpugauge", *args, "--out", str(out), "--block-time", "0.1"],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _leftovers(repo: Path, tmp: Path) -> list[str]:
    trees = [
        x
        for x in _git(repo, "worktree", "list", "--porcelain").splitlines()
        if x.startswith("worktree ") and PREFIX in x
    ]
    folders = [str(p) for p in tmp.glob(f"{PREFIX}*")]
    return trees + folders


@pytest.mark.slow
def test_a_head_that_stops_timing_a_case_fails_the_a_b(toy: Path, tmp_path: Path) -> None:
    """A test that no longer calls gauge passes on head: the A/B must not pass with it.

    Base goes first and times it; head runs it too and makes no call (a review,
    2026-12-06: exit 0, "0 slower"). Nothing was compared at all, so that says so too.
    """
    untimed = BENCH.format(extra="").replace("    gauge(work)", "    work()")
    (toy / "test_toy.py").write_text(untimed)
    done = _ab(toy, "ab", "HEAD", "WORKTREE", "--rounds", "1", out=tmp_path / "ab")
    said = done.stdout + done.stderr
    assert done.returncode == 1, said
    assert "test_spin: head made no timing call to pair with base's" in said, said
    assert "nothing was compared: no case was timed by both builds" in said, said
    assert "head made no timing call" in (tmp_path / "ab" / "ab.md").read_text()
    # a side's log named its saved run by its name while pytest wrote it: the last line
    # names the file it became (a review: the printed report command failed)
    saved = tmp_path / "ab" / "base.json"
    partial = saved.with_name(".base.partial.json")
    last = (tmp_path / "ab" / "base.log").read_text().splitlines()[-1]
    assert last == f"gpugauge ab: this side's saved run is {saved} (renamed from {partial})"


@pytest.mark.slow
def test_a_commit_that_sleeps_is_slower_and_a_a_is_same(toy: Path, tmp_path: Path) -> None:
    _commit(toy, "\n    time.sleep(0.003)", "sleep")
    slow = _ab(toy, "ab", "HEAD~1", "HEAD", out=tmp_path / "slow")
    assert slow.returncode == 1, slow.stdout + slow.stderr
    data = json.loads((tmp_path / "slow" / "ab.json").read_text())
    (case,) = data["cases"]
    assert case["outcome"] == "slower"
    assert case["ci_low"] > 1.1  # a sleep of >= 3 ms on a 3 ms round
    # where the time went, kept per case and summed in the table's last line
    assert set(case["phases"]) == {"setup", "blocks", "after", "alone"}
    # a first look of pairs of two blocks of about 0.1 s
    assert case["phases"]["blocks"] > 0.05 * 2 * Schedule().min_pairs
    # after the first pair both sides time one count of rounds a block
    later = case["pairs"][1:]
    assert later
    assert all(p["base"]["rounds"] == p["head"]["rounds"] for p in later)
    # the cost line names each phase of half a second or more: the blocks always are
    (cost,) = [x for x in slow.stdout.splitlines() if x.startswith("time: ")]
    assert "paired blocks" in cost, cost
    # and what lies outside the tests: both rounds' sides starting (Python, pytest, torch)
    assert "sides' start" in cost, cost
    assert data["start_s"] > 0.5
    outside = data["start_s"] + data["end_s"] + data["between_s"]
    assert outside + sum(case["phases"].values()) <= data["wall_s"] + 1e-6
    assert "efficiency: timed rounds" in slow.stdout.strip().splitlines()[-2]
    # every block says how long it timed and warmed up, within its call of the primitive
    block = case["pairs"][0]["head"]
    assert 0.1 <= block["timed_s"] <= block["wall_s"]
    assert block["timed_s"] + block["warmup_s"] <= block["wall_s"] + 1e-3
    assert "slower" in (tmp_path / "slow" / "ab.md").read_text()
    # two rounds from the start, the second in a fresh pair of processes, head's build
    # started first, and slower there too
    assert case["round_outcome"] == "slower"
    (second,) = case["rounds"]
    assert second["round_outcome"] == "slower"
    assert second["pairs"][0]["base_first"] is False
    assert (tmp_path / "slow" / "round-2" / "head.log").is_file()
    assert "round 2 of 2" in slow.stdout
    # each round says how long its sides took to start: Python, pytest and the plugins
    ready = re.findall(r"ready: base ([0-9.]+) s, head ([0-9.]+) s after their start", slow.stdout)
    assert len(ready) == 2, slow.stdout
    assert all(0 < float(x) < 120 for pair in ready for x in pair), ready
    same = _ab(toy, "ab", "HEAD", "HEAD", out=tmp_path / "same")
    assert same.returncode == 0, same.stdout + same.stderr
    (case,) = json.loads((tmp_path / "same" / "ab.json").read_text())["cases"]
    # "same" on a quiet host; a host-timed spin on a loaded one (other processes taking
    # its cores) can leave the CI too wide to say so, but never slower or faster
    assert case["outcome"] in ("same", "need more samples")
    assert _leftovers(toy, tmp_path) == []


PLACED = (
    """\
import os
import time
from pathlib import Path


"""
    + SPIN
    + """

def first_here():
    # the process that runs the test first in its pair is 10% slower in every round, the
    # same way in every block, as a process's memory placement can make a 0.1 ms GPU case
    name = os.environ["GPUGAUGE_AB_ADDRESS"].replace(os.sep, "_")
    try:
        (Path(os.environ["TOY_MARKS"]) / name).touch(exist_ok=False)
    except FileExistsError:
        return False
    return True


def test_spin(gauge):
    ms = 3.3 if first_here() else 3.0
    gauge(lambda: spin(ms))
"""
)

# the process in head's place is 10% faster in every round, whichever started first: what
# four A/As of one commit on H200s showed (run 89: head's process faster in 69% of cases)
NAMED = (
    """\
import os
import time


"""
    + SPIN
    + """

def test_spin(gauge):
    ms = 2.7 if os.environ["GPUGAUGE_AB_SIDE"] == "head" else 3.0
    gauge(lambda: spin(ms))
"""
)


@pytest.mark.slow
@pytest.mark.parametrize("toy_text", [PLACED, NAMED], ids=["first-started", "head-named"])
def test_a_difference_of_one_pair_of_processes_is_not_a_verdict(
    toy: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, toy_text: str
) -> None:
    # runs 87-89 (H200): A/As read linear-fwd-bf16 0.981x and 0.986x, resnet18 eager 0.989x
    # "faster", every pair alike: the two processes of one A/B differed, not the code
    (tmp_path / "marks").mkdir()
    monkeypatch.setenv("TOY_MARKS", str(tmp_path / "marks"))
    (toy / "test_toy.py").write_text(toy_text)
    _git(toy, "add", "-A")
    _git(toy, "commit", "-qm", "placed")
    once = _ab(toy, "ab", "HEAD", "HEAD", "--rounds", "1", out=tmp_path / "once")
    (case,) = json.loads((tmp_path / "once" / "ab.json").read_text())["cases"]
    assert case["outcome"] == "faster", once.stdout + once.stderr  # what one round says
    assert case["rounds"] == []
    twice = _ab(toy, "ab", "HEAD", "HEAD", out=tmp_path / "twice")
    assert twice.returncode == 0, twice.stdout + twice.stderr
    (case,) = json.loads((tmp_path / "twice" / "ab.json").read_text())["cases"]
    assert case["round_outcome"] == "faster"
    # each build in the other's place in round 2, head's started first
    assert case["rounds"][0]["round_outcome"] == "slower"
    assert case["outcome"] == "need more samples"
    # the rounds disagree: two speeds, or (intervals touching under load) one each way
    assert "bimodal across processes: 0.9" in twice.stdout or " by round" in twice.stdout
    assert "head, in base's place" in twice.stdout
    assert (tmp_path / "twice" / "round-2" / "head.log").is_file()
    assert _leftovers(toy, tmp_path) == []


# a setup answer of the build's own (a frontier found, a cut fitted), kept for its later
# rounds: each build works its answer out once, in round 1, and reads it back after
KEPT = (
    """\
import os
import time

ANSWER = {answer!r}


"""
    + SPIN
    + """

def test_spin(gauge):
    def work_out():
        with open(os.environ["TOY_WORKED_OUT"], "a") as f:
            f.write(ANSWER + "\\n")
        return {{"answer": ANSWER}}

    kept, earlier = gauge.kept(gauge.call_spec(), "answer", work_out)
    assert kept == {{"answer": ANSWER}}, kept  # this build's own answer, never the other's
    gauge(lambda: spin(3.0))
"""
)


@pytest.mark.slow
def test_each_build_works_a_setup_answer_out_once_for_all_its_rounds(
    toy: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    worked = tmp_path / "worked-out.txt"
    monkeypatch.setenv("TOY_WORKED_OUT", str(worked))
    for answer in ("base", "head"):
        (toy / "test_toy.py").write_text(KEPT.format(answer=answer))
        _git(toy, "add", "-A")
        _git(toy, "commit", "-qm", answer)
    out = tmp_path / "ab"
    (out / "setup-memo" / "head").mkdir(parents=True)  # an earlier A/B's: not this one's
    (out / "setup-memo" / "head" / "stale.json").write_text("{}")
    run = _ab(toy, "ab", "HEAD~1", "HEAD", out=out)
    assert run.returncode in (0, 1), run.stdout + run.stderr
    (case,) = json.loads((out / "ab.json").read_text())["cases"]
    assert case["status"] == {"base": "passed", "head": "passed"}, run.stdout
    assert len(case["rounds"]) == 1  # round 2 ran, in fresh processes
    assert sorted(worked.read_text().split()) == ["base", "head"]
    assert not (out / "setup-memo" / "head" / "stale.json").exists()
    assert {p.parent.parent.name for p in (out / "setup-memo").rglob("answer.json")} == {
        "base",
        "head",
    }


def test_the_ready_line_says_how_long_each_side_took_to_start_and_to_start_cuda() -> None:
    from types import SimpleNamespace

    from gpugauge.ab.runner import ready_line
    from gpugauge.ab.worker import start_cuda

    sides = {
        "base": SimpleNamespace(build="head", started=100.0),  # exchanged places
        "head": SimpleNamespace(build="base", started=100.5),
    }
    collected = {"base": {"at": 106.1, "cuda_s": 2.3}, "head": {"at": 105.0, "cuda_s": 2.1}}
    line = ready_line(collected, sides)  # type: ignore[arg-type]
    assert line == "ready: base 4.5 s, head 6.1 s after their start; CUDA started in 2.1 s, 2.3 s"
    collected = {"base": {"at": 106.1, "cuda_s": None}, "head": {"at": 105.0}}
    assert ready_line(collected, sides).endswith("after their start")  # type: ignore[arg-type]
    assert start_cuda() is None  # no GPU here: the first test starts nothing either


def test_a_case_of_exchanged_places_reads_head_over_base() -> None:
    case = CaseAB(
        "c",
        "t.py::c",
        _pairs(1.03),
        status={"base": "passed", "head": "failed"},
        timed_alone="base",
    )
    back = case.exchanged()
    assert back.ratio is not None
    assert case.ratio is not None
    assert back.ratio.ratio == pytest.approx(1 / case.ratio.ratio)
    assert back.outcome is Outcome.FASTER
    assert [p.base_first for p in back.pairs] == [not p.base_first for p in case.pairs]
    assert back.status == {"head": "passed", "base": "failed"}
    assert back.timed_alone == "head"
    assert back.exchanged() == case


EARLY = """\
# a plugin the project's addopts load with -p, ahead of the A/B's worker: it imports
# gpugauge, whose pipeline holds the timing primitive by name
import gpugauge.runtime.pipeline  # noqa: F401
"""


@pytest.mark.slow
def test_a_project_plugin_that_imports_gpugauge_first_still_pairs(
    toy: Path, tmp_path: Path
) -> None:
    # run 88's night-1 confirm: the injected commit loaded a plugin from pytest.ini, every
    # paired call went to the bare primitive, and 48 cases read "no timing ... to pair"
    (toy / "early_plugin.py").write_text(EARLY)
    (toy / "pytest.ini").write_text("[pytest]\naddopts = -p no:cacheprovider -p early_plugin\n")
    _git(toy, "add", "-A")
    _git(toy, "commit", "-qm", "a plugin of the project's own")
    run = _ab(toy, "ab", "HEAD", "HEAD", out=tmp_path / "aa")
    assert run.returncode == 0, run.stdout + run.stderr
    (case,) = json.loads((tmp_path / "aa" / "ab.json").read_text())["cases"]
    assert len(case["pairs"]) >= Schedule().min_pairs, case  # a round's first look
    assert case["outcome"] in ("same", "need more samples")


@pytest.mark.slow
def test_a_reference_from_before_a_marker_pairs_the_tests_the_selection_names(
    toy: Path, tmp_path: Path
) -> None:
    # run 134's night on an H100: its class baselines were recorded at a commit from before
    # the nightly marker, and confirm's reference side selected none of `-m nightly`
    text = (toy / "test_toy.py").read_text()
    marked = text.replace("def test_spin(gauge):", "@pytest.mark.nightly\ndef test_spin(gauge):")
    (toy / "test_toy.py").write_text(marked + "\n\ndef test_left(gauge):\n    gauge(work)\n")
    _git(toy, "add", "-A")
    _git(toy, "commit", "-qm", "the nightly marker, and a test it leaves out")
    run = _ab(toy, "ab", "HEAD~1", "HEAD", "-m", "nightly", out=tmp_path / "marked")
    assert run.returncode == 0, run.stdout + run.stderr
    data = json.loads((tmp_path / "marked" / "ab.json").read_text())
    (case,) = data["cases"]  # head's selection alone: neither untimed test_count nor test_left
    assert case["id"] == "test_toy.py::test_spin"
    assert case["only"] == "", case  # paired, not on one side only
    assert len(case["pairs"]) >= Schedule().min_pairs, case
    assert case["rounds"], case  # round 2 selects it by node id on both sides
    assert data["problems"] == []
    assert "also runs 1 test(s)" in (tmp_path / "marked" / "base.log").read_text()


def test_a_following_side_adds_head_s_tests_where_head_runs_them_and_keeps_its_order(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from types import SimpleNamespace

    from gpugauge.ab import worker

    class Selection:
        def ask(self, message: dict[str, Any]) -> dict[str, Any]:
            assert message == {"op": "selection"}
            return {"ids": ["a[x]", "new1", "c[x]", "new2", "a[y]", "c[y]"]}

    monkeypatch.setattr(worker, "CHANNEL", Selection())
    item = {i: SimpleNamespace(nodeid=i) for i in ("a[x]", "a[y]", "c[x]", "c[y]", "new1", "new2")}
    every = [item[i] for i in ("a[x]", "a[y]", "c[x]", "c[y]", "new1", "new2")]  # collected
    # pytest's own reordering by a module-scoped parameter, and new1/new2 left out by -m
    items = [item[i] for i in ("a[x]", "c[x]", "a[y]", "c[y]")]
    worker.follow(every, items)
    assert [i.nodeid for i in items] == ["a[x]", "new1", "c[x]", "new2", "a[y]", "c[y]"]
    # nothing to add: the order stays as the side's plugins left it
    items = [item[i] for i in ("a[x]", "c[x]", "a[y]", "c[y]", "new1", "new2")]
    worker.follow(every, items)
    assert [i.nodeid for i in items] == ["a[x]", "c[x]", "a[y]", "c[y]", "new1", "new2"]


SCOPED = (
    """import time

import pytest


"""
    + SPIN
    + """

@pytest.fixture(scope="module", params=["x", "y"])
def kind(request):
    return request.param


def test_a(gauge, kind):
    gauge(lambda: spin(1.0))


def test_c(gauge, kind):
    gauge(lambda: spin(1.0))
"""
)


@pytest.mark.slow
def test_tests_pytest_reorders_by_a_module_scoped_parameter_still_pair(
    toy: Path, tmp_path: Path
) -> None:
    # a first draft of the following side rebuilt its tests in collection order, and two
    # of these read "on base only" and "on head only"
    (toy / "test_toy.py").unlink()
    (toy / "test_scoped.py").write_text(SCOPED)
    _git(toy, "add", "-A")
    _git(toy, "commit", "-qm", "a module-scoped parameter")
    run = _ab(toy, "ab", "HEAD", "HEAD", "--rounds", "1", out=tmp_path / "scoped")
    assert run.returncode == 0, run.stdout + run.stderr
    cases = json.loads((tmp_path / "scoped" / "ab.json").read_text())["cases"]
    assert len(cases) == 4, cases
    assert all(c["only"] == "" for c in cases), [(c["id"], c["only"]) for c in cases]


@pytest.mark.slow
def test_a_side_whose_rounds_fail_fails_its_test_and_the_ab_goes_on(
    toy: Path, tmp_path: Path
) -> None:
    (toy / "test_other.py").write_text(BENCH.format(extra="").replace("test_spin", "test_ok"))
    (toy / "test_plain.py").write_text("def test_plain():\n    pass\n")
    _commit(toy, "", "a second test, and one that times nothing")
    _commit(toy, "\n    raise ValueError('broken')", "work raises")
    done = _ab(toy, "ab", "HEAD~1", "HEAD", out=tmp_path / "broken")
    assert done.returncode == 1, done.stdout + done.stderr
    data = json.loads((tmp_path / "broken" / "ab.json").read_text())
    by_id = {c["id"]: c for c in data["cases"]}
    broken = by_id["test_toy.py::test_spin"]
    assert broken["status"] == {"base": "passed", "head": "failed"}
    assert broken["outcome"] is None
    assert by_id["test_other.py::test_ok"]["outcome"] in ("same", "need more samples")
    assert any("failed on head" in p for p in data["problems"])
    # a test with nothing to pair runs on both sides: a build that stopped timing it shows
    plain = by_id["test_plain.py::test_plain"]
    assert plain["status"] == {"base": "passed", "head": "passed"}, plain
    assert plain["timed_alone"] == "", plain
    assert _leftovers(toy, tmp_path) == []


@pytest.mark.slow
def test_a_spent_time_budget_skips_the_tests_left_on_both_sides(toy: Path, tmp_path: Path) -> None:
    (toy / "test_other.py").write_text(BENCH.format(extra="").replace("test_spin", "test_ok"))
    _commit(toy, "", "a second test")
    # spent by the first test, not yet at the start (a budget of 0 is bad input)
    done = _ab(toy, "ab", "HEAD", "HEAD", "--time-budget", "0.001", out=tmp_path / "spent")
    assert done.returncode == 0, done.stdout + done.stderr
    data = json.loads((tmp_path / "spent" / "ab.json").read_text())
    assert data["complete"] is True  # the end rewrote the file whole
    cases = data["cases"]
    assert len(cases) == 2
    for case in cases:
        assert case["pairs"] == []
        assert set(case["status"].values()) == {f"skipped: {BUDGET_SPENT}"}
    assert "time budget was spent" in done.stdout
    assert _leftovers(toy, tmp_path) == []


def test_bisect_with_no_time_left_says_so_in_its_file(toy: Path, tmp_path: Path) -> None:
    _commit(toy, "  # 1", "commit 1")
    # 1 ms: spent by its first A/B, not yet when it starts (a budget of 0 is bad input)
    done = _ab(toy, "bisect", "HEAD~1", "HEAD", "--time-budget", "0.001", out=tmp_path / "b")
    assert done.returncode == 1, done.stdout + done.stderr
    text = (tmp_path / "b" / "bisect.txt").read_text()
    assert "the time budget was spent before its first A/B" in text
    assert _leftovers(toy, tmp_path) == []


@pytest.mark.slow
def test_bisect_names_the_commit_that_sleeps(toy: Path, tmp_path: Path) -> None:
    for i in range(1, 6):
        extra = "\n    time.sleep(0.003)" if i >= 3 else ""
        _commit(toy, extra + f"  # {i}", f"commit {i}" + (" sleeps" if i == 3 else ""))
    culprit = _git(toy, "rev-parse", "HEAD~2")
    done = _ab(toy, "bisect", "HEAD~5", "HEAD", out=tmp_path / "bisect", timeout=1200)
    assert done.returncode == 0, done.stdout + done.stderr
    text = (tmp_path / "bisect" / "bisect.txt").read_text()
    assert f"culprit: {culprit} commit 3 sleeps" in text
    assert "slower" in text


def started_ab(
    repo: Path, tmp: Path, *args: str, out: Path, env: dict[str, str] | None = None
) -> subprocess.Popen[str]:
    """``gpugauge ab ARGS --out OUT`` started in ``repo``, its output in one pipe."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TMPDIR": str(tmp), **(env or {})}
    return subprocess.Popen(
        [sys.executable, "-m", "gpugauge", "ab", *args, "--out", str(out)],
        cwd=repo,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def interrupted(
    proc: subprocess.Popen[str], repo: Path, tmp: Path, how: int = signal.SIGINT
) -> str:
    """Stop an A/B as a Ctrl-C (or ``how``) does; what it said. Within 20 s, it must end
    with 130, and leave no side running, no worktree and no folder of its own."""
    sides = _side_pids(tmp)
    t0 = time.monotonic()
    proc.send_signal(how)
    said, _ = proc.communicate(timeout=60)
    assert proc.returncode == 130, said
    assert time.monotonic() - t0 < 20, said
    time.sleep(1)
    assert [p for p in sides if _alive(p)] == []
    assert _leftovers(repo, tmp) == []
    return said


@pytest.mark.slow
@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGINT])
def test_a_stopped_ab_leaves_no_worktree_or_process(
    toy: Path, tmp_path: Path, how: signal.Signals
) -> None:
    out = tmp_path / "stopped"
    proc = started_ab(toy, tmp_path, "HEAD", "HEAD", "--block-time", "2", out=out)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and not (out / "base.log").exists():
        time.sleep(0.5)
    time.sleep(8)  # both sides started, pytest importing or timing
    assert _side_pids(tmp_path), "no side was running"
    assert "interrupted" in interrupted(proc, toy, tmp_path, how)
    assert not list(out.glob(".*.partial.json"))


@pytest.mark.slow
def test_an_ab_that_breaks_leaves_no_earlier_ab_s_record_as_its_own(
    toy: Path, tmp_path: Path
) -> None:
    # --out is reused (reports/ab by default): an A/B that breaks before its first case,
    # or after some, must not leave the last A/B's complete ab.json and ab.md beside it
    out = tmp_path / "reused"
    out.mkdir()
    (out / "ab.json").write_text(json.dumps({"complete": True, "cases": []}))
    (out / "ab.md").write_text("### gpugauge A/B\n\n**1 case: 1 same**\n")
    done = _ab(toy, "ab", "HEAD", "HEAD", "--base-args=--no-such-option", out=out)
    assert done.returncode == 1, done.stdout + done.stderr  # base's pytest: a usage error
    assert not (out / "ab.md").exists()
    assert not (out / "ab.json").exists()
    assert _leftovers(toy, tmp_path) == []


@pytest.mark.slow
def test_a_stopped_ab_keeps_the_cases_it_finished(toy: Path, tmp_path: Path) -> None:
    # a second test that sleeps before its timed call: the A/B is stopped there
    (toy / "test_zz.py").write_text("import time\n\n\ndef test_zz(gauge):\n    time.sleep(120)\n")
    _commit(toy, "", "a slow second test")
    out = tmp_path / "kept"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TMPDIR": str(tmp_path)}
    args = [sys.executable, "-m", "gpugauge", "ab", "HEAD", "HEAD", "--out", str(out)]
    proc = subprocess.Popen(
        [*args, "--block-time", "0.1"], cwd=toy, env=env, stdout=subprocess.PIPE, text=True
    )
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and not (out / "ab.json").exists():
        time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    said, _ = proc.communicate(timeout=60)
    assert proc.returncode == 130, said
    data = json.loads((out / "ab.json").read_text())
    assert data["complete"] is False
    (case,) = data["cases"]  # the first test's pairs, paid for before the stop
    assert case["id"] == "test_toy.py::test_spin"
    assert len(case["pairs"]) >= Schedule().min_pairs  # a round's first look
    assert _leftovers(toy, tmp_path) == []


def processes(matches: Callable[[list[bytes], list[bytes]], bool]) -> list[int]:
    """The pids of this user's processes whose command line and environment match."""
    pids = []
    for proc in Path("/proc").iterdir():
        try:
            cmd = (proc / "cmdline").read_bytes().split(b"\0")
            env = (proc / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if proc.name.isdigit() and matches(cmd, env):
            pids.append(int(proc.name))
    return pids


def _side_pids(tmp: Path) -> list[int]:
    return processes(
        lambda cmd, env: b"_gpugauge_ab_worker" in cmd and any(str(tmp).encode() in c for c in cmd)
    )


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/status").read_text().find("State:\tZ") < 0


def test_an_unknown_ref_is_a_clear_error(toy: Path) -> None:
    with pytest.raises(SideError, match="names no commit"):
        resolve_ref(toy, "no-such-ref")
    with (
        pytest.raises(SideError, match="not found"),
        checkouts(toy, [SideSpec("base", "HEAD", "no-such-python-3")]),
    ):
        pass


def test_checkouts_remove_their_worktrees_on_an_exception(toy: Path, tmp_path: Path) -> None:
    specs = [SideSpec("base", "HEAD", sys.executable), SideSpec("head", "HEAD", sys.executable)]
    seen = {}

    def inside() -> None:
        with checkouts(toy, specs, parent=tmp_path) as sides:
            seen.update(sides)
            raise RuntimeError("stop")

    with pytest.raises(RuntimeError, match="stop"):
        inside()
    assert (seen["base"].root / "test_toy.py").exists() is False  # removed
    assert seen["base"].root != seen["head"].root
    assert _leftovers(toy, tmp_path) == []


def test_a_sweep_leaves_a_running_ab_s_folders_and_removes_a_dead_one_s(
    toy: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # two A/Bs side by side on a host with two GPUs: the second's start must not remove
    # the first's socket (run 87 lost two whole A/Bs' results to that)
    import tempfile

    from gpugauge.ab.launch import listening
    from gpugauge.ab.sides import owned_folder, sweep

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    with listening() as (_, channel):
        mine = Path(channel.address).parent
        being_made = tmp_path / f"{PREFIX}new"  # another A/B's, before its owner file
        being_made.mkdir()
        dead = owned_folder(f"{PREFIX}sock-")
        (dead / "owner.pid").write_text("999999999")
        assert sweep(toy) == [dead]
        assert mine.exists()
        assert being_made.exists()
    assert not mine.exists()  # its own end removes it


def test_a_killed_ab_s_worktrees_are_swept_by_the_next(toy: Path, tmp_path: Path) -> None:
    dead = tmp_path / f"{PREFIX}dead"
    dead.mkdir()
    (dead / "owner.pid").write_text("999999999")
    _git(toy, "worktree", "add", "-q", "--detach", str(dead / "base"), "HEAD")
    specs = [SideSpec("base", "HEAD", sys.executable)]
    with checkouts(toy, specs, parent=tmp_path):
        pass
    assert _leftovers(toy, tmp_path) == []


def test_bisect_search_with_a_fake_compare(tmp_path: Path, toy: Path) -> None:
    for i in range(1, 9):
        _commit(toy, f"  # {i}", f"commit {i}")
    commits = _git(toy, "rev-list", "--reverse", "HEAD~8..HEAD").split()
    bad_from = commits[4]
    order = {c: i for i, c in enumerate(commits)}
    asked = []

    def compare(base: str, head: str, ids: object, step: str) -> ABReport:
        asked.append((base, head))
        slower = order.get(head, -1) >= order[bad_from] and order.get(base, -1) < order[bad_from]
        case = CaseAB("c", "t.py::t[c]", _pairs(1.05 if slower else 1.0))
        assert ids is None or list(ids) == ["t.py::t[c]"]  # later steps follow node ids
        return _report((case,))

    result = bisect(toy, "HEAD~8", "HEAD", compare, note=lambda _: None)
    assert result.culprit == bad_from
    assert result.verified
    assert len(asked) == 1 + 3 + 1  # good-vs-bad, log2(8) steps, the confirmation
    assert asked[-1] == (commits[3], bad_from)
    assert "culprit:" in render_bisect(result)


def _clocked_search(toy: Path, monkeypatch: pytest.MonkeyPatch, ends: float, cut: bool):
    """A search over 8 commits whose A/Bs each cost 4 s of a budget clock that ends at ``ends``.

    ``cut``: an A/B that ends past it paired nothing (its test skipped by the budget).
    """
    import types

    import gpugauge.ab.budget as budget_module
    from gpugauge.ab.bisect import bisect
    from gpugauge.ab.budget import Budget

    clock = [0.0]
    monkeypatch.setattr(
        budget_module, "time", types.SimpleNamespace(monotonic=lambda: clock[0], time=time.time)
    )
    for i in range(1, 9):
        _commit(toy, f"  # {i}", f"commit {i}")
    commits = _git(toy, "rev-list", "--reverse", "HEAD~8..HEAD").split()
    asked = []

    def compare(base: str, head: str, ids: object, step: str) -> ABReport:
        asked.append(head)
        clock[0] += 4.0
        if cut and clock[0] > ends:
            return _report((CaseAB("c", "t.py::t[c]", (), status={"base": "skipped"}),))
        slower = commits.index(head) >= 4 if head in commits else True
        return _report((CaseAB("c", "t.py::t[c]", _pairs(1.05 if slower else 1.0)),))

    result = bisect(toy, "HEAD~8", "HEAD", compare, note=lambda _: None, budget=Budget(ends))
    return result, asked, commits


def test_a_bisect_out_of_budget_ends_naming_the_commits_still_suspect(
    tmp_path: Path, toy: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gpugauge.ab.bisect import BUDGET_ENDED, render_bisect

    # two A/Bs fit: good-vs-bad and one step; the search ends before the next
    result, asked, commits = _clocked_search(toy, monkeypatch, ends=6.0, cut=False)
    assert len(asked) == 2
    assert (result.culprit, result.verified) == (None, False)
    assert result.reason == f"{BUDGET_ENDED} before the next step"
    assert commits[4] in result.suspects  # the first slower commit is among them
    assert not result.skipped
    said = render_bisect(result)
    assert "still suspect" in said
    assert BUDGET_ENDED in said


def test_a_bisect_step_the_budget_cut_short_is_no_evidence(
    tmp_path: Path, toy: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gpugauge.ab.bisect import BUDGET_ENDED

    result, asked, commits = _clocked_search(toy, monkeypatch, ends=6.0, cut=True)
    assert len(asked) == 2
    assert result.reason.startswith(f"{BUDGET_ENDED} during the step of ")
    assert not result.skipped  # not counted as untestable, nor as good
    assert commits[4] in result.suspects


def test_a_bisect_whose_verifying_ab_the_budget_cut_says_so(
    tmp_path: Path, toy: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gpugauge.ab.bisect import BUDGET_ENDED

    # good-vs-bad and three steps fit (16 s); the verifying A/B ends past the budget
    result, asked, commits = _clocked_search(toy, monkeypatch, ends=17.0, cut=True)
    assert len(asked) == 5
    assert (result.culprit, result.verified) == (commits[4], False)
    assert result.reason == f"{BUDGET_ENDED} during the A/B that would verify it"


def test_a_bisect_with_no_budget_left_runs_no_ab(
    tmp_path: Path, toy: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gpugauge.ab.bisect import BUDGET_ENDED

    result, asked, _ = _clocked_search(toy, monkeypatch, ends=0.0, cut=False)
    assert asked == []
    assert result.reason == f"{BUDGET_ENDED} before its first A/B"


# --- confirm: which results of a gated run get an A/B, against which commit -------------


def _saved_run(toy: Path, tmp_path: Path) -> Path:
    out = tmp_path / "run.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "--gauge-rounds", "3", f"--benchmark-json={out}"],
        cwd=toy,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return out


def _with_verdict(path: Path, ratio: float, verdict: str, reference: str) -> Path:
    data = json.loads(path.read_text())
    (bench,) = data["benchmarks"]
    info = bench["extra_info"]
    info["gate"] = time_gate(info["id"], ratio, verdict, reference)
    out = path.with_name(f"run-{ratio}-{verdict}-{reference[:4]}.json")
    out.write_text(json.dumps(data))
    return out


def test_confirm_picks_passed_results_above_the_floor_judged_by_the_class(
    toy: Path, tmp_path: Path
) -> None:
    from gpugauge.ab.confirm import borderline

    run = _saved_run(toy, tmp_path)
    cls = "new host (0 of 5 runs): class baseline, host spread 5.0% (default: 0 other hosts)"
    (picked,) = borderline(_with_verdict(run, 1.03, "unchanged", cls))
    assert picked.id == "test_toy.py::test_spin"
    assert picked.nodeid == "test_toy.py::test_spin"
    assert picked.ratio == pytest.approx(1.03)
    assert picked.ms == pytest.approx(3.09)  # its median round, ms
    assert picked.test_s is not None  # the test's own wall seconds
    assert picked.test_s > 0
    assert picked.busy is None  # the toy reads no GPU-busy share
    assert borderline(_with_verdict(run, 1.005, "unchanged", cls)) == []  # under the floor
    # a GPU-busy result of 0.1 ms or more: A/B'd every night whatever its ratio (a 3%
    # slowdown on a host 3% faster than its class reads 1.00x against it; a known host's
    # history allows three times its spread)
    gpu = _with_verdict(run, 0.97, "unchanged", cls)
    data = json.loads(gpu.read_text())
    data["benchmarks"][0]["extra_info"]["timing"]["clock"] = "cuda_event"
    gpu.write_text(json.dumps(data))
    assert [c.ratio for c in borderline(gpu)] == [pytest.approx(0.97)]
    known = gpu.with_name("known.json")
    data["benchmarks"][0]["extra_info"]["gate"]["references"]["time"] = "class baseline"
    known.write_text(json.dumps(data))
    assert [c.ratio for c in borderline(known)] == [pytest.approx(0.97)]

    def host_paced(path: Path) -> Path:
        data = json.loads(path.read_text())
        data["benchmarks"][0]["extra_info"]["values"] = {"gpu_busy": 0.6}
        path.write_text(json.dumps(data))
        return path

    assert borderline(host_paced(known)) == []  # below the floor, and not the GPU's work
    # a step its host paces, above the floor: A/B'd too (the A/B says "need more samples"
    # where its blocks scatter, slower where they do not)
    assert [c.busy for c in borderline(host_paced(_with_verdict(run, 1.03, "unchanged", cls)))] == [
        pytest.approx(0.6)
    ]
    regressed = host_paced(_with_verdict(run, 1.09, "regressed", cls))
    assert [c.regressed for c in borderline(regressed)] == [True]
    # a new host's class regression too: an A/B may find it is the host's speed
    assert [c.regressed for c in borderline(_with_verdict(run, 1.09, "regressed", cls))] == [True]
    # judged by other hosts' history, no committed baseline: no commit to A/B against
    other = _with_verdict(run, 1.03, "unchanged", "new host (0 of 5 runs): class history")
    data = json.loads(other.read_text())
    data["benchmarks"][0]["extra_info"]["gate"]["checks"][0]["basis"] = "class history"
    other.write_text(json.dumps(data))
    assert borderline(other) == []
    # issue 48: a known host's history allows 3x its spread, which can pass 3%: above the
    # floor, an A/B decides there too
    host = "host history: last 5 runs, spread 1.1%"
    assert [c.ratio for c in borderline(_with_verdict(run, 1.03, "unchanged", host))] == [
        pytest.approx(1.03)
    ]
    assert borderline(_with_verdict(run, 1.005, "unchanged", host)) == []  # under the floor
    assert borderline(run) == []  # not gated


def test_confirm_a_b_s_device_paced_results_first_the_cheapest_first() -> None:
    from gpugauge.ab.confirm import Borderline, in_order

    def case(
        name: str, ratio: float, ms: float, test_s: float | None = None, busy: float | None = None
    ) -> Borderline:
        return Borderline(name, f"t.py::t[{name}]", "f", "c", ratio, ms, busy, test_s)

    vgg, conv = case("vgg", 1.03, 92.0, 12.0), case("conv", 1.05, 9.8, 4.0)
    split = case("split", 1.03, 97.0, 90.0)  # the most time lost, the dearest A/B: last
    eager = case("eager", 1.03, 7.4, 3.0, busy=0.6)  # host-paced: after the device-paced
    relu = case("relu", 1.07, 0.044, 1.0)  # a launch path's ratio as much as the GPU's
    unknown = case("unknown", 1.03, 50.0)  # saved without its test's seconds
    other = case("linear", 1.2, 0.1)  # another family's reference commit
    order = in_order({"ref1": [relu, split, eager, vgg, unknown, conv], "ref2": [other]})
    assert order == [("ref1", [conv, vgg, split, unknown, eager, relu]), ("ref2", [other])]
    # another reference's regressed result before this one's device-paced: A/Bs per tier
    failing = replace(other, id="failing", regressed=True)
    order = in_order({"ref1": [relu, conv], "ref2": [other, failing]})
    assert order == [("ref2", [failing]), ("ref1", [conv, relu]), ("ref2", [other])]
    assert in_order({"r": [relu, failing, conv]}) == [("r", [failing, conv, relu])]
    assert [c.device_paced for c in (conv, eager, relu)] == [True, False, False]
    assert vgg.lost_ms == pytest.approx(92.0 * 0.03 / 1.03)
    # a run saved without seconds: the device-paced ones by the most time lost
    old = [case(n, r, ms) for n, r, ms in (("relu", 1.07, 0.044), ("vgg", 1.03, 92.0))]
    assert [c.id for c in in_order({"r": [*old, case("conv", 1.05, 9.8)]})[0][1]] == [
        "vgg",
        "conv",
        "relu",
    ]


def test_confirm_s_ab_decides_the_result_in_its_run_file(toy: Path, tmp_path: Path) -> None:
    from gpugauge.ab.overruled import decided, still_regressed
    from gpugauge.results.runs import load_run

    cls = "new host (0 of 5 runs): class baseline, host spread 5.0% (default: 0 other hosts)"
    run = _with_verdict(_saved_run(toy, tmp_path), 1.03, "unchanged", cls)
    case_id = "test_toy.py::test_spin"
    slower = tuple(
        Pair(Block(3.0, 10), Block(3.0 * (1.03 + i / 1e4), 10), i % 2 == 0) for i in range(6)
    )
    other = CaseAB("not-in-the-run", "x::y", slower)
    sides = SideInfo("base", "abc", "a" * 40, "py", "gg"), SideInfo("head", "WT", None, "py", "gg")
    # a case is matched by node id: gauge(fn) names its result by the whole node id, while
    # the A/B names a parametrized case by its brackets ("2.0" for README example 1's)
    same_id = ABReport(*sides, (CaseAB(case_id, "x::z", slower),), "cpu", 1.0)
    assert decided(run, "a" * 40, same_id, write=False) == []
    report = ABReport(*sides, (CaseAB("2.0", case_id, slower), other), "cpu", 1.0)
    (overruled,) = decided(run, "a" * 40, report)
    assert overruled.result.verdict.value == "regressed"
    assert still_regressed(run) == [case_id]  # what confirm's exit status says
    stored = load_run(run).verdicts[case_id]  # the file says what the job's status says
    assert stored["verdict"] == "regressed"
    (check,) = stored["checks"]
    assert check["basis"] == "same-GPU A/B"
    assert check["ratio"] == pytest.approx(1.03025, abs=1e-4)
    assert "decided by a same-GPU A/B against aaaaaaaaaa" in stored["note"]
    assert "was time 1.030x vs <= 1.065 allowed (unchanged, by class baseline)" in stored["note"]
    assert stored["references"]["time"] == "decided by a same-GPU A/B against aaaaaaaaaa"
    same = tuple(
        Pair(Block(3.0, 10), Block(3.0 * (1 + (-1) ** i / 1e4), 10), True) for i in range(6)
    )
    (again,) = decided(run, "b" * 40, replace(report, cases=(CaseAB(case_id, case_id, same),)))
    # a later A/B decides again: the latest same-GPU A/B counts, and replaces the earlier's note
    assert again.result.verdict.value == "unchanged"
    twice = load_run(run).verdicts[case_id]
    assert twice["note"] == (
        "decided by a same-GPU A/B against bbbbbbbbbb; was time 1.030x vs <= 1.065 allowed "
        "(unchanged, by class baseline)"
    )
    assert twice["references"] == {"time": "decided by a same-GPU A/B against bbbbbbbbbb"}
    assert decided(run, "b" * 40, replace(report, cases=(CaseAB(case_id, case_id, same),)))
    assert load_run(run).verdicts[case_id] == twice  # the same A/B again changes nothing


def test_a_class_regression_on_a_new_host_is_confirmed_and_an_a_b_may_clear_it(
    toy: Path, tmp_path: Path
) -> None:
    """Run 90's A/A night: a host-paced ResNet-18 step read 1.51x its one-host H200 class
    baseline, and failed; three A/As of it on that GPU read 0.994-1.000x, "same"."""
    from gpugauge.ab.confirm import borderline, in_order
    from gpugauge.ab.overruled import decided, still_regressed
    from gpugauge.results.runs import load_run

    cls = "new host (0 of 5 runs): class baseline, host spread 5.0% (default: 0 other hosts)"
    saved = _saved_run(toy, tmp_path)
    run = _with_verdict(saved, 1.51, "regressed", cls)
    (picked,) = borderline(run)
    assert picked.regressed
    assert (
        in_order({"r": [replace(picked, regressed=False, id="other"), picked]})[0][1][0] is picked
    )
    host = "host history: last 5 runs, spread 0.3%"
    assert borderline(_with_verdict(saved, 1.51, "regressed", host)) == []  # the host knows
    case_id = "test_toy.py::test_spin"
    sides = SideInfo("base", "abc", "a" * 40, "py", "gg"), SideInfo("head", "WT", None, "py", "gg")

    def ab(*logs: float) -> ABReport:
        pairs = tuple(
            Pair(Block(3.0, 10), Block(3.0 * r, 10), i % 2 == 0) for i, r in enumerate(logs)
        )
        return ABReport(*sides, (CaseAB(case_id, case_id, pairs),), "cpu", 1.0)

    # undecided, and its CI reaches the class's allowance (1.065): the regression stands
    assert decided(run, "a" * 40, ab(0.95, 1.10, 0.97, 1.08, 1.0)) == []
    assert still_regressed(run) == [case_id]
    # undecided, but it rules out 6.5%: the host, not the code
    (cleared,) = decided(run, "a" * 40, ab(0.995, 1.012, 0.998, 1.011, 1.0, 1.013))
    assert cleared.result.verdict.value == "inconclusive"
    assert still_regressed(run) == []
    same = _with_verdict(saved, 1.51, "regressed", cls)
    (overruled,) = decided(same, "a" * 40, ab(1.0001, 0.9999, 1.0, 1.0002, 0.9998))
    assert overruled.result.verdict.value == "unchanged"
    assert "was time 1.510x" in load_run(same).verdicts[case_id]["note"]


def test_a_host_paced_step_s_class_regression_meets_an_a_b_that_saw_no_change(
    toy: Path, tmp_path: Path
) -> None:
    """A step its host paces read 1.17x its class on a new H200 host (and 0.54x on
    another): its time follows the host's CPU. Two full rounds whose wide intervals hold no
    change leave it inconclusive, saying why. A change the A/B sees, rounds that disagree,
    a round cut short, one round alone, or a step the device paces: the regression stands.
    """
    from gpugauge.ab.overruled import HOST_PACED, decided, still_regressed
    from gpugauge.measure.busy import BUSY_KEY, host_bound_of

    cls = "new host (0 of 5 runs): class baseline, host spread 5.0% (default: 0 other hosts)"
    saved = _saved_run(toy, tmp_path)
    case_id = "test_toy.py::test_spin"
    sides = SideInfo("base", "abc", "a" * 40, "py", "gg"), SideInfo("head", "WT", None, "py", "gg")
    made = iter(range(100))

    def paced_by(host_bound: bool | None) -> Path:
        run = _with_verdict(saved, 1.17, "regressed", cls)
        data = json.loads(run.read_text())
        extra = data["benchmarks"][0]["extra_info"].setdefault("extra", {})
        if host_bound is not None:
            extra[BUSY_KEY] = {"share": 0.4 if host_bound else 0.95, "host_bound": host_bound}
        assert host_bound_of(extra) is host_bound
        out = run.with_name(f"paced-{next(made)}.json")
        out.write_text(json.dumps(data))
        return out

    def one(*ratios: float) -> CaseAB:
        pairs = tuple(
            Pair(Block(3.0, 10), Block(3.0 * r, 10), i % 2 == 0) for i, r in enumerate(ratios)
        )
        return CaseAB(case_id, case_id, pairs)

    def ab(*rounds: CaseAB) -> ABReport:
        case = rounds[0]
        for later in rounds[1:]:
            case = case.with_round(later)
        return ABReport(*sides, (case,), "cpu", 1.0)

    def stands(run: Path, report: ABReport) -> bool:
        decided(run, "a" * 40, report)
        return still_regressed(run) == [case_id]

    scattered = one(0.85, 1.2, 0.9, 1.25, 0.8, 1.15, 1.1, 0.95, 1.3, 0.9)
    again = one(1.1, 0.9, 1.2, 0.85, 1.05, 0.95, 1.25, 0.8, 1.0, 1.15)
    host = paced_by(True)
    (cleared,) = decided(host, "a" * 40, ab(scattered, again))
    assert cleared.result.verdict.value == "inconclusive"
    assert HOST_PACED in cleared.result.note
    assert still_regressed(host) == []
    assert stands(paced_by(False), ab(scattered, again))  # the device paces it
    assert stands(paced_by(None), ab(scattered, again))  # no busy record, or graphed
    assert stands(paced_by(True), ab(scattered))  # one round: one pair of processes
    assert stands(paced_by(True), ab(one(1.3, 0.8), again))  # a round cut short
    twice = one(1.9, 2.1, 2.0, 1.95, 2.05, 2.0)  # a 2x slowdown: the A/B sees it
    assert stands(paced_by(True), ab(twice, twice))
    # rounds that disagree (1.25x, 0.79x) pool to an interval that holds 1: they stand
    up, down = one(1.24, 1.26, 1.25, 1.25), one(0.78, 0.8, 0.79, 0.79)
    disagree = ab(up, down)
    assert disagree.cases[0].bimodal
    assert stands(paced_by(True), disagree)
    # a round slower on its own (1.08x) beside a scattered one: the pooled interval holds
    # 1, the rounds read no two speeds, but one round's own interval lies above 1
    lower = one(1.0, 0.8, 1.1, 0.75, 0.95, 0.85, 1.15, 0.7, 0.9, 1.05)
    mixed = ab(one(1.07, 1.09, 1.08, 1.08), lower)
    assert not mixed.cases[0].bimodal
    assert stands(paced_by(True), mixed)
    # about 2x, so noisy that each round's own interval holds 1: their 95% lies above 1
    noisy = ab(one(1.4, 2.8, 1.5, 2.7), one(1.6, 2.5, 1.45, 2.9))
    pooled = noisy.cases[0].same_ratio
    assert pooled is not None
    assert pooled.ci_low > 1
    assert stands(paced_by(True), noisy)
    # "same" clears a host-paced step as any other: no word of its host in the note
    even = one(1.0, 1.001, 0.999, 1.0)
    (same,) = decided(paced_by(True), "a" * 40, ab(even, even))
    assert same.result.verdict.value == "unchanged"
    assert HOST_PACED not in same.result.note
    # two speeds, both slower (1.2x, 1.05x): undecided, its interval above 1: it stands
    slow = ab(one(1.2, 1.22, 1.18, 1.21, 1.19, 1.2), one(1.02, 1.08, 1.0, 1.1, 1.04, 1.06))
    (case,) = slow.cases
    assert case.check is not None
    assert case.check.verdict.value == "inconclusive"
    assert case.check.ci_low > 1
    assert stands(paced_by(True), slow)


def test_a_new_host_s_time_regression_against_its_class_is_left_to_an_a_b() -> None:
    from gpugauge.judging.judge import regressed_on_new_host
    from gpugauge.results.verdicts import Basis, GateResult, MetricCheck, Verdict

    def check(metric: str, verdict: Verdict, basis: Basis = Basis.CLASS_BASELINE) -> MetricCheck:
        return MetricCheck(metric, 1.0, 1.5, 1.5, 1.4, 1.6, 0.065, verdict, basis)

    new = {"time": "new host (0 of 5 runs): class baseline, host spread 5.0%"}
    slow = check("time", Verdict.REGRESSED)
    assert regressed_on_new_host(GateResult("c", "f", "gpu", (slow,), references=new))
    heavier = check("memory", Verdict.REGRESSED)  # an allocator peak is no host's speed
    assert not regressed_on_new_host(GateResult("c", "f", "gpu", (slow, heavier), references=new))
    known = {"time": "host history: last 5 runs, spread 0.3%"}
    by_host = check("time", Verdict.REGRESSED, Basis.HOST_HISTORY)
    assert not regressed_on_new_host(GateResult("c", "f", "gpu", (by_host,), references=known))
    assert not regressed_on_new_host(
        GateResult("c", "f", "gpu", (slow,))
    )  # no history: no new host
    fine = check("time", Verdict.UNCHANGED)
    assert not regressed_on_new_host(GateResult("c", "f", "gpu", (fine,), references=new))


@pytest.mark.slow
@pytest.mark.parametrize(
    "spent",
    [("--time-budget", "0"), ("--time-budget", "600", "--deadline", "1500000000")],
    ids=["budget", "deadline-passed"],
)
def test_confirm_with_its_time_budget_spent_starts_no_ab(
    toy: Path, tmp_path: Path, spent: tuple[str, ...]
) -> None:
    run = _saved_run(toy, tmp_path)
    _committed_class(toy, run)
    cls = "new host (0 of 5 runs): class baseline, host spread 5.0% (default: 0 other hosts)"
    gated = _with_verdict(run, 1.03, "unchanged", cls)
    before = gated.read_bytes()
    done = _ab(toy, "confirm", str(gated), *spent, out=tmp_path / "spent")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "the time budget was spent: not A/B'd" in done.stdout
    assert "gpugauge ab:" not in done.stdout  # no sides started, no worktree made
    assert gated.read_bytes() == before


def _committed_class(toy: Path, run: Path) -> None:
    from gpugauge.results.runs import load_run

    (m,) = load_run(run).measurements
    folder = toy / "baselines" / m.device_class
    folder.mkdir(parents=True)
    (folder / f"{m.spec.family}.json").write_text("{}\n")
    _git(toy, "add", "-A")
    _git(toy, "commit", "-qm", "baselines")


def test_confirm_fails_a_class_regression_it_could_not_a_b(toy: Path, tmp_path: Path) -> None:
    """With --gauge-confirm-new-host the gated test passed: confirm's status is the job's."""
    run = _saved_run(toy, tmp_path)
    _committed_class(toy, run)
    cls = "new host (0 of 5 runs): class baseline, host spread 5.0% (default: 0 other hosts)"
    gated = _with_verdict(run, 1.51, "regressed", cls)
    done = _ab(toy, "confirm", str(gated), "--time-budget", "0", out=tmp_path / "spent")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "regressed after the A/Bs: test_toy.py::test_spin" in done.stdout


@pytest.mark.slow
def test_confirm_clears_a_class_regression_that_an_a_a_finds_same(
    toy: Path, tmp_path: Path
) -> None:
    from gpugauge.results.runs import load_run

    run = _saved_run(toy, tmp_path)
    _committed_class(toy, run)
    cls = "new host (0 of 5 runs): class baseline, host spread 5.0% (default: 0 other hosts)"
    gated = _with_verdict(run, 1.51, "regressed", cls)  # this host, not the code
    done = _ab(toy, "confirm", str(gated), out=tmp_path / "cleared")
    stored = load_run(gated).verdicts["test_toy.py::test_spin"]
    # "same" on a quiet host; a host-timed spin on a loaded one may leave the CI too wide
    # to say so, yet narrow enough to rule out the class's 6.5%
    assert stored["verdict"] in ("unchanged", "inconclusive"), done.stdout + done.stderr
    assert done.returncode == 0, done.stdout + done.stderr
    assert stored["checks"][0]["basis"] == "same-GPU A/B"
    assert _leftovers(toy, tmp_path) == []


def test_confirm_keeps_no_ab_of_a_result_with_injected_work(
    toy: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # run 89's injected night: such results never join the history, so their A/Bs have no
    # row to go with; confirm said "not kept: run ... holds no result", as if it had failed
    from gpugauge.ab.confirm_command import _keep
    from gpugauge.ab.overruled import decided
    from gpugauge.history.store import History
    from gpugauge.results.runs import load_run

    cls = "new host (0 of 5 runs): class baseline, host spread 5.0% (default: 0 other hosts)"
    run = _with_verdict(_saved_run(toy, tmp_path), 1.03, "unchanged", cls)
    case_id = "test_toy.py::test_spin"
    sides = SideInfo("base", "abc", "a" * 40, "py", "gg"), SideInfo("head", "WT", None, "py", "gg")
    report = ABReport(*sides, (CaseAB(case_id, case_id, _pairs(1.03)),), "cpu", 1.0)
    (overruled,) = decided(run, "a" * 40, report, write=False)
    target, run_id = str(tmp_path / "h.sqlite"), load_run(run).run_id
    with History.open(target):
        pass  # an empty history: a real row would be an error to look for
    _keep((target, run_id), [overruled], {case_id})
    out = capsys.readouterr()
    assert "1 A/B of results with injected work not kept in the history" in out.out
    assert "were not kept" not in out.err
    with History.open(target, read_only=True) as h:
        assert h.ab_cases(run_id) == []


def test_a_second_confirm_of_a_run_ab_s_nothing_again(toy: Path, tmp_path: Path) -> None:
    from gpugauge.ab.confirm import borderline
    from gpugauge.ab.overruled import decided

    cls = "new host (0 of 5 runs): class baseline, host spread 5.0% (default: 0 other hosts)"
    run = _with_verdict(_saved_run(toy, tmp_path), 1.03, "unchanged", cls)
    case_id = "test_toy.py::test_spin"
    # an A/B too short to tell: inconclusive, yet passed, its ratio above the floor
    wide = tuple(
        Pair(Block(3.0, 10), Block(3.0 * (1.03 + (-1) ** i * 0.03), 10), True) for i in range(4)
    )
    sides = SideInfo("base", "abc", "a" * 40, "py", "gg"), SideInfo("head", "WT", None, "py", "gg")
    report = ABReport(*sides, (CaseAB(case_id, case_id, wide),), "cpu", 1.0)
    (overruled,) = decided(run, "a" * 40, report)
    assert overruled.result.verdict.value == "inconclusive"
    assert borderline(run) == []  # an A/B decided it: the closest reference has spoken
    # the history the run went to (the toy's default) keeps it as the run file says it
    from gpugauge.ab.overruled import kept
    from gpugauge.history.store import History
    from gpugauge.results.runs import load_run

    target, run_id = str(toy / ".benchmarks" / "gpugauge-history.sqlite"), load_run(run).run_id
    assert kept(target, run_id, [overruled]) == 1
    with History.open(target, read_only=True) as h:
        (point,) = h.points(case_id)
        assert (point.result.verdict, point.result.note) == ("inconclusive", overruled.result.note)
        assert point.metric.reference == "same-GPU A/B against aaaaaaaaaa"


@pytest.mark.slow
def test_confirm_end_to_end_a_slower_commit_fails_and_says_so_everywhere(
    toy: Path, tmp_path: Path
) -> None:
    # the class baseline is committed, then a commit makes the case slower; the nightly's
    # gated run read it 1.03x, inside a new host's allowance: confirm's A/B must decide
    from gpugauge.history.store import History
    from gpugauge.results.runs import load_run

    run = _saved_run(toy, tmp_path)
    device_class = json.loads(run.read_text())["benchmarks"][0]["extra_info"]["device_class"]
    folder = toy / "baselines" / device_class
    folder.mkdir(parents=True)
    (folder / "custom.json").write_text("{}\n")
    _git(toy, "add", "-A")
    _git(toy, "commit", "-qm", "baselines")
    _commit(toy, "\n    time.sleep(0.003)", "sleep")
    cls = "new host (0 of 5 runs): class baseline, host spread 5.0% (default: 0 other hosts)"
    gated = _with_grown_and_broken(_with_verdict(run, 1.03, "unchanged", cls))
    history = tmp_path / "h.sqlite"
    import_run = [sys.executable, "-m", "gpugauge", "history", "import", str(gated)]
    subprocess.run([*import_run, "--history", str(history)], check=True, capture_output=True)
    run_id = json.loads(gated.read_text())["gpugauge"]["history_run_id"]
    storage = tmp_path / "storage" / "Linux-CPython-3.11-64bit"  # pytest-benchmark's copy
    storage.mkdir(parents=True)
    (storage / "0001_toy.json").write_text(gated.read_text())
    confirm = ["confirm", str(gated), "--history", str(history), "--storage", str(storage.parent)]
    # --out relative, as the nightly workflow gives it: the sides run in their own checkouts
    done = _ab(toy, *confirm, out=Path("results") / "ab", tmp=tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr  # slower: the job fails
    assert "decided by a same-GPU A/B" in done.stdout
    # the unreadable result is named, the one with new memory is no A/B's: the rest ran
    assert "left out a result that cannot be read" in done.stderr
    assert "benchmarks[2]" in done.stderr
    (sides,) = (toy / "results" / "ab").iterdir()  # one reference commit
    assert {p.name for p in sides.glob("*.json")} >= {"base.json", "head.json"}, done.stdout
    stored = load_run(gated).verdicts["test_toy.py::test_spin"]
    assert stored["verdict"] == "regressed"  # the file says what the exit status says
    assert stored["checks"][0]["basis"] == "same-GPU A/B"
    copy = load_run(storage / "0001_toy.json").verdicts["test_toy.py::test_spin"]
    assert copy == stored  # the autosaved copy says the same
    from gpugauge.__main__ import main

    assert main(["report", "--current", str(gated), "--out", str(tmp_path / "rep")]) == 0
    (md,) = (tmp_path / "rep").glob("*.md")  # and so does the report drawn from it
    text = md.read_text()
    # test_spin recorded both its results: the A/B of the test decided both times
    assert "2 results decided by a same-GPU A/B (gpugauge confirm)" in text
    assert "time (same-GPU A/B)" in text
    assert "new 1.049e+08 bytes (reference 0)" in text  # grown's memory: a clear verdict
    assert "benchmarks[2]" in text  # the report names what it left out
    with History.open(str(history)) as h:
        abs_ = {a.bench_id: a for a in h.ab_cases(run_id)}
        assert set(abs_) == {"grown", "test_toy.py::test_spin"}  # broken: never read
        ab = abs_["test_toy.py::test_spin"]
        assert ab.verdict == "regressed"
        assert len(ab.pairs) >= 2 * Schedule().min_pairs  # both rounds' pairs
        (point,) = h.points("test_toy.py::test_spin")
        assert (point.result.verdict, point.accepted) == ("regressed", False)
    assert _leftovers(toy, tmp_path) == []


def _with_grown_and_broken(path: Path) -> Path:
    """The run with two more results: one whose memory grew from a 0 B baseline (the gate
    fails it on new memory), one that cannot be read (a negative sample)."""
    from gpugauge.regress.baselines import Entry
    from gpugauge.regress.gate import compare
    from gpugauge.regress.tolerances import Tolerance

    data = json.loads(path.read_text())
    (bench,) = data["benchmarks"]
    grown, broken = copy.deepcopy(bench), copy.deepcopy(bench)
    info = grown["extra_info"]
    info["id"] = "grown"
    now = Entry("grown", info["family"], info["device_class"], {"memory": (100 * 2**20,)})
    was = Entry("grown", info["family"], info["device_class"], {"memory": (0.0,)})
    info["gate"] = compare(now, was, Tolerance()).as_dict()
    broken["extra_info"]["id"] = "broken"
    broken["extra_info"]["timing"]["device_ms"] = [-1.0]
    data["benchmarks"] += [grown, broken]
    path.write_text(json.dumps(data))
    return path


def test_confirm_s_reference_is_the_commit_that_wrote_the_baseline(
    toy: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gpugauge.ab.confirm import Borderline, by_reference, reference_commit

    folder = toy / "baselines" / "cpu-x"
    folder.mkdir(parents=True)
    (folder / "mine.json").write_text("{}\n")
    _git(toy, "add", "-A")
    _git(toy, "commit", "-qm", "baselines")
    accepted = _git(toy, "rev-parse", "HEAD")
    _commit(toy, "  # later", "later work")
    assert reference_commit(toy, Path("baselines"), "cpu-x", "mine") == accepted
    with pytest.raises(SideError, match="no commit wrote it"):
        reference_commit(toy, Path("baselines"), "cpu-x", "other")
    # a folder outside the checkout: said so, not git's "fatal: ... outside repository"
    with pytest.raises(SideError, match=r"outside the checkout .* must be a folder of this"):
        reference_commit(toy, tmp_path / "elsewhere", "cpu-x", "mine")
    # confirm run in a project below the checkout's top: --baselines-dir is the project's
    project = toy / "project"
    (project / "baselines" / "cpu-y").mkdir(parents=True)
    (project / "baselines" / "cpu-y" / "mine.json").write_text("{}\n")
    _git(toy, "add", "-A")
    _git(toy, "commit", "-qm", "a project's baselines")
    case = Borderline("t", "test_t.py::t", "mine", "cpu-y", 1.03)
    monkeypatch.chdir(project)
    assert by_reference(toy, Path("baselines"), [case]) == {_git(toy, "rev-parse", "HEAD"): [case]}
    monkeypatch.undo()
    # an ephemeral runner's shallow checkout fetches the history it needs
    shallow = tmp_path / "shallow"
    _git(tmp_path, "clone", "-q", "--depth", "1", f"file://{toy}", str(shallow))
    assert reference_commit(shallow, Path("baselines"), "cpu-x", "mine") == accepted
    cut_off = tmp_path / "cut-off"  # one that cannot: a clear error
    _git(tmp_path, "clone", "-q", "--depth", "1", f"file://{toy}", str(cut_off))
    _git(cut_off, "remote", "remove", "origin")
    with pytest.raises(SideError, match="shallow and its history could not be fetched"):
        reference_commit(cut_off, Path("baselines"), "cpu-x", "mine")


def test_a_test_timed_on_one_side_only_says_which() -> None:
    case = CaseAB("c", "t.py::c", calls=0, status={"base": "passed", "head": "passed"})
    assert case.unpaired_reason == "no timing of a case to pair"
    alone = replace(case, timed_alone="base")
    assert alone.outcome is None
    assert alone.unpaired_reason == (
        "only base timed it through gauge.measure (head made no such call)"
    )


def test_a_verdict_stands_only_where_every_round_agrees() -> None:
    first = CaseAB("c", "t.py::c", _pairs(1.03))
    assert first.outcome is Outcome.SLOWER
    assert first.verdict_text == "slower (1 of 2 rounds)"
    agreed = first.with_round(CaseAB("c", "t.py::c", _pairs(1.029)))
    assert agreed.outcome is Outcome.SLOWER
    assert agreed.verdict_text == "slower"
    assert agreed.pairs_text == "5+5"
    undone = first.with_round(CaseAB("c", "t.py::c", _pairs(1.0)))
    assert undone.outcome is Outcome.NEED_MORE
    assert undone.check is not None
    assert undone.check.verdict.value == "inconclusive"
    assert "bimodal across processes: 1.030x, 1.000x by round" in undone.verdict_text
    # a round that never reached the case (its time budget spent) leaves the first verdict
    unreached = first.with_round(CaseAB("c", "t.py::c", status={"base": BUDGET_SPENT}))
    assert unreached.outcome is Outcome.SLOWER
    assert "1 of 2 rounds" in unreached.verdict_text
    # undecided on its one round: said so too, and the header says one round ran
    alone = CaseAB("d", "t.py::d", _pairs(1.0, 2))
    assert alone.verdict_text == "need more samples (1 of 2 rounds)"
    assert "2 rounds of fresh processes asked, 1 run;" in terminal(_report((unreached, alone)))
    report = _report((first, CaseAB("d", "t.py::d", _pairs(1.0))))
    assert report.paired_ids == ("t.py::c", "t.py::d")  # the next round A/Bs every paired case
    merged = report.with_round(_report((undone.later[0],)))
    assert [c.outcome for c in merged.cases] == [Outcome.NEED_MORE, Outcome.SAME]
    assert merged.as_dict()["cases"][0]["rounds"][0]["round_outcome"] == "same"


def test_a_round_cut_short_by_a_failure_says_neither_slower_nor_same() -> None:
    """A round of fewer pairs than the first look (a side failed) decides nothing.

    Counted as a round for "same", one pair moved the interval to the 95% level: a 1.2%
    change at 1% noise a pair read "same" in 4.7% of synthetic cases (a review, 2026-12-06).
    """
    same = CaseAB("c", "t.py::c", _pairs(1.0))
    assert same.with_round(CaseAB("c", "t.py::c", _pairs(1.0))).outcome is Outcome.SAME
    short = same.with_round(CaseAB("c", "t.py::c", _pairs(1.0, 1)))
    assert short.outcome is Outcome.NEED_MORE
    slow = CaseAB("c", "t.py::c", _pairs(1.05))
    cut = _pairs(1.05, Schedule().min_pairs - 1)
    assert slow.with_round(CaseAB("c", "t.py::c", cut)).outcome is Outcome.NEED_MORE


def test_a_case_with_two_speeds_across_processes_is_named_so_never_slower() -> None:
    """conv-fwd-tf32 on an H200 A/A: 1.028x in one pair of processes, 0.973x in the next,
    each interval tight (9.44 against 9.70 ms, the same kernels at the same clock)."""
    two = CaseAB("c", "t.py::c", _pairs(1.028)).with_round(CaseAB("c", "t.py::c", _pairs(0.973)))
    assert two.outcome is Outcome.NEED_MORE
    assert two.bimodal == "1.028x, 0.973x by round"
    assert "bimodal across processes" in terminal(_report((two,)))
    assert two.as_dict()["bimodal"] == "1.028x, 0.973x by round"
    # two speeds that both read slower are slower: the build is slower in every process
    both = CaseAB("c", "t.py::c", _pairs(1.03)).with_round(CaseAB("c", "t.py::c", _pairs(1.06)))
    assert (both.bimodal, both.outcome) == ("", Outcome.SLOWER)


def test_a_class_regression_stands_unless_every_round_rules_it_out() -> None:
    from gpugauge.ab.overruled import clears
    from gpugauge.results.verdicts import Basis, GateResult, MetricCheck, Verdict

    slow = MetricCheck("time", 1.0, 1.51, 1.51, 1.48, 1.53, 0.065, Verdict.REGRESSED)
    before = GateResult("c", "f", "gpu", (slow,))
    faster = CaseAB("c", "t.py::c", _pairs(0.985))
    assert not clears(before, faster)  # one pair of processes' "faster": its own speed?
    assert clears(before, faster.with_round(CaseAB("c", "t.py::c", _pairs(0.986))))
    wide = tuple(
        Pair(Block(3.0, 10), Block(3.0 * (1.0 + (-1) ** i * 0.01), 10), True) for i in range(6)
    )
    undecided = CaseAB("c", "t.py::c", wide)
    assert undecided.outcome is Outcome.NEED_MORE
    assert clears(before, undecided)  # its CI rules out 6.5%
    # a round whose CI reaches 6.5%: the first round's narrow CI no longer clears it
    spread = tuple(
        Pair(Block(3.0, 10), Block(3.0 * (1.05 + (-1) ** i * 0.05), 10), True) for i in range(6)
    )
    against = undecided.with_round(CaseAB("c", "t.py::c", spread))
    assert against.ratio is not None
    assert against.ratio.ci_high > 1.065
    assert not clears(before, against)
    # run 88's false "faster", then that: undecided, and not cleared by the first round's CI
    undone = faster.with_round(CaseAB("c", "t.py::c", spread))
    assert undone.outcome is Outcome.NEED_MORE
    assert not clears(before, undone)
    passed = GateResult("c", "f", "gpu", (replace(slow, verdict=Verdict.UNCHANGED),))
    assert clears(passed, faster)  # a passed result: the A/B decides it, whatever it says
    assert Basis.SAME_GPU_AB.value == "same-GPU A/B"


def test_a_repeat_selects_its_node_ids_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import argparse

    from gpugauge.ab.command import selection

    monkeypatch.chdir(tmp_path)
    (tmp_path / "benches").mkdir()
    (tmp_path / "benches" / "test_x.py").write_text("")
    (tmp_path / "baselines").mkdir()
    given = ["benches/test_x.py", "--gauge-baselines-dir", "baselines", "-p", "no:x"]
    args = argparse.Namespace(select="vgg", markers="nightly", pytest_args=given, benches="benches")
    assert selection(args) == ("-k", "vgg", "-m", "nightly", *given)
    ids = ["benches/test_x.py::test_a[c]"]
    # round 1 applied -k and -m; a build from before the marker would deselect its ids
    assert selection(args, ids) == (
        "--gauge-baselines-dir",
        "baselines",
        "-p",
        "no:x",
        *ids,
    )


HANGS = (
    """\
import os
import time


"""
    + SPIN
    + """

def test_a_first(gauge):
    gauge(lambda: spin(3.0))


def test_b_hangs(gauge):
    if os.environ.get("GPUGAUGE_AB_SIDE") == "head":
        time.sleep(600)  # a side that hangs in its setup
    gauge(lambda: spin(3.0))
"""
)


@pytest.mark.slow
def test_a_side_silent_past_the_budget_is_stopped_and_the_ab_keeps_its_cases(
    toy: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A hanging side ran 180 s past --deadline (issue 49): a nightly would run to its timeout."""
    import gpugauge.ab.runner as runner
    from gpugauge.ab.budget import Budget
    from gpugauge.ab.config import ABConfig
    from gpugauge.ab.rounds import run_sides

    (toy / "test_toy.py").write_text(HANGS)
    _git(toy, "add", "-A")
    _git(toy, "commit", "-qm", "hangs")
    monkeypatch.setattr(runner, "SILENT_GRACE_S", 1.0)
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    specs = [SideSpec("base", "HEAD", sys.executable), SideSpec("head", "HEAD", sys.executable)]
    t0 = time.monotonic()
    cfg = ABConfig(
        ("test_toy.py",),
        tmp_path / "out",
        block_s=0.1,
        schedule=replace(Schedule(), rounds=1),
        budget=Budget(time.monotonic() + 60.0),  # the sides' start and the first test, loaded
    )
    with checkouts(toy, specs, parent=tmp_path) as sides:
        report = run_sides(cfg, sides, note=lambda _: None)
    assert time.monotonic() - t0 < 120  # the budget's 60 s, its grace, the sides' ends
    assert len(report.cases) == 1, report.problems
    (first,) = report.cases  # the case it finished keeps its verdict
    assert first.nodeid == "test_toy.py::test_a_first"
    assert first.outcome is not None
    assert any("said nothing past the time budget's end" in p for p in report.problems)
    assert _leftovers(toy, tmp_path) == []


def test_each_case_s_line_says_about_how_long_its_round_has_left() -> None:
    """Issue 51: a 10-minute A/B printed a line per case and nothing of what was left."""
    from gpugauge.ab.runner import eta_s

    assert eta_s(30.0, 3, 24) == "; about 4 min left in this round"  # 10 s a test, 21 left
    assert eta_s(5.0, 1, 2) == "; about 5 s left in this round"
    assert eta_s(5.0, 2, 2) == ""  # the round's last test
    # round 1 of 2: 21 tests left of 24 at 10 s each, then a round of 240 s
    assert eta_s(30.0, 3, 24, rounds_after=1) == "; about 4 min left in this round, 8 min in all"


def test_bisect_and_confirm_say_how_long_they_have_left() -> None:
    """Issue 51: an ETA for bisect's search and for confirm's A/Bs, from their costs."""
    from gpugauge.ab.bisect import steps_left
    from gpugauge.ab.budget import ROUND_START_S, Budget

    # 6 commits untested: 3 halvings, then the A/B of the culprit's parent against it
    assert steps_left(6, [60.0, 120.0]) == "; about 4 A/Bs, 6 min left"
    assert steps_left(0, [30.0]) == "; about 1 A/B, 30 s left"  # only the confirming A/B
    assert steps_left(6, []) == ""  # no step yet to go by
    budget = Budget(test_s={"t::a": 10.0, "t::b": 5.0}, first_look_s=2.0)
    # 2 rounds of both sides' tests (2 x 15 s), the first looks (2 x 2 s) and a start
    assert budget.expected_ab_s(["t::a", "t::b"], 2, 0.0) == 2 * (34.0 + ROUND_START_S)
    assert budget.expected_ab_s(["t::a"], 1, 8.0) == 22.0 + 8.0


def test_a_noisy_a_a_round_stops_once_no_verdict_is_in_reach() -> None:
    """At 3% noise a pair, 20 pairs cannot call an A/A 'same': a round stops well before."""
    rng = random.Random(11)
    s = Schedule()
    used = []
    for _ in range(300):
        logs: list[float] = []
        while k := s.more(logs):
            logs += [rng.gauss(0, 0.03) for _ in range(k)]
        used.append(len(logs))
    assert sum(used) / len(used) < 15  # 19.9 when only a 4-effect-wide interval stopped it


class _NeverFutile(Schedule):
    """The schedule without its early stop: every undecided round runs to max_pairs."""

    def futile(self, log_ratios: Sequence[float]) -> bool:
        return False


@pytest.mark.parametrize("sigma", [0.02, 0.03])
def test_stopping_early_catches_three_percent_as_often_as_every_pair(sigma: float) -> None:
    """The early stop costs no power: a 3% change at 2-3% noise a pair, one round."""
    n = 600
    caught = [
        sum(_simulate(s, 0.03, sigma, rng) is Outcome.SLOWER for _ in range(n)) / n
        for s, rng in ((Schedule(), random.Random(5)), (_NeverFutile(), random.Random(5)))
    ]
    assert caught[0] >= caught[1] - 0.02


def _round_of(mean: float, spread: float, n: int = 20) -> CaseAB:
    """One round of ``n`` pairs whose log-ratios alternate ``mean ± spread``."""
    pairs = tuple(
        Pair(Block(3.0, 10), Block(3.0 * math.exp(mean + (-1) ** i * spread), 10), True)
        for i in range(n)
    )
    return CaseAB("c", "t.py::c", pairs)


def test_same_needs_two_rounds_for_its_95_percent_interval() -> None:
    """One pair of processes cannot tell its own speed from the build's: a one-round case
    reads same only at the 99.8% that slower and faster need."""
    one = _round_of(0.005, 0.0005)
    assert one.same_ratio == one.ratio  # 99.8%, the process floor's 0.93% and more
    assert one.outcome is Outcome.NEED_MORE
    two = one.with_round(_round_of(0.005, 0.0005))
    assert two.same_ratio is not None
    assert two.same_ratio.level == 0.95
    assert two.outcome is Outcome.SAME
    assert two.verdict_text.startswith("same (95%: [")
    assert two.check is not None
    assert two.check.ci_high == two.same_ratio.ci_high  # the interval that decided it
    assert two.as_dict()["same_level"] == 0.95


def test_same_stands_only_where_every_round_lies_within_the_minimum_effect() -> None:
    """Two rounds at +1.2% and -0.4% pool to "same"; the round at +1.2% keeps it open."""
    apart = _round_of(0.012, 0.01).with_round(_round_of(-0.004, 0.01))
    assert apart.same_ratio is not None
    assert apart.same_ratio.ci_low >= 1 / 1.01
    assert apart.same_ratio.ci_high <= 1.01
    assert not apart.bimodal
    assert apart.outcome is Outcome.NEED_MORE
    close = _round_of(0.006, 0.01).with_round(_round_of(-0.004, 0.01))
    assert close.outcome is Outcome.SAME
