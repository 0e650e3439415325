"""What the harness knows of a benchmark family: the :class:`Family` record a family registers.

A family is a unit: its package holds its cases, steps, charts, tables and comparisons,
and exposes one ``FAMILY``, declared by one entry point of the ``gpugauge.families`` group
(:mod:`gpugauge.family.entries`). The harness (gauge, plugin, session, results, regress,
report, check, history, CLI) reaches a family only through the registry
(:mod:`gpugauge.family.registry`) and never imports or names one; a family imports the harness.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from gpugauge.results.measurement import Comparison, Measurement, Spec


class Chart(Protocol):
    """One figure of a report, a family's or the report's own.

    ``data`` is the report's :class:`gpugauge.report.data.ReportData` (a family's chart gets
    that family's results only). Declared here, below the report, as the family's side of
    the interface: a family names what it draws without importing the report.
    """

    name: str
    title: str

    def applies(self, data: Any) -> bool:
        """Whether the report has data for this chart."""

    def draw(self, data: Any) -> Figure:
        """The figure."""


def _importable(name: str) -> bool:
    """Whether a module can be imported, found without importing it."""
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):  # a parent package missing; a spec-less module
        return False


def no_comparisons(measurements: Sequence[Measurement]) -> list[Comparison]:
    """A family that compares nothing within a run."""
    return []


def no_tables(measurements: Sequence[Measurement]) -> dict[str, str]:
    """A family with no end-of-run tables of its own."""
    return {}


@dataclass(frozen=True)
class Family:
    """One benchmark family as the registry holds it.

    ``name`` is the spec's ``family``, the pytest marker and the baseline file's stem;
    ``about`` is the marker's help line. ``cases(profile)`` lists its specs (importing the
    family's workload only when called). ``comparisons`` pairs results of one run (normal
    against swapped, fp32 against bf16) from whatever results are present, so a comparison
    never depends on which test ran first; ``charts`` are drawn by the report when they
    apply, on this family's results only; ``tables`` are extra end-of-run tables by name.
    ``needs`` names the modules its cases import that gpugauge itself does not install, and
    ``install`` says how to install them: where one is missing, its cases are skipped with
    that reason, never an ImportError.
    """

    name: str
    about: str
    cases: Callable[[str], Sequence[Spec]]
    charts: tuple[Chart, ...] = ()
    comparisons: Callable[[Sequence[Measurement]], list[Comparison]] = no_comparisons
    tables: Callable[[Sequence[Measurement]], dict[str, str]] = no_tables
    needs: tuple[str, ...] = ()
    install: str = ""

    def __post_init__(self) -> None:
        if not self.name.isidentifier():
            raise ValueError(f"family name {self.name!r} must be a Python identifier")

    def missing(self) -> str | None:
        """Why this family's cases cannot run here (a module it needs is missing), or None."""
        gone = [name for name in self.needs if not _importable(name)]
        if not gone:
            return None
        how = f": {self.install}" if self.install else ""
        return f"family {self.name} needs {', '.join(gone)}, which is not installed{how}"
