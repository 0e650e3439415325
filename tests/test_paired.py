"""Two callables timed in alternating blocks: a comparison the host's drift cannot sway
(issue 51: the CPU quick start's swapped/normal ratio read 0.97-1.26x over three runs)."""

from __future__ import annotations

import math
import time
from dataclasses import replace

import pytest

from gpugauge.measure.paired import paired_blocks
from gpugauge.measure.stats import ratio_of_pairs
from gpugauge.measure.timing import TimingPolicy
from gpugauge.report.tables import comparison_table
from gpugauge.results.measurement import Comparison
from gpugauge.runtime.pipeline import clock_for

from .fakes import result

POLICY = TimingPolicy(warmup_rounds=1, min_rounds=3, target_ci=0.05, budget_s=1.0)


def _spin(ms: float) -> None:
    end = time.thread_time() + ms / 1e3
    while time.thread_time() < end:
        pass


def test_ratio_of_pairs_is_the_geometric_mean_with_a_t_interval() -> None:
    r = ratio_of_pairs([math.log(2.0)] * 3 + [math.log(2.0) + 0.01, math.log(2.0) - 0.01])
    assert r.value == pytest.approx(2.0)
    assert r.ci_low < 2.0 < r.ci_high < 2.03
    assert ratio_of_pairs([0.1]).ci_high == math.inf  # one pair: no interval
    for bad in ([], [math.nan]):
        with pytest.raises(ValueError, match="finite"):
            ratio_of_pairs(bad)


def test_paired_blocks_read_twice_the_work_as_a_ratio_of_two() -> None:
    pairs = paired_blocks(lambda: _spin(2.0), lambda: _spin(1.0), POLICY, clock_for(("cpu",)))
    assert len(pairs.log_ratios) == 8
    assert 1.7 < pairs.ratio.value < 2.3
    assert pairs.timed_s >= 8 * 2 * 0.3 * 0.9  # every block at least its 0.3 s, about
    assert pairs.as_dict()["log_ratios"] == list(pairs.log_ratios)  # the raw pairs kept


def test_a_drift_shared_by_both_blocks_of_a_pair_cancels() -> None:
    """The host gets 3x slower over the blocks: equal work still reads 1.0x."""
    t0 = time.monotonic()

    def drifting() -> None:
        _spin(1.0 * (1 + (time.monotonic() - t0)))

    pairs = paired_blocks(drifting, drifting, POLICY, clock_for(("cpu",)))
    assert time.monotonic() - t0 > 4  # the work grew 5-fold over the pairs
    assert 0.85 < pairs.ratio.value < 1.15


def test_a_comparison_takes_its_speedup_from_the_pairs_against_its_own_baseline() -> None:
    normal, swapped = result("normal", 2.0), result("swapped", 1.0)  # medians: 2.0x
    logs = [math.log(1.05)] * 7 + [math.log(1.06)]
    paired = replace(swapped, extra={"paired": {"against": "normal", "log_ratios": logs}})
    c = Comparison("vgg", normal, paired, "normal", "swapped")
    assert c.speedup.value == pytest.approx(1.051, abs=1e-3)
    assert comparison_table([c]).splitlines()[-1].endswith("from 8 paired blocks")
    # pairs timed against another result say nothing of this comparison
    other = replace(swapped, extra={"paired": {"against": "elsewhere", "log_ratios": logs}})
    assert Comparison("vgg", normal, other, "n", "s").speedup.value == pytest.approx(2.0, rel=0.01)


BENCH = """
import time
from dataclasses import dataclass
from typing import ClassVar

import pytest

from gpugauge.measure.paired import PairedReference


def spin(ms):
    end = time.thread_time() + ms / 1e3
    while time.thread_time() < end:
        pass


@dataclass(frozen=True)
class Case:
    family: ClassVar[str] = "demo"
    variant: str
    device: str = "cpu"

    @property
    def id(self):
        return f"spin-{self.variant}"

    def as_dict(self):
        return {"variant": self.variant, "device": self.device}


def test_normal(gauge):
    gauge.measure(Case("normal"), lambda: spin(2.0))


def test_halved(gauge):
    ref = PairedReference("spin-normal", lambda: (lambda: spin(2.0)))
    m = gauge.measure(Case("halved"), lambda: spin(1.0), reference=ref)
    pairs = m.extra["paired"]
    assert pairs["against"] == "spin-normal"
    assert len(pairs["log_ratios"]) == 8
    assert 1.7 < pairs["value"] < 2.3


def test_the_pairs_time_a_candidate_built_beside_the_reference(gauge):
    built = []
    ref = PairedReference(
        "spin-normal", lambda: (lambda: spin(2.0)), lambda: built.append(1) or (lambda: spin(4.0))
    )
    m = gauge.measure(Case("fresh"), lambda: spin(1.0), reference=ref)
    assert built == [1]
    assert 0.35 < m.extra["paired"]["value"] < 0.65  # the fresh build's 4 ms, not 1 ms


def test_a_reference_needs_no_setup(gauge):
    ref = PairedReference("spin-normal", lambda: (lambda: spin(2.0)))
    with pytest.raises(Exception, match="a reference pairs whole rounds"):
        gauge.measure(Case("other"), lambda: spin(1.0), setup=lambda: None, reference=ref)
"""


def test_a_benchmark_s_reference_is_timed_in_pairs_on_a_cpu(
    gauge_pytester: pytest.Pytester,
) -> None:
    gauge_pytester.makepyfile(test_spin=BENCH)
    out = gauge_pytester.runpytest("--gauge-rounds", "5", "-p", "no:randomly")
    out.assert_outcomes(passed=4)


def test_an_a_b_side_times_no_pairs(gauge_pytester: pytest.Pytester) -> None:
    """--gauge-skip-extras (both sides of an A/B): only the time is compared, no pairs."""
    gauge_pytester.makepyfile(test_spin=BENCH.split("\n\ndef test_halved")[0] + SKIPPED)
    out = gauge_pytester.runpytest("--gauge-rounds", "5", "--gauge-skip-extras")
    out.assert_outcomes(passed=2)


SKIPPED = """

def test_halved(gauge):
    ref = PairedReference("spin-normal", lambda: (lambda: spin(2.0)))
    m = gauge.measure(Case("halved"), lambda: spin(1.0), reference=ref)
    assert "paired" not in m.extra
"""
