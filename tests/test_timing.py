import time

import pytest

from gpugauge.measure.timing import (
    MAX_BATCH,
    MAX_HEAD_START_S,
    BatchState,
    HostClock,
    Timing,
    TimingPolicy,
    _next_batch,
    measure,
    median_halfwidth,
    stop_reason,
)

from .conftest import FakeClock, noisy_ms


def test_fixed_rounds_keep_every_sample_after_warmup() -> None:
    clock = FakeClock(iter(float(i) for i in range(1, 100)))
    t = measure(lambda: None, TimingPolicy(warmup_rounds=5, rounds=10), clock, now=lambda: clock.t)
    # warm-up rounds call fn but are not timed: the fake clock only advances on timed rounds
    assert t.device_ms == tuple(float(i) for i in range(1, 11))
    assert t.warmup_rounds == 5
    assert t.stop_reason == "fixed 10 rounds"
    assert not t.noisy
    assert len(t.host_ms) == 10
    assert clock.syncs == 2  # one after warm-up, one to read the single batch


def test_warmup_by_count_calls_fn_first() -> None:
    calls: list[int] = []
    clock = FakeClock(noisy_ms(1.0, 0.0))
    measure(lambda: calls.append(1), TimingPolicy(warmup_rounds=7, rounds=3), clock)
    assert len(calls) == 10
    assert clock.begins == 3


def test_adaptive_stops_when_the_ci_target_is_met() -> None:
    clock = FakeClock(noisy_ms(10.0, 0.01))
    policy = TimingPolicy(warmup_rounds=0, min_rounds=10, target_ci=0.01, budget_s=100)
    t = measure(lambda: None, policy, clock, now=lambda: clock.t)
    assert "within target" in t.stop_reason
    assert not t.noisy
    assert t.summary.ci_rel_halfwidth <= 0.01
    assert 10 <= t.summary.n < 100


def test_adaptive_gives_up_at_the_budget_and_says_so() -> None:
    clock = FakeClock(noisy_ms(10.0, 0.5))
    policy = TimingPolicy(warmup_rounds=0, min_rounds=5, target_ci=0.001, budget_s=0.5)
    t = measure(lambda: None, policy, clock, now=lambda: clock.t)
    assert t.noisy
    assert t.stop_reason.startswith("max time 0.5 s reached")
    # it stays near the budget: 0.5 s of 10 ms rounds is about 50 rounds
    assert 25 <= t.summary.n <= 110


def test_min_rounds_win_over_the_budget() -> None:
    clock = FakeClock(noisy_ms(1000.0, 0.3))
    policy = TimingPolicy(warmup_rounds=0, min_rounds=8, target_ci=0.0001, budget_s=0.1)
    t = measure(lambda: None, policy, clock, now=lambda: clock.t)
    assert t.summary.n == 8


def test_between_runs_before_every_round_outside_the_timing() -> None:
    order: list[str] = []

    class Recording(FakeClock):
        def begin(self) -> None:
            order.append("begin")

    clock = Recording(noisy_ms(1.0, 0.0))
    measure(
        lambda: order.append("fn"),
        TimingPolicy(warmup_rounds=1, rounds=2),
        clock,
        between=lambda: order.append("flush"),
    )
    assert order == ["flush", "fn", "flush", "begin", "fn", "flush", "begin", "fn"]


def test_clock_watch_records_every_batch_and_flags_throttled_ones() -> None:
    class Watch:
        def __init__(self) -> None:
            self.mhz = iter([1980.0, 1500.0, 1440.0, 1530.0])

        def state_between(self, t0: float, t1: float, rounds: int) -> BatchState:
            mhz = next(self.mhz)
            return BatchState(rounds, mhz, 3201.0, 690.0, ("sw_power_cap",), mhz < 1485)

    clock = FakeClock(noisy_ms(1.0, 0.05))
    policy = TimingPolicy(warmup_rounds=0, min_rounds=2, target_ci=1e-9, max_rounds=16)
    t = measure(lambda: None, policy, clock, watch=Watch(), now=lambda: clock.t)
    assert [b.rounds for b in t.batches] == [2, 2, 4, 8]
    assert t.throttled_rounds == 4  # the batch of 4 rounds at 1440 MHz
    assert t.clock_events == ("sw_power_cap",)
    c = t.clocks()
    assert (c["sm_min_mhz"], c["sm_max_mhz"], c["mem_median_mhz"]) == (1440.0, 1980.0, 3201.0)
    assert c["sm_median_mhz"] == 1530.0  # weighted by rounds: 8 of 16 rounds ran at 1530
    assert t.clock_moved == pytest.approx((1980 - 1440) / 1530)
    back = Timing.from_dict(t.as_dict())
    assert back.batches == t.batches
    assert back.clocks() == c


def _boost_then_sustained(boost_rounds: int) -> object:
    """Rounds as a power-capped GPU runs them: fast while boosting, 15% slower after."""
    for _ in range(boost_rounds):
        yield 1.0
    yield from noisy_ms(1.15, 0.002, seed=1)


def test_sustained_warm_up_waits_for_the_clock_to_settle() -> None:
    clock = FakeClock(_boost_then_sustained(150))
    policy = TimingPolicy(
        warmup_rounds=0, warmup_s=0.3, settle=0.02, min_rounds=20, target_ci=0.01, budget_s=5
    )
    t = measure(lambda: None, policy, clock, now=lambda: clock.t)
    assert t.settled is True
    assert t.warmup_batch_ms[0] == pytest.approx(1.0)  # boost seen in warm-up ...
    assert abs(t.warmup_batch_ms[-1] / t.warmup_batch_ms[-2] - 1) <= 0.02
    assert min(t.device_ms) > 1.1  # ... and none of it in the timed rounds
    assert t.regime == "sustained"


def test_a_warm_up_that_never_settles_says_so() -> None:
    clock = FakeClock(1.0 + i * 0.01 for i in range(1_000_000))  # 1% slower every round
    policy = TimingPolicy(
        warmup_rounds=0,
        warmup_s=0.2,
        settle=0.001,
        max_warmup_s=0.5,
        warmup_batch_s=0.001,
        rounds=5,
    )
    t = measure(lambda: None, policy, clock, now=lambda: clock.t)
    assert t.settled is False
    assert 0.5 <= t.warmup_s < 0.6


def test_a_noisy_step_settles_once_its_batches_agree_within_their_noise() -> None:
    """Issue 48: a host-paced step's batches jitter by more than 2% for as long as it
    runs; its warm-up ends at warmup_s, not at max_warmup_s."""
    clock = FakeClock(noisy_ms(1.0, 0.2, seed=3))
    policy = TimingPolicy(warmup_rounds=0, warmup_s=0.3, settle=0.02, max_warmup_s=5.0, rounds=5)
    t = measure(lambda: None, policy, clock, now=lambda: clock.t)
    assert t.settled is True
    assert t.warmup_s < 0.5
    assert median_halfwidth([1.0] * 10) == 0.0
    assert median_halfwidth([1.0, 3.0]) == pytest.approx(0.5)  # (3 - 1) / 2 / median 2


def test_min_time_keeps_timing_past_a_met_ci() -> None:
    clock = FakeClock(noisy_ms(1.0, 0.001))
    policy = TimingPolicy(warmup_rounds=0, min_rounds=10, min_time_s=0.5, budget_s=100)
    t = measure(lambda: None, policy, clock, now=lambda: clock.t)
    assert sum(t.device_ms) >= 500
    assert t.summary.n < 700  # batches aim at the minimum, not far past it
    assert stop_reason([1.0] * 20, 0.5, TimingPolicy(min_rounds=5, min_time_s=1.0)) is None
    policy = TimingPolicy(min_rounds=5, min_time_s=20.0, budget_s=10.0)
    assert stop_reason([1.0] * 20, 10.0, policy) == (
        "max time 10 s reached before 20 s were measured",
        True,
    )


def test_a_result_stopped_short_of_its_min_time_says_so_not_a_ci_it_met() -> None:
    """Steady rounds whose max time ran out before their min time: noisy for that reason.

    Said as the CI alone, such a result read "noisy: CI ±0% > target ±1%" (a review,
    2026-12-06): a CI inside its target, called the reason it was noisy.
    """
    clock = FakeClock(noisy_ms(1.0, 0.001))
    policy = TimingPolicy(warmup_rounds=0, min_rounds=5, min_time_s=2.0, budget_s=0.5)
    t = measure(lambda: None, policy, clock, now=lambda: clock.t)
    assert t.noisy
    assert t.summary.ci_rel_halfwidth < policy.target_ci
    assert t.noise == "noisy: max time 0.5 s reached before 2 s were measured"


def test_min_time_is_wall_time_so_a_flushed_micro_op_stops_in_time() -> None:
    """0.04 ms rounds behind 0.16 ms of flush and host work each: 1 s of wall time is
    ~5000 rounds, not the 25000 that 1 s of device time would take."""

    class Flushed(FakeClock):
        def end(self) -> None:
            super().end()
            self.t += 0.16e-3  # the flush and launch gap the device time does not see

    clock = Flushed(noisy_ms(0.04, 0.01))
    policy = TimingPolicy(warmup_rounds=0, min_rounds=10, min_time_s=1.0, budget_s=10)
    t = measure(lambda: None, policy, clock, now=lambda: clock.t)
    assert not t.noisy
    assert 4000 <= t.summary.n <= 8000


def test_burst_idles_first() -> None:
    clock = FakeClock(noisy_ms(1.0, 0.0))
    t0 = time.perf_counter()
    t = measure(lambda: None, TimingPolicy(regime="burst", idle_s=0.05, rounds=3), clock)
    assert time.perf_counter() - t0 >= 0.05
    assert t.regime == "burst"
    assert t.settled is None


def test_batches_are_capped_and_get_a_head_start_covering_host_queueing() -> None:
    clock = FakeClock(noisy_ms(0.05, 0.5))
    policy = TimingPolicy(
        warmup_rounds=3, min_rounds=10, target_ci=0.0001, budget_s=100, max_rounds=600
    )
    t = measure(lambda: time.sleep(0.001), policy, clock, now=lambda: clock.t)
    assert t.summary.n == 600
    # each head start covers the batch's queueing time (1 ms a round here), capped
    assert all(h >= 0.001 * 10 for h in clock.head_starts)
    assert max(clock.head_starts) <= MAX_HEAD_START_S


def test_a_device_slower_than_the_host_gets_one_round_of_head_start() -> None:
    """5 ms rounds queued in ~0 ms: the device builds its own queue, and a long spin
    kernel (little power) would let a power-capped clock recover between batches."""
    clock = FakeClock(noisy_ms(5.0, 0.01))
    policy = TimingPolicy(warmup_rounds=3, min_rounds=10, target_ci=0.0001, max_rounds=300)
    measure(lambda: None, policy, clock, now=lambda: clock.t)
    assert len(clock.head_starts) > 3
    assert max(clock.head_starts) < 0.001  # one round's dispatch, not batch x dispatch


class QueueClock:
    """A device that runs each kernel when it is issued or when it is free, whichever is
    later (host time is real time): rounds the device waits for read as the host's time,
    as CUDA events would show them."""

    name = "queue"

    def __init__(self) -> None:
        self.free = 0.0
        self.rounds: list[float] = []
        self.leads: list[float] = []

    def prepare(self, rounds: int, head_start_s: float = 0.0) -> None:
        self.leads.append(head_start_s)
        self.free = max(self.free, time.perf_counter()) + head_start_s

    def begin(self) -> None:
        self.free = max(self.free, time.perf_counter())
        self._start = self.free

    def kernel(self, seconds: float) -> None:
        self.free = max(self.free, time.perf_counter()) + seconds

    def end(self) -> None:
        self.free = max(self.free, time.perf_counter())
        self.rounds.append((self.free - self._start) * 1e3)

    def collect(self) -> list[float]:
        self.synchronize()
        out, self.rounds = self.rounds, []
        return out

    def synchronize(self) -> None:
        while time.perf_counter() < self.free:
            pass


def _host_bound_round(clock: QueueClock, host_s: float, device_s: float, kernels: int = 10):
    def fn() -> None:
        for _ in range(kernels):
            until = time.perf_counter() + host_s / kernels
            while time.perf_counter() < until:
                pass
            clock.kernel(device_s / kernels)

    return fn


@pytest.mark.parametrize(
    "policy",
    [
        TimingPolicy(warmup_rounds=5, rounds=10),  # the seeds' method: no timed warm-up
        TimingPolicy(warmup_rounds=5, warmup_s=0.05, min_rounds=10, budget_s=0.5),
    ],
    ids=["fixed", "adaptive"],
)
def test_a_host_slower_than_the_device_still_measures_device_time(policy) -> None:
    """2 ms of dispatch for 0.5 ms of device work a round: the lead must cover the batch,
    or the rounds time the host (a lead sized from such rounds stays too short)."""
    clock = QueueClock()
    t = measure(_host_bound_round(clock, 2e-3, 0.5e-3), policy, clock)
    assert t.summary.median == pytest.approx(0.5, rel=0.1)
    assert max(clock.leads) > 5 * 2e-3  # several rounds' dispatch, not one


def test_host_clock_measures_real_work() -> None:
    t = measure(lambda: time.sleep(0.01), TimingPolicy(warmup_rounds=1, rounds=5), HostClock())
    assert t.clock == "perf_counter"
    assert all(9.5 <= ms < 100 for ms in t.device_ms)


def test_stop_reason_needs_min_rounds() -> None:
    assert stop_reason([1.0] * 3, 99.0, TimingPolicy(min_rounds=5)) is None
    assert stop_reason([1.0] * 5, 0.0, TimingPolicy(min_rounds=5))[1] is False


@pytest.mark.parametrize(
    "bad",
    [
        dict(warmup_rounds=-1),
        dict(rounds=0),
        dict(min_rounds=0),
        dict(target_ci=0),
        dict(target_ci=1.5),
        dict(budget_s=0),
        dict(min_rounds=20, max_rounds=10),
        dict(regime="boost"),
        dict(min_time_s=-1),
        dict(settle=1.0),
        dict(warmup_s=20, max_warmup_s=10),
    ],
)
def test_invalid_policy_is_rejected(bad: dict) -> None:
    with pytest.raises(ValueError, match="invalid timing policy"):
        TimingPolicy(**bad)


def test_next_batch_never_exceeds_the_cap() -> None:
    policy = TimingPolicy(min_rounds=10, max_rounds=100_000, budget_s=1e9)
    assert _next_batch([1.0] * 1000, 0.0, policy) == MAX_BATCH
    assert _next_batch([1.0] * 3, 0.0, policy) == 7


def test_a_policy_says_what_its_warm_up_does() -> None:
    """A run's note before each case's rounds: the smoke profile does not settle; seed does."""
    from gpugauge.runtime.options import PROFILE_POLICIES

    assert PROFILE_POLICIES["smoke"].warmup_plan() == "sustained regime, warm-up 5 rounds"
    assert PROFILE_POLICIES["seed"].warmup_plan() == (
        "sustained regime, warm-up 5 rounds, then 1-5 s of batches until two agree within 2%"
    )
    burst = TimingPolicy(regime="burst", idle_s=2.0, warmup_rounds=2)
    assert burst.warmup_plan() == "burst regime, idle 2 s, warm-up 2 rounds"
