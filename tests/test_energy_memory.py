import json
import subprocess
import sys
import time

import pytest

from gpugauge.measure.energy import SHORT_WINDOW_S, Energy, measure_energy
from gpugauge.measure.memory import ALLOCATOR_EVENTS, events_per_call
from gpugauge.measure.nvml import reason_names
from gpugauge.measure.sampler import GpuSampler


class FakeGpu:
    """An NvmlDevice double: energy grows at ``watts`` while time passes."""

    def __init__(self, watts: float = 300.0, clock_mhz: int = 1980, mask: int = 0) -> None:
        self.watts = watts
        self.t0 = time.perf_counter()
        self.clock = clock_mhz
        self.mask = mask

    def energy_mj(self) -> int:
        return int((time.perf_counter() - self.t0) * self.watts * 1000)

    def power_w(self) -> float:
        return self.watts

    def temperature_c(self) -> int:
        return 50

    def sm_clock_mhz(self) -> int:
        return self.clock

    def mem_clock_mhz(self) -> int:
        return 3201

    def max_sm_clock_mhz(self) -> int:
        return 1980

    def clock_event_mask(self) -> int:
        return self.mask


def test_energy_window_reads_the_counter_around_the_runs() -> None:
    [e] = measure_energy(
        lambda: time.sleep(0.01),
        [FakeGpu(300.0)],
        lambda: None,
        seconds_per_iter=0.01,
        window_s=1.0,
        idle_s=0.0,
    )
    assert e.iterations == 100
    assert e.window_s >= 1.0
    assert e.avg_power_w == pytest.approx(300.0, rel=0.02)
    assert e.joules_per_iter == pytest.approx(300.0 * e.window_s / 100, rel=0.02)
    assert e.short_window == (e.window_s < SHORT_WINDOW_S)  # 1 s planned; a loaded host runs over
    assert e.power_trace_mean_w == 300.0
    assert e.as_dict()["dynamic_joules_per_iter"] == pytest.approx(0.0, abs=0.05)


def test_energy_window_is_topped_up_when_rounds_run_faster_than_timed() -> None:
    [e] = measure_energy(
        lambda: time.sleep(0.001),
        [FakeGpu()],
        lambda: None,
        seconds_per_iter=0.05,  # 50× the real round: a loaded CI host cannot close that gap
        window_s=1.0,
        idle_s=0.0,
    )
    assert e.window_s >= 1.0
    assert e.iterations > 20  # more than the first chunk, planned from 50 ms a round


def test_energy_window_under_one_second_is_refused() -> None:
    with pytest.raises(ValueError, match=r"at least 1\.0 s"):
        measure_energy(lambda: None, [FakeGpu()], lambda: None, seconds_per_iter=0.1, window_s=0.5)


def test_devices_share_one_window_each_with_its_own_energy() -> None:
    """A split model: two GPUs read over the same window, each its own counter."""
    e0, e1 = measure_energy(
        lambda: time.sleep(0.01),
        [FakeGpu(300.0), FakeGpu(100.0)],
        lambda: None,
        seconds_per_iter=0.01,
        window_s=1.0,
        idle_s=0.0,
        names=["cuda:0", "cuda:1"],
    )
    assert (e0.device, e1.device) == ("cuda:0", "cuda:1")
    assert e0.iterations == e1.iterations
    assert e0.window_s == e1.window_s
    assert e0.avg_power_w == pytest.approx(3 * e1.avg_power_w, rel=0.05)
    assert Energy.from_dict(e0.as_dict()) == e0


def test_sampler_flags_low_clocks_and_slowdown_reasons() -> None:
    with GpuSampler(FakeGpu(clock_mhz=1000), period_s=0.001) as s:
        time.sleep(0.02)
    assert s.state_between(0, time.perf_counter(), 0).throttled
    with GpuSampler(FakeGpu(mask=0x4), period_s=0.001) as s:  # power cap at full clock
        time.sleep(0.02)
    state = s.state_between(0, time.perf_counter(), 0)
    assert (state.throttled, state.reasons) == (False, ("sw_power_cap",))
    with GpuSampler(FakeGpu(mask=0x40), period_s=0.001) as s:
        time.sleep(0.02)
    state = s.state_between(0, time.perf_counter(), 0)
    assert (state.throttled, state.reasons) == (True, ("hw_thermal_slowdown",))


def test_reason_names() -> None:
    assert reason_names(0x4 | 0x1) == ("gpu_idle", "sw_power_cap")
    assert reason_names(None) == ()


FRESH_CPU_MEMORY = """
import json, torch
from gpugauge.measure.memory import measure_cpu_memory
m = measure_cpu_memory(lambda: torch.ones(64 * 2**20 // 4).sum())
print(json.dumps([m.peak_rss_growth_bytes, m.peak_bytes, m.peak_allocated_bytes]))
"""


def test_cpu_memory_sees_a_large_allocation() -> None:
    # in a fresh process: this one's allocator may hold freed memory from earlier tests,
    # which a first run reuses and, by design, does not count
    out = subprocess.run(
        [sys.executable, "-c", FRESH_CPU_MEMORY], capture_output=True, text=True, check=True
    )
    growth, peak, allocated = json.loads(out.stdout.strip().splitlines()[-1])
    assert growth is not None
    assert growth >= 60 * 2**20
    assert peak == growth
    assert allocated is None


def test_allocator_events_are_counted_per_call_and_device() -> None:
    before = [dict.fromkeys(ALLOCATOR_EVENTS, 0), dict.fromkeys(ALLOCATOR_EVENTS, 5)]
    after = [dict.fromkeys(ALLOCATOR_EVENTS, 30), {**before[1], "num_alloc_retries": 20}]
    per = events_per_call(before, after, calls=15)
    assert per[0] == dict.fromkeys(ALLOCATOR_EVENTS, 2.0)
    assert per[1]["num_alloc_retries"] == 1.0
    assert per[1]["num_ooms"] == 0.0
