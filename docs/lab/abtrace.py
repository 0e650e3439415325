# A lab plugin, runs 140-141 in gpu-runs.md. On both sides of an A/B:
#   ABTRACE_DIR=$OUT/trace PYTHONPATH=$PWD/docs/lab python3 -m gpugauge ab ... -- -p abtrace
"""Where a side's time around its timed call goes, one JSON line per step.

Writes ``$ABTRACE_DIR/<side>-<pid>.jsonl``: ``{"side", "test", "what", "t", "dt"}``, with
``t`` the ``time.monotonic()`` of the step's end and ``dt`` its seconds. It wraps the steps a
test takes after its timed call (the sampler's stop, the memory and profiled rounds, the
record, garbage collection, CUDA syncs), pytest's phases, and counts the collections that
run inside each timed call. The primitive itself is not wrapped: the A/B worker pairs only
calls that come straight from the pipeline, so the plugin wraps the sampler's context
around it instead. Inert without ``ABTRACE_DIR``.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import json
import os
import time
from collections.abc import Callable, Iterator
from typing import IO, Any, ClassVar

import pytest

SIDE = os.environ.get("GPUGAUGE_AB_SIDE", "plain")


class Trace:
    """The open trace file, the test in hand and the collections of the timed call."""

    out: IO[str] | None = None
    test = ""
    wrapped = False
    gc_started = 0.0
    collections: ClassVar[dict[str, int]] = {"n0": 0, "n1": 0, "n2": 0}
    gc_s = 0.0


def log(what: str, t: float, dt: float = 0.0) -> None:
    """One line: a step's end and its seconds."""
    if Trace.out is not None:
        line = {"side": SIDE, "test": Trace.test, "what": what, "t": t, "dt": dt}
        Trace.out.write(json.dumps(line) + "\n")
        Trace.out.flush()


def timed(what: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn``, each call logged as ``what``."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        t0 = time.monotonic()
        try:
            return fn(*args, **kwargs)
        finally:
            t1 = time.monotonic()
            log(what, t1, t1 - t0)

    return wrapper


def patch(owner: object, name: str, what: str) -> None:
    """Log each call of ``owner.name`` as ``what``."""
    setattr(owner, name, timed(what, getattr(owner, name)))


def on_collection(phase: str, info: dict[str, Any]) -> None:
    """A gc callback: count collections by generation, and their seconds."""
    if phase == "start":
        Trace.gc_started = time.perf_counter()
        return
    Trace.collections[f"n{info['generation']}"] += 1
    Trace.gc_s += time.perf_counter() - Trace.gc_started


def traced_watching(original: Callable[..., Any]) -> Callable[..., Any]:
    """The pipeline's sampler context, logging the timed call inside it and its stop."""

    @contextlib.contextmanager
    def watching(device: Any) -> Iterator[Any]:
        with original(device) as sampler:
            t0 = time.monotonic()
            Trace.collections = dict.fromkeys(Trace.collections, 0)
            Trace.gc_s = 0.0
            gc.callbacks.append(on_collection)
            try:
                yield sampler
            finally:
                gc.callbacks.remove(on_collection)
                t1 = time.monotonic()
                log("primitive", t1, t1 - t0)
                counts = " ".join(f"{k}={v}" for k, v in Trace.collections.items())
                log(f"gc_in_timed {counts}", t1, Trace.gc_s)
        t2 = time.monotonic()
        log("watch_exit", t2, t2 - t1)

    return watching


@pytest.hookimpl(trylast=True)
def pytest_configure(config: pytest.Config) -> None:
    folder = os.environ.get("ABTRACE_DIR")
    if not folder:
        return
    os.makedirs(folder, exist_ok=True)
    Trace.out = open(os.path.join(folder, f"{SIDE}-{os.getpid()}.jsonl"), "a")  # noqa: SIM115
    import torch

    from gpugauge.measure import nvml, sampler
    from gpugauge.runtime import gauge, pipeline

    patch(pipeline, "measure_cuda_memory", "memory_round")
    patch(pipeline, "round_kernels", "kernels")
    patch(gauge, "measure_case", "measure_case")
    patch(sampler.GpuSampler, "__exit__", "sampler_exit")
    patch(sampler.GpuSampler, "__enter__", "sampler_enter")
    patch(gauge.Gauge, "_record", "record")
    patch(gauge, "fill_benchmark_fixture", "fill_benchmark")
    patch(nvml.NvmlDevice, "state", "nvml_state")
    patch(torch.cuda, "synchronize", "cuda_sync")
    patch(torch.cuda, "empty_cache", "empty_cache")
    patch(gc, "collect", "gc_collect")


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    if not Trace.wrapped and Trace.out is not None:
        from gpugauge.runtime import pipeline

        pipeline.watching = traced_watching(pipeline.watching)  # type: ignore[attr-defined]
        Trace.wrapped = True
    Trace.test = item.nodeid
    t0 = time.monotonic()
    counts = f"freeze={gc.get_freeze_count()} tracked={len(gc.get_objects())}"
    log(f"gcinfo {counts} counts={gc.get_count()}", t0)
    yield
    t1 = time.monotonic()
    log("protocol_end", t1, t1 - t0)


def _phase(what: str) -> Iterator[None]:
    t0 = time.monotonic()
    yield
    t1 = time.monotonic()
    log(what, t1, t1 - t0)


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    yield from _phase("call_phase")


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    yield from _phase("teardown_phase")
