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
import statistics
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import Any

from gpugauge.ab.pairs import Pair
from gpugauge.ab.verdict import (
    Outcome,
    PairedRatio,
    Schedule,
    across_rounds,
    outcome_of,
    paired_ratio,
    pooled_process_sd,
)
from gpugauge.core.phrasing import joined, plural
from gpugauge.results.files import atomic_write_text
from gpugauge.results.verdicts import Basis, MetricCheck

NOTHING_TO_PAIR = "no timing of a case to pair"
# how each skip reason of the A/B's own begins (budget's too), not a build's
AB_SKIP = "gpugauge ab: "
# a side's skip reason for a test either side marks untimed (a count, a search)
UNTIMED_SKIPPED = f"{AB_SKIP}marked untimed, {NOTHING_TO_PAIR}"
# a case round 1 paired that the A/B is not to judge, and its later rounds leave out: its
# command's own verdict stands
NOT_JUDGED = "not judged here: round 1 only, its command judges it otherwise"

# what a summary counts a case under where it has no outcome
ONE_SIDE, LEFT_OUT, UNPAIRED = "on one side only", "not judged (round 1 only)", "not paired"
UNDECIDED = (ONE_SIDE, LEFT_OUT, UNPAIRED)  # in a summary's order, after the outcomes

# 3: a case's later rounds of fresh processes ("rounds"), its verdict over all; 4: every
# pair counts, so no pair's "kept" and no case's "clocks_unstable"; 5: "counts" adds up to
# the cases, with each reason a case has no outcome (UNDECIDED)
AB_SCHEMA = 5
# where a paired test's wall time goes, s: both sides' setups up to their timed call, the
# blocks, both sides' work after it (memory, kernels, a family's own extras), and timing
# calls one side made alone (a search's probes, a CPU reference)
PHASES = ("setup", "blocks", "after", "alone")

# the outcomes every round must give too, to stand
DECIDED = (Outcome.SLOWER, Outcome.FASTER)


def other_side(name: str) -> str:
    """'head' for 'base' and 'base' for 'head'; anything else ('': no side) as it is."""
    return {"base": "head", "head": "base"}.get(name, name)


AB_JSON = "ab.json"  # the A/B's record, in its --out folder
AB_MD = "ab.md"  # its table, for a pull request or $GITHUB_STEP_SUMMARY


@dataclass(frozen=True)
class CaseAB:
    """One test's A/B: the pairs of its timed call in each round, and its kernels.

    The fields hold the first round (one pair of processes): its pairs, test outcomes,
    phases; ``later`` holds the same test in each later round, one :class:`CaseAB` each.
    The verdict is derived over every round (:mod:`gpugauge.ab.verdict`), never stored as
    the truth. ``calls`` counts the test's calls of the timing primitive that were paired;
    ``only`` names the side that ran the test where the other did not.
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
    # the side that timed the test through gauge.measure where the other side did not
    timed_alone: str = ""
    # the same test in each later round of fresh processes, in order
    later: tuple[CaseAB, ...] = field(default=(), compare=False)
    # the spread of a round from its processes (log-ratio SD) that the verdict allows, and
    # its degrees of freedom: the A/B's pooled estimate (ABReport.pooled); None: the
    # schedule's floor
    process_sd: tuple[float, float] | None = None
    # False: round 1 paired it, but the command picked it for no judgement here, nor for the
    # later rounds (it judges it otherwise): its pairs are kept, and it has no outcome
    judged: bool = True

    def exchanged(self) -> CaseAB:
        """The round with base's and head's places exchanged: each pair's blocks, the names.

        A round whose processes ran in each other's places (base's build in the process the
        coordinator calls head) reads its cases back so: ratios are head's build over base's.
        """
        return replace(
            self,
            pairs=tuple(Pair(p.head, p.base, not p.base_first) for p in self.pairs),
            only=other_side(self.only),
            status={other_side(k): v for k, v in self.status.items()},
            timed_alone=other_side(self.timed_alone),
        )

    @property
    def rounds(self) -> tuple[CaseAB, ...]:
        """Every round of the test, in order, each a case of one round."""
        return (replace(self, later=()), *self.later) if self.later else (self,)

    def with_round(self, later: CaseAB | None) -> CaseAB:
        """The case with ``later`` as its next round (unchanged for None)."""
        if later is None:
            return self
        return replace(self, later=(*self.later, *later.rounds))

    @property
    def unpaired_reason(self) -> str:
        """Why a case has no pairs: 'skipped: no CUDA', 'failed on head', ..."""
        if self.only:
            return f"on {self.only} only ({self.status.get(self.only, '?')})"
        if self.timed_alone:
            alone, other = self.timed_alone, other_side(self.timed_alone)
            return f"only {alone} timed it through gauge.measure ({other} made no such call)"
        outcomes = set(self.status.values())
        if any(NOTHING_TO_PAIR in v for v in outcomes):  # UNTIMED_SKIPPED
            return NOTHING_TO_PAIR
        if len(outcomes) == 1:
            (one,) = outcomes
            return one if one != "passed" else NOTHING_TO_PAIR
        return "; ".join(f"{k}: {v}" for k, v in sorted(self.status.items()))

    @property
    def every_pair(self) -> tuple[Pair, ...]:
        """Every round's pairs, in order."""
        return tuple(p for r in self.rounds for p in r.pairs)

    @property
    def logs(self) -> list[float]:
        """The log-ratios of the round's own pairs, in order."""
        return [p.log_ratio for p in self.pairs]

    @cached_property
    def round_ratio(self) -> PairedRatio | None:
        """Head/base of this round's own pairs, with its CI; None without a pair."""
        logs = self.logs
        return paired_ratio(logs, self.schedule.level) if logs else None

    @cached_property
    def round_same(self) -> PairedRatio | None:
        """The round's own pairs' interval at the level a round's same needs (the schedule's)."""
        logs = self.logs
        return paired_ratio(logs, self.schedule.round_same_level) if logs else None

    @cached_property
    def round_outcome(self) -> Outcome | None:
        """The outcome of this round's pairs alone; None where it paired nothing.

        A round with fewer pairs than the schedule's first look (a failed side) decides
        nothing.
        """
        r = self.round_ratio
        if r is None:
            return None
        if r.n < self.schedule.min_pairs:
            return Outcome.NEED_MORE
        return outcome_of(r, self.schedule.min_effect, same=self.round_same or r)

    @property
    def paired_rounds(self) -> tuple[CaseAB, ...]:
        """The rounds that paired the test."""
        return tuple(r for r in self.rounds if r.round_outcome is not None)

    @cached_property
    def ratio(self) -> PairedRatio | None:
        """Head/base over every round, with its CI; None without a pair.

        Computed once: ab.json is rewritten after every case, each time with every case.
        """
        logs = [r.logs for r in self.rounds]
        if not any(logs):
            return None
        sd, df = self.process_sd or (self.schedule.process_sd, math.inf)
        return across_rounds(logs, self.schedule.level, sd, df)

    @cached_property
    def same_ratio(self) -> PairedRatio | None:
        """The interval "same" is judged on: :attr:`ratio`'s at the schedule's ``same_level``.

        At ``level`` (:attr:`ratio` itself) where fewer than two rounds paired: one pair of
        processes cannot tell its own speed from the build's, and a one-round "same" at 95%
        read a 1.5% change "same" in 2-8% of synthetic cases.
        """
        logs = [r.logs for r in self.rounds]
        if sum(bool(x) for x in logs) < 2:
            return self.ratio
        sd, df = self.process_sd or (self.schedule.process_sd, math.inf)
        return across_rounds(logs, self.schedule.same_level, sd, df)

    @property
    def _same_interval(self) -> bool:
        return self.same_ratio is not None and self.same_ratio.has_interval

    def _rounds_within_effect(self) -> bool:
        """Whether every paired round's own ratio lies within the minimum effect of 1.

        A round cut short (fewer pairs than the first look: a side failed) says nothing,
        so it cannot say same either: counted as a round, it would move "same" to the
        95% level on a pair or two (a 1.2% change read "same" in 4.7% of synthetic cases).
        """
        bound = math.log1p(self.schedule.min_effect)
        own = [r.round_ratio for r in self.paired_rounds]
        least = self.schedule.min_pairs
        return all(x is not None and x.n >= least and abs(math.log(x.ratio)) <= bound for x in own)

    @cached_property
    def bimodal(self) -> str:
        """'1.028x, 0.973x by round' where two rounds read two speeds; '' else.

        Two rounds whose own intervals lie apart, by more than the minimum effect, and
        that decide differently: the build runs at one speed in one process and at another
        in the next (a kernel chosen per process, memory placed per process).
        """
        rs = [r for r in self.paired_rounds if r.round_ratio and r.round_ratio.has_interval]
        step = math.log1p(self.schedule.min_effect)
        for a, b in itertools.combinations(rs, 2):
            ra, rb = a.round_ratio, b.round_ratio
            assert ra is not None
            assert rb is not None
            lo, hi = (ra, rb) if ra.ratio < rb.ratio else (rb, ra)
            apart = lo.ci_high < hi.ci_low and math.log(hi.ratio / lo.ratio) > step
            if apart and a.round_outcome is not b.round_outcome:
                return ", ".join(_x(r) for r in rs) + " by round"
        return ""

    @cached_property
    def outcome(self) -> Outcome | None:
        """slower, faster, same or need more samples, over every round; None unpaired.

        Slower (faster) stands only where every round that paired the test says so too,
        and same only where every round's own ratio lies within the minimum effect (a case
        whose processes differ more than the A/B's pooled spread says). A case bimodal
        across processes needs more samples, whatever its mean (its interval still bounds
        it: confirm's ``clears``).
        """
        counted, r = self.paired_rounds, self.ratio
        if not counted or not self.judged:
            return None
        if r is None or self.bimodal:
            return Outcome.NEED_MORE
        said = outcome_of(r, self.schedule.min_effect, same=self.same_ratio or r)
        if said in DECIDED and any(c.round_outcome is not said for c in counted):
            return Outcome.NEED_MORE
        if said is Outcome.SAME and not self._rounds_within_effect():
            return Outcome.NEED_MORE
        return said

    @property
    def rounds_note(self) -> str:
        """What the rounds said, where it is worth a word ('' else).

        Bimodal across processes; rounds that disagree; fewer rounds than asked.
        """
        if self.bimodal:
            return f"bimodal across processes: {self.bimodal}"
        counted = self.paired_rounds
        if self.outcome is Outcome.NEED_MORE and len(counted) > 1:
            said = {c.round_outcome for c in counted}
            if said & set(DECIDED):
                return ", ".join(f"{c.round_outcome} at {_x(c)}" for c in counted) + " by round"
        if 0 < len(counted) < self.schedule.rounds:  # whatever it says: one pair of processes
            return f"{len(counted)} of {plural(self.schedule.rounds, 'round')}"
        return ""

    @property
    def verdict_text(self) -> str:
        """The outcome as a table says it: 'need more samples (bimodal across processes: ...)'."""
        if not self.judged:
            return NOT_JUDGED
        notes = joined(self.rounds_note, self.same_note)
        return f"{self.outcome} ({notes})" if notes else f"{self.outcome}"

    @property
    def same_note(self) -> str:
        """'95%: [0.996, 1.006]' for a case that reads same: the interval that decided it."""
        s = self.same_ratio
        if self.outcome is not Outcome.SAME or s is None:
            return ""
        return f"{s.level * 100:.3g}%: [{s.ci_low:.3f}, {s.ci_high:.3f}]"

    @property
    def base_ms(self) -> float | None:
        """Median of base's block medians over every round, ms."""
        return _median([p.base.median_ms for p in self.every_pair])

    @property
    def head_ms(self) -> float | None:
        """Median of head's block medians over every round, ms."""
        return _median([p.head.median_ms for p in self.every_pair])

    @property
    def tally(self) -> str:
        """What a summary counts the case as: its outcome, or one of :data:`UNDECIDED`.

        Every case counts once: a count of outcomes alone had left out a test that failed
        on one side or was skipped on both (a review, 2026-12-07).
        """
        if self.outcome is not None:
            return self.outcome.value
        if self.only:
            return ONE_SIDE
        return UNPAIRED if self.judged else LEFT_OUT

    @property
    def pairs_text(self) -> str:
        """The pairs of each round: '5+5', or '7' for one round."""
        return "+".join(str(len(r.pairs)) for r in self.rounds)

    @property
    def check(self) -> MetricCheck | None:
        """The A/B as the judge's time check (head against base); None without an interval.

        slower is *regressed*, faster *improved*, same *unchanged*, need more samples
        *inconclusive*; what it can see is the minimum effect.
        """
        r, outcome = self.ratio, self.outcome
        if r is None or outcome is None or not r.has_interval:
            return None
        if outcome is Outcome.SAME and self.same_ratio is not None:
            r = self.same_ratio  # the interval that decided it: inside the minimum effect
        base, head = self.base_ms or 0.0, self.head_ms or 0.0
        return MetricCheck(
            "time",
            base,
            head,
            r.ratio,
            r.ci_low,
            r.ci_high,
            self.schedule.min_effect,
            outcome.verdict,
            Basis.SAME_GPU_AB,
            r.level,
        )

    @property
    def spent(self) -> dict[str, float]:
        """Where every round's wall time on the test went, s, by :data:`PHASES`."""
        return {k: sum(r.phases.get(k, 0.0) for r in self.rounds) for k in PHASES}

    @property
    def process_spread(self) -> tuple[float, int] | None:
        """Its rounds' means' variance beyond what their pairs explain, and how many rounds.

        None under two rounds with two pairs each: what :func:`pooled_process_sd` pools.
        """
        logs = [r.logs for r in self.paired_rounds]
        logs = [x for x in logs if len(x) >= 2]
        if len(logs) < 2:
            return None
        means = [statistics.fmean(x) for x in logs]
        within = statistics.fmean(statistics.variance(x) / len(x) for x in logs)
        return statistics.variance(means) - within, len(logs)

    def as_dict(self) -> dict[str, Any]:
        """Plain dict for JSON: the pairs and the verdicts derived from them."""
        r, own = self.ratio, self.round_ratio
        same = self.same_ratio if self._same_interval else None
        out = {
            "id": self.id,
            "nodeid": self.nodeid,
            "outcome": None if self.outcome is None else self.outcome.value,
            "ratio": None if r is None else r.ratio,
            "ci_low": None if r is None or not r.has_interval else r.ci_low,
            "ci_high": None if r is None or not r.has_interval else r.ci_high,
            "level": self.schedule.level,
            # the interval "same" was judged on (at same_level, or level with one round)
            "same_level": None if same is None else same.level,
            "same_ci_low": None if same is None else same.ci_low,
            "same_ci_high": None if same is None else same.ci_high,
            "min_effect": self.schedule.min_effect,
            "process_sd": None if self.process_sd is None else self.process_sd[0],
            "bimodal": self.bimodal,
            "base_ms": self.base_ms,
            "head_ms": self.head_ms,
        }
        return out | self._round_dict(own)

    def _round_dict(self, own: PairedRatio | None) -> dict[str, Any]:
        """The round's own record: its pairs, its outcome and ratio, the later rounds."""
        return {
            "calls": self.calls,
            "kernels": self.kernels,
            "only": self.only,
            "status": dict(self.status),
            "wall_s": self.wall_s,
            "phases": dict(self.phases),
            "timed_alone": self.timed_alone,
            "judged": self.judged,
            "round_outcome": None if self.round_outcome is None else self.round_outcome.value,
            "round_ratio": None if own is None else own.ratio,
            "pairs": [p.as_dict() for p in self.pairs],
            "rounds": [c._round_dict(c.round_ratio) for c in self.later],
        }


def _x(case: CaseAB) -> str:
    """A round's own ratio as its verdict notes write it: '1.029x'."""
    r = case.round_ratio
    return f"{r.ratio:.3f}x" if r is not None else "-"


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
    # every round's s from its start until both sides were at their first test, and from
    # the last test until both had exited and their saved runs were read
    start_s: float = 0.0
    end_s: float = 0.0
    # the GPUs its tests were spread over, each with its own pair of processes (CUDA
    # indices or UUIDs); empty: the one device the sides saw. Over several, ``wall_s`` is
    # the whole A/B's, and every other second is summed over the GPUs.
    gpus: tuple[str, ...] = ()

    @property
    def device_s(self) -> float:
        """The seconds of device time it held: its wall on each of its GPUs."""
        return self.wall_s * max(len(self.gpus), 1)

    def count(self, outcome: Outcome) -> int:
        """How many cases have this outcome."""
        return self.counts[outcome.value]

    @property
    def counts(self) -> dict[str, int]:
        """Cases by :attr:`CaseAB.tally`, every outcome and reason for none: they add up."""
        said = [c.tally for c in self.cases]
        return {k: said.count(k) for k in (*(o.value for o in Outcome), *UNDECIDED)}

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
            "gpus": list(self.gpus),
            "wall_s": self.wall_s,
            "blocks_s": self.blocks_s,
            "start_s": self.start_s,
            "end_s": self.end_s,
            "between_s": self.between_s,
            "only_s": self.only_s,
            "schedule": dict(self.schedule.__dict__),
            "counts": self.counts,
            "problems": list(self.problems),
            "complete": self.complete,
            "cases": [c.as_dict() for c in self.cases],
        }

    @property
    def spent(self) -> dict[str, float]:
        """Where its cases' wall time went, every round's, s, by :data:`PHASES`."""
        return {p: sum(c.spent[p] for c in self.cases) for p in PHASES}

    @property
    def rest_s(self) -> float:
        """Its device seconds outside its cases' phases: the sides' start and end, and the like."""
        return max(self.device_s - sum(self.spent.values()), 0.0)

    @property
    def between_s(self) -> float:
        """Every round's seconds in its paired tests outside their phases, s.

        A side's pytest between one test's end and the next one's start (its reports, its
        fixtures), and the coordinator's messages; the last test's includes the gated
        run's closing work where it ran before the side said goodbye.
        """
        rounds = [r for c in self.cases for r in c.rounds if not r.only]
        return sum(max(r.wall_s - sum(r.phases.values()), 0.0) for r in rounds)

    @property
    def only_s(self) -> float:
        """Every round's seconds of tests one side ran alone, s.

        An untimed test (a memory search) in a gated run, a test the other build lacks.
        """
        return sum(r.wall_s for c in self.cases for r in c.rounds if r.only)

    @property
    def blocks_s(self) -> float:
        """Seconds of paired blocks, every round's: what the A/B is for."""
        return self.spent["blocks"]

    @property
    def timing_s(self) -> tuple[float, float] | None:
        """Seconds of timed batches and of warm-up, every block of every round.

        None where a block does not say (an ab.json from before blocks counted them).
        """
        blocks = [
            b for c in self.cases for r in c.rounds for p in r.pairs for b in (p.base, p.head)
        ]
        if any(b.timed_s is None or b.warmup_s is None for b in blocks):
            return None
        return sum(b.timed_s or 0.0 for b in blocks), sum(b.warmup_s or 0.0 for b in blocks)

    @property
    def paired_ids(self) -> tuple[str, ...]:
        """Node ids of the cases its first round paired: what a later round A/Bs."""
        return tuple(c.nodeid for c in self.cases if c.round_outcome is not None)

    def leaving(self, nodeids: set[str]) -> ABReport:
        """The A/B with these cases not judged: round 1 paired them, the later rounds leave them."""
        cases = tuple(replace(c, judged=False) if c.nodeid in nodeids else c for c in self.cases)
        return replace(self, cases=cases)

    def with_round(self, later: ABReport) -> ABReport:
        """The A/B with ``later``'s cases as the next round of its own, by node id."""
        by_node = {c.nodeid: c for c in later.cases}
        return replace(
            self,
            cases=tuple(c.with_round(by_node.get(c.nodeid)) for c in self.cases),
            wall_s=self.wall_s + later.wall_s,
            problems=self.problems + later.problems,
            start_s=self.start_s + later.start_s,
            end_s=self.end_s + later.end_s,
        )

    @property
    def process_sd(self) -> tuple[float, float]:
        """A round's spread from its processes, pooled over its cases: (log-ratio SD, df)."""
        spreads = [s for c in self.cases if (s := c.process_spread) is not None]
        return pooled_process_sd(spreads, self.schedule.process_sd)

    def pooled(self) -> ABReport:
        """Its cases judged with the spread of processes its own rounds showed."""
        sd = self.process_sd
        return replace(self, cases=tuple(replace(c, process_sd=sd) for c in self.cases))

    def save(self, out: Path) -> Path:
        """Write ``out/ab.json`` whole (atomically): after each case, and at the end."""
        path = out / AB_JSON
        atomic_write_text(path, json.dumps(self.as_dict(), indent=2) + "\n")
        return path
