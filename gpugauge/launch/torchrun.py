"""Start a workload on several ranks with torchrun, wait with a timeout, collect every rank.

Nothing a launch starts outlives it, whatever ends it. :func:`launch` starts torchrun under
:mod:`gpugauge.launch.reaper`, a small process that is a Linux *child subreaper*: every
process of the tree stays below it even when torchrun is ``kill -9``-ed or a worker made
a session of its own (torchrun starts each worker in its own session, so stopping
torchrun's process group would miss them). The reaper ends the whole tree (SIGTERM and
SIGCONT, a grace period, then SIGKILL until ``/proc`` shows none) when torchrun exits,
when the launcher stops it (the timeout, an exception, Ctrl-C), or when the launcher
itself dies (``PR_SET_PDEATHSIG``: a SIGTERM or ``kill -9`` of pytest). Each worker dies
with torchrun too. See :mod:`gpugauge.launch.reaper` for why this, and not a watchdog.

Every rank writes ``rank<N>.json`` (see :mod:`gpugauge.launch.worker`), and from its start
``rank<N>.alive``, whose time it renews every :data:`~gpugauge.launch.worker.HEARTBEAT_S`.
A rank whose heartbeat stops (a SIGSTOPped or frozen process) for ``Launch.stall_s`` ends
the launch early; at the end every rank that wrote no result is named in the
:class:`LaunchError`: one that stopped reporting (with its pid and process state, such as
``T``: stopped), one still running at the timeout, one that failed (with the last line of
its traceback).

The same command runs across nodes: give ``nnodes`` and a rendezvous endpoint, start
:func:`launch` (or the printed command) on every node with a shared ``out_dir``.
NVLink multicast stays off in every worker (``NCCL_NVLS_ENABLE=0`` and friends).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from gpugauge.launch import reaper
from gpugauge.measure.timing import Timing
from gpugauge.results.files import FileError, read_json

ROOT = Path(__file__).resolve().parents[2]
RANK_GRACE_S = 5.0  # a stopped launch's ranks: SIGTERM, this long to exit, then SIGKILL
# multicast can take a shared host's GPUs out of service: never on where we start workers
NO_MULTICAST = {
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
}
LOG_DIR = "torchrun-logs"  # under a launch's out_dir: torch elastic's per-rank logs
POLL_S = 0.25  # how often the launcher looks at torchrun and the heartbeats
SILENT_S = 5.0  # a heartbeat older than this (several missed beats): the rank is silent
STATES = {"T": "stopped", "t": "stopped by a tracer", "Z": "exited", "D": "in disk sleep"}


def own_seconds() -> float:
    """The clock a launch's ``timeout_s`` runs on (s): monotonic time.

    Its own work only: where a launch's ranks wait on something outside it, its caller
    may stop this clock for the wait (``gpugauge ab``'s worker does while a rank waits for
    the other side's blocks), so that a hang elsewhere does not end this launch too.
    """
    return time.monotonic()


class LaunchError(RuntimeError):
    """A launch that did not give every rank's result; the message names the ranks."""


@dataclass(frozen=True)
class RankResult:
    """What one rank saved: its timing (if it timed), metric values and anything else."""

    rank: int
    timing: Timing | None
    values: Mapping[str, float] = field(default_factory=dict)
    extra: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def load(cls, path: Path) -> RankResult:
        """Read ``rank<N>.json``."""
        data = read_json(path)
        timing = data.get("timing")
        return cls(
            rank=int(data["rank"]),
            timing=None if timing is None else Timing.from_dict(timing, f"{path}: timing"),
            values={k: float(v) for k, v in (data.get("values") or {}).items()},
            extra=dict(data.get("extra") or {}),
        )


@dataclass(frozen=True)
class Launch:
    """How to start one workload: the rank function, its spec, and the world's shape."""

    call: str  # "module:function", run on every rank
    spec: Mapping[str, Any]
    nproc_per_node: int
    nnodes: int = 1
    rdzv_endpoint: str | None = None  # host:port of node 0 for several nodes
    node_rank: int | None = None
    collective_timeout_s: float = 600.0
    # a rank whose heartbeat stops this long ends the launch before its timeout
    stall_s: float = 120.0

    @property
    def world_size(self) -> int:
        """Ranks over every node."""
        return self.nproc_per_node * self.nnodes

    def command(self, out_dir: Path) -> list[str]:
        """The torchrun command line (the same on every node but for ``node_rank``)."""
        cmd = [sys.executable, "-m", "torch.distributed.run"]
        cmd += [f"--nproc-per-node={self.nproc_per_node}", f"--nnodes={self.nnodes}"]
        if self.rdzv_endpoint is None:
            if self.nnodes != 1:
                raise ValueError("several nodes need a rendezvous endpoint (host:port)")
            cmd.append("--standalone")
        else:
            cmd += ["--rdzv-backend=c10d", f"--rdzv-endpoint={self.rdzv_endpoint}"]
            if self.node_rank is not None:
                cmd.append(f"--node-rank={self.node_rank}")
        # torch's own logs beside the ranks' files: left to choose, torchrun makes a
        # /tmp/torchelastic_* folder per launch and never removes it
        cmd.append(f"--log-dir={out_dir / LOG_DIR}")
        cmd += ["-m", "gpugauge.launch.worker", "--call", self.call]
        cmd += ["--spec", json.dumps(dict(self.spec)), "--out", str(out_dir)]
        return [*cmd, f"--timeout-s={self.collective_timeout_s:g}"]


@dataclass(frozen=True)
class RankBeat:
    """What a rank's heartbeat says: its process and how long ago it last reported."""

    rank: int
    pid: int | None
    host: str
    age_s: float  # since the heartbeat was last renewed
    state: str | None  # /proc state letter where the rank runs on this host, else None

    @property
    def silent(self) -> bool:
        """Stopped reporting: its heartbeat is old, or its process is stopped."""
        return self.age_s >= SILENT_S or self.state in ("T", "t")

    def describe(self) -> str:
        """'pid 123 on host: stopped (state T)'."""
        where = f"pid {self.pid} on {self.host}"
        if self.state is None:
            return where
        return f"{where}: {STATES.get(self.state, 'running')} (state {self.state})"


def heartbeats(out_dir: Path, world_size: int) -> dict[int, RankBeat]:
    """The heartbeat of every rank that has one, by rank."""
    here, now, out = socket.gethostname(), time.time(), {}
    for rank in range(world_size):
        path = out_dir / f"rank{rank}.alive"
        try:
            age = now - path.stat().st_mtime
            data = json.loads(path.read_text())
            pid, host = int(data["pid"]), str(data["host"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
        state = reaper.state(pid) if host == here else None
        out[rank] = RankBeat(rank, pid, host, max(age, 0.0), state)
    return out


def _stop(proc: subprocess.Popen, grace_s: float) -> None:
    """Have the reaper end the tree (SIGTERM); SIGKILL it if it does not within the grace.

    A SIGKILL-ed reaper still takes torchrun with it (its death signal), and torchrun its
    workers.
    """
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=grace_s + 10)
        except subprocess.TimeoutExpired:
            proc.kill()
    proc.wait()


def processes_mentioning(text: str) -> list[str]:
    """``pid: command line`` of live processes whose command line contains ``text``.

    The proof that a launch left nothing behind: its workers' command lines name its
    output folder (Linux ``/proc``).
    """
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if text in cmdline:
            found.append(f"{proc.name}: {cmdline[:150]}")
    return found


def _tail(path: Path, lines: int = 12) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def launch(
    job: Launch,
    out_dir: Path,
    *,
    timeout_s: float,
    env: Mapping[str, str] | None = None,
    note: Callable[[str], None] = print,
    grace_s: float = RANK_GRACE_S,
) -> list[RankResult]:
    """Run ``job`` with torchrun and return every rank's result, rank order.

    ``timeout_s`` bounds the whole launch (on :func:`own_seconds`); past it, or once a rank
    has not reported for ``job.stall_s``, every process of the launch is stopped (SIGTERM,
    then SIGKILL after ``grace_s``) and the ranks that wrote no result are named. However
    the launch ends
    (an exception, Ctrl-C, torchrun killed, the launcher killed) no process of it is left.
    torchrun's output goes to ``out_dir/torchrun.log``.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    for pattern in ("rank*.json", "rank*.error", "rank*.alive"):
        for old in out_dir.glob(pattern):
            old.unlink(missing_ok=True)
    log = out_dir / "torchrun.log"
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    full_env = {**os.environ, **(env or {}), **NO_MULTICAST, "PYTHONPATH": path}
    cmd = [sys.executable, "-m", "gpugauge.launch.reaper", f"--parent={os.getpid()}"]
    cmd += [f"--grace-s={grace_s:g}", "--", *job.command(out_dir)]
    note(f"torchrun: {job.world_size} ranks of {job.call} (log {log})")
    with log.open("w") as fh:
        # a session of its own: a Ctrl-C reaches the launcher, which stops the launch
        proc = subprocess.Popen(
            cmd, cwd=ROOT, env=full_env, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            ended = _watch(proc, job, out_dir, timeout_s)
        finally:
            _stop(proc, grace_s)
    return _collect(job, out_dir, log, proc.returncode, ended)


@dataclass(frozen=True)
class _Ended:
    """Why the launcher stopped a launch, and every rank's heartbeat at that moment."""

    how: str  # "timed out" or "stalled"
    detail: str
    beats: Mapping[int, RankBeat]


def _watch(proc: subprocess.Popen, job: Launch, out_dir: Path, timeout_s: float) -> _Ended | None:
    """Wait for torchrun; an _Ended if the timeout passed or a rank stopped reporting."""
    deadline = own_seconds() + timeout_s
    while True:
        try:
            proc.wait(timeout=POLL_S)
            return None
        except subprocess.TimeoutExpired:
            pass
        beats = heartbeats(out_dir, job.world_size)
        if own_seconds() >= deadline:
            return _Ended("timed out", f"within {timeout_s:g} s", beats)
        stalled = [
            b for b in beats.values() if b.age_s >= job.stall_s and not _finished(out_dir, b.rank)
        ]
        if stalled:
            b = stalled[0]
            return _Ended("stalled", f"rank {b.rank} did not report for {job.stall_s:g} s", beats)


def _finished(out_dir: Path, rank: int) -> bool:
    return (out_dir / f"rank{rank}.json").exists() or (out_dir / f"rank{rank}.error").exists()


def _unfinished(rank: int, ended: _Ended | None) -> str:
    """Why a rank wrote no result: it stopped reporting, was still running, or never began."""
    if ended is None:
        return f"rank {rank} wrote no result"
    beat = ended.beats.get(rank)
    if beat is None:
        return f"rank {rank} never reported (no heartbeat: it did not start)"
    if beat.silent:
        return f"rank {rank} did not report for {beat.age_s:.0f} s ({beat.describe()})"
    if ended.how == "timed out":
        return f"rank {rank} did not finish {ended.detail} (still reporting: {beat.describe()})"
    return f"rank {rank} was still reporting when the launch was stopped"


def _collect(
    job: Launch, out_dir: Path, log: Path, code: int, ended: _Ended | None
) -> list[RankResult]:
    results, problems = {}, []
    for rank in range(job.world_size):
        done, error = out_dir / f"rank{rank}.json", out_dir / f"rank{rank}.error"
        if error.exists():
            last = error.read_text(errors="replace").strip().splitlines()[-1:]
            problems.append(f"rank {rank} failed: {last[0] if last else '?'}")
        elif not done.exists():
            problems.append(_unfinished(rank, ended))
        else:
            try:
                results[rank] = RankResult.load(done)
            except (FileError, KeyError, TypeError, ValueError) as err:
                problems.append(f"rank {rank} wrote an unreadable result: {err}")
    if problems or code != 0 or ended is not None:
        if ended is None:
            how = f"torchrun exit {code}"
            if code - 128 in signal.valid_signals():
                how += f" ({signal.Signals(code - 128).name})"
        elif ended.how == "timed out":
            how = "timed out; every worker was stopped"
        else:
            how = f"{ended.detail}; every worker was stopped"
        if not problems:  # torchrun failed (or was stopped) after every rank saved
            then = ", then a rank ended abnormally" if ended is None else ""
            problems.append(f"every rank saved its result{then}")
        # the silent ranks first: they are the cause, the others waited on them
        problems.sort(key=lambda p: "did not report" not in p)
        raise LaunchError(
            f"{job.call} on {job.world_size} ranks: {'; '.join(problems)} ({how}). "
            f"Last lines of {log}:\n{_tail(log)}"
        )
    return [results[r] for r in range(job.world_size)]


def slowest_rank_rounds(timings: Sequence[Timing]) -> Timing:
    """One timing whose every round is the slowest rank's time for that round.

    A distributed step ends when its last rank ends, so round i takes max over ranks of
    their round i. Every rank must have timed the same number of rounds (fixed rounds: an
    adaptive stop could differ between ranks and leave one waiting in a collective).
    """
    if not timings:
        raise ValueError("no rank timings to merge")
    counts = {len(t.device_ms) for t in timings}
    if len(counts) != 1:
        raise ValueError(f"ranks timed different numbers of rounds: {sorted(counts)}")
    device = tuple(max(r) for r in zip(*(t.device_ms for t in timings), strict=True))
    host = tuple(max(r) for r in zip(*(t.host_ms for t in timings), strict=True))
    flags = [t.throttled for t in timings if t.throttled]
    throttled = tuple(any(r) for r in zip(*flags, strict=True)) if flags else ()
    first = timings[0]
    return replace(
        first,
        device_ms=device,
        host_ms=host,
        stop_reason=f"{first.stop_reason}; each round the slowest of {len(timings)} ranks",
        noisy=any(t.noisy for t in timings),
        throttled=throttled,
        clock_events=tuple(sorted({e for t in timings for e in t.clock_events})),
    )
