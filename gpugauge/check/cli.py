"""Command line of ``gpugauge check`` (a subcommand of ``python -m gpugauge``).

    gpugauge check timer [--out DIR] [--ops PATTERN ...] [-k EXPR] [--threshold 0.02]
    gpugauge check gate [-k EXPR] [--profile seed] [--slowdown 0.03] [--runs 2]

Exit status: 0 the check passed; 1 it failed (an op outside the threshold, a case not
caught, a false alarm, a run that did not complete); 2 bad input; 3 the check cannot run
here (no CUDA, no triton, no baselines of this device class); 130 interrupted. Pytest
arguments after ``--`` go to every pytest run the check starts.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpugauge.check.gate_report import DEFAULT_SLOWDOWN
from gpugauge.check.runs import CheckError, CheckUnavailable, sigterm_as_interrupt
from gpugauge.check.timer_report import DEFAULT_THRESHOLD
from gpugauge.core.arguments import number, path_option
from gpugauge.core.commands import name_missing_choices
from gpugauge.core.profiles import PROFILES
from gpugauge.results.files import FileError, make_dir

EXIT_PASSED, EXIT_FAILED, EXIT_BAD_INPUT, EXIT_UNAVAILABLE, EXIT_INTERRUPTED = 0, 1, 2, 3, 130
DEFAULT_OUT = Path("reports") / "check"


def fraction_quoting(default: float) -> Callable[[str], float]:
    """An argparse type: a fraction in (0, 1); its error quotes the option's own default.

    One parser serves --threshold (default 0.02) and --slowdown (0.03): a fixed example in
    the message would name the other option's default to half of its readers.
    """
    what = f"a fraction in (0, 1), e.g. the default {default:g} = {default * 100:g}%"
    parse = number(float, 0, what, inclusive=False, high=1, below_high=True)
    parse.__name__ = "fraction"  # argparse names the type by it in its own messages
    return parse


MOST_AA_RUNS = 20  # each A/A run is a whole pytest run of the selection
_aa_runs = number(
    int, 1, f"a whole number of A/A runs >= 1 (at most {MOST_AA_RUNS})", high=MOST_AA_RUNS
)


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--out", type=path_option, default=DEFAULT_OUT, help=f"folder (default {DEFAULT_OUT})"
    )
    p.add_argument(
        "-k",
        dest="select",
        default=None,
        metavar="EXPR",
        help="pytest -k expression of the cases (default: the families that have baselines)",
    )
    p.add_argument("--profile", choices=PROFILES, default="seed", help="default: seed")
    p.add_argument(
        "--benches",
        type=path_option,
        default=Path("benches"),
        metavar="PATH",
        help="the benchmarks' folder (default: benches)",
    )
    p.add_argument(
        "--baselines-dir",
        type=path_option,
        default=Path("baselines"),
        help="the stored baselines, by device class (default: baselines)",
    )
    p.add_argument(
        "pytest_args", nargs="*", metavar="-- PYTEST_ARG", help="passed to every pytest run"
    )


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add ``check`` and its ``timer`` and ``gate`` commands to a subparsers object."""
    check = sub.add_parser(
        "check",
        help="prove the suite on this machine: the timer against triton's do_bench, the "
        "gate against A/A runs and an injected slowdown",
        description="Prove the suite on this machine: gpugauge check timer compares the "
        "suite's timer with triton's do_bench; gpugauge check gate runs the gated benchmarks "
        "unchanged and with an injected slowdown. Exit status: 0 passed, 1 failed, 2 bad "
        "input, 3 cannot run here, 130 interrupted.",
    )
    kinds = check.add_subparsers(title="checks", dest="check", required=True, metavar="CHECK")
    timer = kinds.add_parser(
        "timer",
        help="the suite's timer against triton.testing.do_bench and a bare CUDA-event loop",
        description="Time each GPU case with the suite's timer, triton.testing.do_bench and "
        "a bare CUDA-event loop, plus three power-heavy ops; fail if any op's suite median "
        "differs from do_bench's by more than --threshold. Writes timer.json and timer.md.",
    )
    _common(timer)
    timer.add_argument(
        "--ops",
        nargs="+",
        default=[],
        metavar="PATTERN",
        help="only ops whose id matches one of these shell-style patterns "
        "(e.g. 'conv*' 'matmul-*')",
    )
    timer.add_argument(
        "--threshold",
        type=fraction_quoting(DEFAULT_THRESHOLD),
        default=DEFAULT_THRESHOLD,
        help=f"largest |suite/do_bench - 1| that passes (default {DEFAULT_THRESHOLD:g})",
    )
    timer.set_defaults(func=timer_command)
    gate = kinds.add_parser(
        "gate",
        help="A/A runs and an injected slowdown against the stored baselines",
        description="Run the gated benchmarks --runs times unchanged and once with --slowdown "
        "of each case's baseline median injected as device work; table of caught cases and "
        "false alarms. Writes gate.json, gate.md and the runs under gate-runs/.",
    )
    _common(gate)
    gate.add_argument(
        "--slowdown",
        type=fraction_quoting(DEFAULT_SLOWDOWN),
        default=None,
        help=f"injected fraction of each case's baseline median (default {DEFAULT_SLOWDOWN:g}; "
        "with --judge-again, the earlier check's)",
    )
    gate.add_argument("--runs", type=_aa_runs, default=2, metavar="N", help="A/A runs (default 2)")
    gate.add_argument(
        "--tolerances-dir",
        type=path_option,
        default=None,
        help="the gate's tolerance TOML folder (default: the gated pytest's, <rootdir>/tolerances)",
    )
    gate.add_argument(
        "--judge-again",
        type=path_option,
        default=None,
        metavar="FOLDER",
        help="run nothing: judge the runs of an earlier check (its --out folder) again "
        "against the baselines and tolerances as they are now (--out: another folder)",
    )
    gate.set_defaults(func=gate_command)
    return check


def _command_line() -> str:
    return shlex.join(["gpugauge", *sys.argv[1:]])


def _guarded(kind: str, run: Callable[[], int]) -> int:
    """Run ``run()`` and turn the check's errors into one line and an exit status."""
    try:
        with sigterm_as_interrupt():
            return run()
    except CheckUnavailable as err:
        print(f"gpugauge check {kind}: cannot run here: {err}", file=sys.stderr)
        return EXIT_UNAVAILABLE
    except (CheckError, FileError) as err:
        print(f"gpugauge check {kind}: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print(f"gpugauge check {kind}: interrupted; the run in hand was stopped", file=sys.stderr)
        return EXIT_INTERRUPTED


def timer_command(args: argparse.Namespace) -> int:
    """``gpugauge check timer``."""
    from gpugauge.check.timer_report import TimerConfig, render_timer, run_timer_check, write_timer

    cfg = TimerConfig(
        out=args.out,
        benches=args.benches,
        select=args.select,
        ops=tuple(args.ops),
        profile=args.profile,
        threshold=args.threshold,
        baselines_dir=args.baselines_dir,
        pytest_args=tuple(args.pytest_args),
    )
    return _checked("timer", lambda: run_timer_check(cfg), render_timer, write_timer, cfg.out)


def _checked(
    name: str,
    check: Callable[[], Any],
    render: Callable[[Any], str],
    write: Callable[[Any, Path, str], list[Path]],
    out: Path,
) -> int:
    """Run a check, print its table, write its files; the exit status says if it passed."""

    def run() -> int:
        report = check()
        print("\n" + render(report))
        for path in write(report, make_dir(out, "--out"), _command_line()):
            print(f"wrote {path}")
        return EXIT_PASSED if report.passed else EXIT_FAILED

    return _guarded(name, run)


def gate_command(args: argparse.Namespace) -> int:
    """``gpugauge check gate``."""
    from gpugauge.check.gate_report import render_gate, write_gate
    from gpugauge.check.gate_runs import GateConfig, judge_again, run_gate_check

    cfg = GateConfig(
        out=args.out,
        benches=args.benches,
        select=args.select,
        profile=args.profile,
        fraction=args.slowdown,
        aa_runs=args.runs,
        baselines_dir=args.baselines_dir,
        tolerances_dir=args.tolerances_dir,
        pytest_args=tuple(args.pytest_args),
        judge_again=args.judge_again,
    )
    check = judge_again if cfg.judge_again is not None else run_gate_check
    return _checked("gate", lambda: check(cfg), render_gate, write_gate, cfg.out)


def main(argv: list[str] | None = None) -> int:
    """``python -m gpugauge.check.cli timer|gate ...`` (the same as ``gpugauge check``)."""
    parser = argparse.ArgumentParser(prog="gpugauge")
    add_parser(parser.add_subparsers(dest="command", required=True))
    name_missing_choices(parser)
    args = parser.parse_args(["check", *(sys.argv[1:] if argv is None else argv)])
    return args.func(args)


if __name__ == "__main__":
    raise SystemExit(main())
