"""One rank of a torchrun launch: join the process group, run a rank function, save its result.

Started by torchrun (``python -m torch.distributed.run ... -m gpugauge.launch.worker``)
once per rank. ``--call module:function`` names the rank function, which gets the spec
(a plain dict) and a :class:`RankContext` and returns a plain dict, usually
``{"timing": Timing.as_dict(), "values": {...}, "extra": {...}}``. The worker writes it to
``<out>/rank<N>.json`` atomically; if the function raises, the traceback goes to
``<out>/rank<N>.error`` first, so the launcher can say which rank failed and why.

From its first moment a worker started under :mod:`gpugauge.launch.reaper` dies with
torchrun (``PR_SET_PDEATHSIG``, SIGKILL): a killed torchrun leaves no worker running even
for the instant before the reaper ends the tree. A thread renews ``<out>/rank<N>.alive``
(its pid and host) every :data:`HEARTBEAT_S`: a rank that is stopped or frozen stops
renewing it, which is how the launcher tells the rank that stopped from the ranks that
wait on it in a collective.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import datetime
import importlib
import json
import os
import socket
import sys
import threading
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpugauge.launch.reaper import REAPER_ENV, die_with_parent
from gpugauge.results.files import atomic_write_json, atomic_write_text

HEARTBEAT_S = 1.0  # seconds between renewals of rank<N>.alive
# ``module:function`` every rank calls with its RankContext once it joined its group, before
# the rank function: how ``gpugauge ab`` paces the rounds of a rank (gpugauge.ab.worker)
RANK_HOOK_ENV = "GPUGAUGE_RANK_HOOK"


@dataclass(frozen=True)
class RankContext:
    """Where this rank runs: its global and local rank, the world size and its device."""

    rank: int
    local_rank: int
    world_size: int
    device: str  # "cuda:<local_rank>" for a CUDA spec, else "cpu"
    backend: str  # "nccl" or "gloo"


def resolve_call(call: str) -> Callable[..., Any]:
    """The function named ``module:function``; ValueError if there is none."""
    module, _, name = call.partition(":")
    if not module or not name:
        raise ValueError(f"--call {call!r}: expected module:function")
    fn = getattr(importlib.import_module(module), name, None)
    if not callable(fn):
        raise ValueError(f"--call {call!r}: {module} has no function {name!r}")
    return fn


def context(spec: dict[str, Any]) -> RankContext:
    """The rank's context, from torchrun's environment and the spec's device."""
    import torch

    rank, local = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"])
    world = int(os.environ["WORLD_SIZE"])
    if str(spec.get("device", "cpu")).startswith("cuda"):
        torch.cuda.set_device(local)
        return RankContext(rank, local, world, f"cuda:{local}", "nccl")
    return RankContext(rank, local, world, "cpu", "gloo")


def heartbeat(path: Path, every_s: float = HEARTBEAT_S) -> threading.Event:
    """Write ``path`` (pid, host) and renew its time every ``every_s`` from a daemon thread.

    Set the returned event to stop. A file removed meanwhile (another node's launcher
    clearing a shared folder) is written again.
    """
    body = {"pid": os.getpid(), "host": socket.gethostname()}
    done = threading.Event()

    def beat() -> None:
        while True:
            with contextlib.suppress(OSError):
                try:
                    os.utime(path)
                except FileNotFoundError:
                    atomic_write_json(path, body)
            if done.wait(every_s):
                return

    atomic_write_json(path, body)
    threading.Thread(target=beat, name="gpugauge-heartbeat", daemon=True).start()
    return done


def main(argv: list[str] | None = None) -> int:
    """Run one rank; the exit status is non-zero when the rank function failed."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--call", required=True, help="module:function run on every rank")
    parser.add_argument("--spec", required=True, help="the spec as a JSON object")
    parser.add_argument("--out", type=Path, required=True, help="folder for rank<N>.json")
    parser.add_argument("--timeout-s", type=float, default=600.0, help="collective timeout")
    args = parser.parse_args(argv)
    reaper = os.environ.get(REAPER_ENV)
    if reaper and (not die_with_parent() or str(os.getppid()) == reaper):
        return 1  # torchrun ended before this worker began: nothing to join
    rank = int(os.environ.get("RANK", "0"))
    heartbeat(args.out / f"rank{rank}.alive")
    try:
        import torch.distributed as dist

        spec = json.loads(args.spec)
        fn = resolve_call(args.call)
        ctx = context(spec)
        dist.init_process_group(ctx.backend, timeout=datetime.timedelta(seconds=args.timeout_s))
        try:
            if hook := os.environ.get(RANK_HOOK_ENV):
                resolve_call(hook)(ctx)
            result = fn(spec, ctx)
        finally:
            dist.destroy_process_group()
        atomic_write_json(args.out / f"rank{rank}.json", {"rank": rank, **result})
    except BaseException:
        atomic_write_text(args.out / f"rank{rank}.error", traceback.format_exc())
        raise
    return 0


def leave(code: int) -> None:
    """End this rank now with ``code``, its output flushed, skipping the interpreter's teardown.

    Its result is on disk by then. The teardown runs native destructors (gloo's and the
    profiler's threads among them) that can abort a finished rank at exit, which torchrun
    reports as the launch's failure.
    """
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    with contextlib.suppress(OSError, AttributeError):  # what native code printed, too
        ctypes.CDLL(None).fflush(None)
    os._exit(code)


if __name__ == "__main__":
    leave(main())
