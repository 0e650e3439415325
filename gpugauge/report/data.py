"""What a report shows: one saved run, its verdicts, the runs before it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from gpugauge.history.changepoints import ChangePoint
from gpugauge.history.records import Point
from gpugauge.history.reference import Reference
from gpugauge.report.noise import hedged_ids
from gpugauge.report.tables import run_label, uncertain_ids, verdict_counts
from gpugauge.results.measurement import on_gpu
from gpugauge.results.runs import SavedRun
from gpugauge.results.verdicts import GateResult, Verdict


@dataclass(frozen=True)
class ReportData:
    """Everything a report shows: the current run, its verdicts and the run history.

    ``baseline_noisy`` holds the ids whose time was noisy or host-timed in the run compared
    against (``--against``: :func:`~gpugauge.report.tables.uncertain_ids`); with the current
    run's own they make :attr:`noisy`.

    From the results history (``trend_source``: its path or URL): ``trends`` holds each
    case's time points on its device class, every host, oldest first; ``changes`` their
    change points, largest first; ``bands`` the reference that judged each case in the
    reported run. ``trend_note`` says why there are no trends (empty when there are).
    """

    current: SavedRun
    against: str
    results: list[GateResult]
    history: list[SavedRun]
    notes: tuple[str, ...] = ()
    baseline_noisy: frozenset[str] = field(default_factory=frozenset)
    trends: Mapping[str, tuple[Point, ...]] = field(default_factory=dict)
    changes: tuple[ChangePoint, ...] = ()
    bands: Mapping[str, Reference] = field(default_factory=dict)
    trend_source: str = ""
    trend_note: str = ""

    @property
    def noisy(self) -> frozenset[str]:
        """Ids noisy or host-timed on either side: a change they show may be noise."""
        return uncertain_ids(self.current.measurements) | self.baseline_noisy

    @property
    def hedged(self) -> frozenset[str]:
        """Noisy ids whose change is within a few times the noise: it may be noise."""
        return hedged_ids(self.results, self.noisy, self.current.measurements)

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
    def verdict_line(self) -> str:
        """'1 regressed, 35 unchanged', or a loud line when nothing could be compared."""
        counts = verdict_counts(self.results)
        if any(r.checks for r in self.results):
            moved = [r for r in self.results if r.verdict in (Verdict.REGRESSED, Verdict.IMPROVED)]
            flagged = sum(r.id in self.hedged for r in moved)
            if flagged and flagged == len(moved):
                return counts + (
                    f" (every change noisy or host-timed and within a few times its noise: "
                    f"{flagged} of {len(moved)}; they may be noise, not the code)"
                )
            return counts + (f" ({flagged} of the changes noisy)" if flagged else "")
        return (
            f"NOTHING COMPARED: no result of this run had a counterpart of its device class "
            f"in {self.against}" + (f" ({counts})" if counts else "")
        )


def about(run: SavedRun) -> list[str]:
    """What a reader must know before the numbers: CPU-timed, ended early, tests skipped."""
    lines = []
    if not on_gpu(run.measurements):
        lines.append(run_label(run.measurements, smoke=run.profile in (None, "smoke")))
    if run.outcome is not None:
        early = run.outcome.ended_early()
        lines += [early] if early else []
        lines += run.outcome.skip_lines()
    return lines
