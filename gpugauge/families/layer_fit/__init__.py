"""layer_fit: how many layers fit one GPU, and the model split over two (seed 004, Task-1)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from gpugauge.families.layer_fit.charts import Frontier
from gpugauge.family import Family
from gpugauge.results.comparisons import pair_up

if TYPE_CHECKING:
    from gpugauge.results.measurement import Comparison, Measurement, Spec

NAME = "layer_fit"


def cases(profile: str) -> Sequence[Spec]:
    """The profile's searches, then its splits (imports the workload)."""
    from gpugauge.families.layer_fit.cases import cases, split_cases

    return [*cases(profile), *split_cases(profile)]


def _schedule(p: dict[str, Any]) -> str:
    return "naive" if p["schedule"] == "naive" else f"{p['schedule']} x{p['micro_batches']}"


def comparisons(measurements: Sequence[Measurement]) -> list[Comparison]:
    """Each pipelined split against the naive split of the same model, budget and allocator."""
    return [
        c
        for c in pair_up(
            measurements,
            NAME,
            ("schedule", "micro_batches"),
            lambda p: p["schedule"] == "naive",
            lambda p: f"layer_fit split c{p['conv']} m{p['fc']} {p['budget']}",
            _schedule,
        )
        if c.candidate.spec.as_dict()["schedule"] != "single"
    ]


FAMILY = Family(
    NAME,
    "how many layers fit, and the split over two GPUs",
    cases,
    charts=(Frontier(),),
    comparisons=comparisons,
)
