"""``gpugauge bisect GOOD BAD``: the first commit whose cases run slower than GOOD's.

Every step is an A/B on this GPU (:mod:`gpugauge.ab.runner`): GOOD against BAD first, to
learn which cases BAD made slower (nothing slower: nothing to bisect); then a binary search
over the first-parent commits between them, each commit tried against GOOD on those cases
alone; a commit is bad when any of them is slower, good when none is slower or undecided,
and undecided otherwise: skipped, as ``git bisect skip`` does, never counted as good, and
named in the result where the culprit could lie beside it. The commit found is named only after a
closer A/B, of its parent against it, says slower too: a search over noisy steps can land
one commit off, and the confirmation says so rather than blaming the wrong change.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from gpugauge.ab.launch import ABError
from gpugauge.ab.result import ABReport, CaseAB
from gpugauge.ab.sides import SideError, git
from gpugauge.ab.verdict import Outcome
from gpugauge.phrasing import plural

# compare(base ref, head ref, case ids or None for the selection, step name) -> report
Compare = Callable[[str, str, Sequence[str] | None, str], ABReport]
Note = Callable[[str], None]


@dataclass(frozen=True)
class Step:
    """One A/B of the search: which commit against which, and its slower cases."""

    base: str
    head: str
    slower: tuple[str, ...]
    report: ABReport
    followed: tuple[str, ...] = ()  # the node ids it was asked about (none: the selection)


@dataclass(frozen=True)
class BisectResult:
    """What the search found: the culprit (None: none), its confirmation, every step."""

    good: str
    bad: str
    culprit: str | None
    confirmed: bool
    cases: tuple[str, ...]  # node ids of the cases BAD made slower, which the search followed
    steps: tuple[Step, ...]
    subject: str = ""
    reason: str = ""  # why no culprit is named, where none is

    @property
    def confirmation(self) -> Step | None:
        """The parent-against-culprit A/B, if it ran."""
        return self.steps[-1] if self.culprit and self.steps else None


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


def undecided(step: Step) -> bool:
    """No followed case slower, and one of them left at 'need more samples'."""
    followed = [c for c in step.report.cases if c.nodeid in step.followed]
    return not step.slower and any(c.outcome is Outcome.NEED_MORE for c in followed)


def _step(compare: Compare, base: str, head: str, cases: Sequence[str], name: str) -> Step:
    """One A/B of the search (its rounds are its evidence; undecided stays undecided)."""
    report = compare(base, head, cases, name)
    if report.problems or not any(c.nodeid in cases for c in report.cases):
        # a step that did not run its cases is no evidence either way: say so, stop
        said = "; ".join(report.problems) or "none of the followed cases ran"
        raise ABError(f"bisect step {name} ({base[:10]} against {head[:10]}): {said}")
    return Step(base, head, _slower(report), report, tuple(cases))


def bisect(repo: Path, good: str, bad: str, compare: Compare, note: Note = print) -> BisectResult:
    """Search GOOD..BAD for the first commit whose cases are slower than GOOD's."""
    good_sha = git(repo, "rev-parse", "--verify", f"{good}^{{commit}}")
    bad_sha = git(repo, "rev-parse", "--verify", f"{bad}^{{commit}}")
    try:
        git(repo, "merge-base", "--is-ancestor", good_sha, bad_sha)
    except SideError:
        raise SideError(
            f"{good} is not an ancestor of {bad}: the commits between them are not a line "
            f"to search (bisect from their merge base, `git merge-base {good} {bad}`, if it "
            "is good)"
        ) from None
    commits = first_parent_commits(repo, good_sha, bad_sha)
    if not commits:
        return BisectResult(
            good_sha, bad_sha, None, False, (), (), reason=f"{bad} is not after {good}"
        )
    note(f"bisect: {plural(len(commits), 'commit')} after {good_sha[:10]} up to {bad_sha[:10]}")
    steps = []
    first = compare(good_sha, bad_sha, None, "good-vs-bad")
    cases = _slower(first)
    steps.append(Step(good_sha, bad_sha, cases, first))
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
    skipped: set[int] = set()  # commits whose step decided nothing: neither good nor bad
    while left := [i for i in range(lo + 1, hi) if i not in skipped]:
        mid = left[len(left) // 2]
        step = _step(compare, good_sha, commits[mid], cases, f"step-{len(steps)}")
        steps.append(step)
        if step.slower:
            hi, said = mid, "bad"
        elif undecided(step):
            skipped.add(mid)
            said = "undecided (need more samples): skipped, not counted as good"
        else:
            lo, said = mid, "good"
        note(f"bisect: {commits[mid][:10]} {said} ({plural(hi - lo, 'commit')} still suspect)")
    beside = [commits[i][:10] for i in sorted(skipped) if lo < i < hi]
    culprit = commits[hi]
    parent = commits[hi - 1] if hi > 0 else good_sha
    check = _step(compare, parent, culprit, cases, "confirm")
    confirmed = check.slower
    steps.append(check)
    return BisectResult(
        good_sha,
        bad_sha,
        culprit,
        bool(confirmed),
        cases,
        tuple(steps),
        subject=subject(repo, culprit),
        reason=""
        if confirmed
        else (
            "the parent-against-culprit A/B found nothing slower: the change is spread "
            "over several commits or below what an A/B resolves"
            + (
                f"; undecided commits before it, any of which may be the first slower one: "
                f"{', '.join(beside)}"
                if beside
                else ""
            )
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
    """What a person reads at the end: the culprit, its ratio with CI, its kernels."""
    lines = [
        f"gpugauge bisect {result.good[:10]}..{result.bad[:10]}: {plural(len(result.steps), 'A/B')}"
    ]
    if result.culprit is None:
        lines.append(f"no culprit: {result.reason}")
        return "\n".join(lines)
    verdict = "culprit" if result.confirmed else "suspect (not confirmed)"
    lines.append(f"{verdict}: {result.culprit} {result.subject}")
    step = result.confirmation
    if step is not None:
        lines.append(f"its parent against it ({step.base[:10]} -> {step.head[:10]}):")
        lines += [_case_line(c) for c in step.report.cases if c.nodeid in result.cases]
    if not result.confirmed:
        lines.append(result.reason)
    return "\n".join(lines)
