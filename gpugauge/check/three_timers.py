"""The three timers of ``gpugauge check timer``, and the ops only the check times.

:func:`compare_timers` times a callable with the suite's own timer
(:func:`gpugauge.measure.timing.measure`), ``triton.testing.do_bench`` (500 ms warm-up, 1 s
of repetitions, median: the settings the 2% threshold was set with, docs/check.md) and a
bare CUDA-event loop, in the order suite, do_bench, bare, do_bench, suite, each round after
do_bench's own L2 flush, with the SM clock each saw; :func:`time_power_heavy` does it for
three power-capped ops that are no benchmark's case.
"""

from __future__ import annotations

import fnmatch
import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from functools import partial
from typing import Any

from gpugauge.core.phrasing import Note
from gpugauge.measure.clocks import CLOCKS_APART, CLOCKS_APART_AT_MOST
from gpugauge.measure.nvml import NvmlDevice
from gpugauge.measure.timing import Timing, TimingPolicy

DO_BENCH_WARMUP_MS = 500  # the settings the threshold was set with (docs/check.md)
DO_BENCH_REP_MS = 1000
BARE_WARMUP = 5  # a plain event loop: 5 warm-up rounds, median of 50
BARE_ROUNDS = 50
BARE_MIN_ROUNDS = 10  # fewer for long ops: at most about BARE_SPAN_MS of rounds
BARE_SPAN_MS = 1000.0
# the last comparisons on an H200 and an H100 held 25 of 25 ops within 2% (worst -1.54%,
# -0.63%; docs/check.md)
DEFAULT_THRESHOLD = 0.02
# suite, do_bench, do_bench, suite is one pair of blocks a side; a row outside the
# threshold whose blocks of one timer spread more than half the threshold is timed again,
# up to MAX_PAIRS: at the power cap one ~1 s block of either timer moves ~3% with nothing
# changed (docs/check.md), so two blocks a side cannot tell 2% apart
MAX_PAIRS = 3


@dataclass(frozen=True)
class TimerRow:
    """One op timed three ways (ms) and the SM clock each saw (MHz; None without NVML).

    ``suite_ms`` and ``do_bench_ms`` are the means of each timer's block medians
    (``suite_runs_ms``, ``do_bench_runs_ms``, in the order they ran, in pairs suite,
    do_bench, do_bench, suite); rows from before the interleaving list none.
    """

    op: str
    suite_ms: float
    do_bench_ms: float
    bare_ms: float
    suite_sm_mhz: float | None = None
    suite_sm_min_mhz: float | None = None
    suite_sm_max_mhz: float | None = None
    do_bench_sm_mhz: float | None = None
    l2_flushed: bool = False
    settled: bool | None = None
    rounds: int = 0
    case_ms: float | None = None  # the case's own median, as its family timed it
    suite_runs_ms: tuple[float, ...] = ()
    do_bench_runs_ms: tuple[float, ...] = ()

    @property
    def vs_do_bench(self) -> float:
        """Suite / do_bench - 1 (positive: the suite reads slower)."""
        return self.suite_ms / self.do_bench_ms - 1

    @property
    def clock_ratio(self) -> float | None:
        """The suite's SM clock / do_bench's; None without both clocks."""
        if not self.suite_sm_mhz or not self.do_bench_sm_mhz:
            return None
        return self.suite_sm_mhz / self.do_bench_sm_mhz

    @property
    def vs_do_bench_at_its_clock(self) -> float | None:
        """Suite / do_bench - 1 with the suite's time scaled to do_bench's SM clock.

        None without both clocks. For an op whose time follows the SM clock (a GEMM or a
        convolution at the power cap), what is left once the two clocks are accounted for.
        """
        ratio = self.clock_ratio
        return None if ratio is None else (self.vs_do_bench + 1) * ratio - 1

    def clocks_explain(self, threshold: float) -> bool:
        """Outside ``threshold`` only because the two timers ran at different SM clocks.

        True when the clocks differ by :data:`CLOCKS_APART` to :data:`CLOCKS_APART_AT_MOST`
        and the difference scaled to one clock is within ``threshold`` (on an H100:
        matmul-8192-bf16 +3.46% at 1380 MHz in the suite, 1410 under do_bench; +1.25% at
        one clock).
        """
        ratio, at_clock = self.clock_ratio, self.vs_do_bench_at_its_clock
        if ratio is None or at_clock is None or abs(self.vs_do_bench) <= threshold:
            return False
        return CLOCKS_APART <= abs(ratio - 1) <= CLOCKS_APART_AT_MOST and abs(at_clock) <= threshold

    @property
    def spread(self) -> float | None:
        """The wider of the two timers' block spreads (max / min - 1); None before blocks."""
        sides = [r for r in (self.suite_runs_ms, self.do_bench_runs_ms) if len(r) >= 2]
        return max(block_spread(r) for r in sides) if sides else None

    @property
    def vs_bare(self) -> float:
        """Suite / bare loop - 1."""
        return self.suite_ms / self.bare_ms - 1

    def as_dict(self) -> dict[str, Any]:
        """Plain dict for JSON, with the two differences."""
        return {**asdict(self), "vs_do_bench": self.vs_do_bench, "vs_bare": self.vs_bare}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TimerRow:
        """Read back :meth:`as_dict` (the derived differences are dropped)."""
        names = cls.__dataclass_fields__
        kept = {k: v for k, v in d.items() if k in names}
        for key in ("suite_runs_ms", "do_bench_runs_ms"):
            kept[key] = tuple(kept.get(key, ()))
        return cls(**kept)


def block_spread(medians: Sequence[float]) -> float:
    """How far one timer's block medians spread: max / min - 1."""
    return max(medians) / min(medians) - 1


def bare_event_loop(
    fn: Callable[[], object],
    rounds: int = BARE_ROUNDS,
    warmup: int = BARE_WARMUP,
    between: Callable[[], object] | None = None,
) -> float:
    """Median ms of a plain loop: events around each call, one synchronize at the end.

    ``between`` (an L2 flush, as the suite and do_bench do for the same op) runs before
    each round, outside its events. No head start, no batches, no warm-up by time.
    """
    import torch

    for _ in range(warmup):
        if between is not None:
            between()
        fn()
    torch.cuda.synchronize()
    pairs = [
        (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
        for _ in range(rounds)
    ]
    for a, b in pairs:
        if between is not None:
            between()
        a.record()
        fn()
        b.record()
    torch.cuda.synchronize()
    return statistics.median(a.elapsed_time(b) for a, b in pairs)


def bare_rounds(suite_ms: float) -> int:
    """Rounds of the bare loop: 50, fewer for long ops (about 1 s of rounds, at least 10)."""
    return max(BARE_MIN_ROUNDS, min(BARE_ROUNDS, math.ceil(BARE_SPAN_MS / max(suite_ms, 1e-6))))


def do_bench_flush(device: str) -> Callable[[], object]:
    """do_bench's own L2 flush (triton's 256 MB buffer, zeroed), for all three timers.

    The check compares timers, so the rest of a round is made the same: the suite's own
    flush zeroes twice the L2 (100 MB on an H100), do_bench's 256 MB, and at the power cap
    what runs between an op's rounds changes the clock it runs at.
    """
    import torch
    from triton import runtime

    driver = runtime.driver.active
    with torch.cuda.device(torch.device(device)):
        cache = driver.get_empty_cache_for_benchmark()
    clear = getattr(driver, "clear_cache", None)  # triton < 3.2: do_bench zeroes it itself
    return cache.zero_ if clear is None else partial(clear, cache)


def cold_timing(
    fn: Callable[[], object],
    policy: TimingPolicy,
    device: str,
    flush: Callable[[], object],
    nvml_device: NvmlDevice | None,
) -> Timing:
    """The suite's one timing primitive on ``fn`` with ``flush`` before every round.

    do_bench clears a 256 MB buffer before each repetition; the suite's timer is compared
    with it in that regime. A case the suite times with a warm L2 (a training step that
    finds its weights in L2) is timed cold here: a 0.12 ms graphed MLP step read 17% under
    do_bench warm and within 0.1% of the warm bare loop.
    """
    from gpugauge.measure.sampler import watching
    from gpugauge.measure.timing import measure
    from gpugauge.runtime.pipeline import clock_for

    cold = replace(policy, flush_l2=True)
    with watching(nvml_device) as watch:
        return measure(fn, cold, clock_for((device,)), between=flush, watch=watch)


def _do_bench(
    fn: Callable[[], object], nvml_device: NvmlDevice | None, warmup_ms: int = DO_BENCH_WARMUP_MS
) -> tuple[float, list[float]]:
    """do_bench's median (ms) and the SM clocks NVML read while it ran (MHz)."""
    import triton.testing

    from gpugauge.measure.sampler import watching

    with watching(nvml_device) as watch:
        t0 = time.perf_counter()
        ms = triton.testing.do_bench(
            fn, warmup=warmup_ms, rep=DO_BENCH_REP_MS, return_mode="median"
        )
        t1 = time.perf_counter()
    seen = [s.sm_clock_mhz for s in watch.between(t0, t1) if s.sm_clock_mhz] if watch else []
    return float(ms), seen


def compare_timers(
    op: str,
    fn: Callable[[], object],
    suite: Callable[[], Timing],
    flush: Callable[[], object],
    nvml_device: NvmlDevice | None,
    case_ms: float | None = None,
    threshold: float = DEFAULT_THRESHOLD,
) -> TimerRow:
    """Time ``fn`` with the suite's timer (``suite()``), do_bench and the bare loop.

    In pairs of blocks suite, do_bench, do_bench, suite (the bare loop once, inside the
    first), each side the mean of its block medians: a GPU at its power cap moves while the
    check runs, and a drift linear in time then weighs the same on both sides instead of on
    whichever timer ran second (matmul-8192-bf16 read +2.88% with the suite first, at
    the same median clock). A row outside ``threshold`` whose blocks of one timer spread
    more than half of it gets another pair, up to :data:`MAX_PAIRS`. ``flush`` runs before
    every round of all three, as do_bench's own flush does (:func:`do_bench_flush`).
    ``case_ms`` is the case's own median, as its family timed it.
    """
    timings: list[Timing] = []
    bench: list[float] = []
    seen: list[float] = []
    bare = 0.0

    def do_bench() -> None:
        ms, clocks = _do_bench(fn, nvml_device)
        bench.append(ms)
        seen.extend(clocks)

    def row() -> TimerRow:
        runs = tuple(t.summary.median for t in timings)
        pooled = replace(timings[0], batches=tuple(b for t in timings for b in t.batches))
        clocks = pooled.clocks()
        return TimerRow(
            op=op,
            suite_ms=statistics.fmean(runs),
            do_bench_ms=statistics.fmean(bench),
            bare_ms=bare,
            suite_sm_mhz=clocks["sm_median_mhz"],
            suite_sm_min_mhz=clocks["sm_min_mhz"],
            suite_sm_max_mhz=clocks["sm_max_mhz"],
            do_bench_sm_mhz=float(statistics.median(seen)) if seen else None,
            l2_flushed=all(t.l2_flushed for t in timings),
            settled=all(t.settled for t in timings),
            rounds=sum(t.summary.n for t in timings),
            case_ms=case_ms,
            suite_runs_ms=runs,
            do_bench_runs_ms=tuple(bench),
        )

    for pair in range(MAX_PAIRS):
        timings.append(suite())
        do_bench()
        if pair == 0:
            bare = bare_event_loop(fn, bare_rounds(timings[0].summary.median), between=flush)
        do_bench()
        timings.append(suite())
        done = row()
        if abs(done.vs_do_bench) <= threshold or (done.spread or 0.0) <= threshold / 2:
            return done
    return done


POWER_HEAVY_OPS = ("matmul-8192-bf16", "matmul-8192-fp16", "conv3x3-256ch-56px-b128-bf16")


def power_heavy_ops() -> list[tuple[str, Callable[[], object]]]:
    """The matmul of the clock-regime table and two more ops that run at the power cap."""
    import torch

    a16 = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b16 = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    h16 = torch.randn(8192, 8192, device="cuda", dtype=torch.float16)
    conv = torch.nn.Conv2d(256, 256, 3, padding=1).cuda().to(torch.bfloat16)
    x = torch.randn(128, 256, 56, 56, device="cuda", dtype=torch.bfloat16)
    conv.requires_grad_(False)

    def conv_fwd() -> object:
        with torch.inference_mode():
            return conv(x)

    ops = [lambda: torch.mm(a16, b16), lambda: torch.mm(h16, h16), conv_fwd]
    return list(zip(POWER_HEAVY_OPS, ops, strict=True))


def time_power_heavy(
    profile: str, patterns: Sequence[str], note: Note, threshold: float = DEFAULT_THRESHOLD
) -> list[TimerRow]:
    """The power-heavy ops (those ``patterns`` select), timed three ways in this process.

    Cold L2 in all three timers, like do_bench, which clears a 256 MB buffer before each
    repetition: timed warm, the H100 read matmul-8192-bf16 2.9% under do_bench.
    """
    chosen = [name for name in POWER_HEAVY_OPS if selected(name, patterns)]
    if not chosen:
        return []
    import torch

    from gpugauge.measure.nvml import maybe_nvml
    from gpugauge.runtime.options import PROFILE_POLICIES

    rows = []
    with maybe_nvml() as nvml:
        dev = None if isinstance(nvml, Exception) else nvml.device(0)
        ops = [(name, fn) for name, fn in power_heavy_ops() if name in chosen]
        flush = do_bench_flush("cuda")
        for name, fn in ops:
            suite = partial(cold_timing, fn, PROFILE_POLICIES[profile], "cuda", flush, dev)
            row = compare_timers(name, fn, suite, flush, dev, threshold=threshold)
            rows.append(row)
            note(f"  {name}: suite {row.suite_ms:.4g} ms, do_bench {row.do_bench_ms:.4g} ms")
    del ops, flush
    torch.cuda.empty_cache()
    return rows


def selected(op: str, patterns: Sequence[str]) -> bool:
    """Whether ``op`` matches any of the shell-style ``patterns`` (all ops when none)."""
    return not patterns or any(fnmatch.fnmatchcase(op, p) for p in patterns)
