"""``python -m gpugauge`` and the ``gpugauge`` script: :mod:`gpugauge.cli`, stoppable at once.

The command line imports torch and every command (about half a second). A Ctrl-C or a
SIGTERM in that time ends the command as one later does: one line, exit 130, not a
traceback or a process killed by its signal. Nothing has been written by then.
"""

from __future__ import annotations

import sys

from gpugauge.core.commands import EXIT_INTERRUPTED
from gpugauge.results.files import signals_interrupt


def main(argv: list[str] | None = None) -> int:
    """Run one command line (``argv``, else ``sys.argv``); its exit status."""
    try:
        with signals_interrupt():  # a command sets its own, and puts this one back
            from gpugauge.cli import main as run

            return run(argv)
    except KeyboardInterrupt as err:
        print(f"\ngpugauge: stopped by {str(err) or 'SIGINT'}", file=sys.stderr)
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    raise SystemExit(main())
