"""The one registry of metrics: every number the suite stores, gates, tabulates and reports.

A metric has a name (also its tolerance key and its column), a unit, a direction and a
kind. ``samples`` metrics hold many readings per result (the time of every round) and are
compared on the bootstrap CI of the ratio of medians; ``value`` metrics hold one reading
(a peak, a count, an efficiency) and are compared on the ratio itself. Baselines, the
tolerance files, the gate, the tables and the report all read this registry: adding a
metric is one entry in :data:`METRICS`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum


class Better(StrEnum):
    """Which way is good."""

    LOWER = "lower"
    HIGHER = "higher"


class Kind(StrEnum):
    """How many readings one result holds."""

    SAMPLES = "samples"
    VALUE = "value"


@dataclass(frozen=True)
class Metric:
    """One kind of number a result can hold.

    ``tolerance`` is the default relative worsening the gate allows (0: exact, any
    worsening is a regression); ``slack`` an absolute difference, in ``unit``, that is
    never a change on its own (allocator rounding). ``exact``: the same build reads the
    same value every run (a peak of the allocator, a count), no noise to model.
    ``per_host``: the reading is the host's as much as the build's, so it is judged only
    against the same host's own earlier runs (the results history), never against a
    committed class baseline that another host recorded; there it is shown, not judged.
    ``judged``: False for a diagnostic that the gate and the history never judge; it is
    recorded, stored in baselines and history, and shown in tables and reports.
    """

    name: str
    unit: str
    better: Better
    kind: Kind
    tolerance: float
    description: str
    slack: float = 0.0
    exact: bool = False
    per_host: bool = False
    judged: bool = True

    def allowed(self, tolerance: float) -> str:
        """The bound on current/baseline a result must keep: '<= 1.030' or '>= 0.970'."""
        if self.better is Better.LOWER:
            return f"<= {1 + tolerance:.3f}"
        return f">= {1 - tolerance:.3f}"


MiB = 2**20

METRICS: dict[str, Metric] = {
    m.name: m
    for m in [
        Metric("time", "ms", Better.LOWER, Kind.SAMPLES, 0.015, "device time of one round"),
        Metric(
            "memory",
            "bytes",
            Better.LOWER,
            Kind.VALUE,
            0.01,
            "peak allocated above the start, summed over devices",
            slack=2 * MiB,
            exact=True,
        ),
        Metric("energy", "J", Better.LOWER, Kind.VALUE, 0.15, "energy of one round, all devices"),
        Metric(
            "max_layers",
            "layers",
            Better.HIGHER,
            Kind.VALUE,
            0.0,
            "largest layer count that fits the memory budget",
            exact=True,
        ),
        Metric("throughput", "items/s", Better.HIGHER, Kind.VALUE, 0.03, "items per second"),
        Metric("speedup", "x", Better.HIGHER, Kind.VALUE, 0.03, "reference time / this time"),
        Metric(
            "efficiency", "fraction", Better.HIGHER, Kind.VALUE, 0.03, "speedup / ideal speedup"
        ),
        Metric(
            "busbw",
            "GB/s",
            Better.HIGHER,
            Kind.VALUE,
            0.05,
            "all-reduce bus bandwidth as nccl-tests defines it",
        ),
        Metric("epoch_time", "s", Better.LOWER, Kind.VALUE, 0.03, "one timed training epoch"),
        Metric(
            "weak_speedup",
            "x",
            Better.HIGHER,
            Kind.VALUE,
            0.03,
            "N x one-GPU step time / N-GPU step time, per-GPU batch fixed",
        ),
        # judged=False below: read from the profiler's two windows of five steps, where an
        # NCCL kernel lasts from its rank's arrival at the collective until the slower
        # rank's, so it holds the ranks' skew under the profiler as well as the transfer.
        # One 2x H100 host, nothing changed, five runs: the traced comm share of
        # VGG-16's DDP step read 0.047-0.067, ResNet-18's at batch 512 0.012-0.074, and
        # busbw_utilization 0.09-0.55, while every such case's step time, throughput,
        # efficiency and reference all-reduce busbw stayed within 1.5%. A slower collective
        # that costs time shows in those; these say why.
        Metric(
            "comm_fraction",
            "fraction",
            Better.LOWER,
            Kind.VALUE,
            0.25,
            "communication kernel time / step time, from profiler traces",
            slack=0.02,
            judged=False,
        ),
        Metric(
            "exposed_comm_fraction",
            "fraction",
            Better.LOWER,
            Kind.VALUE,
            0.25,
            "communication no compute overlaps / step time, from profiler traces",
            slack=0.02,
            judged=False,
        ),
        Metric(
            "subtraction_comm_fraction",
            "fraction",
            Better.LOWER,
            Kind.VALUE,
            0.25,
            "(T(N) - T(1)/N) / T(N) of epoch times: the seed's subtraction",
            slack=0.02,
        ),
        Metric(
            "busbw_utilization",
            "fraction",
            Better.HIGHER,
            Kind.VALUE,
            0.10,
            "reference all-reduce time of the gradient bytes / traced communication per step",
            slack=0.02,
            judged=False,
        ),
        Metric(
            "gpu_busy",
            "fraction",
            Better.HIGHER,
            Kind.VALUE,
            0.5,
            "device activity (union of kernels, copies, memsets) / wall time of one step",
            # on one host a halving is a change, so is 0.9 -> 0.4; across hosts a step the
            # host issues moves with the host's pace: one build on five H100 hosts read
            # ResNet-18's eager fp32 step 62-94% busy and MLP's 7.7-18.9%, a 0.41x that
            # would fail a new host's first night (docs/amp.md)
            slack=0.1,
            per_host=True,
        ),
    ]
}


class MetricError(ValueError):
    """A metric name or reading the registry does not allow."""


def metric(name: str) -> Metric:
    """The registry entry of ``name``; MetricError naming the known metrics otherwise."""
    try:
        return METRICS[name]
    except KeyError:
        raise MetricError(f"unknown metric {name!r}; metrics are {', '.join(METRICS)}") from None


def check_readings(readings: Mapping[str, Sequence[float]]) -> None:
    """Every name is registered, a value metric has one reading, a samples metric some."""
    for name, values in readings.items():
        m = metric(name)
        if m.kind is Kind.VALUE and len(values) != 1:
            raise MetricError(f"metric {name!r} is one value, got {len(values)} readings")
        if not values:
            raise MetricError(f"metric {name!r} has no readings")
