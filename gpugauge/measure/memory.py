"""Peak memory of one run of a callable, above what was in use before it.

On a GPU: PyTorch's caching allocator peaks (allocated and reserved) after
``reset_peak_memory_stats``, and NVML's device-wide used memory, which also holds the
CUDA context, cuDNN/cuBLAS workspaces and NCCL buffers that PyTorch does not count. On a
CPU: growth of the process's peak RSS, after resetting the kernel's high-water mark.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpugauge.measure.nvml import NvmlDevice

_STATUS = Path("/proc/self/status")


@dataclass(frozen=True)
class Memory:
    """Memory of one run, bytes. GPU fields are None on a CPU and vice versa."""

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
        return {
            **{k: getattr(self, k) for k in self.__dataclass_fields__},
            "peak_bytes": self.peak_bytes,
        }


def measure_cuda_memory(
    fn: Callable[[], object], device: Any, nvml_device: NvmlDevice | None = None
) -> Memory:
    """Peak allocated/reserved bytes of one ``fn()`` above the allocator's state before it."""
    import torch

    torch.cuda.synchronize(device)
    start_alloc = torch.cuda.memory_allocated(device)
    start_res = torch.cuda.memory_reserved(device)
    torch.cuda.reset_peak_memory_stats(device)
    fn()
    torch.cuda.synchronize(device)
    return Memory(
        peak_allocated_bytes=torch.cuda.max_memory_allocated(device) - start_alloc,
        peak_reserved_bytes=torch.cuda.max_memory_reserved(device) - start_res,
        start_allocated_bytes=start_alloc,
        start_reserved_bytes=start_res,
        device_used_bytes=None if nvml_device is None else nvml_device.memory_used_bytes(),
    )


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
        return Memory(note=f"peak RSS unavailable: {err}")
    note = "first-run peak RSS growth; memory the process already held is not counted"
    if not reset:
        note += "; the peak could not be reset, so this is a lower bound"
    return Memory(peak_rss_growth_bytes=max(growth, 0), note=note)


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
