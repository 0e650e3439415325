"""A split's profiler trace: how long each device works per step, and both at once."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from gpugauge.families.layer_fit.steps import round_clock
from gpugauge.measure.kernels import device_overlap, read_trace
from gpugauge.measure.profile import ProfileSchedule, profile_steps

TRACE_SCHEDULE = ProfileSchedule(wait=0, warmup=1, active=2)


def trace_overlap(step: Callable[[], object], devices: Sequence[str], path: Path) -> dict[str, Any]:
    """Profile a split's steps into ``path``; each device's busy time and both at once.

    What the timed median cannot say: whether a pipelined step is slow because its
    devices do not overlap (``together_ms`` small) or because each works longer at the
    micro-batch size (``busy_ms`` above the naive split's). ms per step; CUDA only.
    """
    profile_steps(
        step,
        path,
        device=devices[0],
        schedule=TRACE_SCHEDULE,
        synchronize=round_clock(tuple(dict.fromkeys(devices))).synchronize,
        cpu=False,  # CPU-side tracing slows the host, and a host-bound step looks worse
    )
    overlap = device_overlap(read_trace(path), TRACE_SCHEDULE.active)
    return {**overlap.as_dict(), "trace": str(path)}
