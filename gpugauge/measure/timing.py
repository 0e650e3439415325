"""The one timing primitive every benchmark calls: :func:`measure`.

On a GPU each round is bracketed by CUDA events recorded on the current stream, the
events are allocated before the rounds they time, and the host synchronizes once per
batch of rounds to read them; nothing else (no ``.item()``, no printing, no I/O) runs
between a round's two events. On a CPU each round is timed with ``perf_counter_ns``.

Every measurement is taken in a named clock *regime*. A GPU at its power limit boosts for
the first fraction of a second of heavy work and then settles lower (an H200 at 700 W:
1980 MHz, then 1400-1700 MHz), so the same kernel runs 10-15% slower after a second than
in its first milliseconds. ``sustained`` (the default: what training sees) warms up for at
least ``warmup_s`` of back-to-back batches and until two consecutive batch medians agree,
then times rounds for at least ``min_time_s``; ``burst`` idles first so that the clock
recovers, then takes a short run (latency questions). Each timed batch keeps the SM and
memory clocks, power and clock-event reasons seen while it ran.

Then either a fixed number of rounds (the seeds' "average of 10"), or adaptive batches
until the 95% CI of the median is narrow enough or its max time (``--gauge-max-time``) is
reached; the latter is recorded as the stop reason and marks the result noisy, as rounds
spread wider than :data:`NOISY_CV` do (:attr:`Timing.noise`). Every round's time is kept.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Protocol

from gpugauge.core.arguments import REGIMES
from gpugauge.core.json_records import from_plain, to_plain
from gpugauge.core.phrasing import plural
from gpugauge.measure.clocks import (  # noqa: F401 (re-exported)
    HOST_CLOCKS,
    CudaEventClock,
    HostClock,
    RunQueueClock,
)
from gpugauge.measure.stats import Summary, order_statistic_ci, summarize


@dataclass(frozen=True)
class TimingPolicy:
    """How long to warm up and when to stop timing, in which clock regime.

    Warm-up: ``idle_s`` of idling first (the burst regime), ``warmup_rounds`` queued back
    to back, then timed batches of about ``warmup_batch_s`` until ``warmup_s`` has passed
    and, with ``settle`` > 0, two consecutive batch medians differ by at most ``settle``
    (relative) or by less than their own rounds can resolve (:func:`median_halfwidth`),
    but no longer than ``max_warmup_s``. ``rounds`` fixes the round count
    (adaptive stopping is then off); otherwise rounds are added until at least
    ``min_rounds`` rounds are taken, the timed batches span at least ``min_time_s``
    seconds of wall time (the GPU busy with them: rounds, flushes, launch gaps), and
    ``target_ci`` (relative half-width of the 95% CI of the median, 0.01 = ±1%) is met,
    with no more than ``budget_s`` seconds (wall time of the timed batches) or
    ``max_rounds`` rounds spent.
    """

    warmup_rounds: int = 5
    warmup_s: float = 0.0
    rounds: int | None = None
    min_rounds: int = 10
    max_rounds: int = 10_000
    target_ci: float = 0.01
    budget_s: float = 10.0
    flush_l2: bool = False
    regime: str = "sustained"
    min_time_s: float = 0.0
    settle: float = 0.0
    max_warmup_s: float = 10.0
    warmup_batch_s: float = 0.1
    idle_s: float = 0.0

    def __post_init__(self) -> None:
        checks = {
            "warmup_rounds": self.warmup_rounds >= 0,
            "warmup_s": self.warmup_s >= 0,
            "rounds": self.rounds is None or self.rounds >= 1,
            "min_rounds": self.min_rounds >= 1,
            "max_rounds": self.max_rounds >= self.min_rounds,
            "target_ci": 0 < self.target_ci < 1,
            "budget_s": self.budget_s > 0,
            "regime": self.regime in REGIMES,
            "min_time_s": self.min_time_s >= 0,
            "settle": 0 <= self.settle < 1,
            "max_warmup_s": self.max_warmup_s >= self.warmup_s,
            "warmup_batch_s": self.warmup_batch_s > 0,
            "idle_s": self.idle_s >= 0,
        }
        bad = [name for name, ok in checks.items() if not ok]
        if bad:
            raise ValueError(f"invalid timing policy field(s) {bad}: {self}")

    def warmup_plan(self) -> str:
        """What comes before the timed rounds, in words: 'sustained regime, warm-up 5 rounds'."""
        plan = f"{self.regime} regime" + (f", idle {self.idle_s:g} s" if self.idle_s else "")
        plan += f", warm-up {self.warmup_rounds} rounds"
        if self.warmup_s > 0:
            agree = f" until two agree within {self.settle:.0%}" if self.settle else ""
            plan += f", then {self.warmup_s:g}-{self.max_warmup_s:g} s of batches{agree}"
        return plan


class RoundClock(Protocol):
    """Times rounds: ``begin``/``end`` around the callable, ``collect`` after a batch."""

    name: str

    def prepare(self, rounds: int, head_start_s: float = 0.0) -> None:
        """Allocate what ``rounds`` rounds need; hold the device for ``head_start_s``."""

    def begin(self) -> None:
        """Mark a round's start."""

    def end(self) -> None:
        """Mark a round's end."""

    def collect(self) -> list[float]:
        """Wait for the device and return the prepared rounds' times, milliseconds."""

    def synchronize(self) -> None:
        """Wait until all work issued so far has finished."""


@dataclass(frozen=True)
class BatchState:
    """What the GPU did while one batch of rounds ran: clocks (MHz), power (W), reasons.

    Readings are NVML's, which update every 20-100 ms (power is a 1-second average on
    Ampere and newer): a short batch shows the state around it rather than inside it.
    """

    rounds: int
    sm_clock_mhz: float | None = None
    mem_clock_mhz: float | None = None
    power_w: float | None = None
    reasons: tuple[str, ...] = ()
    throttled: bool = False


class ClockWatch(Protocol):
    """Says what the GPU's clocks did during a host-time window."""

    def state_between(self, t0: float, t1: float, rounds: int) -> BatchState:
        """Clocks, power and clock-event reasons for ``perf_counter`` times t0..t1."""


CLOCK_MOVED = 0.05  # relative SM-clock range across batches that a result reports as moved
# A result whose rounds spread wider than this (stdev / mean) is noisy even where its
# median's CI met the target: the median's CI is robust to a heavy tail, so a run whose
# rounds are now and then many times slower (a shared CPU's preemptions: CVs of 260-310%)
# stops early with a narrow CI, yet its next run can read a median far from this one. A
# stdev above the mean takes such a tail: ten rounds in a thousand at ten times the
# median give 82%, one round in eight at 4.5 times 86%.
NOISY_CV = 1.0


@dataclass(frozen=True)
class Timing:
    """Every timed round of one measurement, and how the measurement went."""

    device_ms: tuple[float, ...]
    host_ms: tuple[float, ...]
    clock: str
    warmup_rounds: int
    warmup_s: float
    stop_reason: str
    noisy: bool
    throttled: tuple[bool, ...] = ()
    clock_events: tuple[str, ...] = ()
    l2_flushed: bool = False
    policy: TimingPolicy = field(default_factory=TimingPolicy)
    warmup_batch_ms: tuple[float, ...] = ()  # median of each timed warm-up batch
    settled: bool | None = None  # None: no settling asked for
    batches: tuple[BatchState, ...] = ()
    timed_s: float = 0.0  # wall seconds of the timed batches (warm-up's: warmup_s)

    @cached_property
    def summary(self) -> Summary:
        """Statistics of the device-timed rounds, ms."""
        return summarize(self.device_ms)

    @cached_property
    def host_summary(self) -> Summary:
        """Statistics of the host dispatch time per round, ms (shows launch-bound cases)."""
        return summarize(self.host_ms)

    @property
    def noise(self) -> str | None:
        """Why the rounds are noisy, or None: the one rule every table, chart and verdict reads.

        Noisy when the stop rule said so (its max time ran out before the median's CI
        met its target: ``noisy``), or when the rounds' CV passes :data:`NOISY_CV`. The
        reason is said with it: a bare "noisy" leaves a reader to guess.
        """
        s = self.summary
        if self.noisy:
            target = self.policy.target_ci
            if s.has_interval and target and s.ci_rel_halfwidth > target:
                return f"noisy: CI ±{s.ci_rel_halfwidth:.1%} > target ±{target:.1%}"
            # stopped for another reason (its max time before its min time): that reason
            return f"noisy: {self.stop_reason}" if self.stop_reason else "noisy"
        if s.has_interval and s.cv > NOISY_CV:
            return f"noisy: CV {s.cv:.0%}"
        return None

    @property
    def is_noisy(self) -> bool:
        """Whether :attr:`noise` has a reason."""
        return self.noise is not None

    @property
    def host_timed(self) -> bool:
        """Timed with the host's clock (a CPU result): ``perf_counter_ns`` around each round.

        Such rounds share the host with everything else on it: their run-to-run noise is
        not the device's and a within-run CI does not see it.
        """
        return self.clock in HOST_CLOCKS

    @property
    def regime(self) -> str:
        """The clock regime the rounds were timed in (the policy's)."""
        return self.policy.regime

    @property
    def throttled_rounds(self) -> int:
        """How many rounds ran while the GPU had slowed down."""
        return sum(self.throttled)

    def clocks(self) -> dict[str, float | None]:
        """SM clock over the timed batches, MHz: median (by rounds), min, max; memory clock."""
        sm = [(b.sm_clock_mhz, b.rounds) for b in self.batches if b.sm_clock_mhz]
        mem = [b.mem_clock_mhz for b in self.batches if b.mem_clock_mhz]
        if not sm:
            return {
                "sm_median_mhz": None,
                "sm_min_mhz": None,
                "sm_max_mhz": None,
                "mem_median_mhz": None,
            }
        weighted = sorted(v for v, n in sm for _ in range(n))
        return {
            "sm_median_mhz": weighted[len(weighted) // 2],
            "sm_min_mhz": min(v for v, _ in sm),
            "sm_max_mhz": max(v for v, _ in sm),
            "mem_median_mhz": sorted(mem)[len(mem) // 2] if mem else None,
        }

    @property
    def clock_moved(self) -> float | None:
        """Range of the SM clock across timed batches relative to its median; None unknown."""
        c = self.clocks()
        if c["sm_median_mhz"] is None:
            return None
        return (c["sm_max_mhz"] - c["sm_min_mhz"]) / c["sm_median_mhz"]

    def as_dict(self) -> dict[str, Any]:
        """Every round and setting, plus the derived summaries, for JSON (units: ms, s)."""
        return {
            **to_plain(self),
            "policy": to_plain(self.policy),
            "unit": "ms",
            "batches": [to_plain(b) for b in self.batches],
            "regime": self.regime,
            "summary_ms": self.summary.as_dict(),
            "host_dispatch_summary_ms": self.host_summary.as_dict(),
            "throttled_rounds": self.throttled_rounds,
            "clocks": self.clocks(),
            "clock_moved": self.clock_moved,
            "noise": self.noise,
        }

    @classmethod
    def from_dict(cls, data: Any, where: str = "timing") -> Timing:
        """Read back :meth:`as_dict` (also the schema-1 layout: ``clock_events_seen``)."""
        if isinstance(data, dict) and "clock_events" not in data:
            data = {**data, "clock_events": data.get("clock_events_seen", ())}
            if "throttled" not in data:  # schema 1 kept the count only
                n, k = len(data.get("device_ms", ())), data.get("throttled_rounds", 0)
                data["throttled"] = [True] * k + [False] * (n - k)
        floats = lambda xs: tuple(float(x) for x in xs)  # noqa: E731
        return from_plain(
            cls,
            data,
            where,
            {
                "device_ms": floats,
                "host_ms": floats,
                "throttled": lambda xs: tuple(bool(x) for x in xs),
                "clock_events": tuple,
                "policy": lambda p: from_plain(TimingPolicy, p, f"{where}.policy"),
                "warmup_batch_ms": floats,
                "batches": lambda bs: tuple(
                    from_plain(BatchState, b, f"{where}.batches", {"reasons": tuple}) for b in bs
                ),
            },
        )


def stop_reason(
    samples: Sequence[float], elapsed_s: float, policy: TimingPolicy
) -> tuple[str, bool] | None:
    """Why to stop after these samples, and whether the result is noisy; None to go on."""
    n = len(samples)
    if policy.rounds is not None:
        return (f"fixed {plural(policy.rounds, 'round')}", False) if n >= policy.rounds else None
    short = elapsed_s < policy.min_time_s
    if n < policy.min_rounds or (short and elapsed_s < policy.budget_s):
        return None
    width = summarize(samples).ci_rel_halfwidth
    if short:
        return (
            f"max time {policy.budget_s:g} s reached before {policy.min_time_s:g} s were measured",
            True,
        )
    if width <= policy.target_ci:
        return f"CI ±{width:.2%} within target ±{policy.target_ci:.2%}", False
    if n >= policy.max_rounds:
        return f"max {policy.max_rounds} rounds with CI ±{width:.2%}", True
    if elapsed_s >= policy.budget_s:
        return (
            f"max time {policy.budget_s:g} s reached with CI ±{width:.2%} "
            f"> target ±{policy.target_ci:.2%}",
            True,
        )
    return None


MAX_BATCH = 128  # rounds queued behind one head start: keeps the launch queue from filling
MAX_HEAD_START_S = 0.5


def _next_batch(done: Sequence[float], elapsed_s: float, policy: TimingPolicy) -> int:
    """Double the rounds so far, but stay inside the budget, max_rounds and MAX_BATCH."""
    return min(MAX_BATCH, _wanted(done, elapsed_s, policy))


def _wanted(done: Sequence[float], elapsed_s: float, policy: TimingPolicy) -> int:
    if policy.rounds is not None:
        return policy.rounds - len(done)
    if len(done) < policy.min_rounds:
        return policy.min_rounds - len(done)
    per_round_s = max(sorted(done)[len(done) // 2] / 1e3, 1e-6)
    fits = int(max(policy.budget_s - elapsed_s, 0.0) / per_round_s)
    # the wall time per round (host work, flushes) is elapsed/rounds, not the device median
    wall_per_round_s = max(elapsed_s / len(done), per_round_s)
    to_min_time = math.ceil(max(policy.min_time_s - elapsed_s, 0.0) / wall_per_round_s)
    return max(1, min(max(len(done), to_min_time), fits, policy.max_rounds - len(done)))


def _timed_batch(
    fn: Callable[[], object],
    clock: RoundClock,
    batch: int,
    head_start_s: float,
    between: Callable[[], object] | None,
    host: list[float] | None = None,
) -> tuple[list[float], float]:
    """Time ``batch`` rounds behind a head start; (their times in ms, host s per round)."""
    clock.prepare(batch, head_start_s)
    q0 = time.perf_counter()
    for _ in range(batch):
        if between is not None:
            between()
        h0 = time.perf_counter_ns()
        clock.begin()
        fn()
        clock.end()
        if host is not None:
            host.append((time.perf_counter_ns() - h0) / 1e6)
    queued = (time.perf_counter() - q0) / batch
    return clock.collect(), queued


def _gapless_round_s(times: Sequence[float]) -> float:
    """A round's device time without host gaps, s: the batch's fastest round.

    The lead always covers the first round's dispatch, so at least one round ran back to
    back; rounds the device waited for include the host's time and are slower.
    """
    return min(times) / 1e3


def _head_start(host_per_round_s: float, device_per_round_s: float, batch: int) -> float:
    """The lead the device needs so that no round of ``batch`` waits for the host, s.

    Round j is queued j·host after the batch starts and reached at lead + j·device, so
    the lead must cover one round's dispatch plus, when the host is the slower one,
    (batch − 1)·(host − device); 20% spare. A device that is slower than the host builds
    its own queue and gets one round's lead only: the lead is a spin kernel, which draws
    little power, and a long one lets a power-capped GPU's clock recover between batches.
    ``device_per_round_s`` must be a round's device time measured with no host gap in it
    (0 when none was measured yet: then the whole batch's dispatch is covered); a round
    the device had to wait for reads as the host's time, and would shrink the lead that
    caused the wait.
    """
    deficit = max(host_per_round_s - device_per_round_s, 0.0)
    return min(1.2 * (host_per_round_s + (batch - 1) * deficit), MAX_HEAD_START_S)


def median_halfwidth(times: Sequence[float]) -> float:
    """Half the width of a batch's 95% interval of its median, relative to it.

    Order statistics (:func:`~gpugauge.measure.stats.order_statistic_ci`):
    distribution-free and cheap enough for every warm-up batch. Two batch medians that
    differ by less than their two half-widths have settled as far as their rounds can
    tell: a host-paced step's batches jitter by a few percent for as long as it runs, and
    waiting for them to agree within 2% only spends the warm-up's limit (5 s of the seed
    profile's, on six host-bound steps a night).
    """
    mid = statistics.median(times) if len(times) >= 2 else 0.0
    if mid <= 0:
        return 0.0
    lo, hi = order_statistic_ci(times)
    return (hi - lo) / 2 / mid


@dataclass(frozen=True)
class _Warm:
    rounds: int
    seconds: float
    host_per_round_s: float
    device_per_round_s: float
    batch_ms: tuple[float, ...]
    settled: bool | None


def _warm_up(
    fn: Callable[[], object],
    policy: TimingPolicy,
    clock: RoundClock,
    between: Callable[[], object] | None,
    now: Callable[[], float],
) -> _Warm:
    """Idle if asked, queue the counted rounds, then timed batches until settled."""
    if policy.idle_s:
        clock.synchronize()
        time.sleep(policy.idle_s)  # let the clock recover: the burst regime
    t0 = now()
    q0 = time.perf_counter()
    for _ in range(policy.warmup_rounds):
        if between is not None:
            between()
        fn()
    queued = (time.perf_counter() - q0) / max(policy.warmup_rounds, 1)
    clock.synchronize()
    per_round_s = (now() - t0) / max(policy.warmup_rounds, 1)
    rounds = policy.warmup_rounds
    device_s = 0.0  # no round timed yet: the first lead covers the whole batch's dispatch
    medians: list[float] = []
    spreads: list[float] = []
    settled: bool | None = None
    if policy.warmup_s > 0:
        settled = False
        while True:
            elapsed = now() - t0
            agree = len(medians) >= 2 and abs(medians[-1] / medians[-2] - 1) <= max(
                policy.settle, spreads[-1] + spreads[-2]
            )
            if elapsed >= policy.warmup_s and (policy.settle == 0 or agree):
                settled = True
                break
            if elapsed >= policy.max_warmup_s:
                break
            batch = max(1, min(MAX_BATCH, int(policy.warmup_batch_s / max(per_round_s, 1e-6))))
            lead = _head_start(queued, device_s, batch)
            times, queued = _timed_batch(fn, clock, batch, lead, between)
            rounds += batch
            device_s = _gapless_round_s(times)
            medians.append(statistics.median(times))
            spreads.append(median_halfwidth(times))
            per_round_s = max(medians[-1] / 1e3, 1e-6)
    return _Warm(rounds, now() - t0, queued, device_s, tuple(medians), settled)


def measure(
    fn: Callable[[], object],
    policy: TimingPolicy,
    clock: RoundClock,
    *,
    between: Callable[[], object] | None = None,
    watch: ClockWatch | None = None,
    now: Callable[[], float] = time.perf_counter,
) -> Timing:
    """Warm up in the policy's regime, then time rounds of ``fn`` until the policy says stop.

    ``between`` runs before every round outside the timed region (an L2 flush, say).
    ``watch`` reads the GPU's clocks, power and clock-event reasons for every timed batch
    and flags the rounds of a batch during which the GPU slowed down.
    """
    warm = _warm_up(fn, policy, clock, between, now)
    host_per_round, device_per_round = warm.host_per_round_s, warm.device_per_round_s
    samples: list[float] = []
    host: list[float] = []
    throttled: list[bool] = []
    batches: list[BatchState] = []
    start = now()
    while True:
        batch = _next_batch(samples, now() - start, policy)
        b0 = now()
        lead = _head_start(host_per_round, device_per_round, batch)
        times, host_per_round = _timed_batch(fn, clock, batch, lead, between, host)
        samples.extend(times)
        device_per_round = _gapless_round_s(times)
        if watch is not None:
            state = watch.state_between(b0, now(), batch)
            batches.append(state)
            throttled.extend([state.throttled] * batch)
        verdict = stop_reason(samples, now() - start, policy)
        if verdict is not None:
            break
    reason, noisy = verdict
    return Timing(
        device_ms=tuple(samples),
        host_ms=tuple(host),
        clock=clock.name,
        warmup_rounds=warm.rounds,
        warmup_s=warm.seconds,
        stop_reason=reason,
        noisy=noisy,
        throttled=tuple(throttled),
        clock_events=tuple(sorted({r for b in batches for r in b.reasons})),
        l2_flushed=policy.flush_l2,
        policy=policy,
        warmup_batch_ms=warm.batch_ms,
        settled=warm.settled,
        batches=tuple(batches),
        timed_s=now() - start,
    )
