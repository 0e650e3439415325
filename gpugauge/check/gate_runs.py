"""Running ``gpugauge check gate``: the A/A runs and the injected run, in pytest.

Each run is ``python -m pytest benches -k EXPR --gauge-profile P --gauge-gate
--gauge-energy-window 0`` in a process of its own (:func:`gpugauge.check.runs.run_pytest`);
the A/A runs record each case's kernels, the injected one loads
:mod:`gpugauge.check.slowdown`. The verdicts are gathered into a
:class:`~gpugauge.check.gate_report.GateReport`.
"""

from __future__ import annotations

import math
import shlex
import time
from dataclasses import dataclass
from pathlib import Path

from gpugauge.check.gate_report import (
    DEFAULT_SLOWDOWN,
    GateReport,
    RunResult,
    gate_cases,
    percent,
    read_run,
)
from gpugauge.check.runs import (
    PYTEST_FAILED,
    PYTEST_NO_TESTS,
    PYTEST_OK,
    CheckError,
    CheckUnavailable,
    Finished,
    Note,
    check_benches,
    families_with_baselines,
    log_tail,
    run_pytest,
)
from gpugauge.check.selection import can_select, default_selection, stored_cases
from gpugauge.core.phrasing import plural
from gpugauge.report.tables import verdict_counts
from gpugauge.results.files import FileError, check_dir, make_dir, read_json
from gpugauge.results.runs import RunError


@dataclass(frozen=True)
class GateConfig:
    """What ``gpugauge check gate`` was asked to do."""

    out: Path
    root: Path = Path(".")
    benches: Path = Path("benches")
    select: str | None = None  # pytest -k; None: the families with baselines of this device
    profile: str = "seed"
    # the injected slowdown; None: DEFAULT_SLOWDOWN, or the earlier check's (--judge-again)
    fraction: float | None = None
    aa_runs: int = 2
    baselines_dir: Path = Path("baselines")
    judge_again: Path | None = None  # an earlier check's --out: judge its runs, run nothing
    tolerances_dir: Path | None = None
    pytest_args: tuple[str, ...] = ()


def cuda_here() -> bool:
    """Whether this machine has a CUDA device (else every result is a CPU result)."""
    import torch

    return torch.cuda.is_available()


def this_device_class() -> str:
    """The device class the benchmarks' baselines are stored under on this machine."""
    from gpugauge.measure.environment import device_class

    return device_class("cuda" if cuda_here() else "cpu")


def run_args(cfg: GateConfig, select: str, injected: bool) -> list[str]:
    """A gated run's pytest arguments (the JSON option is added by the runner).

    ``--gauge-no-history``: the check is judged against the committed baselines alone (it checks
    the gate, not this host's past), and leaves the results history as it found it (a slowed run
    must never enter it; the A/A runs are a check, not a night). A regression is measured a
    second time, as in a nightly.
    """
    args = [str(cfg.benches), "-k", select, "--gauge-profile", cfg.profile, "--gauge-gate"]
    args += [
        "--gauge-energy-window",
        "0",
        f"--gauge-baselines-dir={cfg.baselines_dir}",
        "--gauge-no-history",
    ]
    if cfg.tolerances_dir is not None:
        args.append(f"--gauge-tolerances-dir={cfg.tolerances_dir}")
    if injected:
        args += ["-p", "gpugauge.check.slowdown", f"--gauge-inject-slowdown={_slowdown(cfg):g}"]
    else:
        args.append("--gauge-record-kernels")  # a changed plan is named in the verdict's note
    return [*args, "-p", "no:cacheprovider", *cfg.pytest_args]


def _slowdown(cfg: GateConfig) -> float:
    """The fraction a new check injects: ``--slowdown``, else the default 3%."""
    return DEFAULT_SLOWDOWN if cfg.fraction is None else cfg.fraction


def _check_config(cfg: GateConfig) -> None:
    if not 0 < _slowdown(cfg) < 1:
        raise CheckError(f"--slowdown {cfg.fraction}: must be a fraction in (0, 1), 0.03 = 3%")
    if cfg.aa_runs < 1:
        raise CheckError(f"--runs {cfg.aa_runs}: at least one A/A run")
    check_benches(cfg.root, cfg.benches)
    if not cfg.baselines_dir.is_dir():
        raise CheckError(f"--baselines-dir {cfg.baselines_dir}: no such directory")
    if cfg.tolerances_dir is not None and not cfg.tolerances_dir.is_dir():
        raise CheckError(f"--tolerances-dir {cfg.tolerances_dir}: no such directory")


def _finished_line(label: str, done: Finished, found: dict[str, RunResult]) -> str:
    counts = verdict_counts([r.gate for r in found.values() if r.gate is not None])
    return (
        f"[gpugauge check gate] {label}: pytest exit {done.exit_code} in {done.wall_s:.0f} s; "
        f"{counts or 'no verdict'}"
    )


def run_gate_check(cfg: GateConfig, note: Note = print) -> GateReport:
    """The A/A runs, then the injected run; each case's verdicts gathered."""
    _check_config(cfg)
    dev_cls = this_device_class()
    families = families_with_baselines(cfg.baselines_dir, dev_cls)
    if not families:
        raise CheckUnavailable(
            f"no baselines of device class {dev_cls} in {cfg.baselines_dir}: record them "
            "first (two runs with --benchmark-json, then python -m gpugauge baseline RUN1 "
            "RUN2; see docs/check.md)"
        )
    select = cfg.select
    if select is None:
        from gpugauge.family.entries import family_names

        try:
            select = default_selection(cfg.baselines_dir, dev_cls, families, set(family_names()))
        except ValueError as err:
            raise CheckUnavailable(str(err)) from None
    nothing = (
        f"nothing to judge: no case of -k {shlex.quote(select)} has a baseline of device class "
        f"{dev_cls} in {cfg.baselines_dir}"
    )
    if cfg.select is not None and not cuda_here():
        # every result here is a CPU result: only this class's baselines can judge one
        here = stored_cases(cfg.baselines_dir, dev_cls)
        known = [w for case in stored_cases(cfg.baselines_dir) for w in case]
        if can_select(select, here, known) is False:
            raise CheckUnavailable(nothing + " (decided before running pytest)")
    plan = [(f"aa{i + 1}", f"A/A {i + 1} of {cfg.aa_runs}", False) for i in range(cfg.aa_runs)]
    fraction = _slowdown(cfg)
    plan.append(("injected", f"+{percent(fraction)} injected", True))
    note(
        f"[gpugauge check gate] {dev_cls}: -k {shlex.quote(select)}, profile {cfg.profile}, "
        f"{plural(cfg.aa_runs, 'A/A run')} and one with {percent(fraction)} injected"
    )
    make_dir(cfg.out, "--out")  # before the first run: it holds their logs
    t0 = time.monotonic()
    found: dict[str, dict[str, RunResult]] = {}
    runs, problems = [], []
    for i, (name, label, injected) in enumerate(plan):
        note(f"[gpugauge check gate] run {i + 1} of {len(plan)}, {label}: started")
        done = run_pytest(
            name,
            run_args(cfg, select, injected),
            root=cfg.root,
            folder=cfg.out / "gate-runs",
            json_option="--benchmark-json",
            note=note,
        )
        if done.exit_code == PYTEST_NO_TESTS:
            raise CheckError(
                f"-k {shlex.quote(select)} selected no test in {cfg.benches}: no test's name, "
                "module or marker holds those words; pass -k EXPR naming the benchmarks "
                f"whose baselines are in {cfg.baselines_dir} (see {done.log})"
            )
        try:
            found[name] = read_run(done.json)
        except RunError as err:
            found[name] = {}
            problems.append(f"{label}: {err}")
        if done.exit_code not in (PYTEST_OK, PYTEST_FAILED) or done.json is None:
            problems.append(
                f"{label}: pytest exit {done.exit_code}, "
                f"{'no results' if done.json is None else 'results kept'}; see {done.log}"
            )
            if not found[name]:
                note(log_tail(done.log))
        note(_finished_line(label, done, found[name]))
        runs.append(
            {
                "name": name,
                "label": label,
                "injected": injected,
                "pytest_exit": done.exit_code,
                "wall_s": done.wall_s,
                "json": None if done.json is None else str(done.json),
                "log": str(done.log),
                "args": run_args(cfg, select, injected),
            }
        )
    note(f"[gpugauge check gate] {len(plan)} runs in {time.monotonic() - t0:.0f} s")
    cases = gate_cases([found[name] for name, _, inj in plan if not inj], found["injected"])
    report = GateReport(tuple(cases), fraction, dev_cls, tuple(runs), tuple(problems))
    if not report.summary.counted and not report.summary.short:
        raise CheckUnavailable(nothing)
    return report


def judge_again(cfg: GateConfig) -> GateReport:
    """The runs of an earlier check (``cfg.judge_again``), judged again, nothing run.

    Its A/A runs and injected run, ``gate-runs/aa*.json`` and ``injected.json``, are read
    back and each result judged against the baselines and tolerances as they are now: a
    changed rule or baseline is checked on the same measurements.
    """
    from gpugauge.regress.baselines import BaselineStore
    from gpugauge.regress.gate import Gate
    from gpugauge.regress.tolerances import load_tolerances

    if cfg.judge_again is None:
        raise CheckError("judging again needs the folder of an earlier check (--judge-again)")
    try:
        earlier = check_dir(cfg.judge_again, "--judge-again")
    except FileError as err:
        raise CheckError(str(err)) from None
    if cfg.out.resolve() == earlier.resolve():
        raise CheckError(
            f"--out {cfg.out} is the earlier check's folder: its gate.json and gate.md would "
            "be replaced; name another --out"
        )
    fraction = _injected_before(earlier, cfg.fraction)
    folder = earlier / "gate-runs"
    aa_paths = sorted(folder.glob("aa*.json"))
    injected = folder / "injected.json"
    if not aa_paths or not injected.is_file():
        raise CheckError(f"{folder}: no aa*.json and injected.json of an earlier check here")
    if not cfg.baselines_dir.is_dir():
        raise CheckError(f"--baselines-dir {cfg.baselines_dir}: no such directory")
    tolerances = load_tolerances(cfg.tolerances_dir or cfg.root / "tolerances")
    gate = Gate(BaselineStore(cfg.baselines_dir), tolerances)
    try:
        aa = [read_run(p, gate) for p in aa_paths]
        inj = read_run(injected, gate)
    except RunError as err:
        raise CheckError(str(err)) from None
    cases = gate_cases(aa, inj)
    classes = sorted({g.device_class for c in cases for g in c.verdicts})
    runs = tuple(
        {
            "name": p.stem,
            "label": f"{p.name}, judged again",
            "injected": p == injected,
            "json": str(p),
        }
        for p in (*aa_paths, injected)
    )
    return GateReport(tuple(cases), fraction, ", ".join(classes), runs)


def _injected_before(earlier: Path, asked: float | None) -> float:
    """The fraction the earlier check in ``earlier`` injected, from its gate.json.

    Its injected run was measured with that fraction, so another ``--slowdown`` would
    mislabel it; ``asked`` must agree, and names the fraction where no gate.json says it (a
    check stopped before its report).
    """
    said = None
    path = earlier / "gate.json"
    if path.is_file():
        try:
            report = read_json(path)
        except FileError:
            report = None
        if isinstance(report, dict):
            said = report.get("slowdown_fraction")
    if not isinstance(said, int | float) or not 0 < said < 1:
        if asked is None:
            raise CheckError(
                f"{earlier}: no gate.json says what fraction its injected run added; name it "
                "with --slowdown"
            )
        return asked
    if asked is not None and not math.isclose(asked, said):
        raise CheckError(
            f"--slowdown {asked:g}: the earlier check's injected run added {said:g} "
            f"({path}); leave --slowdown out to judge it as it was measured"
        )
    return float(said)
