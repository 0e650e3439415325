"""Running one function in a fresh process, with this one's numerics flags.

For work that leaves a process changed (running out of memory on purpose changes which
cuDNN plans it keeps): :func:`in_fresh_process` runs it in a child, and this process stays
as it was.

The child is forked from multiprocessing's fork server, which imported torch and the
function's module once and never touches CUDA, rather than spawned: a spawned child
imports torch and gpugauge again. On H200 hosts the nightly's six frontier searches took
11-19 s each for 1-7 s of probes spawned, 6-14 s forked (docs/layer_fit.md). A fork of
a process that never initialized CUDA starts with none of its state: no context, no cuDNN
plans, no OOMs. The server also imports what torch would import in each child at its
first training step (:mod:`gpugauge.launch.heap`): on an H200 host, that cut a search's
warm-up from 4.4-5.3 s to 0.4-0.6 s (docs/lab/gpu-runs.md, 2026-12-03).
"""

from __future__ import annotations

import gc
import multiprocessing
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any

import torch

from gpugauge.launch.heap import LAZY_IMPORTS
from gpugauge.measure.environment import apply_torch_flags, torch_flags


def in_fresh_process(what: str, fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)`` in a fresh process with this one's numerics flags (cuDNN, TF32).

    For work that runs out of memory on purpose (a frontier search, fitting a cut). A
    process remembers it: each thread keeps the first cuDNN plan that ran for a
    convolution's shapes (the autograd engine's threads, one per device, live as long as
    the process), and a plan whose workspace could not be allocated is skipped for a
    slower one. After a case had run out of memory on its device, the naive split read
    220 ms on two H200s; alone, 147 ms (its own attempts' fallbacks; fitted this way, 100
    ms: docs/lab/layer-fit-evidence.md). The cached memory is returned
    first (a whole-device budget is the free memory); ``fn``'s error is raised here, and
    the child's death as a RuntimeError naming ``what``.
    """
    if torch.cuda.is_available():
        gc.collect()
        torch.cuda.empty_cache()
    with ProcessPoolExecutor(max_workers=1, mp_context=_context(fn)) as pool:
        try:
            return pool.submit(_child, torch_flags(), fn, args).result()
        except BrokenProcessPool as err:
            raise RuntimeError(f"{what}: its process died ({err})") from err


def _child(flags: dict[str, Any], fn: Callable[..., Any], args: tuple[Any, ...]) -> Any:
    """:func:`in_fresh_process`'s child: the parent's numerics flags, then the work.

    The server's imports are frozen first, so that the work's collections skip them
    (:mod:`gpugauge.launch.heap`).
    """
    gc.freeze()
    apply_torch_flags(flags)
    return fn(*args)


def _context(fn: Callable[..., Any]) -> multiprocessing.context.BaseContext:
    """The fork server's context, its preloads named; spawn where there is no fork server.

    The fork server is the standard library's one per process, started on first use and
    ended when this process ends. It preloads torch, what torch imports lazily
    (:data:`~gpugauge.launch.heap.LAZY_IMPORTS`) and ``fn``'s module, as named when it
    starts (a later call's names count only where the server has to start again).
    """
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(["torch", *LAZY_IMPORTS, "gpugauge.launch.fresh", fn.__module__])
    return ctx
