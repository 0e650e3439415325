"""The family registry: the harness's one way to reach a family.

Every family, the built-in ones too, is declared as an entry point of the
``gpugauge.families`` group (:mod:`gpugauge.family.entries`); the registry loads each
declared ``Family`` record, checks it, and answers the harness's lookups. Nothing in the
harness imports a family module: importing this one imports none either, until
:func:`registry` is called, and then only each family's record (its package's
``__init__``), not its workload (torch models, data).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import cache
from importlib.metadata import EntryPoint
from types import MappingProxyType
from typing import TYPE_CHECKING

from gpugauge.family import Family
from gpugauge.family.entries import GROUP, Declaration, FamilyError, entries

if TYPE_CHECKING:
    from gpugauge.results.measurement import Comparison, Measurement

__all__ = ["FamilyError", "comparisons_of", "load", "registry"]


def load(entry: Declaration) -> Family:
    """The ``Family`` an entry declares; :class:`FamilyError` naming it and where, if not one."""
    where = f"family {entry.name} ({entry.target}, {entry.source})"
    try:
        family = EntryPoint(entry.name, entry.target, GROUP).load()
    except Exception as err:  # a broken family is named, not a traceback
        raise FamilyError(f"{where} failed to load: {type(err).__name__}: {err}") from err
    if not isinstance(family, Family):
        raise FamilyError(f"{where} is a {type(family).__name__}, not a gpugauge Family")
    if family.name != entry.name:
        raise FamilyError(
            f"{where} is named {family.name!r}: an entry point's name is its family's name"
        )
    return family


@cache
def registry() -> Mapping[str, Family]:
    """Every declared family by name, in name order, each loaded once."""
    return MappingProxyType({entry.name: load(entry) for entry in entries()})


def comparisons_of(measurements: Sequence[Measurement]) -> list[Comparison]:
    """Every family's comparisons among ``measurements``, in registry order."""
    present = {m.spec.family for m in measurements}
    out: list[Comparison] = []
    for name, family in registry().items():
        if name in present:
            out += family.comparisons(measurements)
    return out
