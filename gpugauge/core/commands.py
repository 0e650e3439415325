"""What every ``gpugauge`` command line shares: its version, and naming the missing choice.

argparse's own message for a missing subcommand names the parser's ``dest`` ("the
following arguments are required: check"), which tells a newcomer nothing; a reader needs
the choices ("choose a check: timer, gate").
"""

from __future__ import annotations

import argparse
import sys
from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as installed_version
from pathlib import Path


def version() -> str:
    """Gpugauge's version: the installed distribution's, else the package's ``__version__``.

    A checkout run without ``pip install`` has no distribution metadata.
    """
    try:
        return installed_version("gpugauge")
    except PackageNotFoundError:
        from gpugauge import __version__

        return __version__


def _subcommands(parser: argparse.ArgumentParser) -> list[argparse._SubParsersAction]:
    return [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]


def name_missing_choices(parser: argparse.ArgumentParser) -> None:
    """Make every level of subcommands under ``parser`` say which choices it is missing.

    Each required subcommand group becomes optional, and its parser's default ``func``
    exits 2 with usage and "choose a check: timer, gate" (the group's ``dest``, underscores
    read as spaces). A chosen subcommand sets its own ``func``, which takes precedence; a
    parser that dispatches its subcommands itself (``history``) keeps its ``func``, called
    once a subcommand is chosen.
    """
    for group in _subcommands(parser):
        if group.required:
            group.required = False
            what = (group.dest or "command").replace("_", " ")
            article = "an" if what[0] in "aeiou" else "a"
            said = f"choose {article} {what}: {', '.join(group.choices)}"
            then = parser.get_default("func")  # a parser that dispatches itself keeps it

            def missing(
                args: argparse.Namespace, p=parser, said=said, dest=group.dest, then=then
            ) -> int:
                if getattr(args, dest, None) is None or then is None:
                    p.error(said)
                return then(args)

            parser.set_defaults(func=missing)
        for sub in group.choices.values():
            name_missing_choices(sub)


def parsers(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    """``parser`` and every parser of its subcommands, depth first: what ``--help`` shows."""
    out = [parser]
    for group in _subcommands(parser):
        for sub in group.choices.values():
            out += parsers(sub)
    return out


BENCH_COMMANDS = ("ab", "bisect", "confirm")  # they run the project's benchmarks by --benches


def benches_hint(args: argparse.Namespace) -> None:
    """After a failed A/B: where ``--benches`` names no folder and no tests were given.

    Its sides then ran pytest on what the project's configuration collects, which in a
    project whose benchmarks are not in ``benches/`` is often nothing ("0 tests collected").
    """
    given = [a for a in getattr(args, "pytest_args", []) if "::" in a or Path(a).exists()]
    if given or Path(args.benches).exists():
        return
    print(
        f"gpugauge {args.command}: hint: there is no folder {args.benches} here, so both "
        "sides ran pytest on what its configuration collects; pass --benches PATH (the "
        "folder of your benchmarks) or their path after --",
        file=sys.stderr,
    )


EXIT_INTERRUPTED = 130  # a command stopped by Ctrl-C or a signal, as a shell reports SIGINT


def interrupted(command: str, err: KeyboardInterrupt) -> int:
    """One line for a command stopped by a signal; its writes left no partial file."""
    how = str(err) or "SIGINT"
    print(f"gpugauge {command}: stopped by {how}; no file was left half-written", file=sys.stderr)
    return EXIT_INTERRUPTED
