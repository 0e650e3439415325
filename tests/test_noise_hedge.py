"""'may be noise' only where the change is within a few times the run-to-run noise.

A CPU case whose work doubled read 3.16x and failed, as it should, yet its failure said
"REGRESSED (noisy) ... the change may be noise" and the report "they may be noise, not the
code". A host-timed or noisy result's verdict is hedged only where the change is within
:data:`NOISE_MULTIPLE` times its noise.
"""

from dataclasses import replace
from pathlib import Path

from gpugauge.report.data import ReportData
from gpugauge.report.noise import hedge, hedged_ids, within_noise
from gpugauge.report.tables import fmt_verdict, gate_table
from gpugauge.results.runs import SavedRun
from gpugauge.results.verdicts import Basis, GateResult, MetricCheck, Verdict
from tests.fakes import CLASS, result


def _time(ratio: float, tolerance: float = 0.30) -> MetricCheck:
    verdict = Verdict.REGRESSED if ratio > 1 + tolerance else Verdict.UNCHANGED
    return MetricCheck(
        "time", 100.0, 100 * ratio, ratio, ratio * 0.97, ratio * 1.03, tolerance, verdict,
        Basis.CLASS_BASELINE,
    )  # fmt: skip


def _gated(bid: str, ratio: float, tolerance: float = 0.30) -> GateResult:
    return GateResult(bid, "demo", CLASS, (_time(ratio, tolerance),))


def test_a_doubled_workload_is_no_noise_a_small_change_may_be() -> None:
    assert not within_noise(_time(3.16))  # CPU tolerance 30%: noise 15%, 3 x = 1.52x
    assert within_noise(_time(1.40))
    assert within_noise(_time(1 / 1.40))  # a speed-up of the same size counts alike
    assert within_noise(_time(3.16), cv=0.60)  # rounds that spread 60% hide a 3x change
    assert within_noise(None)  # another metric decided: the time's noise is no measure
    tight = _time(1 / 0.671, tolerance=0.015)  # issue 38: unchanged code on a shared CPU
    assert not within_noise(tight)
    assert within_noise(tight, host=True)  # host-timed: at least 15% run to run
    assert not within_noise(_time(3.16, tolerance=0.015), host=True)


def test_a_change_a_same_gpu_a_b_decided_is_never_hedged() -> None:
    """Its paired interval counts the noise: 1.25x [1.24, 1.26] is no "may be noise"."""
    ab = replace(_time(1.25, tolerance=0.01), basis=Basis.SAME_GPU_AB)
    assert within_noise(_time(1.25), cv=0.13)  # the gated run's own rounds spread 13%
    assert not within_noise(ab, cv=0.13)
    assert not within_noise(replace(ab, ratio=1.002), cv=0.13, host=True)


def test_the_failure_hedges_only_a_change_within_noise() -> None:
    m = result("mm")  # host-timed: uncertain
    assert hedge(m, None) == "host-timed rounds"
    assert hedge(m, _gated("mm", 1.40)) == "host-timed rounds"
    assert hedge(m, _gated("mm", 3.16)) is None


def test_tables_and_the_report_say_noisy_only_where_it_applies() -> None:
    ms = [result("big"), result("small")]
    gated = [_gated("big", 3.16), _gated("small", 1.40)]
    hedged = hedged_ids(gated, {"big", "small"}, ms)
    assert hedged == {"small"}
    assert fmt_verdict(gated[0], "big" in hedged) == "REGRESSED"
    table = gate_table(gated, noisy=hedged)
    assert "REGRESSED (noisy)" in table  # small's
    assert table.count("(noisy)") == 1
    run = SavedRun(Path("run.json"), "run", ms)
    data = ReportData(run, "baselines", [gated[0]], [])
    assert data.noisy == {"big", "small"}
    assert data.hedged == frozenset()
    assert "may be noise" not in data.verdict_line
    data = replace(data, results=[gated[1]])
    assert "they may be noise, not the code" in data.verdict_line


def test_confirm_draws_the_gate_table_again_with_the_gated_run_s_hedge(tmp_path: Path) -> None:
    """A same-GPU A/B's slowdown, and a 3.16x regression beside it, are no "(noisy)".

    confirm's redraw of a run's gate table had marked every uncertain result noisy, where
    the gated run's own table and the report hedge by :func:`hedged_ids` (a review,
    2026-12-07)."""
    import json

    from gpugauge.ab.overruled import decided
    from gpugauge.ab.pairs import Block, Pair
    from gpugauge.ab.result import ABReport, CaseAB, SideInfo
    from gpugauge.report.noise import run_gate_table
    from gpugauge.results.runs import load_run
    from tests.fakes import run_json, time_gate

    new_host = "new host (0 of 5 runs): class baseline, host spread 5.0% (default: 0 other hosts)"
    a = result("a", 3.09)  # host-timed, as b: both uncertain; and one round
    a = replace(a, timing=replace(a.timing, device_ms=a.timing.device_ms[:1], host_ms=(3.09,)))
    ms = [a, result("b", 9.5)]
    said = {"a": (1.03, "unchanged"), "b": (3.16, "regressed")}
    data = run_json(ms)
    for bench in data["benchmarks"]:
        bid = bench["param"]
        bench["fullname"] = f"t.py::test_{bid}"
        bench["extra_info"]["gate"] = time_gate(bid, *said[bid], new_host)
    gated = [
        GateResult.from_dict(b["extra_info"]["gate"], "demo", CLASS) for b in data["benchmarks"]
    ]
    data["gpugauge"]["tables"] = {"gate": run_gate_table(gated, ms)}
    assert data["gpugauge"]["tables"]["gate"].count("(noisy)") == 1  # a's 1.03x, not b's
    path = tmp_path / "run.json"
    path.write_text(json.dumps(data))
    logs = [0.03 + i / 1e4 for i in range(6)]  # 3% slower in every pair
    pairs = tuple(
        Pair(Block(3.0, 10), Block(3.0 * (1 + x), 10), i % 2 == 0) for i, x in enumerate(logs)
    )
    sides = SideInfo("base", "abc", "a" * 40, "py", "gg"), SideInfo("head", "WT", None, "py", "gg")
    decided(path, "a" * 40, ABReport(*sides, (CaseAB("a", "t.py::test_a", pairs),), "cpu", 1.0))
    table = json.loads(path.read_text())["gpugauge"]["tables"]["gate"]
    run = load_run(path)
    now = [GateResult.from_dict(run.verdicts[m.id], "demo", CLASS) for m in run.measurements]
    assert table == run_gate_table(now, run.measurements)
    assert "same-GPU A/B" in table
    assert "(noisy)" not in table
    assert "1.030x 99.8% [1.0" in table  # the A/B's interval, though the run's time had one round
