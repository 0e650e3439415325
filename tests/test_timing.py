import time

import pytest

from gpugauge.measure.timing import (
    MAX_BATCH,
    MAX_HEAD_START_S,
    HostClock,
    TimingPolicy,
    _next_batch,
    measure,
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
    assert t.stop_reason.startswith("time budget 0.5 s spent")
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


def test_throttle_watch_flags_batches() -> None:
    class Watch:
        def throttled_between(self, t0: float, t1: float) -> tuple[bool, tuple[str, ...]]:
            return True, ("sw_power_cap",)

    clock = FakeClock(noisy_ms(1.0, 0.0))
    t = measure(lambda: None, TimingPolicy(warmup_rounds=0, rounds=4), clock, watch=Watch())
    assert t.throttled_rounds == 4
    assert t.clock_events == ("sw_power_cap",)


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
    ],
)
def test_invalid_policy_is_rejected(bad: dict) -> None:
    with pytest.raises(ValueError, match="invalid timing policy"):
        TimingPolicy(**bad)


def test_next_batch_never_exceeds_the_cap() -> None:
    policy = TimingPolicy(min_rounds=10, max_rounds=100_000, budget_s=1e9)
    assert _next_batch([1.0] * 1000, 0.0, policy) == MAX_BATCH
    assert _next_batch([1.0] * 3, 0.0, policy) == 7
