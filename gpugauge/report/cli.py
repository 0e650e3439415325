"""``gpugauge report``: a saved run's Markdown and HTML report, against baselines or a run."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from gpugauge.core.arguments import path_option
from gpugauge.history.records import HistoryError
from gpugauge.history.store import ENV_VAR, History, default_target
from gpugauge.regress.tolerances import load_tolerances
from gpugauge.results.files import FileError, check_dir, check_file, make_dir, stoppable


def _folder(given: Path | None, default: Path, option: str) -> Path:
    """A folder named on the command line must exist; the default may be missing."""
    return default if given is None else check_dir(given, option)


def _report(args: argparse.Namespace) -> int:
    return stoppable("report", lambda: _write_report(args))


def _write_report(args: argparse.Namespace) -> int:
    from gpugauge.report.document import collect, write_report

    if args.name.strip() in ("", ".", "..") or "/" in args.name or "\\" in args.name:
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
    if args.against is not None and args.against.samefile(current):
        raise FileError(
            f"--against {args.against} is the run this report is of: every result would read "
            "1.000x; name another run, or leave --against out to use the stored baselines"
        )
    policy = load_tolerances(tolerances)
    if policy.skipped:
        _note(notes, policy.skipped_line())
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


def _note(notes: list[str], line: str) -> None:
    """Say ``line`` now, on stderr, and keep it for the report's notes."""
    notes.append(line)
    print(f"gpugauge report: {line}", file=sys.stderr)


def _stored_runs(storage: Path, notes: list[str]) -> list[Path]:
    """The ``*.json`` runs under ``storage``, sorted; what is not a regular file is refused.

    A folder that is not there gives none, with a note: a run may name its storage before
    the first autosave makes it. A link to nowhere (a run deleted, an autosave moved) is
    skipped with a note; a FIFO, socket or folder named ``*.json`` is a FileError naming
    it, never opened.
    """
    if not storage.exists():
        # a typo here drops every trend without a word: say it, in the report and here
        _note(notes, f"--storage {storage}: no such folder, so no saved runs and no trends")
        return []
    runs = []
    for p in sorted(storage.rglob("*.json")):
        if p.is_symlink() and not p.exists():
            _note(notes, f"--storage: skipped {p}, a link to nowhere ({os.readlink(p)})")
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


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Add ``report`` to ``gpugauge``'s subparsers."""
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
        help="pytest-benchmark storage: history and the default current run (default: .benchmarks)",
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
    rep.add_argument(
        "--name", default="report", help="file name stem of the outputs (default: report)"
    )
    rep.add_argument(
        "--history",
        metavar="PATH|URL",
        type=_history_target,
        default=None,
        help="results history whose trends and change points of the run's cases are shown "
        "(default: $GPUGAUGE_HISTORY, else gpugauge-history.sqlite under --storage)",
    )
    rep.set_defaults(func=_report)
