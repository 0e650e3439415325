"""A gauge run prints one results table, and measures ceilings only for a roofline.

Quick start 1 on a CPU printed pytest-benchmark's 220-column table of the same results
above gpugauge's, and every session measured "cpu ceilings" first (1.4 s before a 0.1 s
toy), printing ``matmul TFLOP/s fp32 0.0``, though only a case that states its work (a
roofline) reads them (issue 51, build 5).
"""

import json

import pytest

from gpugauge.runtime.benchmark_bridge import TABLE_HIDDEN
from tests.fakes import SPEC_SOURCE

GAUGED = (
    SPEC_SOURCE
    + """
@pytest.mark.cpu
def test_toy(gauge):
    gauge.measure(Spec("toy"), lambda: sum(range(1000)))
"""
)

PLAIN = """
def test_plain(benchmark):
    benchmark(sum, range(100))
"""

ROOFLINE = (
    SPEC_SOURCE
    + """
from gpugauge.measure.roofline import Work

@pytest.mark.cpu
def test_mm(gauge):
    import torch
    a = torch.randn(64, 64)
    gauge.measure(Spec("mm"), lambda: a @ a, work=Work(2 * 64**3, 3 * 64 * 64 * 4, "fp32"))
"""
)

ARGS = ("--gauge-rounds", "3", "--gauge-warmup", "1")
TABLE = "*Name (time in *"  # pytest-benchmark's table header


def test_gauge_results_print_one_table_and_say_how_to_get_the_other(
    gauge_pytester: pytest.Pytester,
) -> None:
    gauge_pytester.makepyfile(test_toy=GAUGED)
    result = gauge_pytester.runpytest(*ARGS)
    result.assert_outcomes(passed=1)
    result.stdout.no_fnmatch_line(TABLE)
    result.stdout.fnmatch_lines([f"*{TABLE_HIDDEN[:60]}*", "*gpugauge results*"])
    result.stdout.no_fnmatch_line("*measuring cpu ceilings*")

    asked = gauge_pytester.runpytest(*ARGS, "--benchmark-sort=min")
    asked.stdout.fnmatch_lines([TABLE, "*gpugauge results*"])
    asked.stdout.no_fnmatch_line("*is not printed*")


def test_the_table_stays_for_pytest_benchmarks_own_tests(gauge_pytester: pytest.Pytester) -> None:
    gauge_pytester.makepyfile(test_toy=GAUGED, test_plain=PLAIN)
    result = gauge_pytester.runpytest(*ARGS)
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines([TABLE])
    result.stdout.no_fnmatch_line("*is not printed*")


def test_ceilings_are_measured_for_a_roofline_only(gauge_pytester: pytest.Pytester) -> None:
    gauge_pytester.makepyfile(test_mm=ROOFLINE)
    out = gauge_pytester.path / "out.json"
    result = gauge_pytester.runpytest(*ARGS, f"--benchmark-json={out}")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*measuring cpu ceilings*"])
    [rates] = [line for line in result.stdout.lines if "matmul TFLOP/s" in line]
    assert not rates.endswith("fp32 0.0")  # three significant digits: a CPU's 0.0653
    data = json.loads(out.read_text())
    assert "cpu" in data["gpugauge"]["ceilings"]
    [bench] = data["benchmarks"]
    assert bench["extra_info"]["extra"]["ceilings"]["copy_gbps"] > 0


def test_an_a_b_side_measures_no_ceilings(gauge_pytester: pytest.Pytester) -> None:
    """--gauge-skip-extras (an A/B's sides): results compared by time need no roofline."""
    gauge_pytester.makepyfile(test_mm=ROOFLINE)
    out = gauge_pytester.path / "out.json"
    result = gauge_pytester.runpytest(*ARGS, "--gauge-skip-extras", f"--benchmark-json={out}")
    result.assert_outcomes(passed=1)
    result.stdout.no_fnmatch_line("*measuring cpu ceilings*")
    [bench] = json.loads(out.read_text())["benchmarks"]
    assert bench["extra_info"]["extra"]["ceilings"] is None
