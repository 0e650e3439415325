"""``python -m gpugauge`` and the ``gpugauge`` script: :mod:`gpugauge.cli`, stoppable at once.

The command line imports torch and every command (about half a second). A Ctrl-C or a
SIGTERM in that time ends the command as one later does: one line, exit 130, not a
traceback or a process killed by its signal. Nothing has been written by then.
"""

from __future__ import annotations

import signal
import sys
import threading
from types import FrameType

EXIT_INTERRUPTED = 130


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    """Run one command line (``argv``, else ``sys.argv``); its exit status."""
    if threading.current_thread() is not threading.main_thread():  # no signals to take
        from gpugauge.cli import main as run

        return run(argv)
    before = signal.signal(signal.SIGTERM, _interrupt)  # as Ctrl-C, until a command's own
    try:
        from gpugauge.cli import main as run

        return run(argv)
    except KeyboardInterrupt:
        print("\ngpugauge: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    finally:
        signal.signal(signal.SIGTERM, before)


if __name__ == "__main__":
    raise SystemExit(main())
