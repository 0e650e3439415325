"""Peak memory of one run of a callable, above what was in use before it.

On a GPU: PyTorch's caching allocator peaks (allocated and reserved) after
``reset_peak_memory_stats``, and NVML's device-wide used memory, which also holds the
CUDA context, cuDNN/cuBLAS workspaces and NCCL buffers that PyTorch does not count. On a
CPU: growth of the process's peak RSS, after resetting the kernel's high-water mark.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpugauge.core.json_records import from_plain, to_plain
from gpugauge.measure.nvml import NvmlDevice

_STATUS = Path("/proc/self/status")


@dataclass(frozen=True)
class Memory:
    """Memory of one run on one device, bytes. GPU fields are None on a CPU and vice versa."""

    device: str | None = None
    peak_allocated_bytes: int | None = None
    peak_reserved_bytes: int | None = None
    start_allocated_bytes: int | None = None
    start_reserved_bytes: int | None = None
    device_used_bytes: int | None = None
    peak_rss_growth_bytes: int | None = None
    note: str | None = None

    @property
    def peak_bytes(self) -> int | None:
        """The headline number: peak allocated above start on a GPU, RSS growth on a CPU."""
        if self.peak_allocated_bytes is not None:
            return self.peak_allocated_bytes
        return self.peak_rss_growth_bytes

    def as_dict(self) -> dict[str, Any]:
        """Fields plus the headline, for JSON."""
        return {**to_plain(self), "peak_bytes": self.peak_bytes}

    @classmethod
    def from_dict(cls, data: Any, where: str = "memory") -> Memory:
        """Read back :meth:`as_dict`."""
        return from_plain(cls, data, where)


def measure_cuda_memory(
    fn: Callable[[], object],
    devices: Sequence[Any],
    nvml_devices: Sequence[NvmlDevice | None] = (),
) -> tuple[Memory, ...]:
    """Per device: peak allocated/reserved bytes of one ``fn()`` above the state before it."""
    import torch

    nvml = list(nvml_devices) or [None] * len(devices)
    start = []
    for d in devices:
        torch.cuda.synchronize(d)
        start.append((torch.cuda.memory_allocated(d), torch.cuda.memory_reserved(d)))
        torch.cuda.reset_peak_memory_stats(d)
    fn()
    out = []
    for d, (alloc, res), nv in zip(devices, start, nvml, strict=True):
        torch.cuda.synchronize(d)
        out.append(
            Memory(
                device=str(d),
                peak_allocated_bytes=torch.cuda.max_memory_allocated(d) - alloc,
                peak_reserved_bytes=torch.cuda.max_memory_reserved(d) - res,
                start_allocated_bytes=alloc,
                start_reserved_bytes=res,
                device_used_bytes=None if nv is None else nv.memory_used_bytes(),
            )
        )
    return tuple(out)


ALLOCATOR_EVENTS = ("num_alloc_retries", "num_ooms", "num_device_alloc", "num_device_free")
"""The caching allocator's costly events: a retry frees every cached block (a device-wide
synchronization) and allocates again; an OOM was raised, and perhaps caught (cuDNN then
takes a plan with a smaller workspace); a device alloc or free is a cudaMalloc or cudaFree,
which a warm steady state does not call."""


def allocator_events(devices: Sequence[Any]) -> list[dict[str, int]]:
    """Per CUDA device, the counts of :data:`ALLOCATOR_EVENTS` so far in this process."""
    import torch

    out = []
    for d in devices:
        stats = torch.cuda.memory_stats(d)
        out.append({k: int(stats.get(k, 0)) for k in ALLOCATOR_EVENTS})
    return out


def events_per_call(
    before: Sequence[dict[str, int]], after: Sequence[dict[str, int]], calls: int
) -> list[dict[str, float]]:
    """The events between two :func:`allocator_events` readings, per call of what ran between."""
    return [
        {k: (a[k] - b[k]) / calls for k in ALLOCATOR_EVENTS}
        for b, a in zip(before, after, strict=True)
    ]


def _status_kib(field: str) -> int:
    match = re.search(rf"^{field}:\s+(\d+) kB", _STATUS.read_text(), re.MULTILINE)
    if match is None:
        raise OSError(f"{field} missing from {_STATUS}")
    return int(match.group(1))


def measure_cpu_memory(fn: Callable[[], object]) -> Memory:
    """Growth of peak RSS during one ``fn()`` (Linux: resets VmHWM via clear_refs).

    Call it on the first run: CPU allocators keep what later runs free and reuse it, so a
    steady-state run shows no growth at all.
    """
    try:
        with contextlib.suppress(OSError):
            Path("/proc/self/clear_refs").write_text("5")
        before = _status_kib("VmRSS")
        reset = _status_kib("VmHWM") == before
        fn()
        growth = (_status_kib("VmHWM") - before) * 1024
    except OSError as err:
        fn()
        return Memory(device="cpu", note=f"peak RSS unavailable: {err}")
    note = "first-run peak RSS growth; memory the process already held is not counted"
    if not reset:
        note += "; the peak could not be reset, so this is a lower bound"
    return Memory(device="cpu", peak_rss_growth_bytes=max(growth, 0), note=note)


TOLERANCE = 0.05
SLACK_BYTES = 2 * 2**20  # allocator rounding: blocks are rounded up, small ones to 2 MiB


@dataclass(frozen=True)
class ExpectedMemory:
    """The bytes an op should allocate, by part, and what else may legitimately show up."""

    parts: dict[str, int]
    extra_explained_by: str | None = None

    @property
    def bytes(self) -> int:
        """Sum of the parts."""
        return sum(self.parts.values())

    def check(self, measured: int | None) -> dict[str, Any]:
        """Compare a measured peak with the expectation: within 5% (or 2 MiB), or why not."""
        if measured is None:
            return {
                "expected_bytes": self.bytes,
                "parts": self.parts,
                "measured_bytes": None,
                "verdict": "no allocator peak here (CPU RSS growth is not comparable)",
            }
        diff = measured - self.bytes
        within = abs(diff) <= max(TOLERANCE * self.bytes, SLACK_BYTES)
        if within:
            verdict = "within 5%"
        elif diff > 0 and self.extra_explained_by:
            verdict = f"{diff / 2**20:.0f} MiB over: {self.extra_explained_by}"
        else:
            side = "over" if diff > 0 else "under"
            verdict = f"{side} by {abs(diff) / 2**20:.0f} MiB: unexplained"
        return {
            "expected_bytes": self.bytes,
            "parts": self.parts,
            "measured_bytes": measured,
            "ratio": measured / self.bytes if self.bytes else None,
            "within_tolerance": within,
            "verdict": verdict,
        }
