"""An A/B report as a person reads it: a terminal table, and Markdown for a PR or a job summary.

Rows go worst first (slower, need more samples, faster, same, then tests one side ran
alone), so that what needs a look is on top. Each case's progress line, while the A/B
runs, is phrased here too (:func:`progress_line`, :func:`eta_s`).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from gpugauge.ab.result import AB_MD, ABReport, CaseAB
from gpugauge.ab.verdict import Outcome, Schedule
from gpugauge.core.phrasing import duration, efficiency, plural, seconds_left
from gpugauge.report.tables import fmt_ms, render
from gpugauge.results.files import atomic_write_text

_ORDER = [Outcome.SLOWER, Outcome.NEED_MORE, Outcome.FASTER, Outcome.SAME, None]
SUMMARY_ENV = "GITHUB_STEP_SUMMARY"
HEADERS = ("case", "base ms", "head ms", "head/base", "CI", "pairs", "verdict", "kernels")


def worst_cases_first(cases: tuple[CaseAB, ...]) -> list[CaseAB]:
    """Slower first, cases of one side last; by ratio within an outcome (largest first)."""

    def key(c: CaseAB) -> tuple[int, float]:
        r = c.ratio
        return (_ORDER.index(c.outcome), -(r.ratio if r else 0.0))

    return sorted(cases, key=key)


def row(c: CaseAB) -> list[str]:
    """One case's cells."""
    r = c.ratio
    if c.only or r is None:
        return [c.id, "-", "-", "-", "-", "0", c.unpaired_reason, c.kernels or "-"]
    ci = f"[{r.ci_low:.3f}, {r.ci_high:.3f}]" if r.has_interval else "no interval"
    return [
        c.id,
        fmt_ms(c.base_ms) if c.base_ms else "-",
        fmt_ms(c.head_ms) if c.head_ms else "-",
        f"{r.ratio:.3f}x",
        ci,
        c.pairs_text,
        c.verdict_text,
        c.kernels or "-",
    ]


def eta_s(spent_s: float, done: int, total: int, rounds_after: int = 0) -> str:
    """'; about 3 min left in this round, 9 min in all' ('' at the round's end).

    From the round's seconds per test so far, start-up included (:func:`seconds_left`); each
    round after this one is taken to cost what this one will have cost in all.
    """
    left = seconds_left(spent_s, done, total - done)
    if left is None:
        return ""
    said = f"; about {duration(left)} left in this round"
    if rounds_after > 0:
        said += f", {duration(left + rounds_after * (spent_s + left))} in all"
    return said


def progress_line(case: CaseAB, round_no: int = 1, picked: bool = False) -> str:
    """The line for a case just paired in round ``round_no``: what the table will say of it.

    In a one-round A/B the round is the case, so the line gives the case's verdict, judged
    with the floor of the processes' spread as the table is: the round's own "same" at
    [0.999, 1.004] is "need more samples" at [0.992, 1.011] there (CI, 2026-12-07). With
    several rounds, or where the command ``picked`` the cases to judge after round 1
    (:attr:`~gpugauge.ab.config.ABConfig.picked`), it gives the round's own outcome,
    named as the round's: 'vgg16-...: slower in round 1 of 2, 1.031x [1.024, 1.038]
    (5 pairs, 9 s)'.
    """
    if case.only:
        return f"{case.id}: on {case.only} only"
    r = case.round_ratio
    if r is None:
        return f"{case.id}: {case.unpaired_reason}"
    took = f", {case.wall_s:.0f} s" if case.wall_s else ""
    counted = f"({plural(r.n, 'pair')}{took})"
    rounds = case.schedule.rounds
    if rounds == 1 and not picked and case.ratio is not None:
        v = case.ratio
        ci = f" [{v.ci_low:.3f}, {v.ci_high:.3f}]" if v.has_interval else ""
        return f"{case.id}: {case.outcome} {v.ratio:.3f}x{ci} {counted}"
    ci = f" [{r.ci_low:.3f}, {r.ci_high:.3f}]" if r.has_interval else ""
    if case.round_outcome is Outcome.SAME and case.round_same is not None:
        s = case.round_same  # the interval that decided it
        ci = f" {s.level * 100:.3g}% [{s.ci_low:.3f}, {s.ci_high:.3f}]"
    said = f"{case.round_outcome} in round {round_no} of {rounds}"
    return f"{case.id}: {said}, {r.ratio:.3f}x{ci} {counted}"


def summary_line(report: ABReport) -> str:
    """'53 cases: 50 slower, 0 faster, 2 same, 0 need more samples, 1 not paired; 512 s'.

    Every outcome, then each reason a case has none where some case has it: the counts
    add up to the cases.
    """
    outcomes = {o.value for o in Outcome}
    said = [f"{n} {k}" for k, n in report.counts.items() if n or k in outcomes]
    took = f"{report.wall_s:.0f} s{_on(report)}"
    return f"{plural(len(report.cases), 'case')}: {', '.join(said)}; {took}"


def _on(report: ABReport) -> str:
    """' on 2 GPUs (0, 1)' where the tests were spread over several GPUs, else ''."""
    if len(report.gpus) < 2:
        return ""
    return f" on {len(report.gpus)} GPUs ({', '.join(report.gpus)})"


_PHASE_WORDS = {
    "setup": "setups",
    "blocks": "paired blocks",
    "after": "work after the timed call",
    "alone": "calls timed on one side",
}


def cost_line(report: ABReport) -> str:
    """Where the A/B's time went, s: 'time: setups 120 s, paired blocks 40 s, ...'."""
    parts = [f"{_PHASE_WORDS[p]} {s:.0f} s" for p, s in report.spent.items() if s >= 0.5]
    outside = {
        "sides' start": report.start_s,
        "tests one side ran alone": report.only_s,
        "between tests": report.between_s,
        "sides' end": report.end_s,
    }
    parts += [f"{what} {s:.0f} s" for what, s in outside.items() if s >= 0.5]
    rest = report.rest_s - sum(outside.values())
    over = f" (of {len(report.gpus)} GPUs x {report.wall_s:.0f} s)" if len(report.gpus) > 1 else ""
    return "time" + over + ": " + ", ".join([*parts, f"the rest {max(rest, 0.0):.0f} s"])


def efficiency_line(report: ABReport) -> str:
    """The last line: its timed rounds and warm-up against its wall time, and its cost.

    The first part in a gated run's words; the cost is against the timed rounds.

    'efficiency: timed rounds 80 s and warm-up 20 s of 160 s (62%); 2 rounds of fresh
    processes; the A/B cost 2.0x its timed rounds'. An A/B whose blocks did not count their
    seconds (a side from before they did) says its paired blocks instead (their warm-ups
    and the time between them included), and the calls one side timed alone (a gated run's
    tests past the deadline): both are timing work.
    """
    rounds = f"{plural(rounds_run(report), 'round')} of fresh processes"
    timing = report.timing_s
    held = report.device_s  # over several GPUs, each one's wall
    if timing is None:
        alone = report.spent["alone"]
        work = report.blocks_s + alone
        share = work / held if held > 0 else 0.0
        cost = f"; the A/B cost {held / report.blocks_s:.1f}x its blocks" if report.blocks_s else ""
        also = f" and calls timed alone {alone:.0f} s" if alone >= 0.5 else ""
        return (
            f"efficiency: paired blocks {report.blocks_s:.0f} s{also} of {held:.0f} "
            f"s{_on(report)} ({share:.0%}); {rounds}{cost}"
        )
    timed, warm = timing
    cost = f"; the A/B cost {held / timed:.1f}x its timed rounds" if timed > 0 else ""
    return f"{efficiency(timed, warm, held)}; {rounds}{_on(report)}{cost}"


def sides_line(report: ABReport) -> str:
    """Which build is which, and where they ran."""
    b, h = report.base, report.head

    def build(commit: str | None) -> str:
        return commit[:10] if commit else "working tree"  # cut the hash, never the words

    return (
        f"base {b.ref} ({build(b.commit)}) against head {h.ref} ({build(h.commit)}) "
        f"on {report.device}"
    )


def device_word(report: ABReport) -> str:
    """'GPU', or 'CPU' where the sides ran on no GPU or every case is a CPU case.

    A machine with no NVIDIA driver is named '...; driver -' (:attr:`SavedRun.machine`).
    """
    ids = [c.id for c in report.cases]
    every_cpu = bool(ids) and all(i.endswith("-cpu") for i in ids)
    cpu = report.device.endswith("driver -") or every_cpu
    return "CPU" if cpu else "GPU"


def _same(report: ABReport, here: bool = False) -> str:
    """'same GPU' ('this GPU'), or 'same GPU per case (of 2)' over several GPUs."""
    if len(report.gpus) < 2:
        return f"{'this' if here else 'same'} {device_word(report)}"
    return f"{'one' if here else 'same'} GPU per case (of {len(report.gpus)})"


def rounds_run(report: ABReport) -> int:
    """The rounds of fresh processes the A/B ran: the most that paired any one case."""
    return max((len(c.paired_rounds) for c in report.cases), default=0)


def _same_rule(s: Schedule) -> str:
    """What 'same' needs: one pair of processes judges it at the slower-faster level."""
    if s.rounds < 2:
        return f"its {s.level:.1%} interval within {s.min_effect:.1%}"
    return (
        f"its {s.same_level:.1%} interval within {s.min_effect:.1%} ({s.level:.1%} where "
        "one round paired)"
    )


def _fewer(report: ABReport) -> str:
    """', 1 run' where the A/B ran fewer rounds than asked (its time budget); '' else."""
    ran = rounds_run(report)
    return f" asked, {ran} run" if 0 < ran < report.schedule.rounds else ""


def terminal(report: ABReport) -> str:
    """The terminal table, with what the verdicts mean."""
    s = report.schedule
    title = (
        f"gpugauge ab: {sides_line(report)}\n"
        f"{_same(report)}, blocks alternating, {plural(s.rounds, 'round')} of fresh "
        f"processes{_fewer(report)}; CI {s.level:.1%} over every round; 'slower'/'faster' "
        f"needs a change of at least {s.min_effect:.1%} in every round; 'same' needs "
        f"{_same_rule(s)}"
    )
    table = render(HEADERS, [row(c) for c in worst_cases_first(report.cases)], title=title)
    problems = [f"problem: {p}" for p in report.problems]
    lines = (summary_line(report), cost_line(report), *problems, efficiency_line(report))
    return f"{table}\n" + "\n".join(lines)


def _md_cell(text: str) -> str:
    """A table cell: no line breaks, and a '|' kept as text."""
    return " ".join(text.split()).replace("|", "\\|")


def markdown(report: ABReport) -> str:
    """Markdown for ``$GITHUB_STEP_SUMMARY`` or a PR comment."""
    s = report.schedule
    lines = [  # the verdict counts first: what a pull request's comment shows when folded
        f"### gpugauge A/B: {_md_cell(summary_line(report))}",
        "",
        _md_cell(sides_line(report)),
        "",
        f"**{_md_cell(summary_line(report))}**. Both builds ran on {_same(report, here=True)} "
        f"in alternating blocks, in {plural(s.rounds, 'round')} of fresh "
        f"processes; the CI ({s.level:.1%}) is over every round's paired log-ratios; a "
        f"verdict of slower or faster needs at least {s.min_effect:.1%} in every round; same "
        f"needs {_same_rule(s)}. "
        f"{_md_cell(efficiency_line(report))}.",
        "",
        "| " + " | ".join(HEADERS) + " |",
        "|" + "|".join([":---", *["---:"] * (len(HEADERS) - 2), ":---"]) + "|",
    ]
    lines += [
        "| " + " | ".join(_md_cell(x) for x in row(c)) + " |"
        for c in worst_cases_first(report.cases)
    ]
    lines += [f"\n> problem: {_md_cell(p)}" for p in report.problems]
    return "\n".join(lines) + "\n"


def write_ab_report(report: ABReport, out: Path) -> None:
    """ab.json and ab.md under ``out``; the Markdown also to ``$GITHUB_STEP_SUMMARY``.

    The summary is a copy: one that cannot be written is a warning, never an error that
    would lose the verdicts the A/B paid for (``confirm`` writes them after this).
    """
    report.save(out)
    md = markdown(report)
    atomic_write_text(out / AB_MD, md)
    summary = os.environ.get(SUMMARY_ENV)
    if summary:
        try:
            with open(summary, "a", encoding="utf-8") as fh:
                fh.write(md + "\n")
        except OSError as err:
            print(
                f"gpugauge ab: warning: ${SUMMARY_ENV} {summary} not written "
                f"({err.strerror or err}); the report is in {out / AB_MD}",
                file=sys.stderr,
            )
