"""Run one command as the root of a process tree, and leave nothing of that tree behind.

``python -m gpugauge.launch.reaper --parent PID -- CMD ...`` is what
:func:`gpugauge.launch.torchrun.launch` starts: CMD is torchrun. Killing a process group
is not enough there: torchrun starts each worker in a session of its own, a worker's
DataLoader starts processes of its own, and an orphan is handed to init, out of reach.
So this small process (the standard library only, no torch) holds the whole tree, on
Linux:

- it is a *child subreaper* (``prctl(PR_SET_CHILD_SUBREAPER)``): every orphan of the tree
  (the workers, once torchrun is ``kill -9``-ed) is handed to it rather than to init,
  so the tree stays findable from its pid in ``/proc``, whatever sessions its members
  made, and it reaps every orphan that exits;
- it dies with its launcher (``PR_SET_PDEATHSIG``: SIGTERM when the launching thread
  ends, however it ends, ``kill -9`` included), and torchrun dies with it (SIGKILL), so
  nothing outlives a launcher that was killed outright;
- when torchrun exits, or a SIGTERM, SIGINT or SIGHUP arrives (the launcher's timeout, a
  Ctrl-C, the parent's death), it ends every process left in its tree: SIGTERM and
  SIGCONT (a stopped process acts on SIGTERM only once continued), ``--grace-s`` seconds
  to exit, then SIGKILL (which stops a stopped process too) until ``/proc`` shows none,
  and reaps them all. Its exit status is torchrun's, or 128 + the signal's number.

Each worker also dies with torchrun (:func:`die_with_parent`, called by
:mod:`gpugauge.launch.worker`), so a killed torchrun takes its workers at once. A
watchdog that polls would be slower and still miss processes in other sessions; a
process group or session misses them outright. What this cannot stop: a ``kill -9`` of
this process itself ends torchrun and its workers (their parent-death signals) but no
longer reaps the tree, so a process of it that asked for no such signal (one a worker
started) is handed to init; and a process that leaves the tree by a double fork into
another subreaper.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import os
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
REAPER_ENV = "GPUGAUGE_REAPER_PID"  # set for the tree: the reaper's pid
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def _prctl(option: int, value: int) -> None:
    """prctl(2); OSError where it fails (a kernel or libc without it)."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(option, value, 0, 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def die_with_parent(sig: int = signal.SIGKILL) -> bool:
    """Have the kernel send ``sig`` to this process when its parent ends; False if it did.

    Set as the first thing a child does: if the parent ended in between, this process was
    handed to a subreaper (or init) already, and False says that the parent is gone.
    """
    parent = os.getppid()
    _prctl(PR_SET_PDEATHSIG, sig)
    return parent != 1 and os.getppid() == parent


def _stat(pid: str) -> tuple[int, str] | None:
    """(parent pid, state letter) of a process, from ``/proc/<pid>/stat``; None if gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rfind(")") + 2 :].split()  # the name may hold spaces and ')'
    return int(fields[1]), fields[0]


def descendants(root: int) -> list[int]:
    """Every live (not zombie) process below ``root``, from ``/proc``, parents first."""
    children: dict[int, list[int]] = {}
    states: dict[int, str] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (st := _stat(entry)) is not None:
            children.setdefault(st[0], []).append(int(entry))
            states[int(entry)] = st[1]
    out, todo = [], list(children.get(root, []))
    while todo:
        pid = todo.pop(0)
        if states.get(pid) != "Z":
            out.append(pid)
        todo += children.get(pid, [])
    return out


def state(pid: int) -> str | None:
    """The state letter of a process (R, S, D, T stopped, t traced, Z...); None if gone."""
    st = _stat(str(pid))
    return None if st is None else st[1]


def _reap() -> None:
    """Collect every child that has exited (orphans handed to us included)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _signal_all(pids: Sequence[int], sig: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def end_tree(grace_s: float) -> None:
    """End every process below this one: SIGTERM (and SIGCONT), then SIGKILL; reap all."""
    me = os.getpid()
    left = descendants(me)
    _signal_all(left, signal.SIGTERM)
    _signal_all(left, signal.SIGCONT)
    deadline = time.monotonic() + grace_s
    while left and time.monotonic() < deadline:
        time.sleep(0.05)
        _reap()
        left = descendants(me)
    while left:  # SIGKILL cannot be caught; a process forked meanwhile is found next round
        _signal_all(left, signal.SIGKILL)
        time.sleep(0.02)
        _reap()
        left = descendants(me)
    _reap()


class _Stop(BaseException):
    """A stop signal arrived; ``args[0]`` is its number."""


def reap(cmd: Sequence[str], parent: int | None, grace_s: float) -> int:
    """Run ``cmd`` under this process as a subreaper; end its whole tree; its exit status."""
    _prctl(PR_SET_CHILD_SUBREAPER, 1)

    def stop(signum: int, frame: object) -> None:
        for s in STOP_SIGNALS:  # one stop is enough: the clean-up must not be interrupted
            signal.signal(s, signal.SIG_IGN)
        raise _Stop(signum)

    for s in STOP_SIGNALS:
        signal.signal(s, stop)
    code = 1
    try:
        if parent is not None:
            _prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
            if os.getppid() != parent:  # the launcher ended before the line above
                return 128 + signal.SIGTERM
        os.environ[REAPER_ENV] = str(os.getpid())
        child = os.fork()
        if child == 0:  # pragma: no cover (replaced by exec)
            try:
                for s in STOP_SIGNALS:
                    signal.signal(s, signal.SIG_DFL)
                if die_with_parent(signal.SIGKILL):
                    os.execvp(cmd[0], list(cmd))
            finally:
                os._exit(127)
        while True:  # reap orphans as they end, until the command itself ends
            pid, status = os.waitpid(-1, 0)
            if pid == child:
                code = os.waitstatus_to_exitcode(status)
                code = 128 - code if code < 0 else code
                break
    except _Stop as s:
        code = 128 + s.args[0]
    finally:
        for s in STOP_SIGNALS:
            signal.signal(s, signal.SIG_IGN)
        end_tree(grace_s)
    return code


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: ``--parent PID --grace-s S -- CMD ...``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parent", type=int, default=None, help="die when this pid ends")
    parser.add_argument("--grace-s", type=float, default=5.0, help="SIGTERM to SIGKILL, s")
    parser.add_argument("cmd", nargs=argparse.REMAINDER, help="-- the command")
    args = parser.parse_args(argv)
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not cmd:
        parser.error("no command after --")
    return reap(cmd, args.parent, args.grace_s)


if __name__ == "__main__":
    sys.exit(main())
