"""A device class's first nights: results with no baseline, recorded, then judged by them.

A team with new runners of a GPU it has no baselines for (``baselines/<class>/``) gets a
red nightly from night one under ``--gauge-require-baselines``: every result is *new*.
``--gauge-first-nights N`` changes that for results the gate and the history cannot judge,
and for them only (a verdict other than *new* is never touched, so nothing that regressed
can pass):

* while the history holds fewer than N accepted runs of the case on its class, the result
  passes, saying "first nights of CLASS: night k of N", and is kept in the history;
* once N are there, it is judged against its host's last N accepted runs (the history's own
  judging, :func:`~gpugauge.history.host_checks.check_case`, with a reference of N runs, allowed
  what ``baseline --from-history`` would commit from them), so a slowdown on night N + 1
  fails; from 5 runs on the history judges the case by itself;
* what even then has nothing to judge it (a metric that only a committed baseline judges)
  stays *new*, saying how to commit the runs as baselines
  (``python -m gpugauge baseline --from-history CLASS --runs N``); under
  ``--gauge-require-baselines`` it fails.

It needs a history to count in: a run whose history is out of reach, or stops answering,
lets no result pass as a first night, and says so. A result with injected work (``gpugauge
check``'s slowdown) never joins the history, so it is never a first night either.
"""

from __future__ import annotations

import shlex
from collections import Counter
from dataclasses import dataclass, field, replace
from enum import StrEnum
from pathlib import Path

from gpugauge.core.phrasing import joined, plural
from gpugauge.history.records import HistoryError
from gpugauge.history.reference import DEFAULT_POLICY, ReferencePolicy
from gpugauge.history.store import default_target
from gpugauge.history.targets import redact
from gpugauge.judging.tracking import Tracker, judged_here
from gpugauge.regress.gate import Gate
from gpugauge.results.measurement import Measurement, injected
from gpugauge.results.verdicts import GateResult, Verdict

OPTION = "--gauge-first-nights"


def commit_hint(
    device_class: str, nights: int, history: str | None = None, baselines: str | None = None
) -> str:
    """The command that turns a class's first runs into committed baselines.

    ``history``: the run's history; named with ``--history`` unless the command would find
    it by default, so that the command works as printed (a password shown as ``***``).
    ``baselines``: the folder the run's gate read; named with ``--baselines-dir`` unless it
    is the command's default (``baselines`` here), or the pasted command writes elsewhere.
    """
    said = f"python -m gpugauge baseline --from-history {device_class} --runs {nights}"
    if history is not None and history != default_target():
        said += f" --history {shlex.quote(redact(history))}"
    if baselines is not None and Path(baselines).resolve() != Path("baselines").resolve():
        said += f" --baselines-dir {shlex.quote(baselines)}"
    return said


class Stage(StrEnum):
    """Where a result with no baseline stands in its class's first nights."""

    FIRST = "first night"  # fewer than N runs recorded: passes, kept in the history
    JUDGED = "judged"  # N or more recorded: judged against its host's last N runs
    OVER = "over"  # N or more recorded, yet nothing in the history judges it: stays new
    HISTORY = "history"  # judged by the history's own rule (5 runs), still no baseline
    REFUSED = "refused"  # not counted (no history, injected work): stays new


@dataclass(frozen=True)
class Night:
    """What first nights made of one result.

    ``recorded``: accepted runs of the case on its class in the history before this run;
    ``nights``: N; ``why``: for a refused or finished one, the reason in words.
    """

    id: str
    device_class: str
    stage: Stage
    recorded: int
    nights: int
    why: str = ""
    history: str | None = None  # the history counted in, for the printed command
    baselines: str | None = None  # the gate's baselines folder, for the printed command

    def describe(self) -> str:
        """The phrase a verdict line and the gate table carry."""
        cls, n = self.device_class, self.nights
        hint = commit_hint(cls, n, self.history, self.baselines)
        if self.stage is Stage.FIRST:
            return (
                f"first nights of {cls}: night {self.recorded + 1} of {n}, recorded in the "
                f"history, passes with no baseline ({OPTION} {n})"
            )
        if self.stage is Stage.JUDGED:
            return (
                f"first nights of {cls} over ({self.recorded} runs recorded): judged against "
                f"its host's history; commit them: {hint}"
            )
        if self.stage is Stage.HISTORY:
            return (
                f"no baseline of {cls}: judged by its host's history alone; commit its first "
                f"runs: {hint}"
            )
        if self.stage is Stage.OVER:
            return (
                f"first nights of {cls} over ({self.recorded} runs recorded), but {self.why}; "
                f"commit them as baselines: {hint}"
            )
        return f"not a first night ({OPTION} {n}): {self.why}"


def first_nights_policy(nights: int) -> ReferencePolicy:
    """The history's reference policy with a reference of ``nights`` runs."""
    return replace(
        DEFAULT_POLICY,
        runs=nights,
        spread_runs=max(nights, DEFAULT_POLICY.spread_runs),
    )


@dataclass
class FirstNights:
    """One session's first nights: each result with no baseline, counted and judged.

    ``tracker``: the session's history, None where it is out of reach (``unavailable``
    says why); ``said``: per result id, its :class:`Night`.
    """

    nights: int
    tracker: Tracker | None
    unavailable: str = ""
    said: dict[str, Night] = field(default_factory=dict)
    baselines: str | None = None  # the gate's baselines folder: the printed command names it

    @property
    def _target(self) -> str | None:
        return None if self.tracker is None else self.tracker.target

    def header(self) -> str:
        """For the session's header: the mode, and whether it can count this run."""
        if self.tracker is None:
            return f"first-nights={self.nights} (OFF, no history: a result with no baseline is new)"
        return (
            f"first-nights={self.nights} (a result with no baseline is recorded and passes "
            f"until the history holds {self.nights} runs of it, then is judged against them)"
        )

    def by_first_nights(self, m: Measurement, result: GateResult, gate: Gate) -> GateResult:
        """``result`` as first nights see it: unchanged unless it is *new*.

        A new one is kept as a first night (its note says which), judged against its
        host's history once N runs of it are recorded, or refused, with the reason. One
        the history judged though no baseline holds it is only noted for the summary.
        """
        if result.verdict is not Verdict.NEW:
            if m.id not in (gate.store.load(m.device_class, m.spec.family) or {}):
                night = Night(m.id, m.device_class, Stage.HISTORY, 0, self.nights)
                self.said[m.id] = replace(night, history=self._target, baselines=self.baselines)
            return result
        night = replace(self._night(m), history=self._target, baselines=self.baselines)
        judged = result
        if night.stage is Stage.JUDGED or night.stage is Stage.OVER:
            judged, night = self._judged(m, result, gate, night)
        self.said[m.id] = night
        return replace(judged, note=joined(judged.note, night.describe()))

    def passing(self, result: GateResult) -> str:
        """Why a *new* result passes under ``--gauge-require-baselines`` (a first night), or ""."""
        night = self.said.get(result.id)
        if night is None or night.stage is not Stage.FIRST or result.verdict is not Verdict.NEW:
            return ""
        return night.describe()

    def _refused(self, m: Measurement, why: str, recorded: int = 0) -> Night:
        return Night(m.id, m.device_class, Stage.REFUSED, recorded, self.nights, why)

    def _night(self, m: Measurement) -> Night:
        """Count the case's accepted runs on its class; the stage that count gives."""
        tracker = self.tracker
        if tracker is None:
            return self._refused(m, f"no history to count it in ({self.unavailable})")
        if tracker.lost is not None:
            return self._refused(m, f"the history stopped answering ({tracker.lost})")
        metric = "time" if "time" in m.readings() else next(iter(m.readings()), "time")
        try:
            points = tracker.history.points(m.id, metric, device_class=m.device_class)
        except (HistoryError, OSError) as err:
            tracker.lost = str(err)
            return self._refused(m, f"the history stopped answering ({err})")
        recorded = sum(p.accepted for p in points)
        if recorded >= self.nights:
            return Night(m.id, m.device_class, Stage.JUDGED, recorded, self.nights)
        if injected(m):  # judged once N runs are there, like any result; never one of them
            why = "it has injected work, which never joins the history"
            return self._refused(m, why, recorded)
        return Night(m.id, m.device_class, Stage.FIRST, recorded, self.nights)

    def _judged(
        self, m: Measurement, result: GateResult, gate: Gate, night: Night
    ) -> tuple[GateResult, Night]:
        """Judge the result against its host's last N accepted runs, as the history does.

        Samples metrics and per-host ones, as :meth:`Tracker.by_history` reads them; a result
        with none of them, or none with a reference, stays new: :attr:`Stage.OVER`.
        """
        tracker = self.tracker
        assert tracker is not None
        policy = first_nights_policy(self.nights)
        metrics = judged_here(m)
        try:
            points = tracker.history.case_points(
                m.id, m.device_class, [x.metric for x in metrics], policy
            )
        except (HistoryError, OSError) as err:
            tracker.lost = str(err)
            return result, replace(
                night, stage=Stage.REFUSED, why=f"the history stopped answering ({err})"
            )
        judged = tracker.judged(m, gate, metrics, points, policy=policy)
        if judged.verdict is Verdict.NEW:
            mine = sum(p.accepted and p.host == tracker.host for p in points.get("time", ()))
            why = (
                "nothing in the history judges its metrics (only a committed baseline does)"
                if not metrics
                else f"this host has {mine} of them (its history judges from {self.nights})"
            )
            return result, replace(night, stage=Stage.OVER, why=why)
        note = joined(result.note, judged.note)
        return replace(judged, note=note), replace(night, stage=Stage.JUDGED)

    def summary(self, new_fails: bool = False) -> list[str]:
        """The session's lines: what passed as a first night, what was judged, what next.

        ``new_fails``: a *new* result fails its test (``--gauge-require-baselines``).
        """
        if not self.said:
            return [
                f"first nights ({OPTION} {self.nights}): every result had a baseline or a "
                "history to judge it; none needed a first night"
            ]
        lines = []
        by_class: dict[str, list[Night]] = {}
        for night in self.said.values():
            by_class.setdefault(night.device_class, []).append(night)
        for cls, nights in sorted(by_class.items()):
            stages = Counter(n.stage for n in nights)
            if stages[Stage.FIRST]:
                at = sorted({n.recorded + 1 for n in nights if n.stage is Stage.FIRST})
                said = ", ".join(map(str, at))
                lines.append(
                    f"first nights of {cls}: {plural(stages[Stage.FIRST], 'result')} with no "
                    f"baseline passed as night {said} of {self.nights}, each kept in the "
                    f"history; from night {self.nights + 1} it judges them ({OPTION})"
                )
            judged = stages[Stage.JUDGED] + stages[Stage.HISTORY]
            done = judged + stages[Stage.OVER]
            if done:
                left = stages[Stage.OVER]
                new = "new, so failed" if new_fails else "new"
                nothing = f", {left} with nothing there to judge them ({new})" if left else ""
                lines.append(
                    f"first nights of {cls} over for {plural(done, 'result')} with no "
                    f"committed baseline: {judged} judged against their host's history"
                    f"{nothing}; commit the class's first runs as its baselines: "
                    f"{commit_hint(cls, self.nights, self._target, self.baselines)}"
                )
            if stages[Stage.REFUSED]:
                whys = sorted({n.why for n in nights if n.stage is Stage.REFUSED})
                lines.append(
                    f"first nights of {cls}: {plural(stages[Stage.REFUSED], 'result')} with "
                    f"no baseline NOT counted as first nights ({'; '.join(whys)}): new, as "
                    "without the option"
                )
        return lines
