"""Command line of gpugauge: every command's parser, and ``main`` (``python -m gpugauge``).

python -m gpugauge report [--current RUN.json] [--against RUN.json]   # Markdown + HTML
python -m gpugauge baseline RUN.json [RUN.json ...]                  # record baselines
python -m gpugauge baseline --from-history CLASS [--runs N]          # a new class's first runs
python -m gpugauge env [--ceilings]                                  # fingerprint
python -m gpugauge check timer|gate [...]                            # prove the suite here
python -m gpugauge history {list,show,changes,export,import,accept,remove,ab}  # results history
python -m gpugauge ab BASE [HEAD] [-k EXPR]                          # two builds, one device
python -m gpugauge bisect GOOD BAD [-k EXPR]                         # the commit that slowed
python -m gpugauge confirm RUN.json                                  # A/B a gated run's results
"""

from __future__ import annotations

import argparse
import hashlib
import sys
from pathlib import Path

from gpugauge.ab.cli import add_parser as add_ab_parser
from gpugauge.check.cli import add_parser as add_check_parser
from gpugauge.core.arguments import path_option
from gpugauge.core.commands import (
    BENCH_COMMANDS,
    benches_hint,
    name_missing_choices,
    version,
)
from gpugauge.history import cli as history_cli
from gpugauge.history.first_runs import add_from_history_arguments, from_history
from gpugauge.history.records import HistoryError
from gpugauge.measure.cli import add_parser as add_env_parser
from gpugauge.regress.baselines import (
    BaselineError,
    BaselineStore,
    Entry,
    combine_runs,
    entries_of_benchmark_json,
    read_baseline,
)
from gpugauge.regress.gate import WIDE_SPREAD, wide_spreads
from gpugauge.regress.tolerances import ToleranceError
from gpugauge.report.cli import add_parser as add_report_parser
from gpugauge.results.files import (
    FileError,
    make_dir,
    read_regular,
    stoppable,
)
from gpugauge.results.runs import RunError, load_run


def _baseline(args: argparse.Namespace) -> int:
    return stoppable("baseline", lambda: _record_baselines(args))


def _record_baselines(args: argparse.Namespace) -> int:
    """From saved runs, or with ``--from-history CLASS`` from the results history."""
    if args.from_history is not None:
        if args.runs or args.add:
            given = "saved runs" if args.runs else "--add"
            raise RunError(
                f"--from-history takes no {given}: it reads the class's first runs from "
                "the history; give saved runs without --from-history instead"
            )
        if args.accept_regressed:
            raise RunError(
                "--accept-regressed applies to saved runs; --from-history reads only the "
                "runs the history accepted"
            )
        return _baselines_from_history(args)
    if args.first_runs is not None:
        raise RunError("--runs applies to --from-history; saved runs are counted as given")
    if args.history is not None:
        raise RunError("--history applies to --from-history; saved runs are read from their files")
    if not args.runs:
        raise RunError("give saved runs (RUN1.json RUN2.json ...), or --from-history CLASS")
    return _baselines_from_files(args)


def _baselines_from_history(args: argparse.Namespace) -> int:
    """The class's first runs in the history (read-only), written as its baselines."""
    found = from_history(args, BaselineStore(args.baselines_dir))
    for case in found.kept:
        print(f"gpugauge baseline: kept as committed: {case}", file=sys.stderr)
    return _write_entries(args, list(found.entries), list(found.recorded_from))


def _baselines_from_files(args: argparse.Namespace) -> int:
    """Every run read and checked first; one run given twice is refused.

    Each run is named in the file's ``recorded_from`` with its content's digest (its date
    and results, not its bytes: :func:`~gpugauge.results.runs.content_digest`), so that
    ``--add`` refuses a run the baseline already holds, also as a copy written again with
    other formatting (a repeated or retried command would count it twice in the
    run-to-run spread). Baselines recorded before name a file's bytes' digest; that is
    still recognised.
    """
    digests: dict[Path, tuple[str, str]] = {}  # path: (content digest, bytes digest)
    seen: dict[str, Path] = {}
    for p in args.runs:
        content = read_regular(p, "JSON")
        digests[p] = (load_run(p).digest[:16], hashlib.sha256(content).hexdigest()[:16])
        first = seen.get(digests[p][0])
        if first is not None:
            same = "is given twice" if p.resolve() == first.resolve() else f"repeats {first}"
            raise RunError(f"{p}: {same}; each run counts once in the run-to-run noise")
        seen[digests[p][0]] = p
    named = {p: f"{p} (sha256 {digests[p][0]})" for p in args.runs}
    runs = [entries_of_benchmark_json(p, args.accept_regressed) for p in args.runs]
    store = BaselineStore(args.baselines_dir)
    stored = None
    if args.add:
        stored, provenance = _stored_for(store, runs)
        for p in args.runs:
            for path, listed in provenance.items():
                held = str(p) in listed or any(
                    f"sha256 {d}" in x for x in listed for d in digests[p]
                )
                if held:
                    raise RunError(
                        f"{p}: already in {path} (recorded_from); each run counts once "
                        "in the run-to-run noise"
                    )
    entries = combine_runs(runs, stored)
    if not entries:
        raise RunError("no gpugauge benchmarks in those runs: nothing to store")
    return _write_entries(args, entries, [named[p] for p in args.runs])


def _write_entries(args: argparse.Namespace, entries: list[Entry], recorded_from: list[str]) -> int:
    """Write combined entries as baselines, refusing (or warning of) a wide spread."""
    wide = wide_spreads(entries)
    if wide and not args.allow_wide_spread:
        raise BaselineError(
            f"refused, nothing written: the runs disagree by more than {WIDE_SPREAD:.0%} on "
            f"{len(wide)} case(s), and a baseline that wide lets real slowdowns pass:\n  "
            + "\n  ".join(wide)
            + "\nrecord them again on a quiet host, or pass --allow-wide-spread to store "
            "them as they are (runs of hosts that pace a step differ that much)"
        )
    for line in wide:
        print(f"gpugauge baseline: WARNING, stored anyway: {line}", file=sys.stderr)
    meta = {"recorded_from": recorded_from}
    make_dir(args.baselines_dir, "--baselines-dir")
    for path in BaselineStore(args.baselines_dir).write(entries, meta, added=args.add):
        print(f"baseline {'extended' if args.add else 'written'}: {path}")
    return 0


def _stored_for(
    store: BaselineStore, runs: list[list[Entry]]
) -> tuple[dict[tuple[str, str, str], Entry], dict[Path, list[str]]]:
    """The committed entries of every (device class, family) the runs hold; each file's runs.

    ``--add`` extends baselines; a family with none stored is a BaselineError: record it
    from two runs first.
    """
    stored: dict[tuple[str, str, str], Entry] = {}
    provenance: dict[Path, list[str]] = {}
    for dev, fam in sorted({(e.device_class, e.family) for run in runs for e in run}):
        path = store.path(dev, fam)
        if not path.exists():
            raise BaselineError(
                f"--add: no baseline of {fam} for device class {dev} in {store.root} to add "
                "to; record one from two or more runs first (gpugauge baseline RUN1 RUN2)"
            )
        entries, provenance[path] = read_baseline(path, (dev, fam))
        stored.update({(dev, fam, i): e for i, e in entries.items()})
    return stored, provenance


def build_parser() -> argparse.ArgumentParser:
    """Every command's parser; a missing command or check is named with its choices."""
    parser = argparse.ArgumentParser(
        prog="gpugauge",
        description="gpugauge's commands beside pytest: reports of saved runs (report), "
        "baselines for the gate (baseline), the environment fingerprint (env), checks of the "
        "suite on a new GPU (check), A/Bs of two builds on one device (ab), the commit that "
        "made a case slower (bisect), A/Bs of a gated run's results (confirm), and "
        "the results history (history). Benchmarks themselves run under pytest "
        "(python -m pytest benches --benchmark-autosave).",
        epilog="Each command has its own --help, e.g. python -m gpugauge report --help.",
    )
    parser.add_argument("--version", action="version", version=f"gpugauge {version()}")
    sub = parser.add_subparsers(title="commands", dest="command", required=True, metavar="COMMAND")

    add_report_parser(sub)

    base = sub.add_parser(
        "baseline",
        help="store saved runs as this device class's baselines; "
        "several runs of one build record run-to-run noise",
        description="Store saved runs (pytest-benchmark JSON written with --benchmark-json "
        "or --benchmark-autosave) as their device class's baselines, one file per family "
        "under --baselines-dir; two or more runs of one build record the run-to-run spread "
        "the gate allows. --add adds runs of another host of the class; --from-history "
        "takes a class's first runs from the results history instead. Exit status: 0 "
        "written, 2 bad input or refused.",
    )
    base.add_argument("runs", type=path_option, nargs="*", help="saved runs, oldest first")
    add_from_history_arguments(base)
    base.add_argument(
        "--add",
        action="store_true",
        help="add the runs to the stored baselines (another host or lease of the class) "
        "instead of replacing their entries: each stored case keeps its runs' medians, so "
        "its allowance covers the spread between hosts",
    )
    base.add_argument(
        "--allow-wide-spread",
        action="store_true",
        help=f"store cases whose runs' medians lie more than {WIDE_SPREAD:.0%}% apart (refused "
        "by default: the gate would allow twice that spread); each is named in a warning",
    )
    base.add_argument(
        "--accept-regressed",
        action="store_true",
        help="record a run whose gate failed results as regressed (refused by default: "
        "the slowdown would pass every later night); for a slowdown the build meant, "
        "each such result named",
    )
    base.add_argument(
        "--baselines-dir",
        type=path_option,
        default=Path("baselines"),
        help="where baselines go, as <device-class>/<family>.json (default: baselines)",
    )
    base.set_defaults(func=_baseline)

    add_env_parser(sub)

    add_check_parser(sub)
    add_ab_parser(sub)

    history_cli.add_parser(sub)
    name_missing_choices(parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run one command line (``argv``, else ``sys.argv``); its exit status."""
    argv = sys.argv[1:] if argv is None else list(argv)
    # everything after the first "--" goes to pytest, for every command that runs it: an
    # optional positional (ab's HEAD) would otherwise end the positionals before it
    rest: list[str] | None = None
    if "--" in argv:
        cut = argv.index("--")
        argv, rest = argv[:cut], argv[cut + 1 :]
    args = build_parser().parse_args(argv)
    if rest is not None:
        if not hasattr(args, "pytest_args"):
            print(f"gpugauge {args.command}: takes no pytest arguments after --", file=sys.stderr)
            return 2
        args.pytest_args = [*args.pytest_args, *rest]
    try:
        status = args.func(args)
        if status == 1 and args.command in BENCH_COMMANDS:  # its sides ran (2: bad input)
            benches_hint(args)
        return status
    except (
        BaselineError,
        ToleranceError,
        RunError,
        FileError,
        FileNotFoundError,
        HistoryError,
    ) as err:
        print(f"gpugauge {args.command}: {err}", file=sys.stderr)
        return 2
    except OSError as err:  # a folder that cannot be made, a disk that is full
        where = f"{err.filename}: " if err.filename else ""
        print(f"gpugauge {args.command}: {where}{err.strerror or err}", file=sys.stderr)
        return 2
