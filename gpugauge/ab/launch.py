"""The two sides of an A/B as processes: started, connected, finished or stopped.

Each side is ``python -m pytest -p _gpugauge_ab_worker ARGS`` in its own checkout and
process group, with :mod:`gpugauge.ab.worker` copied into a folder of its own on its
``PYTHONPATH``; it connects back over a local socket with a key. A side that ends before it
connects, or mid-run, is a :class:`SideGone` with its log's tail. The sides die with the
coordinator, however it dies (``PR_SET_PDEATHSIG``).
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import queue
import secrets
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, Listener
from pathlib import Path
from typing import Any

from gpugauge.ab import worker
from gpugauge.ab.claims import Stopped
from gpugauge.ab.result import SideInfo
from gpugauge.ab.sides import PREFIX, Checkout, owned_folder
from gpugauge.check.runs import log_tail, stop_groups
from gpugauge.core.phrasing import Note
from gpugauge.launch.torchrun import RANK_GRACE_S

WORKER_MODULE = "_gpugauge_ab_worker"
SIDE_CONNECT_TIMEOUT_S = 600.0  # a side's pytest imports torch and collects before it connects
# How long past its time budget's end a silent side is waited for, s: a test started in
# time may end after it, but a side that hangs must not hold a nightly to its job's timeout.
SILENT_GRACE_S = 120.0

KERNELS = "record_kernels"  # the dest of the option that records each result's main kernels

# Options the sides take, by pytest ``dest`` (old and namespaced names): no energy windows
# (seconds a case, and an A/B judges time), no history appends (the A/B keeps its own
# record), the main kernels of each result (to say whether they changed), no gate.
# a case launched in processes of its own (torchrun ranks) is launched by its own test, so
# that its blocks are paired inside it: every side, a gated run's too
LAUNCH_EACH: tuple[tuple[str, ...], object] = (("gauge_launch_each",), True)
SIDE_SETTINGS: tuple[tuple[tuple[str, ...], object], ...] = (
    LAUNCH_EACH,
    (("energy_window", "gauge_energy_window"), 0.0),
    (("no_history", "gauge_no_history"), True),
    (("history", "gauge_history"), None),  # a side's arguments name none (ab refuses it)
    ((KERNELS, "gauge_record_kernels"), True),
    (("gauge_skip_extras",), True),  # profiler passes, traces, CPU references: not compared
    (("gate", "gauge_gate"), False),
    # the gate's own options, off with it (a side given a gated run's command line: the base
    # side of ``confirm --measure``)
    (("gauge_require_baselines",), False),
    (("gauge_confirm_new_host",), False),
    (("gauge_no_remeasure", "gauge_no_confirm"), False),
    (("gauge_first_nights",), 0),
    (("update_baselines", "gauge_update_baselines"), False),
)


class ABError(RuntimeError):
    """An A/B that could not be run to its end: why, with the side's log tail."""


class SideGone(ABError):
    """A side's pytest ended or broke its connection in the middle of the A/B."""


class SideSilent(ABError):
    """A side said nothing until past its time: the budget's end and a grace after it."""


@dataclass
class Side:
    """One running side: its checkout, process, connection and files."""

    name: str
    checkout: Checkout
    proc: subprocess.Popen[bytes]
    log: Path
    json: Path
    conn: Connection | None = None
    hello: dict[str, Any] = field(default_factory=dict)
    # the build it runs, "base" or "head": its name, unless the A/B exchanged the two
    # processes' places (every other round)
    role: str = ""
    # a time.monotonic() instant past which a side still silent is given up (None: never)
    silent_after: float | None = None
    # when its process was started (time.monotonic(), the clock the worker stamps with)
    started: float = field(default_factory=time.monotonic)
    # set to stop this side at its next message (the A/B on another GPU stopped or broke)
    stopping: threading.Event | None = None

    @property
    def build(self) -> str:
        """The build this process runs: 'base' or 'head'."""
        return self.role or self.name

    def send(self, message: dict[str, Any]) -> None:
        """Send one order to the side."""
        assert self.conn is not None
        try:
            self.conn.send(message)
        except OSError as err:
            raise self.gone(f"cannot be reached ({err})") from None

    def recv(self) -> dict[str, Any]:
        """The side's next message; SideGone if its pytest ends first."""
        assert self.conn is not None
        while True:
            if self.stopping is not None and self.stopping.is_set():
                raise Stopped(f"{self.build}: stopped")
            try:
                if self.conn.poll(0.5):
                    return self.conn.recv()
            except (EOFError, OSError):
                raise self.gone("closed its connection") from None
            if self.proc.poll() is not None and not self.conn.poll(0):
                raise self.gone(f"ended with exit status {self.proc.returncode}")
            if self.silent_after is not None and time.monotonic() > self.silent_after:
                raise SideSilent(
                    f"{self.build} ({self.checkout.label}) said nothing past the time "
                    f"budget's end and {SILENT_GRACE_S:g} s of grace: stopped; the A/B "
                    "keeps the cases it finished"
                )

    def expect(self, *ops: str) -> dict[str, Any]:
        """The next message, which must be one of ``ops``."""
        m = self.recv()
        if m.get("op") not in ops:
            raise ABError(f"{self.build}: said {m.get('op')!r} where {' or '.join(ops)} was due")
        return m

    def gone(self, what: str) -> SideGone:
        """The error for a side that went away, with its log's tail."""
        return SideGone(f"{self.build} ({self.checkout.label}) {what}:\n{log_tail(self.log)}")

    def info(self) -> SideInfo:
        """The side as the report names it."""
        return SideInfo(
            self.build,
            self.checkout.spec.ref,
            self.checkout.commit,
            self.checkout.spec.python,
            str(self.hello.get("gpugauge", "?")),
            self.proc.returncode,
        )


def _die_with_parent() -> None:  # pragma: no cover (runs in the child before exec)
    """Linux: SIGKILL this process when the coordinator dies, however it dies."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


@dataclass(frozen=True)
class Rendezvous:
    """Where the sides reach the coordinator: a socket, its key, the worker's folder."""

    address: str
    key: str
    plugin: Path


@contextlib.contextmanager
def listening() -> Iterator[tuple[Listener, Rendezvous]]:
    """A local socket for the two sides, with the worker copied beside it; removed after."""
    folder = owned_folder(f"{PREFIX}sock-")
    try:
        plugin = folder / "plugin"
        plugin.mkdir()
        shutil.copyfile(worker.__file__, plugin / f"{WORKER_MODULE}.py")
        key = secrets.token_hex(16)
        address = str(folder / "ab.sock")
        listener = Listener(address, family="AF_UNIX", authkey=bytes.fromhex(key))
        try:
            yield listener, Rendezvous(address, key, plugin)
        finally:
            with contextlib.suppress(FileNotFoundError):  # its folder removed under it
                listener.close()
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def start_side(
    name: str,
    co: Checkout,
    args_of_side: Sequence[str],
    out: Path,
    channel: Rendezvous,
    settings: Sequence[tuple[tuple[str, ...], object]],
    cwd: Path | None,
    note: Note,
    role: str = "",
    as_is: bool = False,
    gpu: str | None = None,
    follows: bool = False,
) -> Side:
    """Start one side's pytest, in its own process group, logging to ``out/<role>.log``.

    ``name`` is the process's place in the A/B (what the coordinator and the worker call
    it); ``role`` the build it runs, where the two differ (default: ``name``). A side
    ``as_is`` keeps every test its command line selects (the worker's
    :data:`~gpugauge.ab.worker.AS_IS_ENV`); one that ``follows`` also runs those the other
    side selected (:data:`~gpugauge.ab.worker.FOLLOWS_ENV`). ``gpu``: the one GPU the side
    sees (``CUDA_VISIBLE_DEVICES``); None: the GPUs this process sees.
    """
    role = role or name
    out = out.absolute()  # the side runs in its own checkout: a relative path would be there
    log, js = out / f"{role}.log", out / f"{role}.json"
    partial = out / f".{role}.partial.json"
    args = [
        co.spec.python,
        "-m",
        "pytest",
        "-p",
        WORKER_MODULE,
        *args_of_side,
        f"--benchmark-json={partial}",
    ]
    env = {
        **os.environ,
        "PYTHONUNBUFFERED": "1",
        "PYTHONPATH": os.pathsep.join(
            x for x in (str(channel.plugin), os.environ.get("PYTHONPATH", "")) if x
        ),
        worker.ADDRESS_ENV: channel.address,
        worker.KEY_ENV: channel.key,
        worker.SIDE_ENV: name,
        worker.SETTINGS_ENV: json.dumps([[list(d), v] for d, v in settings]),
    }
    for var in (worker.AS_IS_ENV, worker.FOLLOWS_ENV, worker.RANKS_ENV):
        env.pop(var, None)  # this side's own, whatever the coordinator's environment holds
    if as_is:
        env[worker.AS_IS_ENV] = "1"
    if follows:
        env[worker.FOLLOWS_ENV] = "1"
    if gpu is not None:
        env["CUDA_VISIBLE_DEVICES"] = gpu
    env.pop("GPUGAUGE_GIT_COMMIT", None)  # each side's commit is its checkout's
    root = co.root / cwd if cwd else co.root
    place = name if role == name else f"{role}, in {name}'s place"
    note(f"  {place}: {co.label} $ {' '.join(args[1:])}")
    fh = log.open("w")
    try:
        proc = subprocess.Popen(
            args,
            cwd=root,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=fh,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_die_with_parent,
        )
    finally:
        fh.close()
    return Side(name, co, proc, log, js, role=role)


def connect(
    listener: Listener, sides: dict[str, Side], stopping: threading.Event | None = None
) -> None:
    """Accept both sides' connections; an ABError if one ends before it connects.

    :class:`Stopped` once ``stopping`` is set (the A/B on another GPU stopped or broke).
    """
    got: queue.Queue[Connection | BaseException] = queue.Queue()

    def accept() -> None:
        for _ in sides:
            try:
                got.put(listener.accept())
            except BaseException as err:  # the listener closed under it
                got.put(err)
                return

    threading.Thread(target=accept, daemon=True).start()
    deadline = time.monotonic() + SIDE_CONNECT_TIMEOUT_S
    while any(s.conn is None for s in sides.values()):
        try:
            conn = got.get(timeout=0.5)
        except queue.Empty:
            conn = None
        if stopping is not None and stopping.is_set():
            raise Stopped("stopped before both sides connected")
        if conn is None:
            for s in sides.values():
                if s.conn is None and s.proc.poll() is not None:
                    raise s.gone("ended before it connected")
            if time.monotonic() > deadline:
                raise ABError(f"the sides did not connect within {SIDE_CONNECT_TIMEOUT_S:g} s")
            continue
        if isinstance(conn, BaseException):
            raise ABError(f"accepting a side failed: {conn}")
        hello = conn.recv()
        side = sides[str(hello.get("side"))]
        side.conn, side.hello = conn, hello
        mine = side.checkout.root / "gpugauge"
        theirs = Path(str(hello.get("gpugauge", "")))
        if mine.is_dir() and theirs.resolve() != mine.resolve():
            raise ABError(
                f"{side.build}: its pytest imported gpugauge from {theirs}, not from its "
                f"checkout {mine}: an installed copy shadows the checkout's"
            )


def exchange(
    said: dict[str, dict[str, Any]],
    sides: tuple[Side, Side],
    order: Callable[[Side], dict[str, Any]],
    together: bool,
) -> None:
    """Send each side its order and keep what it says next ('measure' or 'done') in ``said``.

    In turn, each side's answer before the next side's order; or ``together``: both
    orders, then both answers.
    """
    for s in sides:
        s.send(order(s))
        if not together:
            said[s.name] = s.expect("measure", "done")
    if together:
        for s in sides:
            said[s.name] = s.expect("measure", "done")


def finish(side: Side) -> None:
    """Wait for a side's pytest to end; keep its JSON under its final name.

    :class:`Stopped` once the side's ``stopping`` is set: a side that hangs at its exit
    must not hold up a stop that a Ctrl-C or another GPU's error asked for.
    """
    while True:
        try:
            side.proc.wait(timeout=0.5)
            break
        except subprocess.TimeoutExpired:
            if side.stopping is not None and side.stopping.is_set():
                raise Stopped(f"{side.build}: stopped while it ended") from None
    partial = side.json.with_name(f".{side.build}.partial.json")
    if partial.exists() and partial.stat().st_size > 0:
        os.replace(partial, side.json)
        with contextlib.suppress(OSError), side.log.open("a") as log:  # its lines name the old
            log.write(
                f"gpugauge ab: this side's saved run is {side.json} (renamed from {partial})\n"
            )
    else:
        partial.unlink(missing_ok=True)
        side.json.unlink(missing_ok=True)


def stop(sides: dict[str, Side]) -> None:
    """Stop every side still running (its whole process group); remove partial files.

    All at once, with time for a side's torchrun launch to end its ranks first: a side
    killed sooner leaves its launch's reaper ending them after the A/B has returned.
    """
    running = [s.proc for s in sides.values() if s.proc.poll() is None]
    stop_groups(running, grace_s=RANK_GRACE_S + 3.0)
    for s in sides.values():
        s.json.with_name(f".{s.build}.partial.json").unlink(missing_ok=True)
