"""layers: per-layer time, memory, energy and roofline (seed 004, Task-2)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from gpugauge.family import Family

if TYPE_CHECKING:
    from gpugauge.results.measurement import Spec


def cases(profile: str) -> Sequence[Spec]:
    """The profile's cases (imports the workload)."""
    from gpugauge.families.layers.workload import cases

    return cases(profile)


FAMILY = Family("layers", "per-layer time, memory, power, roofline", cases)
