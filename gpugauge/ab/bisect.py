"""``gpugauge bisect GOOD BAD``: the first commit whose cases run slower than GOOD's.

Every step is an A/B on this GPU (:mod:`gpugauge.ab.runner`): GOOD against BAD first, to
learn which cases BAD made slower (nothing slower: nothing to bisect; GOOD or BAD failing:
an error naming it, as nothing was compared); then a binary search over the first-parent
commits between them, each commit tried against GOOD on those cases alone; a commit is bad
when any of them is slower, good when none is slower or undecided, and undecided
otherwise. An undecided commit, and one that cannot be tested (a side failed, its cases did
not run), is skipped, as ``git bisect skip`` does, never counted as good, and named in the
result where the culprit could lie beside it. The commit found is named only after a
closer A/B, of its parent against it, says slower too: a search over noisy steps can land
one commit off, and the verifying A/B says so rather than blaming the wrong change. After
every step the result so far goes to ``progress``, so whatever ends the search, what it
learnt can be kept. Within a time budget (:class:`~gpugauge.ab.budget.Budget`, as ``ab``
and ``confirm`` take one) no A/B starts once it is spent, and a step it cut short is no
evidence: the search ends there and names the commits still suspect.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from gpugauge.ab.budget import Budget
from gpugauge.ab.launch import ABError
from gpugauge.ab.result import ABReport, CaseAB
from gpugauge.ab.sides import SideError, git, resolve_ref
from gpugauge.ab.verdict import Outcome
from gpugauge.core.phrasing import Note, duration, plural

# compare(base ref, head ref, case ids or None for the selection, step name) -> report
Compare = Callable[[str, str, Sequence[str] | None, str], ABReport]

# why a search ended before its culprit was verified: its budget
BUDGET_ENDED = "the time budget was spent"


@dataclass(frozen=True)
class Step:
    """One A/B of the search: which commit against which, and its slower cases."""

    base: str
    head: str
    slower: tuple[str, ...]
    report: ABReport | None  # None: the A/B broke before its report
    followed: tuple[str, ...] = ()  # the node ids it was asked about (none: the selection)
    untestable: str = ""  # why the step tells nothing (a side failed); empty: it ran


@dataclass(frozen=True)
class BisectResult:
    """What the search found: the culprit (None: none), the A/B that verified it, every step."""

    good: str
    bad: str
    culprit: str | None
    verified: bool
    cases: tuple[str, ...]  # node ids of the cases BAD made slower, which the search followed
    steps: tuple[Step, ...]
    subject: str = ""
    reason: str = ""  # why no culprit is named, where none is
    # the commits still suspect when the search ended (the first slower one is among them)
    suspects: tuple[str, ...] = ()
    skipped: tuple[tuple[str, str], ...] = ()  # (commit, why) of the steps that decided nothing

    @property
    def verification(self) -> Step | None:
        """The parent-against-culprit A/B, if it ran."""
        return self.steps[-1] if self.culprit and self.steps else None


# what a search has learnt so far, after each of its steps
Progress = Callable[[BisectResult], None]


def first_parent_commits(repo: Path, good: str, bad: str) -> list[str]:
    """The commits after GOOD up to BAD on BAD's first-parent line, oldest first."""
    out = git(repo, "rev-list", "--first-parent", "--reverse", f"{good}..{bad}")
    return out.split() if out else []


def subject(repo: Path, commit: str) -> str:
    """A commit's one-line subject."""
    return git(repo, "log", "-1", "--format=%s", commit)


def _slower(report: ABReport) -> tuple[str, ...]:
    """The node ids of the cases head made slower (what later steps select)."""
    return tuple(c.nodeid for c in report.slower)


def _followed(step: Step) -> list[CaseAB]:
    """The cases of the step's report that the search follows (none without a report)."""
    cases = () if step.report is None else step.report.cases
    return [c for c in cases if c.nodeid in step.followed]


def undecided(step: Step) -> bool:
    """No followed case slower, and one of them left at 'need more samples'."""
    return not step.slower and any(c.outcome is Outcome.NEED_MORE for c in _followed(step))


def whole(step: Step) -> bool:
    """Whether the step decided every case it followed (slower, faster or same)."""
    if step.report is None or step.untestable:
        return False
    decided = (Outcome.SLOWER, Outcome.FASTER, Outcome.SAME)
    return all(c.outcome in decided for c in _followed(step))


def failed_sides(report: ABReport) -> list[str]:
    """The builds ('base', 'head') whose pytest did not end well or failed a test."""
    return [
        info.name
        for info in (report.base, report.head)
        if info.exit_code not in (0, 1, None)
        or any(c.status.get(info.name) == "failed" for c in report.cases)
    ]


def _step(compare: Compare, base: str, head: str, cases: Sequence[str], name: str) -> Step:
    """One A/B of the search (its rounds are its evidence; undecided stays undecided).

    A step whose sides failed is no evidence either way, nor is one that left a followed
    case unpaired (the commit lacks or skips the test) where no other case read slower:
    the step says why (:attr:`Step.untestable`), and the search skips its commit rather
    than count a case it never compared as good.
    """
    try:
        report = compare(base, head, cases, name)
    except ABError as err:  # a side that ended before it connected, or mid-run
        return Step(base, head, (), None, tuple(cases), untestable=str(err).splitlines()[0])
    slower = _slower(report)
    followed = [c for c in report.cases if c.nodeid in cases]
    unpaired = [f"{c.id}: {c.unpaired_reason}" for c in followed if c.outcome is None]
    ran = {c.nodeid for c in followed}
    unpaired += [f"{n}: not run" for n in cases if n not in ran]
    if report.problems or len(unpaired) == len(cases) or (unpaired and not slower):
        said = "; ".join(report.problems) or "; ".join(unpaired)
        return Step(base, head, (), report, tuple(cases), untestable=said)
    return Step(base, head, slower, report, tuple(cases))


def steps_left(untested: int, step_s: Sequence[float]) -> str:
    """'; about 3 A/Bs, 6 min left': halving ``untested`` commits, then the verifying A/B.

    Each A/B left is taken to cost the mean of the search's steps so far.
    """
    if not step_s:
        return ""
    more = math.ceil(math.log2(untested + 1)) + 1
    return f"; about {plural(more, 'A/B')}, {duration(more * sum(step_s) / len(step_s))} left"


def bisect(
    repo: Path,
    good: str,
    bad: str,
    compare: Compare,
    note: Note = print,
    progress: Progress = lambda _: None,
    budget: Budget | None = None,
) -> BisectResult:
    """Search GOOD..BAD for the first commit whose cases are slower than GOOD's.

    ``progress`` gets the result so far after every step (its reason: the search goes on).
    ``budget``: no A/B starts once it is spent (``compare`` gets the same budget, so that
    a step's A/B stops starting tests there too).
    """
    budget = budget or Budget()
    good_sha, bad_sha = resolve_ref(repo, good), resolve_ref(repo, bad)
    try:
        git(repo, "merge-base", "--is-ancestor", good_sha, bad_sha)
    except SideError:
        raise SideError(
            f"{good} is not an ancestor of {bad}: the commits between them are not a line "
            f"to search (bisect from their merge base, `git merge-base {good} {bad}`, if it "
            "is good)"
        ) from None
    commits = first_parent_commits(repo, good_sha, bad_sha)
    if not commits:  # one commit named twice: nothing between them to search (bad input)
        raise SideError(
            f"{bad} is {good} ({good_sha[:10]}): there is no commit after GOOD up to BAD to "
            "search; give a BAD later than GOOD"
        )
    note(f"bisect: {plural(len(commits), 'commit')} after {good_sha[:10]} up to {bad_sha[:10]}")
    if budget.left() <= 0:
        return BisectResult(
            good_sha, bad_sha, None, False, (), (), reason=f"{BUDGET_ENDED} before its first A/B"
        )
    steps = []
    first = compare(good_sha, bad_sha, None, "good-vs-bad")
    cases = _slower(first)
    steps.append(Step(good_sha, bad_sha, cases, first))
    failed = failed_sides(first)
    if failed and not cases:  # nothing was compared: that is no "nothing to bisect"
        which = " and ".join(
            f"{'GOOD' if side == 'base' else 'BAD'} ({ref} {sha[:10]})"
            for side, ref, sha in (("base", good, good_sha), ("head", bad, bad_sha))
            if side in failed
        )
        said = f"{which} failed, so nothing was compared: " + "; ".join(first.problems)
        progress(BisectResult(good_sha, bad_sha, None, False, (), tuple(steps), reason=said))
        raise ABError(said)
    if not cases:
        return BisectResult(
            good_sha,
            bad_sha,
            None,
            False,
            (),
            tuple(steps),
            reason=f"no case of {bad} is slower than {good}: nothing to bisect",
        )
    names = ", ".join(c.id for c in first.slower)
    note(f"bisect: {plural(len(cases), 'case')} slower at {bad_sha[:10]}: {names}")
    lo, hi = -1, len(commits) - 1  # commits[hi] is bad; commits[lo] (or GOOD) is good
    skipped: dict[int, str] = {}  # commits whose step decided nothing, and why

    def so_far(reason: str) -> BisectResult:
        return BisectResult(
            good_sha,
            bad_sha,
            None,
            False,
            cases,
            tuple(steps),
            reason=reason,
            suspects=tuple(commits[lo + 1 : hi + 1]),
            skipped=tuple((commits[i], why) for i, why in sorted(skipped.items())),
        )

    progress(so_far("searching"))
    step_s: list[float] = []  # each search step's wall seconds: what the steps left will cost

    def untested() -> list[int]:
        """The commits still to test: strictly between the last good and the first bad."""
        return [i for i in range(lo + 1, hi) if i not in skipped]

    def cut_short(step: Step) -> bool:
        """A step with nothing slower, undecided somewhere, and no budget left: no evidence."""
        return not step.slower and budget.left() <= 0 and not whole(step)

    def ended(why: str) -> BisectResult:
        """The search as the budget left it: the commits still suspect, none verified."""
        note(f"bisect: {why}; {plural(hi - lo, 'commit')} still suspect")
        return so_far(why)

    left = untested()
    while left:
        if budget.left() <= 0:
            return ended(f"{BUDGET_ENDED} before the next step")
        mid = left[len(left) // 2]
        t0 = time.monotonic()
        step = _step(compare, good_sha, commits[mid], cases, f"step-{len(steps)}")
        step_s.append(time.monotonic() - t0)
        steps.append(step)
        if cut_short(step):  # the budget may have cut its A/B short
            return ended(f"{BUDGET_ENDED} during the step of {commits[mid][:10]}")
        if step.untestable:
            skipped[mid] = f"untestable: {step.untestable}"
            said = "untestable: skipped, not counted as good"
        elif step.slower:
            hi, said = mid, "bad"
        elif undecided(step):
            skipped[mid] = "undecided (need more samples)"
            said = "undecided (need more samples): skipped, not counted as good"
        else:
            lo, said = mid, "good"
        left = untested()
        note(
            f"bisect: {commits[mid][:10]} {said} ({plural(hi - lo, 'commit')} still suspect"
            f"{steps_left(len(left), step_s)})"
        )
        progress(so_far("searching"))
    beside = [commits[i][:10] for i in sorted(skipped) if lo < i < hi]
    culprit = commits[hi]
    parent = commits[hi - 1] if hi > 0 else good_sha
    if budget.left() <= 0:
        return ended(f"{BUDGET_ENDED} before the A/B that would verify {culprit[:10]}")
    progress(so_far(f"searching: verifying {culprit[:10]} by an A/B of its parent against it"))
    check = _step(compare, parent, culprit, cases, "verify")
    verified = bool(check.slower)
    steps.append(check)
    if cut_short(check):
        why = f"{BUDGET_ENDED} during the A/B that would verify it"
    elif check.untestable:
        why = f"its parent {parent[:10]} against it could not be tested: {check.untestable}"
    else:
        why = (
            "the parent-against-culprit A/B found nothing slower: the change is spread "
            "over several commits or below what an A/B resolves"
        )
    result = so_far("")
    return replace(
        result,
        culprit=culprit,
        verified=verified,
        subject=subject(repo, culprit),
        reason=""
        if verified
        else why
        + (
            f"; skipped commits before it, any of which may be the first slower one: "
            f"{', '.join(beside)}"
            if beside
            else ""
        ),
    )


def _case_line(c: CaseAB) -> str:
    r = c.ratio
    if r is None:
        return f"  {c.id}: not paired: {c.unpaired_reason}"
    ci = f" [{r.ci_low:.3f}, {r.ci_high:.3f}]" if r.has_interval else ""
    kernels = f"; {c.kernels}" if c.kernels else ""
    return f"  {c.id}: {c.verdict_text} {r.ratio:.3f}x{ci}{kernels}"


def render_bisect(result: BisectResult) -> str:
    """What a person reads at the end: the culprit, its ratio with CI, its kernels.

    A search that ended early says what it had learnt: the commits still suspect, and
    those it skipped, with why.
    """
    lines = [
        f"gpugauge bisect {result.good[:10]}..{result.bad[:10]}: {plural(len(result.steps), 'A/B')}"
    ]
    if result.culprit is None:
        lines.append(f"no culprit: {result.reason}")
    else:
        verdict = "culprit" if result.verified else "suspect (not verified)"
        lines.append(f"{verdict}: {result.culprit} {result.subject}")
        step = result.verification
        if step is not None and step.report is not None:
            lines.append(f"its parent against it ({step.base[:10]} -> {step.head[:10]}):")
            lines += [_case_line(c) for c in step.report.cases if c.nodeid in result.cases]
        if not result.verified:
            lines.append(result.reason)
    if result.culprit is None and result.suspects:
        first, last = result.suspects[0][:10], result.suspects[-1][:10]
        span = first if first == last else f"{first}..{last}"
        lines.append(
            f"still suspect: {plural(len(result.suspects), 'commit')} ({span}); the first "
            f"slower one known so far is {last}"
        )
    lines += [f"skipped {commit[:10]}: {why}" for commit, why in result.skipped]
    return "\n".join(lines)
