"""The GPU-busy share of a step: how much of its wall time the device spends working.

A step of a small model can take longer to issue than to run: the host launches kernel
after kernel, and the GPU waits between them. Timing it with CUDA events then measures the
host. :func:`measure_busy` times the step in a plain loop (CUDA events around each step, no
head start: what a user's training loop sees), then profiles a few more steps with device
activity only and takes the union of the device's kernels, copies and memsets per step
(:func:`busy_ms_per_step`; overlapping work on several streams counted once). The share is
busy time / loop step time; below :data:`HOST_BOUND_BELOW` an eager step is *host-bound*.

The threshold, 0.8: below it the GPU waits for the host for more than a fifth of the step,
so the eager step is at least 1.25x slower than its device work, more than most effects
these steps are compared for. A device-bound step still has small gaps between dependent
kernels, which add up over a few hundred kernels (docs/amp.md: ResNet-18 fp32 on
one H200, 6.85 ms of device activity in a 7.17 ms step, 0.96); a threshold of 0.9 would
come close to that. A step replayed from a CUDA graph is one launch: the host does not
pace it, so it is never called host-bound (``host_bound`` is None); its own gaps between
graph nodes are the device's.

The profiled steps are never the timed ones (the profiler adds host work to every launch),
and the share's two parts come from different passes over the same step: a device-bound
step's activity in the profiled pass can read a little longer than its wall time in the
plain loop (1.005-1.016 on graphed H200 steps: another clock, the profiler's own work).
A share is at most 1, so :attr:`BusyShare.share` is clamped there, and the record keeps
the measured ratio and says that it was clamped and why.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpugauge.measure.kernels import Interval, length, read_trace

# gpu_busy under which a step is host-bound: the GPU waits for the host for more than a
# fifth of it (the threshold's reasons: this module's docstring)
HOST_BOUND_BELOW = 0.8

# a result's record of its share, ``extra[BUSY_KEY]`` (:meth:`BusyShare.as_dict`): its
# "host_bound" is true or false for a step the host issues op by op, None for one replayed
# from a CUDA graph (one launch: the host does not pace it, and device work added after it
# lengthens it whatever its share)
BUSY_KEY = "busy"
LOOP_STEPS = 10  # steps of the plain loop whose median is the step's wall time
PROFILED_STEPS = 3  # steps whose device activity is traced (after one untraced warm-up)
WARMUP_STEPS = 2  # steps before the loop


def host_bound_of(extra: Mapping[str, Any]) -> bool | None:
    """Whether the host paces a result's step, from its ``extra[BUSY_KEY]`` record.

    True where it does, False where the device does, None where the result has no record
    or its step is graphed.
    """
    busy = extra.get(BUSY_KEY)
    bound = busy.get("host_bound") if isinstance(busy, Mapping) else None
    return bound if isinstance(bound, bool) else None


def busy_ms_per_step(intervals: Iterable[Interval], steps: int) -> float:
    """The union of device activity intervals (µs, as traces hold them) per step, in ms."""
    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    return length(intervals) / 1e3 / steps


@dataclass(frozen=True)
class BusyShare:
    """How busy the GPU was during one step: busy ms of the device / wall ms of the step.

    ``loop_ms``: every step of the plain loop (CUDA events), ms; ``busy_ms``: device
    activity per profiled step, ms; ``graphed``: the step is one CUDA graph launch;
    ``clock``: what timed ``loop_ms``.
    """

    loop_ms: tuple[float, ...]
    busy_ms: float
    profiled_steps: int
    graphed: bool = False
    threshold: float = HOST_BOUND_BELOW
    clock: str = "cuda_event, plain loop (no head start)"

    def __post_init__(self) -> None:
        if not self.loop_ms or min(self.loop_ms) <= 0 or self.busy_ms < 0:
            raise ValueError(f"a busy share needs positive step times and busy >= 0: {self}")

    @property
    def step_ms(self) -> float:
        """Wall time of one step in the plain loop: the median, ms."""
        return statistics.median(self.loop_ms)

    @property
    def ratio(self) -> float:
        """Device busy time / step wall time as measured: two passes, so it may pass 1."""
        return self.busy_ms / self.step_ms

    @property
    def share(self) -> float:
        """The busy share, a fraction at most 1 (:attr:`ratio` clamped; about 1 device-bound)."""
        return min(self.ratio, 1.0)

    @property
    def clamped(self) -> str | None:
        """Why :attr:`share` is not :attr:`ratio`, or None where they agree."""
        if self.ratio <= 1.0:
            return None
        return (
            f"measured {self.ratio:.3f}: the profiled pass read {self.busy_ms:.4g} ms of "
            f"device activity per step, the plain loop {self.step_ms:.4g} ms a step (two "
            "passes over a device-bound step); a share is at most 1"
        )

    @property
    def host_bound(self) -> bool | None:
        """Whether an eager step waits for the host (share below the threshold); None if graphed."""
        return None if self.graphed else self.share < self.threshold

    def as_dict(self) -> dict[str, Any]:
        """Plain dict for a result's ``extra`` (ms)."""
        return {
            "share": self.share,
            "ratio": self.ratio,
            "clamped": self.clamped,
            "host_bound": self.host_bound,
            "threshold": self.threshold,
            "busy_ms": self.busy_ms,
            "step_ms": self.step_ms,
            "loop_ms": list(self.loop_ms),
            "profiled_steps": self.profiled_steps,
            "graphed": self.graphed,
            "clock": self.clock,
        }


def measure_busy(
    step: Callable[[], object],
    device: str,
    trace: Path,
    *,
    graphed: bool = False,
    loop_steps: int = LOOP_STEPS,
    profiled_steps: int = PROFILED_STEPS,
) -> BusyShare:
    """Time ``step`` in a plain loop, then trace ``profiled_steps`` more into ``trace``.

    CUDA only; never inside a timed round. The trace records device activity and its
    launch calls, not host operators (whose tracing slows the host).
    """
    import torch

    from gpugauge.measure.profile import ProfileSchedule, profile_steps
    from gpugauge.measure.timing import CudaEventClock

    if torch.device(device).type != "cuda":
        raise ValueError(f"the GPU-busy share needs a CUDA device, not {device!r}")
    clock = CudaEventClock(device)
    for _ in range(WARMUP_STEPS):
        step()
    clock.synchronize()
    clock.prepare(loop_steps)
    for _ in range(loop_steps):
        clock.begin()
        step()
        clock.end()
    loop_ms = tuple(clock.collect())
    profile_steps(
        step,
        trace,
        device=device,
        schedule=ProfileSchedule(wait=0, warmup=1, active=profiled_steps),
        synchronize=clock.synchronize,
        cpu=False,
    )
    work = [(a.start_us, a.end_us) for a in read_trace(trace) if a.on_device]
    if not work:
        raise RuntimeError(f"the trace {trace} holds no device activity")
    return BusyShare(loop_ms, busy_ms_per_step(work, profiled_steps), profiled_steps, graphed)
