"""Huge changes and degenerate rounds: an A/B never reads them "need more samples" or "same",
and never writes a verdict its own readers refuse.

Synthetic pairs through the real :class:`~gpugauge.ab.result.CaseAB` and
:class:`~gpugauge.ab.result.ABReport` (judged with the A/B's pooled spread of processes,
as the runner judges them), and a real saved run file rewritten by
:func:`gpugauge.ab.overruled.decided`.
"""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pytest

from gpugauge.ab.overruled import decided
from gpugauge.ab.pairs import Block, Pair
from gpugauge.ab.result import ABReport, CaseAB, SideInfo
from gpugauge.ab.verdict import Outcome, Schedule, across_rounds
from gpugauge.results.runs import load_run
from tests.fakes import result, run_json, time_gate

SIDE = SideInfo("base", "a", "a" * 40, "python3", "/x")


def _round(cid: str, logs: list[float]) -> CaseAB:
    """One round of case ``cid``: a pair of 3 ms base blocks per head/base log-ratio."""
    pairs = tuple(
        Pair(Block(3.0, 10), Block(3.0 * math.exp(x), 10), i % 2 == 0) for i, x in enumerate(logs)
    )
    return CaseAB(cid, f"t.py::{cid}", pairs)


def _case(cid: str, *round_logs: list[float]) -> CaseAB:
    case = _round(cid, round_logs[0])
    for logs in round_logs[1:]:
        case = case.with_round(_round(cid, logs))
    return case


def _tight(ratio: float, n: int = 6, jitter: float = 0.002) -> list[float]:
    """``n`` pairs at ``ratio``, alternately ``jitter`` above and below it (log)."""
    return [math.log(ratio) + jitter * (-1) ** i for i in range(n)]


def _judged(cases: list[CaseAB]) -> ABReport:
    return ABReport(SIDE, SIDE, tuple(cases), "cpu", 0.0, Schedule()).pooled()


@pytest.mark.parametrize("n_aa", range(3, 9))
@pytest.mark.parametrize("second", [2.0, 3.0, 10.0])
def test_one_case_bimodal_across_processes_leaves_a_2x_slowdown_slower(
    n_aa: int, second: float
) -> None:
    """An A/B of five to ten cases: one reads 2.000x in both rounds, every pair within
    0.2%; one other runs at 1x in one process and at ``second`` in the next (a kernel
    chosen per process). Pooled untrimmed, that one case's spread widened every case's
    interval, and the 2x slowdown read "need more samples" (exit 0: no case slower)."""
    cases = [_case("big", _tight(2.0), _tight(2.0))]
    cases += [_case(f"aa{i}", _tight(1.0), _tight(1.0)) for i in range(n_aa)]
    cases.append(_case("bimodal", _tight(1.0), _tight(second)))
    report = _judged(cases)
    big = report.cases[0]
    assert big.outcome is Outcome.SLOWER, big.verdict_text
    assert report.slower[0].id == "big"
    assert report.cases[-1].outcome is Outcome.NEED_MORE  # the bimodal one, as before


@pytest.mark.parametrize("seed", range(80))
def test_huge_changes_are_decided_beside_cases_bimodal_across_processes(seed: int) -> None:
    """Property: an A/B of 5-30 cases, two rounds each, 0.1-1% noise a pair and 0.3%
    between processes, up to a third of them bimodal across processes (1.3x-10x apart): a
    case 0.5x, 2x or 10x in both rounds reads faster or slower, never need more samples or
    same. The trimmed tenth alone left two bimodal cases of twelve widening every case."""
    rng = random.Random(seed)
    effect = rng.choice([0.5, 2.0, 10.0])
    noise = rng.uniform(0.001, 0.01)

    def rounds(mean: float) -> list[list[float]]:
        out = []
        for _ in range(2):
            offset = rng.gauss(0, 0.003)
            out.append([rng.gauss(mean + offset, noise) for _ in range(rng.randint(4, 20))])
        return out

    n = rng.randint(5, 30)
    bimodal = rng.randint(1, max(1, n // 3))
    cases = [_case("huge", *rounds(math.log(effect)))]
    cases += [_case(f"aa{i}", *rounds(rng.gauss(0, 0.005))) for i in range(n - 1 - bimodal)]
    for i in range(bimodal):
        apart = math.log(rng.uniform(1.3, 10.0))
        bi = rounds(0.0)
        bi[rng.randrange(2)] = [x + apart for x in bi[0]]
        cases.append(_case(f"bimodal{i}", *bi))
    rng.shuffle(cases)
    huge = next(c for c in _judged(cases).cases if c.id == "huge")
    assert huge.outcome is (Outcome.SLOWER if effect > 1 else Outcome.FASTER), huge.verdict_text


def test_two_rounds_of_one_pair_have_no_interval_and_no_check() -> None:
    """A side that failed after one pair in each round: no pair has a spread within its
    round, so the interval over the rounds is unbounded. It was said to have one: its
    time check held ci_high = inf, which no run file may hold (JSON has no infinity), and
    confirm, writing it back, stopped with exit 2 after the history had kept it."""
    case = _case("c", [math.log(2.0)], [math.log(2.0)])
    assert case.ratio is not None
    assert not case.ratio.has_interval
    assert case.outcome is Outcome.NEED_MORE
    assert case.check is None
    json.dumps(case.as_dict(), allow_nan=False)  # ab.json: standard JSON
    assert case.as_dict()["ci_high"] is None


@pytest.mark.parametrize("seed", range(40))
def test_an_interval_said_to_exist_is_finite_whatever_the_rounds(seed: int) -> None:
    """Property: rounds of 0-5 pairs (a side that failed early, a round with none), 1-4
    rounds: where a ratio has an interval its bounds are finite and hold the ratio, and a
    case's record is standard JSON."""
    rng = random.Random(seed)
    for _ in range(50):
        shape = [rng.randint(0, 5) for _ in range(rng.randint(1, 4))]
        if not any(shape):
            continue
        logs = [[rng.gauss(0.3, 0.05) for _ in range(k)] for k in shape]
        r = across_rounds(logs)
        if r.has_interval:
            assert 0 < r.ci_low <= r.ratio <= r.ci_high < math.inf, (shape, r)
        case = _case("c", *logs)
        json.dumps(case.as_dict(), allow_nan=False)
        check = case.check
        if check is not None:
            json.dumps(check.as_dict(), allow_nan=False)


def test_confirm_writes_back_a_run_its_reader_reads_after_one_pair_a_round(
    tmp_path: Path,
) -> None:
    """confirm's write-back of an A/B whose sides each failed after one pair: the result
    keeps its verdict (no interval decides nothing), and the run file stays readable."""
    m = result("c", 3.0)
    data = run_json([m])
    bench = data["benchmarks"][0]
    bench["fullname"] = "t.py::c"
    bench["extra_info"]["gate"] = time_gate("c", 1.03, "unchanged", "class baseline")
    run = tmp_path / "run.json"
    run.write_text(json.dumps(data))
    report = ABReport(SIDE, SIDE, (_case("c", [math.log(2.0)], [math.log(2.0)]),), "cpu", 1.0)
    assert decided(run, "a" * 40, report) == []
    assert load_run(run).verdicts["c"]["verdict"] == "unchanged"
