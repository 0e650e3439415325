"""vgg_swap: VGG as built against VGG with every ReLU→MaxPool pair swapped (seed 004, Task-3)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from gpugauge.family import Family
from gpugauge.results.comparisons import pair_up

if TYPE_CHECKING:
    from gpugauge.results.measurement import Comparison, Measurement, Spec

NAME = "vgg_swap"


def cases(profile: str) -> Sequence[Spec]:
    """The profile's cases (imports the workload)."""
    from gpugauge.families.vgg_swap.workload import cases

    return cases(profile)


def _title(p: dict[str, Any]) -> str:
    return f"{p['arch']} {p['mode']} {p['dtype']} b{p['batch']} {p['device']}"


def comparisons(measurements: Sequence[Measurement]) -> list[Comparison]:
    """Swapped against normal, for every workload both ran."""
    return pair_up(
        measurements,
        NAME,
        ("variant",),
        lambda p: p["variant"] == "normal",
        _title,
        lambda p: p["variant"],
    )


FAMILY = Family(
    NAME,
    "VGG with ReLU and MaxPool swapped",
    cases,
    comparisons=comparisons,
)
