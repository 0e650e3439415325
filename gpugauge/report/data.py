"""What a report shows: one saved run, its verdicts, the runs before it."""

from __future__ import annotations

from dataclasses import dataclass, replace

from gpugauge.families import comparisons_of
from gpugauge.regress.gate import GateResult
from gpugauge.report.tables import verdict_counts
from gpugauge.results.measurement import Comparison
from gpugauge.results.runs import SavedRun


@dataclass(frozen=True)
class ReportData:
    """Everything a report shows: the current run, its verdicts and the run history."""

    current: SavedRun
    against: str
    results: list[GateResult]
    history: list[SavedRun]
    notes: tuple[str, ...] = ()

    def only(self, family: str) -> ReportData:
        """The same report restricted to one family's results: what its charts are given."""
        run = replace(
            self.current,
            measurements=[m for m in self.current.measurements if m.spec.family == family],
        )
        return replace(
            self,
            current=run,
            results=[r for r in self.results if r.family == family],
            history=[
                replace(h, measurements=[m for m in h.measurements if m.spec.family == family])
                for h in self.history
            ],
        )

    @property
    def comparisons(self) -> list[Comparison]:
        """The current run's comparisons, derived by each family from the results present."""
        return comparisons_of(self.current.measurements)

    @property
    def verdict_line(self) -> str:
        """'1 regressed, 35 unchanged', or a loud line when nothing could be compared."""
        counts = verdict_counts(self.results)
        if any(r.checks for r in self.results):
            return counts
        return (
            f"NOTHING COMPARED: no result of this run had a counterpart of its device class "
            f"in {self.against}" + (f" ({counts})" if counts else "")
        )
