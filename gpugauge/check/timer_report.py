"""``gpugauge check timer``: the suite's timer against ``triton.testing.do_bench``.

Every GPU case of the selected benchmarks is timed three ways in one pytest run (see
:mod:`gpugauge.check.timer_plugin`): by the suite (``gauge.measure``, which calls
:func:`gpugauge.measure.timing.measure`, in the profile's sustained regime), by
``triton.testing.do_bench`` and by a bare CUDA-event loop (:mod:`gpugauge.check.three_timers`);
then three power-heavy ops the same way, in this process. The SM clock is recorded beside
each: a power-capped op's time follows how densely each timer keeps the GPU busy. The
check passes when every op's suite median is within ``threshold`` of do_bench's.
"""

from __future__ import annotations

import json
import shlex
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpugauge.check.runs import (
    PYTEST_NO_TESTS,
    PYTEST_OK,
    CheckError,
    CheckUnavailable,
    Note,
    check_benches,
    families_with_baselines,
    log_tail,
    run_pytest,
)
from gpugauge.check.three_timers import (
    DEFAULT_THRESHOLD,
    DO_BENCH_REP_MS,
    DO_BENCH_WARMUP_MS,
    MAX_PAIRS,
    TimerRow,
    time_power_heavy,
)
from gpugauge.measure.clocks import CLOCKS_APART, CLOCKS_APART_AT_MOST
from gpugauge.report.tables import render
from gpugauge.results.files import atomic_write_json, atomic_write_text, make_dir

SCHEMA = 1


@dataclass(frozen=True)
class TimerReport:
    """What the timer check found: every row, the cases it could not compare, the verdict."""

    rows: tuple[TimerRow, ...]
    threshold: float
    not_compared: tuple[dict[str, str], ...] = ()
    device: str = ""
    problems: tuple[str, ...] = ()  # what kept the check from comparing every case
    runs: tuple[dict[str, Any], ...] = field(default_factory=tuple)

    def mark(self, row: TimerRow) -> str:
        """'!' outside the threshold of do_bench, '~' outside it only by the clocks, else ''."""
        if row.clocks_explain(self.threshold):
            return "~"
        return "!" if abs(row.vs_do_bench) > self.threshold else ""

    @property
    def clock_apart(self) -> list[TimerRow]:
        """Rows outside the threshold that the two timers' SM clocks account for."""
        return [r for r in self.rows if self.mark(r) == "~"]

    @property
    def outside(self) -> list[TimerRow]:
        """Rows outside the threshold of do_bench that the clocks do not account for."""
        return [r for r in self.rows if self.mark(r) == "!"]

    @property
    def passed(self) -> bool:
        """Every op within the threshold of do_bench, at one SM clock where the clocks differ.

        At least one op timed, and no problem.
        """
        return bool(self.rows) and not self.outside and not self.problems

    def summary(self) -> str:
        """'25 of 25 within 2% of do_bench; worst -0.63% (maxpool-fwd-fp32-seed-cuda)'.

        Rows that only the clocks put outside are counted apart: '16 of 17 within 2.0% of
        do_bench, 1 more at one SM clock; ...'.
        """
        if not self.rows:
            return "no op timed"
        worst = max(self.rows, key=lambda r: abs(r.vs_do_bench))
        apart = len(self.clock_apart)
        inside = len(self.rows) - len(self.outside) - apart
        more = f", {apart} more at one SM clock" if apart else ""
        return (
            f"{inside} of {len(self.rows)} within {self.threshold:.1%} of do_bench{more}; "
            f"worst {worst.vs_do_bench:+.2%} ({worst.op})"
        )

    def as_dict(self) -> dict[str, Any]:
        """Plain dict for JSON."""
        return {
            "check": "timer",
            "schema": SCHEMA,
            "device": self.device,
            "threshold": self.threshold,
            "passed": self.passed,
            "summary": self.summary(),
            "rows": [r.as_dict() for r in self.rows],
            "not_compared": list(self.not_compared),
            "problems": list(self.problems),
            "runs": list(self.runs),
            "do_bench": {"warmup_ms": DO_BENCH_WARMUP_MS, "rep_ms": DO_BENCH_REP_MS},
        }


def _mhz(x: float | None) -> str:
    return "-" if x is None else f"{x:.0f}"


def _blocks(r: TimerRow) -> str:
    """'2+2 (0.31%)': block medians of the suite + do_bench, and the wider side's spread."""
    spread = r.spread
    if spread is None:
        return "-"
    return f"{len(r.suite_runs_ms)}+{len(r.do_bench_runs_ms)} ({spread:.2%})"


def timer_table(report: TimerReport) -> tuple[list[str], list[list[str]]]:
    """Headers and rows: op, the three medians, the two differences, the SM clocks."""
    headers = [
        "op",
        "suite ms",
        "do_bench ms",
        "bare ms",
        "vs do_bench",
        "at one clock",
        "vs bare",
        "suite SM MHz",
        "do_bench MHz",
        "blocks (spread)",
        "case ms",
    ]
    rows = []
    for r in report.rows:
        mark = report.mark(r)
        flag = f" {mark}" if mark else ""
        at_clock = r.vs_do_bench_at_its_clock
        suite_mhz = "-"
        if r.suite_sm_mhz is not None:
            span = f"{_mhz(r.suite_sm_min_mhz)}-{_mhz(r.suite_sm_max_mhz)}"
            suite_mhz = f"{_mhz(r.suite_sm_mhz)} [{span}]"
        rows.append(
            [
                r.op,
                f"{r.suite_ms:.4g}",
                f"{r.do_bench_ms:.4g}",
                f"{r.bare_ms:.4g}",
                f"{r.vs_do_bench:+.2%}{flag}",
                "-" if at_clock is None else f"{at_clock:+.2%}",
                f"{r.vs_bare:+.2%}",
                suite_mhz,
                _mhz(r.do_bench_sm_mhz),
                _blocks(r),
                "-" if r.case_ms is None else f"{r.case_ms:.4g}",
            ]
        )
    return headers, rows


def render_timer(report: TimerReport) -> str:
    """The table as text, the verdict in its title, what was not compared below it."""
    headers, rows = timer_table(report)
    verdict = "PASS" if report.passed else "FAIL"
    text = render(
        headers, rows, f"gpugauge check timer on {report.device}: {verdict}: {report.summary()}"
    )
    if report.not_compared:
        text += "\nnot compared: " + "; ".join(
            f"{n['op']} ({n['why']})" for n in report.not_compared
        )
    return text + "".join(f"\nproblem: {p}" for p in report.problems)


def markdown_timer(report: TimerReport, command: str) -> str:
    """The report as Markdown: verdict, command, table, what was not compared."""
    from gpugauge.report.cells import markdown_table

    headers, rows = timer_table(report)
    lines = [
        f"# gpugauge check timer: {'PASS' if report.passed else 'FAIL'}",
        "",
        f"{report.device}. `{command}`",
        "",
        f"{report.summary()}; `!` marks an op outside the threshold, `~` one inside it once "
        f"the suite's time is scaled to do_bench's SM clock (the clocks "
        f"{CLOCKS_APART:.0%}-{CLOCKS_APART_AT_MOST:.0%} apart). "
        f"Suite: the suite's timer (sustained regime); do_bench: `triton.testing.do_bench` "
        f"({DO_BENCH_WARMUP_MS} ms warm-up, {DO_BENCH_REP_MS} ms of repetitions, median); "
        "bare: CUDA events around each call, one synchronize, median (not judged). Timed in "
        "pairs of blocks suite, do_bench, do_bench, suite (bare once, in the first), each "
        f"side the mean of its block medians; a row outside the threshold whose blocks "
        f"spread more than half of it gets another pair, up to {MAX_PAIRS}. All three with "
        "do_bench's L2 flush before every round. blocks: how many a side, and the wider "
        "side's spread (max/min - 1); case ms: the case's own median, as its family timed "
        "it (a training step with a warm L2).",
        "",
        markdown_table(headers, rows),
    ]
    if report.not_compared:
        lines += ["", "Not compared:", ""]
        lines += [f"- {n['op']}: {n['why']}" for n in report.not_compared]
    lines += [f"\nProblem: {p}" for p in report.problems]
    return "\n".join(lines) + "\n"


def why_not_here(cuda_available: bool, has_triton: bool) -> str | None:
    """Why the timer check cannot run on this machine, or None when it can."""
    if not cuda_available:
        return (
            "no CUDA device is visible (torch.cuda.is_available() is False): the timer "
            "check compares GPU timers; run it on the GPU machine"
        )
    if not has_triton:
        return (
            "triton is not installed: the timer check compares the suite's timer with "
            "triton.testing.do_bench (pip install triton, or a torch build that ships it)"
        )
    return None


def probe_machine() -> str | None:
    """:func:`why_not_here` for this machine."""
    import importlib.util

    import torch

    return why_not_here(torch.cuda.is_available(), importlib.util.find_spec("triton") is not None)


@dataclass(frozen=True)
class TimerConfig:
    """What ``gpugauge check timer`` was asked to do."""

    out: Path
    root: Path = Path(".")
    benches: Path = Path("benches")
    select: str | None = None  # pytest -k; None: families with baselines
    ops: tuple[str, ...] = ()
    profile: str = "seed"
    threshold: float = DEFAULT_THRESHOLD
    baselines_dir: Path = Path("baselines")
    pytest_args: tuple[str, ...] = ()


def suite_run_args(cfg: TimerConfig, select: str) -> list[str]:
    """The child pytest's arguments (its JSON option is added by the runner).

    Time only, and nothing appended to the results history: a check is not a night.
    """
    args = [
        str(cfg.benches),
        "-k",
        select,
        "--gauge-profile",
        cfg.profile,
        "--gauge-energy-window",
        "0",
    ]
    args += ["--gauge-no-history", "-p", "gpugauge.check.timer_plugin", "-p", "no:cacheprovider"]
    args.append(f"--gauge-timer-check-threshold={cfg.threshold}")
    for pattern in cfg.ops:
        args.append(f"--gauge-timer-check-op={pattern}")
    return [*args, *cfg.pytest_args]


def run_timer_check(cfg: TimerConfig, note: Note = print) -> TimerReport:
    """Run the check: the benchmarks' GPU cases in pytest, then the power-heavy ops here."""
    import torch

    why = probe_machine()
    if why:
        raise CheckUnavailable(why)
    if not 0 < cfg.threshold < 1:
        raise CheckError(f"--threshold {cfg.threshold}: must be a fraction in (0, 1)")
    check_benches(cfg.root, cfg.benches)
    select = cfg.select
    if select is None:
        families = families_with_baselines(cfg.baselines_dir)
        if not families:
            raise CheckError(
                f"no stored baselines in {cfg.baselines_dir} to choose the cases from: "
                "name them with -k"
            )
        from gpugauge.check.selection import default_selection
        from gpugauge.family.entries import family_names

        try:
            select = default_selection(cfg.baselines_dir, None, families, set(family_names()))
        except ValueError as err:
            raise CheckError(str(err)) from None
    device = f"{torch.cuda.get_device_name()} (torch {torch.__version__})"
    note(f"[gpugauge check timer] {device}; cases: -k {shlex.quote(select)}")
    make_dir(cfg.out, "--out")  # before the run: it holds its log
    t0 = time.monotonic()
    done = run_pytest(
        "timer-suite",
        suite_run_args(cfg, select),
        root=cfg.root,
        folder=cfg.out / "timer-runs",
        json_option="--gauge-timer-check-json",
        note=note,
    )
    note(
        f"[gpugauge check timer] suite's cases: pytest exit {done.exit_code} in "
        f"{done.wall_s:.0f} s (log {done.log})"
    )
    problems = []
    if done.exit_code == PYTEST_NO_TESTS and not cfg.ops:
        raise CheckError(f"-k {shlex.quote(select)} selected no test in {cfg.benches}")
    if done.exit_code not in (PYTEST_OK, PYTEST_NO_TESTS):
        problems.append(f"the suite's run ended with pytest exit {done.exit_code}: see {done.log}")
    if done.json is None:
        raise CheckError(
            f"the suite's run wrote no rows (pytest exit {done.exit_code}); the end of "
            f"{done.log}:\n{log_tail(done.log)}"
        )
    got = json.loads(done.json.read_text())
    rows = [TimerRow.from_dict(r) for r in got["rows"]]
    rows += time_power_heavy(cfg.profile, cfg.ops, note, cfg.threshold)
    if not rows:
        raise CheckError(
            f"no op was timed: -k {shlex.quote(select)} and --ops {shlex.join(cfg.ops) or '(all)'} "
            f"selected none that can be compared (see {done.log})"
        )
    note(f"[gpugauge check timer] done in {time.monotonic() - t0:.0f} s")
    return TimerReport(
        rows=tuple(rows),
        threshold=cfg.threshold,
        not_compared=tuple(got.get("not_compared", ())),
        device=device,
        problems=tuple(problems),
        runs=(
            {
                "name": done.name,
                "pytest_exit": done.exit_code,
                "wall_s": done.wall_s,
                "log": str(done.log),
                "select": select,
            },
        ),
    )


def write_timer(report: TimerReport, out: Path, command: str) -> list[Path]:
    """``timer.json`` and ``timer.md`` in ``out``, each written atomically."""
    js, md = out / "timer.json", out / "timer.md"
    atomic_write_json(js, {**report.as_dict(), "command": command})
    atomic_write_text(md, markdown_timer(report, command))
    return [js, md]
