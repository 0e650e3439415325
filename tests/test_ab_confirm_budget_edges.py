"""gpugauge confirm and its time budget at their edges: which results get an A/B, in which order.

Each test pins a behaviour a mutation of ``gpugauge/ab/confirm.py`` or ``gpugauge/ab/budget.py``
changed without failing any other test. The gated runs are built in memory (``tests.fakes``):
no benchmark has to run for them.
"""

from __future__ import annotations

import json
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from gpugauge.ab.budget import BUDGET_SPENT, Budget
from gpugauge.ab.confirm import Borderline, borderline, in_order, reference_commit
from gpugauge.ab.verdict import MIN_EFFECT
from gpugauge.measure.busy import HOST_BOUND_BELOW
from gpugauge.results.measurement import Measurement
from tests.fakes import device_timed, result, run_json, time_gate
from tests.test_ab import _git, new_repo

NEW_HOST = "new host (0 of 5 runs): class baseline, host spread 5.0% (default: 0 other hosts)"
NODE = "benches/test_demo.py::test_demo[a]"  # the test's node id: not the result's id, "a"


def _gated(
    path: Path,
    m: Measurement,
    ratio: float,
    *,
    verdict: str = "unchanged",
    checks: list[dict[str, Any]] | None = None,
    busy: float | None = None,
    test_s: float = 4.5,
) -> Path:
    """A gated run of ``m`` saved at ``path``: its time check at ``ratio``, against a class
    baseline on a new host; its test ``NODE``, which took ``test_s`` seconds."""
    data = run_json([m])
    (bench,) = data["benchmarks"]
    bench["fullname"] = NODE
    info = bench["extra_info"]
    if busy is not None:
        info["values"] = {"gpu_busy": busy}
    info["gate"] = time_gate(info["id"], ratio, verdict, NEW_HOST, checks)
    data["gpugauge"]["test_seconds"] = {NODE: test_s}
    path.write_text(json.dumps(data))
    return path


def _device_rounds(*ms: float) -> Measurement:
    """Result "a", its rounds timed by CUDA events at ``ms`` each."""
    m = device_timed(result("a"))
    assert m.timing is not None
    return replace(m, timing=replace(m.timing, device_ms=ms, host_ms=ms))


def _case(name: str, ratio: float, ms: float, **kw: Any) -> Borderline:
    return Borderline(name, f"t.py::t[{name}]", "f", "c", ratio, ms, **kw)


def test_a_result_s_node_id_and_cost_come_from_its_test_not_its_id(tmp_path: Path) -> None:
    """A family case's id is not its node id: the A/B runs the node, costed by its seconds."""
    (picked,) = borderline(_gated(tmp_path / "run.json", _device_rounds(2.0, 2.0, 2.0), 0.97))
    assert picked.id == "a"
    assert picked.nodeid == NODE  # what the A/B's -k runs: "a" would select nothing
    assert picked.test_s == pytest.approx(4.5)  # what orders it and what the budget expects


def test_a_gpu_busy_result_is_a_b_d_only_from_a_median_round_of_0_1_ms(tmp_path: Path) -> None:
    """0.1 ms is where a GPU round stops being its launch path's: shorter ones pass untried."""
    short = _device_rounds(*[0.05] * 8)
    assert borderline(_gated(tmp_path / "short.json", short, 0.97)) == []
    # five rounds of 0.05 ms and three of 0.5: the median is short, whatever the outliers
    outliers = _device_rounds(*[0.05] * 5, *[0.5] * 3)
    assert borderline(_gated(tmp_path / "outliers.json", outliers, 0.97)) == []
    at = _device_rounds(*[0.1] * 8)  # "0.1 ms or more"
    assert [c.ratio for c in borderline(_gated(tmp_path / "at.json", at, 0.97))] == [0.97]


def test_the_gpu_busy_and_floor_thresholds_are_the_documented_ones(tmp_path: Path) -> None:
    """80% busy is the GPU's work (HOST_BOUND_BELOW: host-bound *below*); 1.01x is not above."""
    busy = _gated(tmp_path / "busy.json", _device_rounds(2.0), 0.97, busy=HOST_BOUND_BELOW)
    assert [c.busy for c in borderline(busy)] == [HOST_BOUND_BELOW]
    host = result("a")  # host-timed: only its ratio can pick it
    assert borderline(_gated(tmp_path / "floor.json", host, 1 + MIN_EFFECT)) == []
    assert Borderline("a", NODE, "f", "c", 1.03, 5.0, HOST_BOUND_BELOW).device_paced
    assert Borderline("a", NODE, "f", "c", 1.03, 1.0).device_paced  # "1 ms or more"


def test_a_result_gated_on_other_metrics_alone_is_left_out(tmp_path: Path) -> None:
    """No time check, nothing for a time A/B to decide: confirm must skip it, not crash."""
    memory = {
        "metric": "memory",
        "baseline": 1000.0,
        "current": 1000.0,
        "ratio": 1.0,
        "ci_low": 1.0,
        "ci_high": 1.0,
        "tolerance": 0.01,
        "verdict": "unchanged",
    }
    run = _gated(tmp_path / "run.json", _device_rounds(2.0), 1.0, checks=[memory])
    assert borderline(run) == []


def test_the_reference_is_the_last_commit_that_wrote_the_baseline(tmp_path: Path) -> None:
    """Baselines recorded again are the accepted build's: the A/B's base is that commit."""
    repo = new_repo(tmp_path / "repo")
    baseline = repo / "baselines" / "cpu-x" / "mine.json"
    baseline.parent.mkdir(parents=True)
    commits = []
    for n in range(2):
        baseline.write_text(json.dumps({"n": n}))
        _git(repo, "add", "-A")
        _git(repo, "commit", "-qm", f"baselines {n}")
        commits.append(_git(repo, "rev-parse", "HEAD"))
    assert reference_commit(repo, repo / "baselines", "cpu-x", "mine") == commits[-1]


def test_a_reference_whose_first_a_b_is_cheapest_goes_first() -> None:
    """Within a tier, references go by their cheapest case there: the budget decides most."""
    cheap, dear = _case("cheap", 1.2, 5.0, test_s=1.0), _case("dear", 1.2, 5.0, test_s=50.0)
    cheap = replace(cheap, regressed=True)
    dear = replace(dear, regressed=True)
    relu = _case("relu", 1.07, 0.044, test_s=1.0)  # a later tier of the cheap one's reference
    order = in_order({"a": [cheap, relu], "b": [dear]})
    assert order == [("a", [cheap]), ("b", [dear]), ("a", [relu])]


def test_a_later_tier_ranks_each_reference_by_its_own_cases_there() -> None:
    """A reference's cheap regressed case does not put its dear device-paced one first.

    On a tight deadline, A's 100 s A/B would spend the budget before B's 1 s one.
    """
    a0 = replace(_case("a0", 1.2, 5.0, test_s=1.0), regressed=True)
    c0 = replace(_case("c0", 1.2, 5.0, test_s=2.0), regressed=True)
    a1 = _case("a1", 1.03, 5.0, busy=0.95, test_s=100.0)  # device-paced
    b1 = _case("b1", 1.03, 5.0, busy=0.95, test_s=1.0)
    order = in_order({"A": [a0, a1], "B": [b1], "C": [c0]})
    assert order == [("A", [a0]), ("C", [c0]), ("B", [b1]), ("A", [a1])]


def test_results_saved_without_their_rounds_go_by_the_higher_ratio() -> None:
    """Equal time lost (none saved): the larger slowdown is A/B'd first."""
    low, high = _case("low", 1.02, 0.0), _case("high", 1.05, 0.0)
    assert in_order({"r": [low, high]}) == [("r", [high, low])]


def test_a_deadline_sooner_than_the_time_budget_counts() -> None:
    """--deadline and --time-budget: the sooner ends the budget, whichever is given first."""
    budget = Budget.of(seconds=600.0, unix_deadline=time.time() + 30.0)
    assert 25.0 < budget.left() <= 30.0


def test_a_budget_spent_before_it_was_made_ends_now_not_in_the_past() -> None:
    """A long-passed --deadline ends the budget now: a side's silence grace counts from now."""
    before = time.monotonic()
    for budget in (Budget.of(unix_deadline=time.time() - 3600.0), Budget.of(seconds=-5.0)):
        assert budget.left() == 0.0
        assert budget.ends is not None
        assert budget.ends >= before  # the runner stops a side silent past ends + 120 s


def test_costs_known_already_are_kept_over_later_ones() -> None:
    """with_costs adds only the costs a budget did not know: the gated run's count first."""
    budget = Budget(test_s={"t::a": 10.0}).with_costs({"t::a": 99.0, "t::b": 5.0})
    assert dict(budget.test_s) == {"t::a": 10.0, "t::b": 5.0}


def test_a_spent_budget_starts_nothing_even_of_tests_of_unknown_cost() -> None:
    """A test no run has costed is expected to cost nothing: a spent budget still stops it."""
    spent = Budget(time.monotonic() - 1.0)
    assert not spent.fits(["t::unknown"])
    assert spent.why_not("t::unknown") == BUDGET_SPENT


def test_an_a_b_fits_only_with_its_own_start_counted() -> None:
    """An A/B's start (both sides' start-up) is paid before its first test can end."""
    budget = Budget(time.monotonic() + 100.0, {"t::a": 30.0})  # 60 s: both sides run it
    assert budget.fits(["t::a"], start_s=20.0)
    assert not budget.fits(["t::a"], start_s=50.0)  # 110 s in a budget of 100
