"""Command line of gpugauge.

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
import os
import sys
from pathlib import Path

from gpugauge.ab.cli import add_parser as add_ab_parser
from gpugauge.check.cli import add_parser as add_check_parser
from gpugauge.core.arguments import path_option
from gpugauge.core.commands import BENCH_COMMANDS, benches_hint, name_missing_choices, version
from gpugauge.env_command import add_parser as add_env_parser
from gpugauge.history import cli as history_cli
from gpugauge.history.first_runs import add_from_history_arguments, from_history
from gpugauge.history.records import HistoryError
from gpugauge.history.store import ENV_VAR, History, default_target
from gpugauge.regress.baselines import (
    BaselineError,
    BaselineStore,
    Entry,
    combine_runs,
    entries_of_benchmark_json,
    read_baseline,
)
from gpugauge.regress.gate import WIDE_SPREAD, wide_spreads
from gpugauge.regress.tolerances import ToleranceError, load_tolerances
from gpugauge.results.files import (
    FileError,
    check_dir,
    check_file,
    make_dir,
    read_regular,
    signals_interrupt,
)
from gpugauge.results.runs import RunError, load_run


def _folder(given: Path | None, default: Path, option: str) -> Path:
    """A folder named on the command line must exist; the default may be missing."""
    return default if given is None else check_dir(given, option)


def _report(args: argparse.Namespace) -> int:
    with signals_interrupt():
        try:
            return _write_report(args)
        except KeyboardInterrupt as err:
            return _interrupted("report", err)


def _write_report(args: argparse.Namespace) -> int:
    from gpugauge.report.document import collect, write_report

    if args.name in ("", ".", "..") or "/" in args.name or "\\" in args.name:
        raise FileError(f"--name {args.name!r}: must be a plain file name stem")
    if args.out.exists() and not args.out.is_dir():
        raise FileError(f"--out {args.out}: not a directory")
    baselines = _folder(args.baselines_dir, Path("baselines"), "--baselines-dir")
    tolerances = _folder(args.tolerances_dir, Path("tolerances"), "--tolerances-dir")
    if args.storage.exists() and not args.storage.is_dir():
        raise FileError(f"--storage {args.storage}: not a directory")
    notes = [] if tolerances.is_dir() else [f"no {tolerances}/ folder: built-in tolerances"]
    trend_history = _trend_history(args)
    history = _stored_runs(args.storage, notes)
    if args.current is not None:
        check_file(args.current, "--current")
    if args.against is not None:
        check_file(args.against, "--against")
    current = args.current or _newest(history, args.storage)
    policy = load_tolerances(tolerances)
    if policy.skipped:
        notes.append(policy.skipped_line())
        print(f"gpugauge report: {policy.skipped_line()}", file=sys.stderr)
    data = collect(
        current,
        baseline_run=args.against,
        baselines=baselines,
        tolerances=policy,
        history=history,
        notes=notes,
        trend_history=trend_history,
    )
    for path in write_report(data, make_dir(args.out, "--out"), args.name):
        print(f"wrote {path}")
    return 0


def _trend_history(args: argparse.Namespace) -> str:
    """The history the report's trends read; one a person named must open (read-only).

    A history named by ``--history`` or ``$GPUGAUGE_HISTORY`` that cannot be read (missing,
    not a gpugauge history, a server that does not answer) is a HistoryError naming the
    option, before any file is written; the default one may be missing, which the report
    notes under "Charts not drawn".
    """
    target = args.history or default_target(args.storage)
    option = "--history" if args.history else f"${ENV_VAR}" if os.environ.get(ENV_VAR) else None
    if option is not None:
        try:
            History.open(target, read_only=True).close()
        except HistoryError as err:
            raise HistoryError(f"{option} {str(err).removeprefix('history ')}") from None
    return target


def _history_target(text: str) -> str:
    """An argparse type: a SQLite path or a database URL, not empty."""
    if not text.strip():
        raise argparse.ArgumentTypeError("'': give a SQLite file path or a postgresql:// URL")
    return text


def _stored_runs(storage: Path, notes: list[str]) -> list[Path]:
    """The ``*.json`` runs under ``storage``, sorted; what is not a regular file is refused.

    A link to nowhere (a run deleted, an autosave moved) is skipped with a note; a FIFO,
    socket or folder named ``*.json`` is a FileError naming it, never opened.
    """
    if not storage.exists():
        return []
    runs = []
    for p in sorted(storage.rglob("*.json")):
        if p.is_symlink() and not p.exists():
            note = f"--storage: skipped {p}, a link to nowhere ({os.readlink(p)})"
            notes.append(note)
            print(f"gpugauge report: {note}", file=sys.stderr)
            continue
        if not p.is_file():
            raise FileError(f"--storage: {p}: not a regular file; refused, not read")
        runs.append(p)
    return runs


def _newest(runs: list[Path], storage: Path) -> Path:
    """The most recently written of ``runs`` (the default current run)."""
    if not runs:
        raise FileNotFoundError(
            f"no saved runs under {storage}: run pytest with --benchmark-autosave, "
            "or pass --current"
        )
    return max(runs, key=lambda p: p.stat().st_mtime)


def _interrupted(command: str, err: KeyboardInterrupt) -> int:
    """One line for a command stopped by a signal; its writes left no partial file."""
    how = str(err) or "SIGINT"
    print(f"gpugauge {command}: stopped by {how}; no file was left half-written", file=sys.stderr)
    return 130


def _baseline(args: argparse.Namespace) -> int:
    with signals_interrupt():
        try:
            return _record_baselines(args)
        except KeyboardInterrupt as err:
            return _interrupted("baseline", err)


def _record_baselines(args: argparse.Namespace) -> int:
    """From saved runs, or with ``--from-history CLASS`` from the results history."""
    if args.from_history is not None:
        if args.runs or args.add:
            given = "saved runs" if args.runs else "--add"
            raise RunError(
                f"--from-history takes no {given}: it reads the class's first runs from "
                "the history; give saved runs without --from-history instead"
            )
        return _baselines_from_history(args)
    if args.first_runs is not None:
        raise RunError("--runs applies to --from-history; saved runs are counted as given")
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
    runs = [entries_of_benchmark_json(p) for p in args.runs]
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
        print("no gpugauge benchmarks in those runs", file=sys.stderr)
        return 1
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

    rep = sub.add_parser(
        "report",
        help="write a Markdown + HTML comparison report",
        description="Write a report of a saved run (the newest under --storage unless "
        "--current names one): its results, its verdicts against the stored baselines or "
        "against another run (--against), its family tables, charts, and each case's trend "
        "and change points from the results history, as <name>.md and <name>.html under "
        "--out. Exit status: 0 written, 2 bad input.",
    )
    rep.add_argument(
        "--current", type=path_option, help="a saved run (default: newest in --storage)"
    )
    rep.add_argument(
        "--against",
        type=path_option,
        help="another saved run to compare with (default: stored baselines)",
    )
    rep.add_argument(
        "--storage",
        type=path_option,
        default=Path(".benchmarks"),
        help="pytest-benchmark storage: history and the default current run",
    )
    rep.add_argument(
        "--baselines-dir",
        type=path_option,
        default=None,
        help="stored baselines (default: baselines)",
    )
    rep.add_argument(
        "--tolerances-dir",
        type=path_option,
        default=None,
        help="tolerance TOML (default: tolerances)",
    )
    rep.add_argument(
        "--out",
        type=path_option,
        default=Path("reports"),
        help="folder for <name>.md, <name>.html and the charts' PNGs (default: reports)",
    )
    rep.add_argument("--name", default="report", help="file name stem of the outputs")
    rep.add_argument(
        "--history",
        metavar="PATH|URL",
        type=_history_target,
        default=None,
        help="results history whose trends and change points of the run's cases are shown "
        "(default: $GPUGAUGE_HISTORY, else gpugauge-history.sqlite under --storage)",
    )
    rep.set_defaults(func=_report)

    base = sub.add_parser(
        "baseline",
        help="store saved runs as this device class's baselines; "
        "several runs of one build record run-to-run noise",
        description="Store saved runs (pytest-benchmark JSON written with --benchmark-json "
        "or --benchmark-autosave) as their device class's baselines, one file per family "
        "under --baselines-dir; two or more runs of one build record the run-to-run spread "
        "the gate allows. --add adds runs of another host of the class; --from-history "
        "takes a class's first runs from the results history instead. Exit status: 0 "
        "written, 1 no gpugauge results in the runs, 2 bad input or refused.",
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
    """Entry point of ``python -m gpugauge`` and the ``gpugauge`` script."""
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


if __name__ == "__main__":
    raise SystemExit(main())
