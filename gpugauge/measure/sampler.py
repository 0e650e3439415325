"""A background thread that samples one GPU's clocks, clock-event reasons and power.

It backs two things: the clocks of every timed batch (SM and memory clock, power,
reasons; a batch is flagged throttled when the SM clock fell below 75% of the GPU's
maximum, as nvbench does, or a slowdown reason was raised) and the power trace beside an
energy window. NVML calls run through ctypes and release the GIL, so a 10 ms period costs
the timed thread little.
"""

from __future__ import annotations

import contextlib
import statistics
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

from gpugauge.measure.nvml import SLOWDOWN_MASK, NvmlDevice, reason_names
from gpugauge.measure.timing import BatchState

THROTTLE_CLOCK_FRACTION = 0.75


@dataclass(frozen=True)
class GpuSample:
    """One reading; ``t_s`` is ``time.perf_counter()`` seconds."""

    t_s: float
    sm_clock_mhz: int | None
    reason_mask: int | None
    power_w: float | None
    mem_clock_mhz: int | None = None


class GpuSampler:
    """Samples a GPU every ``period_s`` seconds while entered (``with GpuSampler(dev):``)."""

    def __init__(self, device: NvmlDevice, period_s: float = 0.01) -> None:
        self._dev = device
        self._period = period_s
        self._samples: list[GpuSample] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        max_clock = device.max_sm_clock_mhz()
        self._floor_mhz = None if max_clock is None else max_clock * THROTTLE_CLOCK_FRACTION

    def _read(self) -> GpuSample:
        return GpuSample(
            time.perf_counter(),
            self._dev.sm_clock_mhz(),
            self._dev.clock_event_mask(),
            self._dev.power_w(),
            self._dev.mem_clock_mhz(),
        )

    def _run(self) -> None:
        while not self._stop.is_set():
            self._samples.append(self._read())
            self._stop.wait(self._period)

    def __enter__(self) -> GpuSampler:
        self._samples = [self._read()]
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="gpugauge-sampler", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._samples.append(self._read())

    def between(self, t0: float, t1: float) -> list[GpuSample]:
        """Samples taken in [t0, t1] (perf_counter seconds)."""
        return [s for s in list(self._samples) if t0 <= s.t_s <= t1]

    def state_between(self, t0: float, t1: float, rounds: int) -> BatchState:
        """Median clocks, mean power and every reason over [t0, t1], for ``rounds`` rounds.

        A window shorter than the sampling period holds no sample: the last sample taken
        before its end stands in for it.
        """
        samples = self.between(t0, t1)
        if not samples:
            before = [s for s in list(self._samples) if s.t_s <= t1]
            samples = before[-1:]
        flag, mask = False, 0
        for s in samples:
            mask |= s.reason_mask or 0
            if s.reason_mask and s.reason_mask & SLOWDOWN_MASK:
                flag = True
            if self._floor_mhz and s.sm_clock_mhz and s.sm_clock_mhz < self._floor_mhz:
                flag = True
        sm = [s.sm_clock_mhz for s in samples if s.sm_clock_mhz]
        mem = [s.mem_clock_mhz for s in samples if s.mem_clock_mhz]
        power = [s.power_w for s in samples if s.power_w is not None]
        return BatchState(
            rounds=rounds,
            sm_clock_mhz=float(statistics.median(sm)) if sm else None,
            mem_clock_mhz=float(statistics.median(mem)) if mem else None,
            power_w=sum(power) / len(power) if power else None,
            reasons=reason_names(mask),
            throttled=flag,
        )


@contextlib.contextmanager
def watching(nvml_device: NvmlDevice | None) -> Iterator[GpuSampler | None]:
    """A :class:`GpuSampler` over the block, or None where the GPU has no NVML device."""
    if nvml_device is None:
        yield None
        return
    with GpuSampler(nvml_device) as sampler:
        yield sampler
