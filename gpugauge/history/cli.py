"""``gpugauge history``: list, show, export, import, accept, and the change points.

Every subcommand takes ``--history PATH|URL``: a SQLite file or a ``postgresql://`` URL;
by default ``$GPUGAUGE_HISTORY``, else ``.benchmarks/gpugauge-history.sqlite``. The
reading subcommands open it read-only (a missing file is an error, never created). Errors
are one line on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import csv
import fnmatch
import functools
import io
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from gpugauge.core.arguments import path_option, positive_int
from gpugauge.core.phrasing import plural
from gpugauge.history.capture import saved_records
from gpugauge.history.changepoints import (
    RECENT_RUNS,
    ChangePoint,
    case_changes,
    changes_of_cases,
)
from gpugauge.history.records import HistoryError, ResultRecord, RunRecord, some
from gpugauge.history.render import ab_text, cases_text, changes_text, trend_text
from gpugauge.history.rows import COLUMNS, flat_row
from gpugauge.history.store import (
    ENV_VAR,
    MIN_PREFIX,
    Case,
    History,
    default_path,
    default_target,
)
from gpugauge.results.files import atomic_text_stream, signals_interrupt
from gpugauge.results.runs import RunError

HELP = "the results history: trends, change points, import and export"
DESCRIPTION = f"""\
The results history: every measured pytest run appends all its results to it, gated
or not (unless --gauge-no-history), per host.

  gpugauge history list                         cases, with run counts per host
  gpugauge history show ID                      one case's trend, change points marked
  gpugauge history changes                      every change point and what changed
  gpugauge history export --csv FILE            every metric row as CSV
  gpugauge history import RUN.json [...]        add saved pytest-benchmark runs
  gpugauge history accept RUN_ID [--id ID]      let a run's results serve as references
  gpugauge history remove RUN_ID [...]          remove whole runs (all of them, or none)
  gpugauge history ab [--run RUN]               the same-GPU A/Bs that decided results

--history is a SQLite file or a postgresql:// URL; default ${ENV_VAR}, else
{default_path()}. list, show, changes, export and ab only read it: they never create or
change it, and refuse what is not a gpugauge history."""


def _history_option(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--history",
        metavar="PATH|URL",
        default=None,
        help=f"SQLite file or postgresql:// URL (default: ${ENV_VAR}, else {default_path()})",
    )


def _matching(ids: Sequence[str], pattern: str | None) -> list[str]:
    return [i for i in ids if pattern is None or fnmatch.fnmatchcase(i, pattern)]


def _no_match(cases: Sequence[Case], pattern: str) -> str | None:
    """What to say when ``--id`` matches no case of a history that holds some; else None."""
    if not cases or _matching([c.bench_id for c in cases], pattern):
        return None
    results, ids = sum(c.runs for c in cases), len({c.bench_id for c in cases})
    return f"no results match --id {pattern!r} (the history holds {results} results of {ids} cases)"


def _list(h: History, args: argparse.Namespace) -> int:
    unreadable: list[str] = []
    held = h.cases(skip=unreadable)
    said = _no_match(held, args.id) if args.id else None
    print(said or cases_text([c for c in held if _matching([c.bench_id], args.id)]))
    _skipped(args, unreadable)
    return 0


def _ab(h: History, args: argparse.Namespace) -> int:
    unreadable: list[str] = []
    print(ab_text(h.ab_cases(h.run_id(args.run) if args.run else None, unreadable)))
    _skipped(args, unreadable)
    return 0


def _skipped(args: argparse.Namespace, unreadable: Sequence[str]) -> None:
    """Each stored row a listing could not read, named on stderr; the rest were shown."""
    for said in unreadable:
        print(f"gpugauge history {args.history_command}: skipped {said}", file=sys.stderr)


def _one_of(option: str, wanted: str | None, held: Sequence[str], what: str) -> None:
    """HistoryError naming ``option`` when ``wanted`` is none of ``held``."""
    if wanted is not None and wanted not in held:
        raise HistoryError(f"{option} {wanted!r}: {what} {some(held)}")


def _show(h: History, args: argparse.Namespace) -> int:
    cases = h.cases(args.id)
    if not cases:
        raise HistoryError(f"history {h.where}: no case {args.id!r} (see: gpugauge history list)")
    case = repr(args.id)
    classes = sorted({c.device_class for c in cases})
    _one_of("--class", args.device_class, classes, f"case {case} has no runs on it; it has")
    if args.device_class is not None:
        classes = [args.device_class]
    hosts = sorted({c.host for c in cases if c.device_class in classes})
    _one_of("--host", args.host, hosts, f"case {case} has no runs on it; it has runs on")
    if args.host is not None:
        classes = sorted({c.device_class for c in cases if c.host == args.host} & set(classes))
    _one_of(
        "--metric", args.metric, h.metrics(args.id), f"case {case} holds no such metric; it holds"
    )
    blocks = []
    for cls in classes:
        points = h.points(args.id, args.metric, cls, args.host)
        if not points:
            continue  # the metric is held on another class
        changes = [c for c in case_changes(points) if not args.host or args.host in c.scope]
        shown = points[-args.last :] if args.last else points
        blocks.append(trend_text(shown, changes, args.metric))
    print("\n\n".join(blocks) or trend_text([], [], args.metric))
    return 0


def _all_changes(
    h: History, metric: str, pattern: str | None, last: int = RECENT_RUNS
) -> list[ChangePoint]:
    """Change points of ``metric`` ('all': of every metric) of the cases ``pattern`` matches.

    Over each host's last ``last`` runs, read at once: the search costs the same in a
    history of three years as in one of three months.
    """
    names = h.metrics() if metric == "all" else [metric]
    ids = _matching(h.bench_ids(), pattern) if pattern else None
    found = changes_of_cases(list(h.recent_points(names, last, ids).values()))
    return [c for steps in found for c in steps]


def _changes(h: History, args: argparse.Namespace) -> int:
    held = h.metrics()
    if held and args.metric != "all":
        _one_of("--metric", args.metric, held, "the history holds no such metric; it holds all,")
    said = _no_match(h.cases(), args.id) if args.id else None
    if said:
        print(said)
        return 0
    print(changes_text(_all_changes(h, args.metric, args.id, args.last)))
    most = max(h.runs_per_host().values(), default=0)
    if most > args.last:
        print(
            f"(searched each host's last {plural(args.last, 'run')} of each case; a host holds "
            f"up to {most:,} runs: --last N searches more)"
        )
    return 0


def _export_problem(out: Path, history: Path | None, force: bool) -> str | None:
    """Why ``--csv out`` may not be written, or None.

    Never the history itself (or its journal files), whatever ``--force`` says; nothing
    that is not a regular file; and, unless ``--force``, no existing file but an export of
    a history (its first line is :data:`COLUMNS`), which this command wrote.
    """
    if history is not None:
        for part in (history, *(Path(f"{history}{s}") for s in ("-wal", "-shm", "-journal"))):
            if out.resolve() == part.resolve() or (
                out.exists() and part.exists() and out.samefile(part)
            ):
                return (
                    f"is the history {history} itself{' (its journal)' if part != history else ''}"
                )
    if not out.exists():
        return None
    if not out.is_file():
        return "exists and is not a regular file"
    if force:
        return None
    try:
        with open(out, encoding="utf-8", newline="") as fh:
            first = fh.readline(10_000).rstrip("\r\n")
    except (OSError, UnicodeDecodeError):
        first = None
    if first == ",".join(COLUMNS):
        return None
    return "exists and is not a history export; give another file, or --force to replace it"


def _export(h: History, args: argparse.Namespace) -> int:
    out: Path = args.csv
    problem = _export_problem(out, h.file, args.force)
    if problem:
        raise HistoryError(f"--csv {out}: {problem}")
    said = _no_match(h.cases(), args.id) if args.id else None
    rows = 0
    with atomic_text_stream(out) as fh:  # streamed: a history of years needs no more memory
        writer = csv.DictWriter(fh, fieldnames=list(COLUMNS))
        writer.writeheader()
        for p in h.iter_points():
            if _matching([p.result.bench_id], args.id):
                writer.writerow(flat_row(p))
                rows += 1
    print(f"wrote {plural(rows, 'row')} to {out}" + (f" ({said})" if said else ""))
    return 0


def _read_runs(args: argparse.Namespace) -> list[tuple[RunRecord, list[ResultRecord]]]:
    """Every file of an import read and checked, before the history is opened or written."""
    return [saved_records(path, host=args.host) for path in args.runs]


def _import(
    h: History, args: argparse.Namespace, runs: Sequence[tuple[RunRecord, list[ResultRecord]]]
) -> int:
    """Append every run in one transaction: all of them, or none."""
    fresh = [run.id for run, _ in runs if not h.has_run(run.id)]
    args.done = lambda seen: (  # what an interrupt left: read back, not guessed
        f"{plural(sum(map(seen.has_run, fresh)), 'run')} of {len(fresh)} new stored"
    )
    added = h.append_runs(runs)
    for path, (run, _), new in zip(args.runs, runs, added, strict=True):
        print(f"{path}: {'added as' if new else 'already in the history as'} run {run.id}")
    print(f"{plural(sum(added), 'run')} added to {h.where}")
    return 0


def _accept(h: History, args: argparse.Namespace) -> int:
    run_id = h.run_id(args.run_id)
    changed = h.accept(run_id, args.id or (), accepted=not args.undo)
    what = "no longer accepted" if args.undo else "accepted"
    print(f"{plural(changed, 'result')} of run {run_id} {what}")
    return 0


def _remove(h: History, args: argparse.Namespace) -> int:
    """Remove whole runs, every result with them, in one transaction: all, or none."""
    ids = list(dict.fromkeys(h.run_id(given) for given in args.run_ids))
    args.done = lambda seen: (
        f"{plural(sum(not seen.has_run(i) for i in ids), 'run')} of {len(ids)} removed"
    )
    removed = h.remove(ids)
    for run_id, results in removed.items():
        print(f"removed run {run_id} ({plural(results, 'result')})")
    print(f"{plural(len(removed), 'run')} removed from {h.where}")
    return 0


def add_parser(sub: Any) -> argparse.ArgumentParser:
    """Add ``history`` and its subcommands to ``gpugauge``'s subparsers."""
    hist = sub.add_parser(
        "history",
        help=HELP,
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    cmds = hist.add_subparsers(dest="history_command", required=True, metavar="COMMAND")

    p = cmds.add_parser("list", help="cases with their run counts per host")
    p.add_argument("--id", metavar="GLOB", help="only cases whose id matches this glob")
    p.set_defaults(history_func=_list, read_only=True)

    p = cmds.add_parser(
        "show", help="one case's trend: its runs, medians, CIs, hosts, change points"
    )
    p.add_argument("id", help="the case's benchmark id (see: history list)")
    p.add_argument("--metric", default="time", help="which metric (default: time)")
    p.add_argument("--class", dest="device_class", help="one device class (default: each in turn)")
    p.add_argument("--host", help="only this host's runs")
    p.add_argument(
        "--last", type=positive_int, default=None, metavar="N", help="show only the last N runs"
    )
    p.set_defaults(history_func=_show, read_only=True)

    p = cmds.add_parser(
        "changes",
        help="change points of every case, per host and per class, with what changed",
    )
    p.add_argument("--id", metavar="GLOB", help="only cases whose id matches this glob")
    p.add_argument("--metric", default="time", help="which metric, or all (default: time)")
    p.add_argument(
        "--last",
        type=positive_int,
        default=RECENT_RUNS,
        metavar="N",
        help=f"search each host's last N runs of each case (default: {RECENT_RUNS})",
    )
    p.set_defaults(history_func=_changes, read_only=True)

    p = cmds.add_parser(
        "export",
        help="write every metric row as CSV (one row per metric), streamed, put in place "
        "whole; never over the history, nor over a file that is not an export unless --force",
    )
    p.add_argument(
        "--csv", type=path_option, required=True, metavar="FILE", help="the CSV to write"
    )
    p.add_argument("--id", metavar="GLOB", help="only cases whose id matches this glob")
    p.add_argument(
        "--force",
        action="store_true",
        help="replace FILE even if it is not an earlier export (never the history itself)",
    )
    p.set_defaults(history_func=_export, read_only=True)

    p = cmds.add_parser(
        "import",
        help="add runs saved by pytest-benchmark (--benchmark-autosave/-json); "
        "every file is checked first, and one bad file adds none; a run already there "
        "is skipped",
    )
    p.add_argument("runs", type=path_option, nargs="+", metavar="RUN.json", help="saved runs")
    p.add_argument(
        "--host",
        help="the host they ran on (default: each run's own, as its live append named it: "
        "its first GPU's UUID, else its machine's name, else 'unknown-host')",
    )
    p.set_defaults(history_func=_import, read_only=False)

    p = cmds.add_parser(
        "accept",
        help="let a run's results serve as their host's reference (an intended change)",
        description="Let a run's results serve as their host's reference (an intended "
        "change). The run is named by its id or a unique prefix of it: the run column of "
        "'gpugauge history show ID' (… marks where it is cut), or the 'history: … of run "
        "ID' line at the end of a pytest run.",
    )
    p.add_argument(
        "run_id",
        metavar="RUN",
        help=f"the run's id or a unique prefix of {MIN_PREFIX} or more characters, "
        "as the run column of 'history show ID' prints it",
    )
    p.add_argument("--id", action="append", metavar="ID", help="only this case (repeatable)")
    p.add_argument("--undo", action="store_true", help="mark them not accepted instead")
    p.set_defaults(history_func=_accept, read_only=False)

    p = cmds.add_parser(
        "remove",
        help="remove whole runs with all their results (one that should never have been "
        "stored); all of them or, if one is not found, none",
    )
    p.add_argument(
        "run_ids",
        nargs="+",
        metavar="RUN",
        help=f"a run's id or a unique prefix of {MIN_PREFIX} or more characters",
    )
    p.set_defaults(history_func=_remove, read_only=False)

    p = cmds.add_parser("ab", help="the same-GPU A/Bs that decided stored results (confirm)")
    p.add_argument("--run", help="one run's (an id or a unique prefix)")
    p.set_defaults(history_func=_ab, read_only=True)

    for p in cmds.choices.values():
        _history_option(p)
    hist.set_defaults(func=run)
    return hist


def run(args: argparse.Namespace) -> int:
    """Run one ``history`` subcommand; errors as one line and exit status 2.

    A signal (Ctrl-C, SIGTERM) is one line too, saying what was done: a transaction that
    had not committed left the history as it was.
    """
    with signals_interrupt():
        try:
            return _run(args)
        except KeyboardInterrupt as err:
            how = str(err) or "SIGINT"
            said = f"gpugauge history {args.history_command}: stopped by {how}; "
            print(said + _left_by_interrupt(args), file=sys.stderr)
            return 130


def _left_by_interrupt(args: argparse.Namespace) -> str:
    """What a command stopped by a signal left: read back from the history where it wrote.

    A transaction that had not committed left nothing; one that had is whole. Which of the
    two happened is asked of the history, not inferred from where the signal came.
    """
    done = getattr(args, "done", None)
    if done is None:
        if args.read_only:
            return "nothing was written"
        return "its one transaction was stored whole or not at all"
    try:
        with History.open(args.history or default_target(), read_only=True) as seen:
            return done(seen)
    except (HistoryError, OSError) as err:
        return f"what was stored could not be read back ({err})"


def _run(args: argparse.Namespace) -> int:
    try:
        target = args.history or default_target()
        func = args.history_func
        if func is _import:  # every file checked first: a bad one leaves the history as it was
            func = functools.partial(_import, runs=_read_runs(args))
        with History.open(target, read_only=args.read_only) as h:
            code = func(h, args)
            sys.stdout.flush()  # a closed pipe is found here, not at the interpreter's exit
            return code
    except BrokenPipeError:  # 'history list | head': the reader has what it wanted
        _quiet_stdout()
        return 0
    except (HistoryError, RunError) as err:
        print(f"gpugauge history {args.history_command}: {err}", file=sys.stderr)
        return 2
    except OSError as err:
        where = f"{err.filename}: " if err.filename else ""
        print(
            f"gpugauge history {args.history_command}: {where}{err.strerror or err}",
            file=sys.stderr,
        )
        return 2


def _quiet_stdout() -> None:
    """Point stdout at /dev/null, so that the interpreter's last flush finds no closed pipe."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError, io.UnsupportedOperation):
        pass  # no file descriptor behind stdout (a test's capture): nothing to flush later


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m gpugauge.history.cli``: the same as ``gpugauge history``."""
    parser = argparse.ArgumentParser(prog="gpugauge")
    add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["history", *(sys.argv[1:] if argv is None else argv)])
    return args.func(args)


if __name__ == "__main__":
    raise SystemExit(main())
