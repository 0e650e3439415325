"""The suite's round clocks: CUDA events on a GPU, ``perf_counter_ns`` on a CPU.

On Linux a CPU case on one thread is timed by :class:`RunQueueClock`: ``perf_counter_ns``
less the time the thread waited for a core that other processes held.

Both follow :class:`gpugauge.measure.timing.RoundClock`, the protocol the one timing
primitive (:func:`gpugauge.measure.timing.measure`) times every round with; the timing
module re-exports them.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

# SM clocks this far apart (relative) can explain a difference in time, up to
# CLOCKS_APART_AT_MOST: scaling by the clock holds for an op whose time follows it (a GEMM or
# a convolution at the cap: 2.1% apart on an H100); a wider gap would excuse a memory-bound
# op's real difference. `gpugauge check timer` excuses a row by them, and an A/B measures a
# pair of blocks again whose clocks are further apart than the most they may explain.
CLOCKS_APART = 0.01
CLOCKS_APART_AT_MOST = 0.05


class HostClock:
    """``perf_counter_ns`` per round, for work that runs synchronously on the CPU."""

    name = "perf_counter"

    def __init__(self, now_ns: Callable[[], int] = time.perf_counter_ns) -> None:
        self._now = now_ns
        self._marks: list[tuple[int, int]] = []
        self._t0 = 0

    def prepare(self, rounds: int, head_start_s: float = 0.0) -> None:
        """Nothing to allocate on the host, and nothing runs ahead of it."""
        self._marks = []

    def begin(self) -> None:
        """Read the clock at the round's start."""
        self._t0 = self._now()

    def end(self) -> None:
        """Read the clock at the round's end."""
        self._marks.append((self._t0, self._now()))

    def collect(self) -> list[float]:
        """Return the rounds' times, ms."""
        out = [(b - a) / 1e6 for a, b in self._marks]
        self._marks = []
        return out

    def synchronize(self) -> None:
        """CPU work is already finished when the callable returns."""


SCHEDSTAT = "/proc/thread-self/schedstat"  # Linux: on-CPU ns, run-queue wait ns, slices


def schedstat_ns() -> tuple[int, int]:
    """The calling thread's time on a core and its wait, ready to run, for one (Linux), ns."""
    with open(SCHEDSTAT, "rb") as fh:
        on_cpu, waited = fh.read().split()[:2]
    return int(on_cpu), int(waited)


class RunQueueClock(HostClock):
    """``perf_counter_ns`` per round less the time the thread waited on a run queue.

    On a shared host a round's wall time includes the time the scheduler gave the core
    to other processes while this thread was ready to run: on a two-core VM under a load
    of 4, one thread's rounds of unchanged code moved 2x between runs. Linux counts that
    wait per thread; this clock takes it out, and keeps the time the thread slept or
    waited for I/O, which is the code's. It sees the calling thread only: for CPU work on
    one intra-op thread (:mod:`gpugauge.measure.threads`).

    The counters are read outside the round (their read costs about 20 us), so a wait
    that ends between a read of them and of the clock is taken out too: a round is never
    shorter than the thread's time on a core in it (a 3 ms spin under a load read 0 ms).
    """

    name = "perf_counter-runqueue"

    def __init__(
        self,
        now_ns: Callable[[], int] = time.perf_counter_ns,
        schedstat: Callable[[], tuple[int, int]] = schedstat_ns,
    ) -> None:
        super().__init__(now_ns)
        self._stat = schedstat
        self._ran0 = self._waited0 = 0

    @staticmethod
    def available(schedstat: Callable[[], tuple[int, int]] = schedstat_ns) -> bool:
        """Whether this platform counts the thread's run-queue wait."""
        try:
            schedstat()
        except (OSError, ValueError, IndexError):
            return False
        return True

    def begin(self) -> None:
        """Read the counters, then the clock, at the round's start."""
        self._ran0, self._waited0 = self._stat()
        self._t0 = self._now()

    def end(self) -> None:
        """Read the clock, then the counters; the round's end less the wait it held."""
        t1 = self._now()
        ran, waited = self._stat()
        on_core = self._t0 + ran - self._ran0  # the least the round can have taken
        self._marks.append((self._t0, min(t1, max(on_core, t1 - (waited - self._waited0)))))


HOST_CLOCKS = (HostClock.name, RunQueueClock.name)  # clocks of the host, not a device


class CudaEventClock:
    """CUDA events recorded on the current stream of each device; one synchronize per batch.

    With several devices (a model split over GPUs) a round spans all of them: the first
    device's start event is recorded, every other device's stream waits on it, and at the
    end the first device's stream waits on an event recorded on every other device's
    stream before its own end event. The first device's elapsed time then runs until the
    work on every device has finished, and no device can start a round early.
    ``cuda`` is ``torch.cuda`` (tests pass a fake with the same calls).
    """

    name = "cuda_event"

    def __init__(self, devices: object, cuda: Any = None) -> None:
        import torch

        self._cuda = cuda if cuda is not None else torch.cuda
        listed = [devices] if isinstance(devices, str | torch.device) else list(devices)
        self._devices = [torch.device(d) for d in listed]
        self._rounds: list[tuple[Any, list[Any], Any]] = []
        self._i = 0
        self._rate: float | None = None

    def _stream(self, device: Any) -> Any:
        return self._cuda.current_stream(device)

    def prepare(self, rounds: int, head_start_s: float = 0.0) -> None:
        """Pre-allocate the events of ``rounds`` rounds, then hold for ``head_start_s``.

        The hold is a spin kernel (``torch.cuda._sleep``) queued on the first device before
        the first start event, as nvbench's blocking kernel: while it spins, the host queues
        the batch, so a round whose host dispatch is slower than its device work still runs
        back to back on the device and no host gap lands between its two events.
        """
        ev = self._cuda.Event  # bound to a device when first recorded
        others = len(self._devices) - 1
        self._rounds = [
            (ev(enable_timing=True), [ev() for _ in range(others)], ev(enable_timing=True))
            for _ in range(rounds)
        ]
        self._i = 0
        if head_start_s > 0:
            with self._cuda.device(self._devices[0]):
                self._cuda._sleep(int(head_start_s * self._cycles_per_s()))

    def _cycles_per_s(self) -> float:
        """Spin-kernel cycles per second, calibrated once with events."""
        if self._rate is None:
            cuda = self._cuda
            start, stop = cuda.Event(enable_timing=True), cuda.Event(enable_timing=True)
            cuda._sleep(1_000_000)  # load the kernel
            start.record()
            cuda._sleep(10_000_000)
            stop.record()
            stop.synchronize()
            self._rate = 10_000_000 / (start.elapsed_time(stop) / 1e3)
        return self._rate

    def begin(self) -> None:
        """Record the round's start; other devices' streams wait for it."""
        start, _, _ = self._rounds[self._i]
        start.record(self._stream(self._devices[0]))
        for d in self._devices[1:]:
            self._stream(d).wait_event(start)

    def end(self) -> None:
        """Record the round's end once every device's stream has reached it."""
        _, marks, stop = self._rounds[self._i]
        first = self._stream(self._devices[0])
        for d, mark in zip(self._devices[1:], marks, strict=True):
            mark.record(self._stream(d))
            first.wait_event(mark)
        stop.record(first)
        self._i += 1

    def collect(self) -> list[float]:
        """Synchronize once, then read every recorded round's elapsed time, ms."""
        self.synchronize()
        out = [start.elapsed_time(stop) for start, _, stop in self._rounds[: self._i]]
        self._rounds, self._i = [], 0
        return out

    def synchronize(self) -> None:
        """Wait for every device."""
        for d in self._devices:
            self._cuda.synchronize(d)
