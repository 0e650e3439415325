"""amp: fp32 against AMP fp16 and bf16 steps, profiler tables, CPU against GPU (seeds 003, 001)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from gpugauge.family import Family
from gpugauge.results.comparisons import pair_up

if TYPE_CHECKING:
    from gpugauge.results.measurement import Comparison, Measurement, Spec

NAME = "amp"


def cases(profile: str) -> Sequence[Spec]:
    """The profile's cases (imports the workload)."""
    from gpugauge.families.amp.workload import cases

    return cases(profile)


def _layout(p: dict[str, Any]) -> str:
    return "NHWC" if p["channels_last"] else "NCHW"


def _mode(p: dict[str, Any]) -> str:
    """How the step is issued: op by op (eager) or replayed from one CUDA graph."""
    return "graphed" if p.get("graphs") else "eager"


def _graphed(p: dict[str, Any]) -> str:
    """A title's suffix for graphed steps (eager titles stay as they were)."""
    return " graphed" if p.get("graphs") else ""


def _cpu_side(m: Measurement) -> Measurement | None:
    """The CPU run a GPU inference case carries in its ``extra`` (never recorded alone)."""
    from dataclasses import replace

    from gpugauge.measure.timing import Timing
    from gpugauge.results.measurement import Measurement, SavedSpec

    timing = (m.extra.get("cpu") or {}).get("timing")
    if timing is None:
        return None
    params = {**m.spec.as_dict(), "device": "cpu"}
    spec = SavedSpec(NAME, m.id.replace(f"-{m.spec.device}", "-cpu"), "cpu", ("cpu",), params)
    return replace(Measurement(spec, timing=Timing.from_dict(timing)), device_class="cpu")


def _inference(measurements: Sequence[Measurement]) -> list[Comparison]:
    from gpugauge.results.measurement import Comparison

    out = []
    for m in measurements:
        cpu = _cpu_side(m) if m.spec.family == NAME and m.timing is not None else None
        if cpu is None:
            continue
        agree = m.extra["agreement"]
        title = (
            f"lenet28 infer b{m.spec.as_dict()['batch']}: outputs agree, "
            f"err {agree['rel_err']:.1e} <= tol {agree['tolerance']:g}"
        )
        out.append(Comparison(title, cpu, m, "cpu", m.spec.device))
    return out


def comparisons(measurements: Sequence[Measurement]) -> list[Comparison]:
    """Precisions against fp32, NHWC against NCHW, graphed against eager, GPU against CPU.

    Pairs differ in the one field compared, so the AMP speedups come both ways: eager
    over eager fp32 and graphed over graphed fp32.
    """
    precision = pair_up(
        measurements,
        NAME,
        ("precision",),
        lambda p: p["precision"] == "fp32",
        lambda p: f"{p['model']} b{p['batch']} {_layout(p)} {p['device']}{_graphed(p)}",
        lambda p: p["precision"],
    )
    layout = pair_up(
        measurements,
        NAME,
        ("channels_last",),
        lambda p: not p["channels_last"],
        lambda p: f"{p['model']} b{p['batch']} {p['precision']} {p['device']}{_graphed(p)} layout",
        _layout,
    )
    graphs = pair_up(
        measurements,
        NAME,
        ("graphs",),
        lambda p: not p["graphs"],
        lambda p: f"{p['model']} b{p['batch']} {p['precision']} {_layout(p)} {p['device']} graphs",
        _mode,
    )
    return precision + layout + graphs + _inference(measurements)


def tables(measurements: Sequence[Measurement]) -> dict[str, str]:
    """The 'amp eager vs graphed' table (imports no torch)."""
    from gpugauge.families.amp.tables import tables

    return tables(measurements)


FAMILY = Family(
    NAME,
    "mixed precision and profiler tables",
    cases,
    comparisons=comparisons,
    tables=tables,
)
