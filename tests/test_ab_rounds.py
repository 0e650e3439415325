"""The A/B's verdict over rounds of fresh processes, on synthetic A/Bs with a random
offset per process: its false-alarm rate and its sensitivity (issue 48's criteria).

Each synthetic A/B has 20 cases of two rounds; in each round both builds' processes get
their own offset (log-normal, SD ``proc``), and each pair of blocks its own noise (SD
``noise``); the round's pairs are drawn through the real schedule, and the verdict is the
real :class:`~gpugauge.ab.result.CaseAB`'s, judged with the A/B's pooled spread.
"""

from __future__ import annotations

import importlib.util
import json
import math
import random
import statistics
from dataclasses import replace
from pathlib import Path
from types import ModuleType

import pytest

from gpugauge.ab.config import ABConfig
from gpugauge.ab.launch import KERNELS
from gpugauge.ab.pairs import Block, Pair
from gpugauge.ab.result import ABReport, CaseAB, SideInfo
from gpugauge.ab.runner import Coordinator
from gpugauge.ab.verdict import Outcome, Schedule, across_rounds, pooled_process_sd

SIDE = SideInfo("base", "a", "a" * 40, "python3", "/x")


def _round(s: Schedule, mean: float, noise: float, rng: random.Random, cid: str) -> CaseAB:
    logs: list[float] = []
    while k := s.more(logs):
        logs += [rng.gauss(mean, noise) for _ in range(k)]
    pairs = tuple(
        Pair(Block(1.0, 10), Block(math.exp(x), 10), i % 2 == 0) for i, x in enumerate(logs)
    )
    return CaseAB(cid, cid, pairs, schedule=s)


def _outcomes(effect: float, noise: float, proc: float, n_ab: int, seed: int) -> list[Outcome]:
    return _a_bs(effect, noise, proc, n_ab, seed)[0]


def _a_bs(
    effect: float, noise: float, proc: float, n_ab: int, seed: int
) -> tuple[list[Outcome], float]:
    """Every case's outcome, and the mean number of pairs a round took."""
    rng, s, out, pairs = random.Random(seed), Schedule(), [], []
    for _ in range(n_ab):
        cases = []
        for i in range(20):
            case = None
            for _ in range(s.rounds):
                offset = rng.gauss(0, proc) - rng.gauss(0, proc)  # head's process, base's
                one = _round(s, math.log1p(effect) + offset, noise, rng, f"c{i}")
                case = one if case is None else case.with_round(one)
            cases.append(case)
        report = ABReport(SIDE, SIDE, tuple(cases), "cpu", 0.0, s).pooled()
        out += [c.outcome for c in report.cases]
        pairs += [len(r.pairs) for c in cases for r in c.rounds]
    return out, statistics.fmean(pairs)


def _false_alarms(outcomes: list[Outcome]) -> float:
    return sum(o in (Outcome.SLOWER, Outcome.FASTER) for o in outcomes) / len(outcomes)


@pytest.mark.parametrize("proc", [0.0, 0.004, 0.015])
def test_a_a_false_alarms_stay_under_one_percent_with_random_process_offsets(
    proc: float,
) -> None:
    assert _false_alarms(_outcomes(0.0, 0.01, proc, n_ab=40, seed=48)) <= 0.01


@pytest.mark.parametrize("proc", [0.0, 0.002, 0.004])
def test_a_three_percent_change_at_low_noise_is_caught(proc: float) -> None:
    """At 0.3% noise per pair: 99% where processes differ by 0.4% or less (an H200's
    device-paced cases read 0.993-1.004x in one-round A/As)."""
    outcomes = _outcomes(0.03, 0.003, proc, n_ab=15, seed=3)
    assert sum(o is Outcome.SLOWER for o in outcomes) / len(outcomes) >= 0.99


def test_an_a_a_at_half_a_percent_reads_same_in_few_pairs() -> None:
    """ "same" needs its 95% interval within 1%: an A/A round at 0.5% noise decides in
    about 6 pairs (10.6 when "same" needed 99.8%, and 28% of cases stayed undecided)."""
    outcomes, pairs = _a_bs(0.0, 0.005, 0.002, n_ab=10, seed=5)
    assert sum(o is Outcome.SAME for o in outcomes) / len(outcomes) >= 0.95
    assert pairs < 7.5


def test_a_change_beyond_the_minimum_effect_seldom_reads_same() -> None:
    """A 1% change (the minimum effect) reads "same" in about 3% of cases (one side of a
    95% interval, looked at as pairs come); a 1.2% change in well under 1%."""
    at_edge, _ = _a_bs(0.01, 0.005, 0.002, n_ab=15, seed=6)
    assert sum(o is Outcome.SAME for o in at_edge) / len(at_edge) <= 0.05
    beyond, _ = _a_bs(0.012, 0.005, 0.002, n_ab=60, seed=7)
    assert sum(o is Outcome.SAME for o in beyond) / len(beyond) <= 0.01


@pytest.mark.slow
@pytest.mark.parametrize("noise", [0.003, 0.02])
@pytest.mark.parametrize("proc", [0.002, 0.008])
def test_false_alarms_over_the_grid(proc: float, noise: float) -> None:
    """1,000 A/A cases per cell, on other seeds than the default tests'.

    docs/lab/ab-evidence.md keeps the grid's table.
    """
    assert _false_alarms(_outcomes(0.0, noise, proc, n_ab=50, seed=7)) <= 0.01


def _lab_script(name: str) -> ModuleType:
    """A script of docs/lab, loaded from its file (docs/lab is no package)."""
    path = Path(__file__).resolve().parents[1] / "docs" / "lab" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("run", ["124", "126", "127"])
def test_the_verdicts_of_recorded_h200_pairs_stand(run: str) -> None:
    """Three H200 A/Bs' pairs (docs/lab/data/ab-pairs.json: an A/A night, a 3%-injected
    night, a PR A/A), judged again: every case reads what that A/B said, under the rule
    they ran and under today's. A change to the rule that turns one shows here by name, and
    its evidence needs replaying (docs/lab/rule_replay.py)."""
    lab = _lab_script("rule_replay")
    cases = lab.recorded()[run]["cases"]
    said = {k: c["outcome"] for k, c in cases.items()}
    got, _, short = lab.replay(cases, lab.RECORDED)
    assert short == 0  # their own rule stops where those A/Bs stopped
    assert {k: str(v) for k, v in got.items()} == said
    # today's first look (3 pairs): a round that wants more pairs than were timed keeps
    # what it has, so this holds the verdicts a shorter first look reaches
    today, _, _ = lab.replay(cases, Schedule())
    assert {k: str(v) for k, v in today.items()} == said


@pytest.mark.parametrize("run", ["124", "126", "127"])
def test_the_recorded_blocks_are_those_pairs_blocks(run: str) -> None:
    """docs/lab/data/ab-blocks.json (every block's rounds, cut shorter by
    docs/lab/block_replay.py) holds the same blocks as the recorded pairs: whole, each
    pair's log-ratio is the one recorded, and the rule reads each case as its A/B did."""
    lab = _lab_script("block_replay")
    blocks = json.loads(lab.DATA.read_text())["runs"][run]["cases"]
    pairs = _lab_script("rule_replay").recorded()[run]["cases"]
    shared = blocks.keys() & pairs.keys()
    assert len(shared) >= 0.9 * len(pairs)  # run 126's head measured four cases again
    for cid in shared:
        whole = [math.log(h[2][0] / b[2][0]) for one in blocks[cid]["rounds"] for b, h in one]
        said = [p[0] for one in pairs[cid]["rounds"] for p in one]
        assert whole == pytest.approx(said, abs=1e-5), cid
    got, _, short = lab.replay(blocks, 0, 1.0, 3)
    assert short == 0
    assert got == {cid: c["outcome"] for cid, c in blocks.items()}


def test_processes_that_spread_widen_every_case_s_interval() -> None:
    """A pooled spread of 1% per round makes two tight rounds at +1.5% undecided."""
    tight = [[0.015, 0.0151, 0.0149, 0.015]] * 2
    assert across_rounds(tight).ci_low > 1  # the floor alone (0.3%): significant
    sd, df = pooled_process_sd([(1e-4, 2)] * 10)
    assert sd > 0.01  # the kept nine, scaled back for the tenth left out
    assert df == 9.0
    assert across_rounds(tight, process_sd=sd, process_df=df).ci_low < 1
    # one bimodal case among ten (its rounds 2.8% apart) does not widen the others'
    assert pooled_process_sd([(1e-4, 2)] * 9 + [(4e-4, 2)]) == (sd, df)
    assert pooled_process_sd([(1e-4, 2)] * 4) == (0.003, math.inf)  # too few: the floor


def test_a_later_round_records_no_kernels_and_keeps_the_first_rounds() -> None:
    """Round 2's sides skip the profiled round; the case keeps round 1's kernel note."""

    def kernels(k: int) -> object:
        cfg = ABConfig(("-k", "x"), Path("out"), round=k, profile="seed")
        settings = dict(Coordinator(cfg, {}).settings("head"))
        (value,) = [v for dests, v in settings.items() if KERNELS in dests]
        assert settings[("profile", "gauge_profile")] == "seed"
        return value

    assert kernels(1) is True
    assert kernels(2) is False
    first = CaseAB("c", "t::c", kernels="same kernels")
    assert first.with_round(CaseAB("c", "t::c", kernels="")).kernels == "same kernels"


def test_an_a_b_s_words_are_labels_of_the_one_verdict_vocabulary() -> None:
    """The A/B's table says 'slower'; the run file and the history say 'regressed'."""
    from gpugauge.results.verdicts import Verdict

    labels = {o: o.verdict for o in Outcome}
    assert labels == {
        Outcome.SLOWER: Verdict.REGRESSED,
        Outcome.FASTER: Verdict.IMPROVED,
        Outcome.SAME: Verdict.UNCHANGED,
        Outcome.NEED_MORE: Verdict.INCONCLUSIVE,
    }


class _ClockSide:
    """A side whose blocks run at a wandering SM clock: each block's log time is its
    process's offset, the change, ``slope`` times the log clock ratio and noise."""

    def __init__(self, name: str, rng: random.Random, log_ms: float, slope: float) -> None:
        self.name = self.build = name
        self.rng, self.log_ms, self.slope = rng, log_ms, slope

    def block(self, wander: float, noise: float) -> Block:
        clock = math.exp(self.rng.gauss(0, wander))
        log_ms = self.log_ms + self.slope * math.log(clock) + self.rng.gauss(0, noise)
        return Block(math.exp(log_ms), 10, 1800.0 * clock)


def _clock_outcomes(effect: float, wander: float, n_ab: int, seed: int) -> list[Outcome]:
    """A/Bs of 20 short steps at the power limit, through the coordinator's own loop.

    Their clocks wander block to block (log SD ``wander``: 1560-1965 MHz on an H200's
    linear steps); their time hardly follows the clock (slope drawn in -0.25..0.1, as
    replayed over runs 110 and 113); 0.4% noise a block, 0.3% a process.
    """
    rng, s, out = random.Random(seed), Schedule(), []

    class Clocked(Coordinator):
        def _block(
            self, side: _ClockSide, first: bool, first_warm_s: float, rounds: int | None = None
        ) -> Block:
            return side.block(wander, 0.004)

    coordinator = Clocked(ABConfig((), Path("unused"), schedule=s), {})
    for _ in range(n_ab):
        cases = []
        for i in range(20):
            slope, case = rng.uniform(-0.25, 0.1), None
            for _ in range(s.rounds):
                base = _ClockSide("base", rng, rng.gauss(0, 0.003), slope)
                head = _ClockSide("head", rng, math.log1p(effect) + rng.gauss(0, 0.003), slope)
                pairs = coordinator._blocks(base, head, True)
                one = CaseAB(f"c{i}", f"c{i}", pairs, schedule=s)
                case = one if case is None else case.with_round(one)
            cases.append(case)
        report = ABReport(SIDE, SIDE, tuple(cases), "cpu", 0.0, s).pooled()
        out += [c.outcome for c in report.cases]
    return out


@pytest.mark.parametrize("wander", [0.02, 0.05])
def test_short_steps_whose_clocks_wander_are_judged_by_every_pair(wander: float) -> None:
    """Stopping a round at its fourth pair 5% apart in clock caught 90 of 500 such 3%
    changes at 5% wander (docs/lab/ab-evidence.md); counting every pair, 99%."""
    assert _false_alarms(_clock_outcomes(0.0, wander, n_ab=10, seed=11)) <= 0.01
    caught = _clock_outcomes(0.03, wander, n_ab=10, seed=12)
    assert sum(o is Outcome.SLOWER for o in caught) / len(caught) >= 0.99


def test_a_one_round_a_b_stops_its_pairs_where_its_verdict_can_say_same() -> None:
    """--rounds 1 judges same at 99.8%: its pairs stopped at 95%, and the case's line said
    same while its table said need more samples (a review, 2026-12-06)."""
    logs = [0.004, 0.008, 0.005, 0.007]  # 95% within 1%, 99.8% not
    two, one = Schedule(), Schedule(rounds=1)
    assert two.outcome(logs) is Outcome.SAME
    assert two.more(logs) == 0
    assert one.round_same_level == one.level
    assert one.outcome(logs) is Outcome.NEED_MORE
    assert one.more(logs) == one.step


def test_a_case_s_progress_line_says_what_its_table_will() -> None:
    """One round is the case: its line gives the verdict the floor of the processes' spread
    leaves, not the round's own "same" (a CI run, 2026-12-07: the line said same at
    [0.999, 1.004], the table need more samples at [0.992, 1.011]). With two rounds, the
    line gives the round's own outcome and says it is the round's."""
    from gpugauge.ab.render import progress_line

    logs = [0.0020, 0.0021, 0.0019]  # a round's 99.8% interval within 1%; not with the floor
    pairs = [Pair(Block(1.0, 10), Block(math.exp(x), 10), i % 2 == 0) for i, x in enumerate(logs)]
    one = CaseAB("c", "t::c", tuple(pairs), schedule=Schedule(rounds=1))
    assert one.round_outcome is Outcome.SAME
    assert one.outcome is Outcome.NEED_MORE
    assert one.ratio is not None
    table_ci = f"[{one.ratio.ci_low:.3f}, {one.ratio.ci_high:.3f}]"
    assert progress_line(one) == f"c: need more samples 1.002x {table_ci} (3 pairs)"
    two = replace(one, schedule=Schedule(rounds=2))
    assert progress_line(two, 1).startswith("c: same in round 1 of 2, 1.002x 95% [")
    # confirm --measure picks after round 1 which cases it judges: one it leaves out reads
    # "not judged" in the table, so its line cannot give a verdict
    assert progress_line(one, 1, picked=True).startswith("c: same in round 1 of 1, 1.002x ")


def test_a_one_round_a_b_leaves_unjudged_what_its_command_judges_otherwise(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """``confirm --measure --rounds 1``: its table said "1 slower" of a case no result owed
    an A/B, and the night's exit status, rightly, left it out (a review, 2026-12-07). With one
    round as with two, the cases ``later`` leaves out are not judged."""
    from gpugauge.ab import rounds
    from gpugauge.ab.render import summary_line

    one = Schedule(rounds=1)
    owed, other = (_round(one, x, 0.001, random.Random(1), c) for x, c in ((0, "o"), (0.05, "x")))
    assert other.outcome is Outcome.SLOWER  # judged alone, 5% slower
    first = ABReport(SIDE, SIDE, (owed, other), "cpu", 1.0, one)

    class RoundOne:  # round 1's coordinator, its cases already paired
        def __init__(self, *_: object) -> None:
            pass

        def run(self) -> ABReport:
            return first

    monkeypatch.setattr(rounds, "Coordinator", RoundOne)
    cfg = ABConfig((), tmp_path, schedule=one)
    report = rounds.run_sides(cfg, {}, lambda _: None, later=lambda ids: ["o"])
    assert [c.judged for c in report.cases] == [True, False]
    assert report.count(Outcome.SLOWER) == 0
    assert "0 slower" in summary_line(report)
    assert "1 not judged (round 1 only)" in summary_line(report)


def test_an_a_b_s_check_carries_the_level_that_decided_it() -> None:
    """Slower at 99.8%; "same" over two rounds at 95%, with one round at 99.8%."""
    s = Schedule()
    slow = _round(s, 0.05, 0.001, random.Random(2), "c")
    slow = slow.with_round(_round(s, 0.05, 0.001, random.Random(3), "c"))
    same = _round(s, 0.0, 0.0005, random.Random(4), "d")
    same = same.with_round(_round(s, 0.0, 0.0005, random.Random(5), "d"))
    assert slow.outcome is Outcome.SLOWER
    assert same.outcome is Outcome.SAME
    assert slow.check is not None
    assert slow.check.level == s.level
    assert same.check is not None
    assert same.check.level == s.same_level
