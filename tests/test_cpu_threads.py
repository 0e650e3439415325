"""CPU cases run on one intra-op thread unless OMP_NUM_THREADS pins more, and say so.

On a shared two-core VM, torch's default of one thread per core made VGG-16's swapped
training step read 2.26x and 5.0x faster in two runs of one build: the rounds timed the
scheduler. One thread, and a warning where the load average reaches the core count.
"""

import pytest
import torch

from gpugauge.measure.threads import CpuThreads, cpu_threads, load_warning, pinned
from tests.fakes import SPEC_SOURCE


def test_one_thread_unless_omp_num_threads_pins_a_count() -> None:
    assert cpu_threads({}) == CpuThreads(1, "default")
    assert cpu_threads({"OMP_NUM_THREADS": "4"}) == CpuThreads(4, "OMP_NUM_THREADS")
    for bad in ("0", "", "two", "-1"):
        assert cpu_threads({"OMP_NUM_THREADS": bad}) == CpuThreads(1, "default")
    assert "OMP_NUM_THREADS=N" in cpu_threads({}).describe()
    assert cpu_threads({"OMP_NUM_THREADS": "4"}).describe() == "cpu-threads=4 (OMP_NUM_THREADS)"


def test_pinned_restores_the_runs_own_count() -> None:
    before = torch.get_num_threads()
    with pinned(1):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before


def test_load_warning_at_the_core_count() -> None:
    assert load_warning(None, 2) is None
    assert load_warning(1.9, 2) is None
    warned = load_warning(2.0, 2)
    assert warned is not None
    assert warned.startswith("WARNING: the load average reached 2.0 on 2 core(s)")


THREADS = (
    SPEC_SOURCE
    + """
import torch

@pytest.mark.cpu
def test_threads(gauge):
    seen = []
    gauge.measure(Spec("t"), lambda: seen.append(torch.get_num_threads()))
    assert set(seen) == {1}
"""
)


def test_cpu_rounds_run_on_one_thread_said_in_the_header(
    gauge_pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    gauge_pytester.makepyfile(test_t=THREADS)
    result = gauge_pytester.runpytest("--gauge-rounds", "3", "--gauge-warmup", "1")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["gpugauge: profile=smoke devices=cpu * cpu-threads=1 *"])


def test_the_run_queue_clock_leaves_out_the_wait_for_a_core() -> None:
    from gpugauge.measure.clocks import RunQueueClock, schedstat_ns
    from gpugauge.measure.timing import Timing

    # (time on a core, wait for one) at each read, ns
    now = iter([0, 10_000_000, 20_000_000, 50_000_000, 60_000_000, 67_500_000])
    stat = iter(
        [
            *[(0, 0), (6_000_000, 4_000_000), (6_000_000, 4_000_000), (36_000_000, 4_000_000)],
            # a 3 ms spin preempted on each side of a round, just outside it: its counters
            # say it waited 8 ms of its 7.5; it read 0 ms, a run its readers then refused
            *[(36_000_000, 4_000_000), (39_000_000, 12_000_000)],
        ]
    )
    clock = RunQueueClock(lambda: next(now), lambda: next(stat))
    clock.prepare(3)
    for _ in range(3):
        clock.begin()
        clock.end()
    # 10 ms less 4 ms waited; 30 ms, none waited; the spin's 3 ms on a core
    assert clock.collect() == [6.0, 30.0, 3.0]
    timing = Timing((1.0,), (1.0,), RunQueueClock.name, 0, 0.0, "fixed rounds", False)
    assert timing.host_timed
    assert RunQueueClock.available(lambda: (0, 0))
    assert not RunQueueClock.available(lambda: (int(""), 0))
    on_core, waited = schedstat_ns()  # this thread's, where Linux counts them
    assert on_core > 0
    assert waited >= 0


def test_cpu_cases_on_one_thread_use_the_run_queue_clock_where_there_is_one() -> None:
    from gpugauge.measure.clocks import HostClock, RunQueueClock
    from gpugauge.runtime.pipeline import clock_for

    one = clock_for(("cpu",), 1)
    assert isinstance(one, RunQueueClock) == RunQueueClock.available()
    assert type(clock_for(("cpu",), 4)) is HostClock  # other threads' waits are unseen
