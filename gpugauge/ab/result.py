"""What an A/B found: every block pair kept, the verdicts derived from them.

A :class:`CaseAB` holds a test's block pairs (:mod:`gpugauge.ab.pairs`) and its verdict
(:mod:`gpugauge.ab.verdict`), derived, never stored as the truth; an :class:`ABReport` is
the whole A/B with the two sides it compared. JSON is ``as_dict``; the terminal table and
Markdown are :mod:`gpugauge.ab.render`'s.
"""

from __future__ import annotations

import itertools
import json
import math
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import Any

from gpugauge.ab.pairs import Pair
from gpugauge.ab.verdict import Outcome, PairedRatio, Schedule, decide, paired_ratio
from gpugauge.judging.verdicts import Basis, MetricCheck, Verdict
from gpugauge.results.files import atomic_write_text

NOTHING_TO_PAIR = "no timing of gauge.measure to pair"
# a second side's skip reason where the first side's run of the test had nothing to pair
SKIPPED_FOR = f"gpugauge ab: {NOTHING_TO_PAIR}"
# both sides' skip reason for the tests left when the A/B's time budget is spent
BUDGET_SPENT = "gpugauge ab: its time budget was spent before this test"
# ... or would be before this test ended, by what the test is expected to cost
BUDGET_SHORT = "gpugauge ab: its time budget would run out before this test ended"

AB_SCHEMA = 2  # 2: a case's "outcome" counts its repeat in fresh processes ("fresh")
# where a paired test's wall time goes, s: both sides' setups up to their timed call, the
# blocks, both sides' work after it (memory, kernels, a family's own extras), and timing
# calls one side made alone (a search's probes, a CPU reference)
PHASES = ("setup", "blocks", "after", "alone")

# the outcomes a repeat in fresh processes must give again to stand
DECIDED = (Outcome.SLOWER, Outcome.FASTER)
# Pairs of processes a verdict must hold in: two, or three for an effect under
# SMALL_EFFECT times the minimum effect. Two processes of one commit differed by up to
# 1.9% on an H200 (a 0.1 ms linear step), the same way in every block pair, and by up to
# 4% on a 2-core CPU, at random from one pair of processes to the next (docs/ab.md).
PROCESS_PAIRS = 3
SMALL_EFFECT = 2.0


def other_side(name: str) -> str:
    """'head' for 'base' and 'base' for 'head'; anything else ('': no side) as it is."""
    return {"base": "head", "head": "base"}.get(name, name)


AB_JSON = "ab.json"  # the A/B's record, in its --out folder
AB_MD = "ab.md"  # its table, for a pull request or $GITHUB_STEP_SUMMARY


@dataclass(frozen=True)
class CaseAB:
    """One test's A/B: the pairs of its timed call, and what the sides' kernels were.

    ``call`` counts the test's calls of the timing primitive that were paired (the last is
    the case's own result; earlier ones time, e.g., the session's ceilings). ``only`` names
    the side that ran the test where the other did not.
    """

    id: str
    nodeid: str
    pairs: tuple[Pair, ...] = ()
    calls: int = 1
    kernels: str = ""  # 'same kernels', 'kernels changed: X -> Y', or '' (not recorded)
    only: str = ""  # 'base' or 'head': the test ran on that side alone
    status: dict[str, str] = field(default_factory=dict, hash=False)  # test outcome by side
    wall_s: float = 0.0  # both sides' whole test, setup and blocks included
    phases: dict[str, float] = field(default_factory=dict, hash=False)  # s, by PHASES
    schedule: Schedule = field(default_factory=Schedule)
    # stopped for more clock-mismatched pairs than the runner allows: undecided, whatever
    # the pairs kept say (they were never looked at as the schedule looks)
    clocks_unstable: bool = False
    # the side that timed the test through gauge.measure where the other side did not
    timed_alone: str = ""
    # the same test A/B'd again in a fresh pair of processes (and that one's own repeat, if
    # any): a slower or faster verdict stands only where each repeat says the same
    fresh: CaseAB | None = field(default=None, compare=False)

    def exchanged(self) -> CaseAB:
        """The case with base's and head's places exchanged: each pair's blocks, the names.

        An A/B whose processes ran in each other's places (base's build in the process the
        coordinator calls head) reads its cases back so: ratios are head's build over base's.
        """
        return replace(
            self,
            pairs=tuple(Pair(p.head, p.base, not p.base_first, p.kept) for p in self.pairs),
            only=other_side(self.only),
            status={other_side(k): v for k, v in self.status.items()},
            timed_alone=other_side(self.timed_alone),
        )

    @property
    def unpaired_reason(self) -> str:
        """Why a case has no pairs: 'skipped: no CUDA', 'failed on head', ..."""
        if self.only:
            return f"on {self.only} only ({self.status.get(self.only, '?')})"
        if self.clocks_unstable:
            return f"{Outcome.NEED_MORE} ({self.unstable_note}, none kept)"
        if self.timed_alone:
            alone, other = self.timed_alone, other_side(self.timed_alone)
            return f"only {alone} timed it through gauge.measure ({other} made no such call)"
        outcomes = set(self.status.values())
        if any(SKIPPED_FOR in v for v in outcomes):
            return NOTHING_TO_PAIR
        if len(outcomes) == 1:
            (one,) = outcomes
            return one if one != "passed" else NOTHING_TO_PAIR
        return "; ".join(f"{k}: {v}" for k, v in sorted(self.status.items()))

    @property
    def kept(self) -> tuple[Pair, ...]:
        """The pairs the verdict uses (not those measured again)."""
        return tuple(p for p in self.pairs if p.kept)

    @cached_property
    def ratio(self) -> PairedRatio | None:
        """Head/base with its CI; None without a pair.

        Computed once: ab.json is rewritten after every case, each time with every case.
        """
        logs = [p.log_ratio for p in self.kept]
        return paired_ratio(logs, self.schedule.level) if logs else None

    @cached_property
    def outcome(self) -> Outcome | None:
        """slower, faster, same or need more samples; None where nothing was paired.

        A slower (faster) case repeated in fresh processes stays so only if every repeat
        says so too; else it needs more samples. Two processes of one commit can differ
        by 2% in a 0.1 ms case, the same way in every pair (where each put its memory, in
        what order they started): the pairs of one process pair cannot see it.
        """
        first, again = self.paired_outcome, self.repeat
        if first not in DECIDED or again is None:
            return first
        return first if again.outcome is first else Outcome.NEED_MORE

    @property
    def repeats(self) -> tuple[CaseAB, ...]:
        """The repeats in fresh processes that paired the test, in order, up to one that did not."""
        return tuple(itertools.takewhile(lambda c: c.paired_outcome is not None, self.attempts))

    @property
    def needs_another(self) -> bool:
        """Whether a fresh pair of processes should A/B the case again.

        A slower (faster) verdict is repeated once, and a second time where the smallest
        effect any pair of processes read is under :data:`SMALL_EFFECT` times the minimum
        effect, up to :data:`PROCESS_PAIRS` pairs in all.
        """
        if self.paired_outcome not in DECIDED:
            return False
        tried = self.attempts
        if not tried:
            return True
        if tried[-1].paired_outcome is None:  # a repeat that could not pair it ends the chain
            return False
        chain = (self, *self.repeats)
        if self.outcome not in DECIDED or len(chain) >= PROCESS_PAIRS:
            return False
        least = min(abs(math.log(c.ratio.ratio)) for c in chain if c.ratio is not None)
        return least < math.log1p(SMALL_EFFECT * self.schedule.min_effect)

    @property
    def attempts(self) -> tuple[CaseAB, ...]:
        """Every repeat in fresh processes, in order, paired or not (a budget spent, a failure)."""
        out: list[CaseAB] = []
        again = self.fresh
        while again is not None:
            out.append(again)
            again = again.fresh
        return tuple(out)

    @property
    def ci_high(self) -> float | None:
        """The highest upper end of the ratio's CI over this pair of processes and its repeats."""
        highs = [c.ratio.ci_high for c in (self, *self.repeats) if c.ratio and c.ratio.has_interval]
        return max(highs) if highs else None

    def chained(self, again: CaseAB | None) -> CaseAB:
        """The case with ``again`` as the repeat after its last one (unchanged for None)."""
        if again is None:
            return self
        if self.fresh is None:
            return replace(self, fresh=again)
        return replace(self, fresh=self.fresh.chained(again))

    @property
    def repeat(self) -> CaseAB | None:
        """The repeat in fresh processes, where it paired the test (else None)."""
        if self.fresh is None or self.fresh.paired_outcome is None:
            return None
        return self.fresh

    @property
    def fresh_note(self) -> str:
        """What the repeat in fresh processes said of a slower or faster case ('' else)."""
        first, chain = self.paired_outcome, self.repeats
        if first not in DECIDED:
            return ""
        if not chain or self.ratio is None:
            return "not repeated in fresh processes"
        if self.outcome is first:
            return f"again {' and '.join(_x(c) for c in chain)} in fresh processes"
        said = ", ".join(f"{c.paired_outcome} at {_x(c)}" for c in chain)
        return f"{first} at {_x(self)}, {said} in fresh processes"

    @cached_property
    def paired_outcome(self) -> Outcome | None:
        """The outcome of this pair of processes' blocks alone.

        A case stopped for unstable clocks, and one with fewer kept pairs than the
        schedule's first look (a failed side), decide nothing.
        """
        if self.clocks_unstable:
            return Outcome.NEED_MORE
        r = self.ratio
        if r is None:
            return None
        if r.n < self.schedule.min_pairs:
            return Outcome.NEED_MORE
        return decide(r, self.schedule.min_effect)

    @property
    def unstable_note(self) -> str:
        """'clocks unstable: 4 pairs measured again', or '' for a case not stopped so."""
        if not self.clocks_unstable:
            return ""
        return f"clocks unstable: {self.remeasured} pairs measured again"

    @property
    def verdict_text(self) -> str:
        """The outcome as a table says it: 'need more samples (clocks unstable: ...)'."""
        notes = "; ".join(n for n in (self.unstable_note, self.fresh_note) if n)
        return f"{self.outcome} ({notes})" if notes else f"{self.outcome}"

    @property
    def base_ms(self) -> float | None:
        """Median of base's block medians, ms."""
        return _median([p.base.median_ms for p in self.kept])

    @property
    def head_ms(self) -> float | None:
        """Median of head's block medians, ms."""
        return _median([p.head.median_ms for p in self.kept])

    @property
    def check(self) -> MetricCheck | None:
        """The A/B as the judge's time check (head against base); None without an interval.

        slower is *regressed*, faster *improved*, same *unchanged*, need more samples
        *inconclusive*; what it can see is the minimum effect.
        """
        r, outcome = self.ratio, self.outcome
        if r is None or outcome is None or not r.has_interval:
            return None
        base, head = self.base_ms or 0.0, self.head_ms or 0.0
        return MetricCheck(
            "time",
            base,
            head,
            r.ratio,
            r.ci_low,
            r.ci_high,
            self.schedule.min_effect,
            _VERDICTS[outcome],
            Basis.SAME_GPU_AB,
        )

    @property
    def remeasured(self) -> int:
        """Pairs measured again because their clocks were too far apart."""
        return sum(not p.kept for p in self.pairs)

    def as_dict(self) -> dict[str, Any]:
        """Plain dict for JSON: the pairs and the verdict derived from them."""
        r = self.ratio
        return {
            "id": self.id,
            "nodeid": self.nodeid,
            "outcome": None if self.outcome is None else self.outcome.value,
            "ratio": None if r is None else r.ratio,
            "ci_low": None if r is None or not r.has_interval else r.ci_low,
            "ci_high": None if r is None or not r.has_interval else r.ci_high,
            "level": self.schedule.level,
            "min_effect": self.schedule.min_effect,
            "base_ms": self.base_ms,
            "head_ms": self.head_ms,
            "calls": self.calls,
            "kernels": self.kernels,
            "only": self.only,
            "status": dict(self.status),
            "wall_s": self.wall_s,
            "phases": dict(self.phases),
            "clocks_unstable": self.clocks_unstable,
            "timed_alone": self.timed_alone,
            "paired_outcome": None if self.paired_outcome is None else self.paired_outcome.value,
            "fresh": None if self.fresh is None else self.fresh.as_dict(),
            "pairs": [p.as_dict() for p in self.pairs],
        }


def _x(case: CaseAB) -> str:
    """A case's ratio as its verdict notes write it: '1.029x'."""
    return f"{case.ratio.ratio:.3f}x" if case.ratio is not None else "-"


_VERDICTS = {
    Outcome.SLOWER: Verdict.REGRESSED,
    Outcome.FASTER: Verdict.IMPROVED,
    Outcome.SAME: Verdict.UNCHANGED,
    Outcome.NEED_MORE: Verdict.INCONCLUSIVE,
}


def _median(xs: list[float]) -> float | None:
    if not xs:
        return None
    s = sorted(xs)
    mid = len(s) // 2
    return s[mid] if len(s) % 2 else (s[mid - 1] + s[mid]) / 2


@dataclass(frozen=True)
class SideInfo:
    """One side as the report names it."""

    name: str
    ref: str
    commit: str | None
    python: str
    gpugauge: str  # the folder its gpugauge was imported from
    exit_code: int | None = None

    def as_dict(self) -> dict[str, Any]:
        """Plain dict for JSON."""
        return dict(self.__dict__)


@dataclass(frozen=True)
class ABReport:
    """A whole A/B: the sides, the device, every case, and how long it took (s)."""

    base: SideInfo
    head: SideInfo
    cases: tuple[CaseAB, ...]
    device: str
    wall_s: float
    schedule: Schedule = field(default_factory=Schedule)
    problems: tuple[str, ...] = ()  # what went wrong beside the verdicts (a side's exit)
    complete: bool = True  # False: the cases so far, of an A/B still running (or stopped)

    def count(self, outcome: Outcome) -> int:
        """How many cases have this outcome."""
        return sum(c.outcome is outcome for c in self.cases)

    @property
    def slower(self) -> tuple[CaseAB, ...]:
        """The cases head made slower."""
        return tuple(c for c in self.cases if c.outcome is Outcome.SLOWER)

    def as_dict(self) -> dict[str, Any]:
        """Plain dict for JSON."""
        return {
            "ab_schema": AB_SCHEMA,
            "base": self.base.as_dict(),
            "head": self.head.as_dict(),
            "device": self.device,
            "wall_s": self.wall_s,
            "schedule": dict(self.schedule.__dict__),
            "counts": {o.value: self.count(o) for o in Outcome},
            "problems": list(self.problems),
            "complete": self.complete,
            "cases": [c.as_dict() for c in self.cases],
        }

    @property
    def rest_s(self) -> float:
        """Its wall seconds outside its cases' phases: the sides' start and end, and the like."""
        spent = sum(v for c in self.cases for v in c.phases.values())
        return max(self.wall_s - spent, 0.0)

    @property
    def to_repeat(self) -> tuple[str, ...]:
        """Node ids of the cases a fresh pair of processes should A/B again."""
        return tuple(c.nodeid for c in self.cases if c.needs_another)

    def with_fresh(self, fresh: ABReport) -> ABReport:
        """The A/B with ``fresh``'s cases as the latest repeats of its own, by node id."""
        again = {c.nodeid: c for c in fresh.cases}
        return replace(
            self,
            cases=tuple(c.chained(again.get(c.nodeid)) for c in self.cases),
            wall_s=self.wall_s + fresh.wall_s,
            problems=self.problems + fresh.problems,
        )

    def save(self, out: Path) -> Path:
        """Write ``out/ab.json`` whole (atomically): after each case, and at the end."""
        path = out / AB_JSON
        atomic_write_text(path, json.dumps(self.as_dict(), indent=2) + "\n")
        return path
