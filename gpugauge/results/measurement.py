"""What one benchmark produced: its spec, its raw rounds, and everything measured beside them.

:class:`Measurement` keeps the raw samples; summaries are derived. ``extra_info()`` is the
self-describing record that goes into pytest-benchmark's JSON, units in the field names.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from gpugauge.measure.energy import Energy
from gpugauge.measure.environment import SCHEMA_VERSION, device_class
from gpugauge.measure.memory import Memory
from gpugauge.measure.nvml import GpuState
from gpugauge.measure.roofline import Roofline
from gpugauge.measure.stats import Ratio, Summary, ratio_of_medians
from gpugauge.measure.timing import Timing


class Spec(Protocol):
    """What is measured: a frozen, hashable value whose ``id`` is the pytest id too."""

    family: str
    device: str

    @property
    def id(self) -> str:
        """Readable, unique within the family."""

    def as_dict(self) -> dict[str, Any]:
        """Plain dict for JSON."""


@dataclass(frozen=True)
class Measurement:
    """One benchmark's result. ``energy`` is None with ``energy_note`` saying why."""

    spec: Spec
    timing: Timing
    memory: Memory | None = None
    energy: Energy | None = None
    energy_note: str | None = None
    gpu_before: GpuState | None = None
    gpu_after: GpuState | None = None
    roofline: Roofline | None = None
    memory_check: dict[str, Any] | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def summary(self) -> Summary:
        """Statistics of the device-timed rounds, ms."""
        return self.timing.summary

    def extra_info(self) -> dict[str, Any]:
        """Everything but the samples' stats, for pytest-benchmark's ``extra_info``."""
        t = self.timing
        return {
            "gpugauge_schema": SCHEMA_VERSION,
            "id": self.spec.id,
            "family": self.spec.family,
            "device_class": device_class(self.spec.device),
            "spec": self.spec.as_dict(),
            "timing": {
                "clock": t.clock,
                "unit": "ms",
                "device_ms": list(t.device_ms),
                "summary_ms": t.summary.as_dict(),
                "host_dispatch_summary_ms": t.host_summary.as_dict(),
                "warmup_rounds": t.warmup_rounds,
                "warmup_s": t.warmup_s,
                "stop_reason": t.stop_reason,
                "noisy": t.noisy,
                "throttled_rounds": t.throttled_rounds,
                "clock_events_seen": list(t.clock_events),
                "l2_flushed": t.l2_flushed,
                "policy": t.policy.__dict__,
            },
            "memory": None if self.memory is None else self.memory.as_dict(),
            "energy": None if self.energy is None else self.energy.as_dict(),
            "energy_note": self.energy_note,
            "gpu_before": None if self.gpu_before is None else self.gpu_before.as_dict(),
            "gpu_after": None if self.gpu_after is None else self.gpu_after.as_dict(),
            "roofline": None if self.roofline is None else self.roofline.as_dict(),
            "memory_check": self.memory_check,
            **self.extra,
        }


@dataclass(frozen=True)
class Comparison:
    """Candidate against baseline of the same workload: speedup and memory saved.

    ``speedup`` is baseline time / candidate time (above 1: the candidate is faster), with
    a bootstrap CI over both sample sets. Allocator peaks are deterministic for a fixed
    workload, so memory saved is one exact reading, not an interval.
    """

    title: str
    baseline: Measurement
    candidate: Measurement
    baseline_label: str
    candidate_label: str

    @property
    def speedup(self) -> Ratio:
        """Baseline median / candidate median, with its CI."""
        return ratio_of_medians(self.baseline.timing.device_ms, self.candidate.timing.device_ms)

    @property
    def memory_saved_bytes(self) -> int | None:
        """Baseline peak minus candidate peak, bytes."""
        a = self.baseline.memory.peak_bytes if self.baseline.memory else None
        b = self.candidate.memory.peak_bytes if self.candidate.memory else None
        return None if a is None or b is None else a - b

    @property
    def memory_saved_fraction(self) -> float | None:
        """Memory saved as a share of the baseline's peak."""
        saved = self.memory_saved_bytes
        base = self.baseline.memory.peak_bytes if self.baseline.memory else None
        return None if saved is None or not base else saved / base

    def as_dict(self) -> dict[str, Any]:
        """Plain dict for JSON."""
        return {
            "title": self.title,
            "baseline": self.baseline.spec.id,
            "candidate": self.candidate.spec.id,
            "baseline_label": self.baseline_label,
            "candidate_label": self.candidate_label,
            "baseline_median_ms": self.baseline.summary.median,
            "candidate_median_ms": self.candidate.summary.median,
            "speedup": self.speedup.as_dict(),
            "memory_saved_bytes": self.memory_saved_bytes,
            "memory_saved_fraction": self.memory_saved_fraction,
        }
