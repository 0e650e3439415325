"""Running ``python -m pytest`` as a child of a check: logged, stoppable, nothing half-written.

The child runs in a process group of its own, so that a Ctrl-C or SIGTERM given to the
check stops pytest and whatever it started (torchrun workers) and nothing else. Its log
and JSON are written under temporary names beside their final ones and renamed when the
child has ended by itself; an interrupted child's files are removed.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from gpugauge.core.phrasing import Note
from gpugauge.results.files import check_dir

# pytest's own exit statuses (pytest.ExitCode), as a child reports them
PYTEST_OK, PYTEST_FAILED, PYTEST_INTERRUPTED, PYTEST_USAGE, PYTEST_NO_TESTS = 0, 1, 2, 4, 5
STOP_GRACE_S = 10.0  # after SIGINT, how long pytest may take to end the test in hand


class CheckError(ValueError):
    """Bad input to a check (an option, a folder); the message names it."""


class CheckUnavailable(RuntimeError):
    """The check cannot run on this machine (no CUDA, no triton, no baselines): why."""


@dataclass(frozen=True)
class Finished:
    """A child pytest that ended by itself: its exit status, wall time and files."""

    name: str
    exit_code: int
    wall_s: float
    json: Path | None  # None: the child wrote no JSON (or an empty one)
    log: Path


def log_tail(path: Path, lines: int = 15) -> str:
    """The last ``lines`` lines of a log, for an error message."""
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def stop_group(proc: subprocess.Popen[bytes], grace_s: float = STOP_GRACE_S) -> None:
    """End a child started in its own process group, and everything in that group.

    SIGINT first, as from a keyboard: pytest stops the test in hand (a torchrun launch
    stops its workers) and ends its session; after ``grace_s`` (or a second Ctrl-C),
    SIGKILL to the whole group, which also ends what pytest left behind.
    """
    stop_groups([proc], grace_s)


def stop_groups(procs: Sequence[subprocess.Popen[bytes]], grace_s: float) -> None:
    """:func:`stop_group` for several children at once: one SIGINT each, one shared grace."""
    for proc in procs:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGINT)
    deadline = time.monotonic() + grace_s
    try:
        for proc in procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(max(0.0, deadline - time.monotonic()))
    except KeyboardInterrupt:
        pass  # asked twice: stop waiting
    finally:
        for proc in procs:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """While the block runs, SIGTERM raises KeyboardInterrupt, as Ctrl-C does.

    So that a job runner's stop takes the same path as a Ctrl-C: the child's group is
    stopped and its partial files removed. The previous handler is restored afterwards.
    """

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def run_pytest(
    name: str,
    args: Sequence[str],
    *,
    root: Path,
    folder: Path,
    json_option: str,
    note: Note = print,
) -> Finished:
    """Run ``python -m pytest ARGS JSON_OPTION=<folder>/<name>.json`` from ``root``.

    Output goes to ``<folder>/<name>.log``. Returns when pytest has ended; on an
    interrupt (KeyboardInterrupt, or SIGTERM under :func:`sigterm_as_interrupt`) the
    child's process group is stopped, its partial files removed, and the interrupt raised.
    """
    folder.mkdir(parents=True, exist_ok=True)
    json_path, log_path = folder / f"{name}.json", folder / f"{name}.log"
    partial_json = folder / f".{name}.partial.json"
    partial_log = folder / f".{name}.partial.log"
    cmd = [sys.executable, "-m", "pytest", *args, f"{json_option}={partial_json}"]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    note(f"  $ {shlex.join(cmd)}")  # quoted as a shell reads it: it can be pasted
    t0 = time.monotonic()
    try:
        with partial_log.open("w") as log:
            proc = subprocess.Popen(
                cmd,
                cwd=root,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            try:
                code = proc.wait()
            except BaseException:
                stop_group(proc)
                raise
    except BaseException:
        partial_json.unlink(missing_ok=True)
        partial_log.unlink(missing_ok=True)
        raise
    wall = time.monotonic() - t0
    os.replace(partial_log, log_path)
    written = partial_json.exists() and partial_json.stat().st_size > 0
    if written:
        os.replace(partial_json, json_path)
    else:  # pytest-benchmark opens its file empty at the start: a crash leaves it so
        partial_json.unlink(missing_ok=True)
        json_path.unlink(missing_ok=True)  # an older run's file must not pass for this one's
    return Finished(name, code, wall, json_path if written else None, log_path)


def check_benches(root: Path, benches: Path) -> None:
    """The bench folder must exist: a check runs from the checkout."""
    where = benches if benches.is_absolute() else root / benches
    try:
        check_dir(where, "--benches")
    except ValueError as err:
        raise CheckError(f"{err} (run gpugauge check from the gpugauge checkout)") from None


def families_with_baselines(baselines: Path, device_cls: str | None = None) -> list[str]:
    """Families with a stored baseline file: of ``device_cls``, or of any device class."""
    if not baselines.is_dir():
        return []
    pattern = f"{device_cls}/*.json" if device_cls else "*/*.json"
    return sorted({p.stem for p in baselines.glob(pattern)})


def or_expression(names: Sequence[str]) -> str:
    """A pytest ``-k`` expression selecting any of ``names`` (family markers)."""
    return " or ".join(names)
