"""The frontier search: the largest N that fits a budget for one head size M.

:func:`search_frontier` finds it by exponential then binary search (galloping from a
start guess: the memory model's prediction, or 1), one :func:`~.probe.probe` per step;
:func:`search_case` runs a :class:`~.cases.FitCase`'s search on its backend, on a GPU in
a fresh process.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch

from gpugauge.families.layer_fit.backends import CudaBackend, SimulatedBackend
from gpugauge.families.layer_fit.cases import FitCase
from gpugauge.families.layer_fit.probe import FitBackend, Probe, probe
from gpugauge.launch.fresh import in_fresh_process


def probe_bound(max_n: int) -> int:
    """The most probes a search may take for one M: 2·⌈log2(N_max)⌉ + 4."""
    return 2 * math.ceil(math.log2(max(max_n, 2))) + 4


@dataclass(frozen=True)
class SearchResult:
    """The largest N that fit one M, and every probe taken to find it, in order."""

    max_n: int
    probes: tuple[Probe, ...]
    cap: int
    start: int

    @property
    def censored(self) -> bool:
        """The cap itself fit: the true frontier is at least ``max_n``."""
        return self.max_n == self.cap

    @property
    def bound(self) -> int:
        """The probe budget this result had to keep."""
        return probe_bound(self.max_n)

    def as_dict(self) -> dict[str, Any]:
        """Plain dict for JSON."""
        return {
            "max_n": self.max_n,
            "probe_count": len(self.probes),
            "probe_bound": self.bound,
            "cap": self.cap,
            "censored": self.censored,
            "start": self.start,
            "probes": [p.as_dict() for p in self.probes],
        }


def search_frontier(
    try_n: Callable[[int], Probe],
    cap: int,
    start: int = 1,
    on_probe: Callable[[Probe], object] | None = None,
) -> SearchResult:
    """Largest N in [1, cap] for which ``try_n(N).fits`` (0 if even N = 1 does not fit).

    Gallops from ``start``: up by 1, 2, 4, ... past the last fit until one does not fit, or
    down by 1, 2, 4, ... until one fits; then bisects the gap. Fitting must be monotone in
    N (more layers never need less memory). From start 1 that is the exponential search
    1, 2, 4, 8, ...; from a good guess it takes a few probes either side of it.
    """
    if cap < 1:
        raise ValueError(f"cap must be >= 1, got {cap}")
    start = min(max(start, 1), cap)
    probes: list[Probe] = []

    def fits(n: int) -> bool:
        p = try_n(n)
        probes.append(p)
        if on_probe is not None:
            on_probe(p)
        return p.fits

    lo, hi = 0, cap + 1  # largest known fit (0: none), smallest known miss
    step = 1
    if fits(start):
        lo = start
        while lo < cap:
            n = min(lo + step, cap)
            if not fits(n):
                hi = n
                break
            lo, step = n, step * 2
    else:
        hi = start
        while hi > 1:
            n = max(hi - step, 1)
            if fits(n):
                lo = n
                break
            hi, step = n, step * 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid
    return SearchResult(lo, tuple(probes), cap, start)


@contextlib.contextmanager
def backend_for(case: FitCase) -> Iterator[FitBackend]:
    """The case's backend, closed (budget lifted) afterwards."""
    if case.device == "cpu":
        assert case.budget_bytes is not None
        yield SimulatedBackend(case.memory_model, case.mode, case.budget_bytes)
        return
    backend = CudaBackend(case.memory_model, case.mode, "cuda:0", case.budget_bytes)
    try:
        yield backend
    finally:
        backend.close()


def run_search(
    case: FitCase, backend: FitBackend, on_probe: Callable[[Probe], object] | None = None
) -> dict[str, Any]:
    """Search the case's frontier on ``backend``; the result with prediction and error."""
    model = case.memory_model
    backend.release()  # cached blocks (the warm-up's) are room a probe can use
    headroom = backend.headroom()
    predicted = model.frontier(case.fc, headroom, case.mode, case.cap)
    start = predicted if case.start == "model" else 1

    def try_n(n: int) -> Probe:
        return probe(backend, n, case.fc, model.predict(n, case.fc, case.mode).total)

    result = search_frontier(try_n, case.cap, max(start, 1), on_probe)
    measured = result.max_n
    return {
        **result.as_dict(),
        "predicted_max_n": predicted,
        "error_layers": predicted - measured,
        "error_fraction": None if measured == 0 else (predicted - measured) / measured,
        "headroom_bytes": headroom,
        "backend": backend.label,
        "emulated": backend.emulated,
        "budget": case.budget,
        "mode": case.mode,
        "fc": case.fc,
        "terms_at_frontier": model.predict(max(measured, 1), case.fc, case.mode).as_dict(),
        "within_bound": len(result.probes) <= result.bound,
    }


def search_case(case: FitCase, isolate: bool | None = None) -> dict[str, Any]:
    """:func:`run_search` of ``case``; on a GPU (or with ``isolate``) in a fresh process.

    A GPU search runs out of memory on purpose, and a process remembers that: see
    :func:`~gpugauge.launch.fresh.in_fresh_process`. ``seconds`` says where its wall time
    went: the whole call, and in the process that searched, CUDA's start, the backend's
    (its warm-up step) and the search's; the process's own start is what the whole call
    adds to them.
    """
    t0 = time.perf_counter()
    fresh = case.device != "cpu" if isolate is None else isolate
    what = f"{case.id}: the search"
    result = in_fresh_process(what, _search, case) if fresh else _search(case)
    result["seconds"] |= {"whole": time.perf_counter() - t0, "fresh_process": fresh}
    return result


def _search(case: FitCase) -> dict[str, Any]:
    t0 = time.perf_counter()
    if case.device != "cpu":
        torch.cuda.init()
    t1 = time.perf_counter()
    with backend_for(case) as backend:
        t2 = time.perf_counter()
        result = run_search(case, backend)
    t3 = time.perf_counter()
    return {**result, "seconds": {"cuda_start": t1 - t0, "backend": t2 - t1, "search": t3 - t2}}


def seconds_line(result: dict[str, Any]) -> str:
    """Where a search's wall time went, s: 'seconds: 8.1 in all: process start 3.2, ...'.

    The probes' own seconds against the search's show what building and freeing between
    them cost; a result from before the breakdown says ''.
    """
    took = result.get("seconds")
    if not isinstance(took, dict) or "whole" not in took:
        return ""
    probes = sum(p["wall_s"] for p in result["probes"])
    inside = took["cuda_start"] + took["backend"] + took["search"]
    start = f"process start {took['whole'] - inside:.1f}, " if took["fresh_process"] else ""
    return (
        f"seconds: {took['whole']:.1f} in all: {start}CUDA start {took['cuda_start']:.1f}, "
        f"backend warm-up {took['backend']:.1f}, probes {probes:.1f}, between probes "
        f"{took['search'] - probes:.1f}"
    )
