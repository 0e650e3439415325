"""amp: fp32 against AMP fp16 and bf16 steps, profiler tables, CPU against GPU (seeds 003, 001)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from gpugauge.families.family import Family
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
    """Each precision against fp32, NHWC against NCHW, and the GPU against its CPU side."""
    precision = pair_up(
        measurements,
        NAME,
        ("precision",),
        lambda p: p["precision"] == "fp32",
        lambda p: f"{p['model']} b{p['batch']} {_layout(p)} {p['device']}",
        lambda p: p["precision"],
    )
    layout = pair_up(
        measurements,
        NAME,
        ("channels_last",),
        lambda p: not p["channels_last"],
        lambda p: f"{p['model']} b{p['batch']} {p['precision']} {p['device']} layout",
        _layout,
    )
    return precision + layout + _inference(measurements)


FAMILY = Family(
    NAME,
    "mixed precision and profiler tables",
    cases,
    comparisons=comparisons,
)
