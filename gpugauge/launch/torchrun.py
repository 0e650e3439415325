"""Start a workload on several ranks with torchrun, wait with a timeout, collect every rank.

:func:`launch` runs ``python -m torch.distributed.run`` in a process group of its own, so
that a crashed or hung rank can be stopped with everything it started: on a timeout the
whole group gets SIGTERM, then SIGKILL, and no worker is left behind. Every rank writes
``rank<N>.json`` (see :mod:`gpugauge.launch.worker`); a rank that wrote none is named in
the :class:`LaunchError`, with its traceback where it left one.

The same command runs across nodes: give ``nnodes`` and a rendezvous endpoint, start
:func:`launch` (or the printed command) on every node with a shared ``out_dir``.
NVLink multicast stays off in every worker (``NCCL_NVLS_ENABLE=0`` and friends).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from gpugauge.measure.timing import Timing
from gpugauge.results.files import FileError, read_json

ROOT = Path(__file__).resolve().parents[2]
# multicast can take a shared host's GPUs out of service: never on where we start workers
NO_MULTICAST = {
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
}


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
        cmd += ["-m", "gpugauge.launch.worker", "--call", self.call]
        cmd += ["--spec", json.dumps(dict(self.spec)), "--out", str(out_dir)]
        return [*cmd, f"--timeout-s={self.collective_timeout_s:g}"]


def _stop_group(pgid: int, grace_s: float = 5.0) -> None:
    """SIGTERM the process group, then SIGKILL whatever is left after ``grace_s``."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)


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
) -> list[RankResult]:
    """Run ``job`` with torchrun and return every rank's result, rank order.

    ``timeout_s`` bounds the whole launch; past it the process group is stopped and the
    ranks that wrote no result are named. torchrun's output goes to
    ``out_dir/torchrun.log``.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    for old in [*out_dir.glob("rank*.json"), *out_dir.glob("rank*.error")]:
        old.unlink()
    log = out_dir / "torchrun.log"
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    full_env = {**os.environ, **(env or {}), **NO_MULTICAST, "PYTHONPATH": path}
    cmd = job.command(out_dir)
    note(f"torchrun: {job.world_size} ranks of {job.call} (log {log})")
    with log.open("w") as fh:
        proc = subprocess.Popen(
            cmd, cwd=ROOT, env=full_env, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True
        )
        timed_out = False
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
        finally:
            _stop_group(proc.pid)  # a clean exit leaves nothing; a hang leaves the workers
            proc.wait()
    return _collect(job, out_dir, log, proc.returncode, timed_out, timeout_s)


def _collect(
    job: Launch, out_dir: Path, log: Path, code: int, timed_out: bool, timeout_s: float
) -> list[RankResult]:
    results, problems = {}, []
    for rank in range(job.world_size):
        done, error = out_dir / f"rank{rank}.json", out_dir / f"rank{rank}.error"
        if error.exists():
            last = error.read_text(errors="replace").strip().splitlines()[-1:]
            problems.append(f"rank {rank} failed: {last[0] if last else '?'}")
        elif not done.exists():
            why = f"did not finish within {timeout_s:g} s" if timed_out else "wrote no result"
            problems.append(f"rank {rank} {why}")
        else:
            try:
                results[rank] = RankResult.load(done)
            except (FileError, KeyError, TypeError, ValueError) as err:
                problems.append(f"rank {rank} wrote an unreadable result: {err}")
    if problems or code != 0:
        how = "timed out; every worker was stopped" if timed_out else f"torchrun exit {code}"
        raise LaunchError(
            f"{job.call} on {job.world_size} ranks: {'; '.join(problems) or how} ({how}). "
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
