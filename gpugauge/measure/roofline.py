"""Roofline arithmetic: achieved rates of a measured op against the device's measured ceilings.

An op is described by :class:`Work` (FLOPs and the fewest bytes it must move, both
counted from a formula); with a median time and :class:`~gpugauge.measure.ceilings.Ceilings`
that gives achieved TFLOP/s and GB/s, which of the two bounds it, and how close it gets.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpugauge.core.json_records import from_plain
from gpugauge.measure.ceilings import Ceilings


@dataclass(frozen=True)
class Work:
    """What one round of an op must do: FLOPs, bytes read + written, and its precision."""

    flops: float
    bytes: float
    dtype: str  # key into Ceilings.matmul_tflops: "fp32", "tf32", "bf16", "fp16"


@dataclass(frozen=True)
class Roofline:
    """An op's achieved rates against the measured ceilings."""

    work: Work
    median_ms: float
    peak_tflops: float
    peak_gbps: float

    @property
    def achieved_tflops(self) -> float:
        """FLOPs per second achieved, TFLOP/s."""
        return self.work.flops / (self.median_ms / 1e3) / 1e12

    @property
    def achieved_gbps(self) -> float:
        """Bytes per second achieved, GB/s."""
        return self.work.bytes / (self.median_ms / 1e3) / 1e9

    @property
    def intensity(self) -> float:
        """Arithmetic intensity, FLOP per byte."""
        return self.work.flops / self.work.bytes if self.work.bytes else float("inf")

    @property
    def ridge(self) -> float:
        """Intensity at which the two ceilings meet, FLOP per byte."""
        return self.peak_tflops * 1e3 / self.peak_gbps

    @property
    def bound(self) -> str:
        """'memory' below the ridge, 'compute' above."""
        return "memory" if self.intensity < self.ridge else "compute"

    @property
    def attainable_ms(self) -> float:
        """The roofline's floor: the larger of bytes/bandwidth and FLOPs/rate, ms."""
        return (
            max(
                self.work.bytes / (self.peak_gbps * 1e9),
                self.work.flops / (self.peak_tflops * 1e12),
            )
            * 1e3
        )

    @property
    def share(self) -> float:
        """Fraction of the roofline reached: attainable time / measured time."""
        return self.attainable_ms / self.median_ms

    def as_dict(self) -> dict[str, Any]:
        """Plain dict for JSON, units in the names."""
        return {
            "flops": self.work.flops,
            "bytes": self.work.bytes,
            "dtype": self.work.dtype,
            "median_ms": self.median_ms,
            "achieved_tflops": self.achieved_tflops,
            "achieved_gbps": self.achieved_gbps,
            "peak_tflops": self.peak_tflops,
            "peak_gbps": self.peak_gbps,
            "share_of_bandwidth": self.achieved_gbps / self.peak_gbps,
            "share_of_compute": self.achieved_tflops / self.peak_tflops,
            "intensity_flop_per_byte": self.intensity,
            "ridge_flop_per_byte": self.ridge,
            "bound": self.bound,
            "attainable_ms": self.attainable_ms,
            "roofline_share": self.share,
        }

    @classmethod
    def from_dict(cls, data: Any, where: str = "roofline") -> Roofline:
        """Read back :meth:`as_dict`."""
        work = from_plain(Work, data, where)
        return cls(work, data["median_ms"], data["peak_tflops"], data["peak_gbps"])


def roofline(work: Work, median_ms: float, ceilings: Ceilings) -> Roofline:
    """Place ``work`` done in ``median_ms`` under ``ceilings``.

    The compute ceiling is the measured matmul rate of the op's dtype (fp32 where that dtype
    was not measured, as on a CPU).
    """
    rates = ceilings.matmul_tflops
    peak = rates.get(work.dtype, rates.get("fp32", 0.0))
    return Roofline(work, median_ms, peak, ceilings.copy_gbps)
