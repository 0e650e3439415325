"""Host-aware references and verdicts: which reference judges, why, and the drift anchor."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from gpugauge.ab.verdict import t_quantile
from gpugauge.history.host_checks import accepted, check_case, check_metric
from gpugauge.history.records import MetricRecord, Point, ResultRecord
from gpugauge.history.reference import (
    SMALL_SAMPLE_QUANTILE,
    ReferencePolicy,
    reference_for,
    small_sample_factor,
)
from gpugauge.history.synthetic import (
    CASE,
    CLASS,
    FAMILY,
    baseline_entry,
    point,
    synthetic_metric,
    synthetic_run,
)
from gpugauge.regress.baselines import KernelShare
from gpugauge.regress.tolerances import Tolerance
from gpugauge.results.verdicts import Verdict


def history(host: str, medians: list[float], start: int = 0, ok: bool = True) -> list:
    return [point(start + i, host, m, ok=ok) for i, m in enumerate(medians)]


def test_a_host_with_enough_runs_is_its_own_reference() -> None:
    points = history("h1", [2.0, 2.001, 1.999, 2.0, 2.002, 2.0])
    ref = reference_for(points, "h1", 0.015)
    assert ref is not None
    assert ref.kind == "host"
    assert ref.median == 2.0  # the last five: 2.001, 1.999, 2.0, 2.002, 2.0
    assert ref.allowed == 0.015  # the floor: 3 x the spread is smaller
    assert ref.reason.startswith("host history: last 5 runs, spread ")


def test_a_noisy_host_is_allowed_its_own_spread() -> None:
    points = history("h1", [2.0, 2.1, 1.9, 2.05, 1.95, 2.0, 2.08, 1.93])
    ref = reference_for(points, "h1", 0.015)
    assert ref is not None
    assert ref.allowed == pytest.approx(3 * ref.spread)
    assert ref.spread > 0.05 * small_sample_factor(7)


def test_regressed_runs_never_become_the_reference() -> None:
    points = history("h1", [2.0] * 5) + history("h1", [2.2] * 5, start=5, ok=False)
    ref = reference_for(points, "h1", 0.015)
    assert ref is not None
    assert ref.median == 2.0


def test_a_new_host_gets_the_class_baseline_with_the_measured_host_spread() -> None:
    points = history("h0", [2.0] * 6) + history("h1", [2.044] * 6) + history("new", [2.1] * 2)
    ref = reference_for(points, "new", 0.015, baseline=(2.0, 0.03))
    assert ref is not None
    assert ref.kind == "class"
    assert ref.median == 2.0
    assert ref.allowed == pytest.approx(0.03 + 0.022)
    assert ref.reason == "new host (2 of 5 runs): class baseline, host spread 2.2% (2 hosts)"


def test_with_fewer_than_two_other_hosts_the_default_spread_is_said() -> None:
    ref = reference_for(history("h0", [2.0] * 6), "new", 0.015, baseline=(2.0, 0.03))
    assert ref is not None
    assert ref.allowed == pytest.approx(0.03 + 0.05)
    assert ref.reason == (
        "new host (0 of 5 runs): class baseline, host spread 5.0% (default: 1 other host)"
    )


def test_a_baseline_recorded_on_several_hosts_carries_its_own_host_spread() -> None:
    # its allowance comes from its runs' spread, which spans hosts already: no default on top
    ref = reference_for([], "new", 0.015, baseline=(2.0, 0.03, 3))
    assert ref is not None
    assert ref.allowed == pytest.approx(0.03)
    assert ref.reason == (
        "new host (0 of 5 runs): class baseline, host spread in the baseline's allowance "
        "(its runs came from 3 hosts)"
    )
    # one host, or hosts unknown (a file recorded before hosts were kept): the default
    for hosts in (1, None):
        one = reference_for([], "new", 0.015, baseline=(2.0, 0.03, hosts))
        assert one is not None
        assert one.allowed == pytest.approx(0.08)
    # a history of two other hosts or more measures the spread itself
    points = history("h0", [2.0] * 6) + history("h1", [2.044] * 6)
    measured = reference_for(points, "new", 0.015, baseline=(2.0, 0.03, 3))
    assert measured is not None
    assert measured.allowed == pytest.approx(0.03 + 0.022)


def test_a_time_faster_than_its_class_on_a_new_host_is_not_claimed() -> None:
    """Run 116: six host-paced eager steps read 0.53-0.81x their class, 3% slower code."""
    j = check_metric(synthetic_metric(1.06, 0.002), "new", [], 0.015, baseline=(2.0, 0.03))
    assert j.check is not None
    assert j.check.ratio == pytest.approx(0.53)
    assert j.verdict is Verdict.UNCHANGED
    assert j.note.startswith("faster than its class on a new host")
    assert "no improvement is claimed" in j.describe()
    case = check_case(
        CASE,
        FAMILY,
        CLASS,
        (synthetic_metric(1.06, 0.002),),
        host="new",
        points={},
        tolerance=Tolerance(),
        baseline=baseline_entry(2.0),
    )
    assert case.gate.verdict is Verdict.UNCHANGED
    assert "time: faster than its class on a new host" in case.gate.note
    assert case.verdicts() == {"time": "unchanged"}  # the host's first accepted run
    # its twin, a regression, stays one (confirm A/Bs it); the host's own history claims
    slower = check_metric(synthetic_metric(4.0, 0.002), "new", [], 0.015, baseline=(2.0, 0.03))
    assert slower.verdict is Verdict.REGRESSED
    assert slower.note == ""
    own = history("h1", [2.0] * 6)
    faster = check_metric(synthetic_metric(1.0, 0.002), "h1", own, 0.015, baseline=(2.0, 0.03))
    assert faster.reference is not None
    assert faster.reference.kind == "host"
    assert faster.verdict is Verdict.IMPROVED


def test_without_a_baseline_the_other_hosts_are_the_class() -> None:
    points = history("h0", [2.0] * 5) + history("h1", [2.1] * 5)
    ref = reference_for(points, "new", 0.015)
    assert ref is not None
    assert ref.median == pytest.approx(2.05)
    assert ref.reason.startswith("new host (0 of 5 runs): class history of other hosts")
    assert reference_for([], "new", 0.015) is None


def _busy(share: float) -> MetricRecord:
    return MetricRecord("gpu_busy", share, share, share, 1, (share,))


def _busy_point(night: int, host: str, share: float) -> Point:
    m = _busy(share)
    return Point(synthetic_run(night, host), ResultRecord(CASE, FAMILY, CLASS, (m,)), m)


def test_a_per_host_metric_is_judged_against_its_own_host_alone() -> None:
    """Run 72: an eager MLP step 18.9% busy on one H100, 7.7% on a new one, same build."""
    others = [_busy_point(i, "h0", 0.189) for i in range(6)]
    first = check_metric(_busy(0.077), "new", others, 0.5, baseline=(0.189, 0.5))
    assert first.check is None
    assert first.verdict is Verdict.NEW
    own = [_busy_point(i, "new", 0.9) for i in range(6, 11)]
    halved = check_metric(_busy(0.4), "new", others + own, 0.5, baseline=(0.189, 0.5))
    assert halved.reference is not None
    assert halved.reference.kind == "host"
    assert halved.verdict is Verdict.REGRESSED
    assert halved.anchor is None  # the class baseline is no anchor for it either


def test_a_diagnostic_metric_gets_no_judgement_from_the_history() -> None:
    comm = MetricRecord("comm_fraction", 0.074, 0.074, 0.074, 1, (0.074,))
    points = history("h1", [2.0, 2.002, 1.998, 2.001, 1.999])
    case = check_case(
        CASE,
        FAMILY,
        CLASS,
        (synthetic_metric(2.0, 0.002), comm),
        host="h1",
        points={"time": points},
        tolerance=Tolerance(),
    )
    assert [j.metric for j in case.judgements] == ["time"]


def test_the_verdict_is_new_without_any_reference() -> None:
    j = check_metric(synthetic_metric(2.0, 0.002), "h1", [], 0.015)
    assert j.verdict is Verdict.NEW
    assert j.describe() == "time: no reference (new)"


def test_a_step_on_a_host_with_history_is_regressed_and_says_why() -> None:
    points = history("h1", [2.0, 2.002, 1.998, 2.001, 1.999])
    j = check_metric(synthetic_metric(2.06, 0.002), "h1", points, 0.015)
    assert j.verdict is Verdict.REGRESSED
    assert j.describe().startswith(
        "time 1.030x [1.028, 1.032] vs <= 1.015 allowed (regressed, by host history)"
    )
    assert "host history: last 5 runs" in j.describe()


def test_a_drift_inside_the_window_is_caught_by_the_class_baseline() -> None:
    # the host crept up 0.3% a night: its last five runs move along, the baseline does not
    medians = [2.0 * 1.003**i for i in range(20)]
    points = history("h1", medians)
    current = synthetic_metric(2.0 * 1.003**20, 0.002)
    j = check_metric(current, "h1", points, 0.015, baseline=(2.0, 0.03))
    assert j.check is not None
    assert j.check.verdict is not Verdict.REGRESSED
    assert j.drift
    assert j.verdict is Verdict.REGRESSED
    assert "drift past the class baseline" in j.describe()
    without = check_metric(current, "h1", points, 0.015)
    assert without.verdict is not Verdict.REGRESSED


def test_an_offset_the_host_had_from_its_start_is_no_drift() -> None:
    points = history("h1", [2.1] * 10)  # 5% behind the baseline's host from day one
    j = check_metric(synthetic_metric(2.1, 0.002), "h1", points, 0.015, baseline=(2.0, 0.03))
    assert j.anchor is not None
    assert not j.drift
    assert j.verdict is Verdict.UNCHANGED


def test_judge_case_gives_a_gate_result_with_references_and_kernels() -> None:
    base = baseline_entry(2.0)
    listed = (KernelShare("old_gemm", 0.8), KernelShare("memset", 0.01))
    mine = [replace(p, result=replace(p.result, kernels=listed)) for p in history("h1", [2.0] * 5)]
    j = check_case(
        CASE,
        FAMILY,
        CLASS,
        (synthetic_metric(2.1, 0.002),),
        host="h1",
        points={"time": mine},
        tolerance=Tolerance(),
        baseline=base,
        kernels=(KernelShare("new_gemm", 0.8), KernelShare("memset", 0.01)),
    )
    assert j.verdict is Verdict.REGRESSED
    gate = j.gate
    assert gate.verdict is Verdict.REGRESSED
    # against the host's own last run, which is what it names, not the committed baseline
    assert "main kernels differ from this host's last run's: now runs new_gemm" in gate.note
    assert "host history: last 5 runs" in gate.note
    assert j.references() == {"time": j.judgements[0].reference.reason}
    assert j.verdicts() == {"time": "regressed"}
    assert j.message().startswith(f"{CASE}: regressed: time 1.050x")
    assert j.as_dict()["references"]["time"]["kind"] == "host"


def test_what_is_accepted_as_a_later_reference() -> None:
    assert not accepted(None)  # ungated: kept, no reference until `history accept` (issue 49)
    assert accepted(Verdict.UNCHANGED)
    assert accepted("improved")
    assert not accepted(Verdict.REGRESSED)
    assert not accepted("inconclusive")


def test_a_policy_that_cannot_work_is_refused() -> None:
    with pytest.raises(ValueError, match="runs >= 2"):
        ReferencePolicy(runs=1)
    with pytest.raises(ValueError, match="runs >= 2"):
        ReferencePolicy(runs=10, spread_runs=5)


def test_students_t_comes_without_importing_scipy_stats() -> None:
    """Issue 38: importing scipy.stats for one quantile took 0.6 s of every report and every
    gated session; scipy.special gives the same numbers (what scipy.stats calls)."""
    from scipy import stats

    q = SMALL_SAMPLE_QUANTILE
    for n in (2, 5, 10, 20, 61, 1000):
        assert small_sample_factor(n) == stats.t.ppf(q, n - 1) / stats.norm.ppf(q)
        assert t_quantile(0.975, n - 1) == stats.t.ppf(0.975, n - 1)
    code = (
        "import sys\n"
        "import gpugauge.report.document, gpugauge.judging.tracking\n"
        "from gpugauge.history.reference import small_sample_factor\n"
        "from gpugauge.ab.verdict import t_quantile\n"
        "small_sample_factor(5), t_quantile(0.975, 4)\n"
        "print(sorted(m for m in sys.modules if m.startswith('scipy.stats')))"
    )
    root = Path(__file__).resolve().parents[1]
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=root, check=True
    )
    assert done.stdout.strip() == "[]"
