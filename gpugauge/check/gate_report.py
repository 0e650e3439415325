"""``gpugauge check gate``: the gate stays quiet on unchanged runs and catches a slowdown.

The gated benchmarks run ``--runs`` times with nothing changed (A/A: each must pass, so
every regression there is a false alarm) and once with a slowdown injected as device work, a
fraction (3% by default) of each case's own baseline median added to every round
(:mod:`gpugauge.check.slowdown`): every case of 1 ms or more must then regress. Shorter
cases are shown but not required: their rounds carry a spin's launch cost and move with the
clock more than the injected fraction (docs/check.md). Nor are host-bound steps (issued op
by op, with a ``gpu_busy`` reading under :data:`~gpugauge.measure.busy.HOST_BOUND_BELOW`
in the A/A runs, or a baseline whose runs their hosts paced): the host paces them and their
GPU idles for a fifth of each step or more, so device work added to the step runs in those
gaps instead of lengthening it (3% injected read 0.99-1.32x on six such steps, busy 11-72%),
or their class baseline allows the spread of its hosts' paces. A real device regression
there does the same; their graphed twins, which keep the GPU busy, are the cases that must
catch it. Time only (no energy window: each adds seconds of rounds to every case, and the
check is about time), the A/A runs recording each case's kernels so that a changed cuDNN or
cuBLAS plan is named.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpugauge.core.phrasing import plural
from gpugauge.judging.judge import Judge
from gpugauge.measure.busy import HOST_BOUND_BELOW, host_bound_of
from gpugauge.regress.gate import Gate
from gpugauge.report.tables import fmt_ratio, render, verdict_counts
from gpugauge.results.files import atomic_write_json, atomic_write_text
from gpugauge.results.measurement import INJECTED_KEY
from gpugauge.results.runs import load_run
from gpugauge.results.verdicts import GateResult, MetricCheck, Verdict

MIN_CASE_MS = 1.0  # cases this long or longer must catch the injected slowdown
# A host-issued step whose baseline allows more than this was recorded on hosts that paced
# it: its runs lie 10% or more apart (ResNet-18's eager fp32 step read 7.9-11.7 ms over
# five H100 hosts, allowed 1.94x), where no case of 1 ms or more that keeps its GPU busy
# allows more than 3.8%.
HOST_PACED_ALLOWANCE = 0.2
HOST_BOUND_NOTE = (
    f" Host-bound steps (issued by the host, GPU busy under {HOST_BOUND_BELOW:.0%} of the step,"
    f" or a baseline that allows more than {HOST_PACED_ALLOWANCE:.0%} because the hosts that"
    " recorded it paced the step) are shown but not required: device work added to them runs"
    " while their GPU would wait for the host, or hides in the hosts' spread."
)
DEFAULT_SLOWDOWN = 0.03
GATE_SCHEMA = 1


@dataclass(frozen=True)
class RunResult:
    """One case in one run: its verdict, median (ms), injected slowdown (ms), GPU-busy share.

    ``gpu_busy`` is a fraction, None where the case does not read one; ``host_issued``:
    the step is issued op by op by the host (false where not recorded, or a graph replay).
    """

    gate: GateResult | None  # None: the run has the case but no verdict (not gated)
    median_ms: float | None = None
    injected_ms: float | None = None
    gpu_busy: float | None = None
    host_issued: bool = False


def read_run(path: Path | None, judge: Gate | None = None) -> dict[str, RunResult]:
    """Each case of a saved run (pytest-benchmark JSON) by id; {} for no file.

    The verdicts are those the run stored, or, with ``judge``, its verdicts on the run's
    results now (``gpugauge check gate --judge-again``: the baselines or rules changed).
    """
    if path is None:
        return {}
    run = load_run(path)
    out = {}
    for m in run.measurements:
        raw = run.verdicts.get(m.id)
        if judge is not None:
            gate = Judge(judge).judge(m)
        else:
            gate = None if raw is None else GateResult.from_dict(raw, m.spec.family, m.device_class)
        injected = m.extra.get(INJECTED_KEY)
        out[m.id] = RunResult(
            gate,
            m.summary.median if m.timing is not None else None,
            float(injected) if isinstance(injected, int | float) else None,
            m.values.get("gpu_busy"),
            host_bound_of(m.extra) is not None,  # a step the host issues, either way
        )
    return out


@dataclass(frozen=True)
class GateCase:
    """One case across the A/A runs and the injected run."""

    id: str
    aa: tuple[RunResult | None, ...]  # None: no result in that run (its test failed)
    injected: RunResult | None

    @property
    def verdicts(self) -> tuple[GateResult, ...]:
        """Every verdict the case got, A/A runs first, the injected run's last."""
        return tuple(r.gate for r in (*self.aa, self.injected) if r and r.gate)

    def _time_check(self) -> MetricCheck | None:
        """The check of time against the baseline, from whichever run compared with it."""
        checks = (g.check("time") for g in self.verdicts)
        return next((c for c in checks if c is not None), None)

    @property
    def baseline_ms(self) -> float | None:
        """The baseline's median time, ms."""
        check = self._time_check()
        return None if check is None else check.baseline

    @property
    def gpu_busy(self) -> float | None:
        """The median of the case's GPU-busy readings over its A/A runs; None without one.

        The injected run counts only where no A/A run has a reading: its added work fills
        the very gaps the share measures (ResNet-18 bf16's eager step: 69% busy
        unchanged, 91% injected), so its share is an upper bound of the step's own.
        """
        readings = [r.gpu_busy for r in self.aa if r and r.gpu_busy is not None]
        if not readings and self.injected is not None and self.injected.gpu_busy is not None:
            readings = [self.injected.gpu_busy]
        return statistics.median(readings) if readings else None

    @property
    def baseline_allows(self) -> float | None:
        """The change of time the baseline allows (0.015: 1.5%); None without one."""
        check = self._time_check()
        return None if check is None else check.tolerance

    @property
    def host_paced_baseline(self) -> bool:
        """The baseline's runs lie so far apart that their hosts paced them."""
        allows = self.baseline_allows
        return allows is not None and allows > HOST_PACED_ALLOWANCE

    @property
    def host_bound(self) -> bool:
        """The host issues its step and paces it: here, or on the hosts of its baseline.

        Here: its GPU idled for a fifth of the step or more in the A/A runs (added device
        work then fills the GPU's gaps instead of lengthening the step). In its baseline:
        runs of hosts that paced it lie far apart, and the allowance they give holds the
        hosts' paces (ResNet-18's eager fp32 step, 93% busy on one host and lengthened
        by the whole injected 3% there, was allowed 1.94x: no 3% can show).
        """
        issued = any(r.host_issued for r in (*self.aa, self.injected) if r is not None)
        busy = self.gpu_busy
        return issued and (
            (busy is not None and busy < HOST_BOUND_BELOW) or self.host_paced_baseline
        )

    @property
    def counted(self) -> bool:
        """A case the check requires to be caught: ``MIN_CASE_MS`` or more, not host-bound."""
        base = self.baseline_ms
        return base is not None and base >= MIN_CASE_MS and not self.host_bound

    @property
    def caught(self) -> bool:
        """The injected run's time regressed: what was injected is device time.

        Its result's verdict could be a regression of another metric (memory) beside an
        unchanged time, which the row's cell, a time ratio, would not show.
        """
        r = self.injected
        t = r.gate.check("time") if r is not None and r.gate is not None else None
        return t is not None and t.verdict is Verdict.REGRESSED

    @property
    def false_alarms(self) -> int:
        """A/A runs in which this case regressed."""
        return sum(
            r is not None and r.gate is not None and r.gate.verdict is Verdict.REGRESSED
            for r in self.aa
        )


def gate_cases(
    aa: Sequence[dict[str, RunResult]], injected: dict[str, RunResult]
) -> list[GateCase]:
    """Every case seen in any run, in the order the runs first list them."""
    ids = list(dict.fromkeys(k for run in (*aa, injected) for k in run))
    return [GateCase(i, tuple(run.get(i) for run in aa), injected.get(i)) for i in ids]


@dataclass(frozen=True)
class GateSummary:
    """The counts the check is judged by."""

    caught: int
    counted: int
    false_alarms: int
    aa_verdicts: int
    short_caught: int
    short: int
    host_bound_caught: int = 0
    host_bound: int = 0

    @property
    def passed(self) -> bool:
        """Every case of 1 ms or more caught, no false alarm, and something to judge."""
        return self.counted > 0 and self.caught == self.counted and self.false_alarms == 0

    def line(self) -> str:
        """'caught 24 of 24 cases of 1 ms or more; false alarms 0'."""
        text = (
            f"caught {self.caught} of {self.counted} cases of {MIN_CASE_MS:g} ms or more; "
            f"false alarms {self.false_alarms}"
        )
        extra = [f"in {plural(self.aa_verdicts, 'A/A verdict')}"]
        if self.short:
            extra.append(f"{self.short_caught} of {self.short} shorter cases caught")
        if self.host_bound:
            extra.append(
                f"{self.host_bound_caught} of {self.host_bound} host-bound steps caught, "
                "not required: the host paces them"
            )
        line = f"{text} ({'; '.join(extra)})"
        if self.counted:
            return line
        judged = self.short + self.host_bound  # why nothing was required: it cannot pass
        return f"{line}; FAIL: " + (
            f"nothing to require: none of the {plural(judged, 'judged case')} is a case of "
            f"{MIN_CASE_MS:g} ms or more that keeps its device busy, so the check proves "
            "nothing here; select such cases (-k EXPR) or a larger --profile"
            if judged
            else "no case had a baseline to judge it by"
        )


def summarize_cases(cases: Sequence[GateCase]) -> GateSummary:
    """Count caught cases (1 ms or more; shorter ones; host-bound ones) and A/A false alarms."""
    judged = [c for c in cases if c.baseline_ms is not None]
    counted = [c for c in judged if c.counted]
    bound = [c for c in judged if c.host_bound]
    short = [c for c in judged if not c.counted and not c.host_bound]
    return GateSummary(
        caught=sum(c.caught for c in counted),
        counted=len(counted),
        false_alarms=sum(c.false_alarms for c in cases),
        aa_verdicts=sum(r is not None and r.gate is not None for c in cases for r in c.aa),
        short_caught=sum(c.caught for c in short),
        short=len(short),
        host_bound_caught=sum(c.caught for c in bound),
        host_bound=len(bound),
    )


def percent(fraction: float) -> str:
    """0.03 -> '3%', 0.025 -> '2.5%'."""
    return f"{fraction * 100:.3g}%"


def _cell(r: RunResult | None, injected: bool = False) -> str:
    """'unchanged 1.002x', 'REGRESSED 1.031x' (an A/A false alarm), 'no result', 'new'.

    The injected run's cell gives its time's verdict (what :attr:`GateCase.caught` reads)
    and the ratio's CI, its regression in lower case: there it is the outcome wanted.
    """
    if r is None:
        return "no result"
    if r.gate is None:
        return "not gated"
    t = r.gate.check("time")
    verdict = t.verdict if injected and t is not None else r.gate.verdict
    alarm = verdict is Verdict.REGRESSED and not injected
    shown = verdict.value.upper() if alarm else verdict.value
    if t is None:
        return shown
    ratio = fmt_ratio(t) if injected else f"{t.ratio:.3f}x"
    return f"{shown} {ratio}"


def _busy_text(c: GateCase) -> str:
    """The busy share as "busy 12.5%", and the baseline's allowance where its hosts paced it."""
    here = c.gpu_busy
    text = "busy -" if here is None else f"busy {here:.1%}"
    if c.host_paced_baseline and (here is None or here >= HOST_BOUND_BELOW):
        text += f", baseline allows {1 + (c.baseline_allows or 0):.3g}x"
    return text


def _caught_cell(c: GateCase) -> str:
    if c.baseline_ms is None:
        judged = sorted({m.metric for g in c.verdicts for m in g.checks})
        return f"- (not timed: {', '.join(judged)})" if judged else "- (no baseline)"
    word = "yes" if c.caught else ("NO" if c.counted else "no")
    if c.host_bound:
        return f"{word} (host-bound, {_busy_text(c)})"
    return word if c.counted else f"{word} (< {MIN_CASE_MS:g} ms)"


def check_gate_table(
    cases: Sequence[GateCase], fraction: float
) -> tuple[list[str], list[list[str]]]:
    """Headers and one row per case: baseline median, A/A verdicts, injected verdict, caught."""
    runs = max((len(c.aa) for c in cases), default=0)
    headers = ["case", "baseline ms"]
    headers += [f"A/A {i + 1}" for i in range(runs)]
    headers += ["injected ms", f"+{percent(fraction)} injected [95% CI]", "allowed", "caught"]
    rows = []
    for c in cases:
        base = c.baseline_ms
        inj = c.injected
        t = inj.gate.check("time") if inj is not None and inj.gate is not None else None
        rows.append(
            [
                c.id,
                "-" if base is None else f"{base:.4g}",
                *(_cell(r) for r in c.aa),
                "-" if inj is None or inj.injected_ms is None else f"{inj.injected_ms:.3g}",
                _cell(inj, injected=True),
                "-" if t is None else t.allowed,
                _caught_cell(c),
            ]
        )
    return headers, rows


@dataclass(frozen=True)
class GateReport:
    """What the gate check found."""

    cases: tuple[GateCase, ...]
    fraction: float
    device_class: str
    runs: tuple[dict[str, Any], ...] = ()
    problems: tuple[str, ...] = ()

    @property
    def summary(self) -> GateSummary:
        """The counts the check is judged by."""
        return summarize_cases(self.cases)

    @property
    def passed(self) -> bool:
        """Caught every case of 1 ms or more, no false alarm, every run complete."""
        return self.summary.passed and not self.problems

    def aa_counts(self) -> str:
        """The A/A runs' verdicts counted: '70 unchanged, 2 inconclusive'."""
        return verdict_counts([r.gate for c in self.cases for r in c.aa if r and r.gate])

    def as_dict(self) -> dict[str, Any]:
        """Plain dict for JSON: every case's verdicts, the counts, the runs."""

        def run(r: RunResult | None) -> dict[str, Any] | None:
            if r is None:
                return None
            return {
                "verdict": None if r.gate is None else r.gate.verdict.value,
                "gate": None if r.gate is None else r.gate.as_dict(),
                "median_ms": r.median_ms,
                "injected_ms": r.injected_ms,
                "gpu_busy": r.gpu_busy,
            }

        s = self.summary
        return {
            "check": "gate",
            "schema": GATE_SCHEMA,
            "device_class": self.device_class,
            "slowdown_fraction": self.fraction,
            "min_case_ms": MIN_CASE_MS,
            "passed": self.passed,
            "summary": s.line(),
            "counts": {k: getattr(s, k) for k in s.__dataclass_fields__},  # every count
            "cases": [
                {
                    "id": c.id,
                    "baseline_ms": c.baseline_ms,
                    "counted": c.counted,
                    "gpu_busy": c.gpu_busy,
                    "baseline_allows": c.baseline_allows,
                    "host_bound": c.host_bound,
                    "caught": c.caught,
                    "false_alarms": c.false_alarms,
                    "aa": [run(r) for r in c.aa],
                    "injected": run(c.injected),
                }
                for c in self.cases
            ],
            "runs": list(self.runs),
            "problems": list(self.problems),
        }


def render_gate(report: GateReport) -> str:
    """The table as text, the verdict and counts in its title, the summary line below."""
    headers, rows = check_gate_table(report.cases, report.fraction)
    verdict = "PASS" if report.passed else "FAIL"
    title = f"gpugauge check gate on {report.device_class}: {verdict}"
    text = render(headers, rows, title)
    text += f"\nA/A verdicts: {report.aa_counts() or 'none'}"
    text += "".join(f"\nproblem: {p}" for p in report.problems)
    return f"{text}\n{report.summary.line()}"


def markdown_gate(report: GateReport, command: str) -> str:
    """The report as Markdown: verdict, command, summary line, table, runs."""
    from gpugauge.report.cells import markdown_table

    headers, rows = check_gate_table(report.cases, report.fraction)
    lines = [
        f"# gpugauge check gate: {'PASS' if report.passed else 'FAIL'}",
        "",
        f"Device class `{report.device_class}`. `{command}`",
        "",
        f"**{report.summary.line()}.** A/A verdicts: {report.aa_counts() or 'none'}. "
        f"An A/A regression is a false alarm (shown in capitals); the injected run adds "
        f"{percent(report.fraction)} of each case's baseline median to every round as device work."
        + (HOST_BOUND_NOTE if report.summary.host_bound else ""),
        "",
        markdown_table(headers, rows),
        "",
        "Runs:",
        "",
    ]
    lines += [_run_line(r) for r in report.runs]
    lines += [f"\nProblem: {p}" for p in report.problems]
    return "\n".join(lines) + "\n"


def _run_line(r: dict[str, Any]) -> str:
    """A run of the report as a Markdown item; a run judged again was not run here."""
    if "pytest_exit" not in r:
        return f"- {r['label']} (`{r['json']}`)"
    return (
        f"- {r['label']}: pytest exit {r['pytest_exit']} in {r['wall_s']:.0f} s "
        f"(`{r['json'] or 'no JSON'}`, log `{r['log']}`)"
    )


def write_gate(report: GateReport, out: Path, command: str) -> list[Path]:
    """``gate.json`` and ``gate.md`` in ``out``, each written atomically."""
    js, md = out / "gate.json", out / "gate.md"
    atomic_write_json(js, {**report.as_dict(), "command": command})
    atomic_write_text(md, markdown_gate(report, command))
    return [js, md]
