"""distributed: one GPU against DataParallel and DDP on several (seeds 004 Task-4, 002, 000)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from gpugauge.families.distributed.charts import CommBars, ScalingCurves
from gpugauge.family import Family

if TYPE_CHECKING:
    from gpugauge.results.measurement import Spec


def cases(profile: str) -> Sequence[Spec]:
    """The profile's cases."""
    from gpugauge.families.distributed.cases import cases

    return cases(profile)


FAMILY = Family(
    "distributed",
    "single vs several GPUs",
    cases,
    charts=(ScalingCurves(), CommBars()),
    needs=("torchvision",),  # AlexNet, and a local CIFAR-10 copy read through it
    install="pip install 'gpugauge[families]'",
)
