"""Huge changes and degenerate rounds: an A/B never reads them "need more samples" or "same",
and never writes a verdict its own readers refuse.

Synthetic pairs through the real :class:`~gpugauge.ab.result.CaseAB` and
:class:`~gpugauge.ab.result.ABReport` (judged with the A/B's pooled spread of processes,
as the runner judges them), and a real saved run file rewritten by
:func:`gpugauge.ab.settle.decided`.
"""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pytest

from gpugauge.ab.pairs import Block, Pair
from gpugauge.ab.result import ABReport, CaseAB, SideInfo
from gpugauge.ab.settle import decided
from gpugauge.ab.verdict import Outcome, across_rounds
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
