"""Energy and power over a window of repeated runs, from NVML's total-energy counter.

The counter (millijoules) and the power readings update only every 20-100 ms, and on
Ampere and newer the power reading is a 1-second average, so the window is long (5 s by
default, never under 1 s); a window under 2 s is marked short. The device is synchronized
at both ends of the window, so the host clock around it measures finished work.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from gpugauge.core.arguments import MIN_WINDOW_S
from gpugauge.core.json_records import from_plain, to_plain
from gpugauge.measure.nvml import NvmlDevice
from gpugauge.measure.sampler import GpuSampler

SHORT_WINDOW_S = 2.0


@dataclass(frozen=True)
class Energy:
    """Energy of one device over ``iterations`` runs in ``window_s`` seconds, with its power."""

    device: str | None
    window_s: float
    iterations: int
    energy_j: float
    idle_power_w: float | None
    power_trace_mean_w: float | None
    power_trace_max_w: float | None
    temperature_before_c: int | None
    temperature_after_c: int | None
    short_window: bool

    @property
    def joules_per_iter(self) -> float:
        """Energy per run, joules."""
        return self.energy_j / self.iterations

    @property
    def avg_power_w(self) -> float:
        """Counter energy over the window's time, watts."""
        return self.energy_j / self.window_s

    @property
    def dynamic_joules_per_iter(self) -> float | None:
        """Energy per run above the idle power, joules."""
        if self.idle_power_w is None:
            return None
        return (self.energy_j - self.idle_power_w * self.window_s) / self.iterations

    def as_dict(self) -> dict[str, Any]:
        """Fields plus derived values, for JSON."""
        return {
            **to_plain(self),
            "joules_per_iter": self.joules_per_iter,
            "avg_power_w": self.avg_power_w,
            "dynamic_joules_per_iter": self.dynamic_joules_per_iter,
        }

    @classmethod
    def from_dict(cls, data: Any, where: str = "energy") -> Energy:
        """Read back :meth:`as_dict` (schema 1 had no device)."""
        if isinstance(data, dict) and "device" not in data:
            data = {**data, "device": None}
        return from_plain(cls, data, where)


def idle_power(
    devices: Sequence[NvmlDevice], synchronize: Callable[[], None], idle_s: float
) -> list[float | None]:
    """Each device's power after ``idle_s`` seconds of idling, W.

    The reading is a 1-second average on Ampere and newer, so about a second of idle is
    what it needs to show the idle draw.
    """
    synchronize()
    time.sleep(idle_s)
    return [d.power_w() for d in devices]


def measure_energy(
    fn: Callable[[], object],
    devices: Sequence[NvmlDevice],
    synchronize: Callable[[], None],
    *,
    seconds_per_iter: float,
    window_s: float = 5.0,
    idle_s: float = 1.0,
    idle_power_w: Sequence[float | None] | None = None,
    names: Sequence[str] = (),
) -> tuple[Energy, ...]:
    """Run ``fn`` for about ``window_s`` seconds and read each device's counter around it.

    The devices share one window (a split model, say): each gets its own energy, idle power
    and power trace. The iteration count comes from the already-measured
    ``seconds_per_iter``, topped up until the window is full, so the host waits only at the
    end of each chunk. ``idle_s`` of idling first gives the idle power (the
    1-second-averaged reading needs about that long to settle), unless ``idle_power_w``
    was read already: then the window starts at once, in the regime the work left.
    """
    if window_s < MIN_WINDOW_S:
        raise ValueError(f"energy window must be at least {MIN_WINDOW_S} s, got {window_s}")
    if not devices:
        raise ValueError("measure_energy needs at least one device")
    if any(d.energy_mj() is None for d in devices):
        raise RuntimeError("this GPU has no NVML total-energy counter (needs Volta or newer)")
    labels = list(names) or [None] * len(devices)
    if idle_power_w is None:
        idle_power_w = idle_power(devices, synchronize, idle_s)
    idle_w = list(idle_power_w)
    temp0 = [d.temperature_c() for d in devices]
    with contextlib.ExitStack() as stack:
        samplers = [stack.enter_context(GpuSampler(d, period_s=0.05)) for d in devices]
        synchronize()
        e0, t0 = [d.energy_mj() for d in devices], time.perf_counter()
        iterations, per_iter = 0, max(seconds_per_iter, 1e-9)
        # Rounds can run faster here than when timed (a warm L2, no setup): top up in
        # chunks until the window is really window_s long; each chunk ends synchronized.
        while (left := window_s - (time.perf_counter() - t0)) > 0:
            chunk = max(1, math.ceil(left / per_iter))
            for _ in range(chunk):
                fn()
            synchronize()
            iterations += chunk
            per_iter = (time.perf_counter() - t0) / iterations
        e1, t1 = [d.energy_mj() for d in devices], time.perf_counter()
    out = []
    for i, d in enumerate(devices):
        powers = [s.power_w for s in samplers[i].between(t0, t1) if s.power_w is not None]
        out.append(
            Energy(
                device=labels[i],
                window_s=t1 - t0,
                iterations=iterations,
                energy_j=(e1[i] - e0[i]) / 1000.0,
                idle_power_w=idle_w[i],
                power_trace_mean_w=sum(powers) / len(powers) if powers else None,
                power_trace_max_w=max(powers) if powers else None,
                temperature_before_c=temp0[i],
                temperature_after_c=d.temperature_c(),
                short_window=(t1 - t0) < SHORT_WINDOW_S,
            )
        )
    return tuple(out)
