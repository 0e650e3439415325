"""The registry of benchmark families: one explicit list, plus installed plugins' families.

Each built-in family is a package here exposing ``FAMILY`` (a
:class:`~gpugauge.families.family.Family`). A family shipped in another distribution
registers under the ``gpugauge.families`` entry-point group (``name = "pkg:FAMILY"``). The
core reads :func:`registry` and never names a family; importing this module imports no
family's workload (torch models, data), only what its record needs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import cache
from importlib.metadata import entry_points
from types import MappingProxyType
from typing import TYPE_CHECKING

from gpugauge.families import amp, distributed, layer_fit, layers, vgg_swap
from gpugauge.families.family import Family
from gpugauge.markers import ENTRY_POINT_GROUP

if TYPE_CHECKING:
    from gpugauge.results.measurement import Comparison, Measurement

BUILT_IN: tuple[Family, ...] = (
    vgg_swap.FAMILY,
    layers.FAMILY,
    layer_fit.FAMILY,
    distributed.FAMILY,
    amp.FAMILY,
)


class FamilyError(ValueError):
    """A family plugin that cannot be registered; the message names it."""


@cache
def registry() -> Mapping[str, Family]:
    """Every family by name: the built-in ones, then those installed packages register."""
    found = {f.name: f for f in BUILT_IN}
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        try:
            family = ep.load()
        except Exception as err:  # a broken plugin is named, not a traceback
            raise FamilyError(
                f"family plugin {ep.value!r} ({ep.name}) failed to load: {err}"
            ) from err
        if not isinstance(family, Family):
            raise FamilyError(f"family plugin {ep.value!r} is not a gpugauge Family")
        if family.name in found and found[family.name] is not family:
            raise FamilyError(f"family {family.name!r} ({ep.value}) is registered twice")
        found[family.name] = family
    return MappingProxyType(found)


def comparisons_of(measurements: Sequence[Measurement]) -> list[Comparison]:
    """Every family's comparisons among ``measurements``, in registry order."""
    present = {m.spec.family for m in measurements}
    out: list[Comparison] = []
    for name, family in registry().items():
        if name in present:
            out += family.comparisons(measurements)
    return out
