"""One probe of the frontier search: run (N, M) once on a backend and survive running out.

:func:`probe` runs one (N, M) on a :class:`FitBackend`, survives an out-of-memory error,
frees everything, and checks that allocated memory is back at its starting value.
"""

from __future__ import annotations

import gc
import time
from dataclasses import asdict, dataclass
from typing import Any, Protocol

import torch


@dataclass(frozen=True)
class Probe:
    """One tried (N, M): whether it fit, its peaks above the start (bytes) and its time."""

    n: int
    m: int
    fits: bool
    peak_allocated_bytes: int
    peak_reserved_bytes: int
    step_ms: float | None  # the last step, device-timed; None for an OOM or a simulation
    wall_s: float  # the whole probe: build, steps, cleanup
    predicted_bytes: int
    error: str | None = None

    def as_dict(self) -> dict[str, Any]:
        """Plain dict for JSON."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Probe:
        """Read back :meth:`as_dict`."""
        return cls(**data)


class MemoryNotReleased(RuntimeError):
    """A probe left memory allocated: the next probe would see a smaller budget."""


class FitBackend(Protocol):
    """Where probes run: a real device, or the simulated allocator."""

    label: str
    emulated: bool

    def headroom(self) -> int:
        """Bytes a probe may still take before the budget stops it."""

    def allocated(self) -> int:
        """Bytes allocated now."""

    def reserved(self) -> int:
        """Bytes reserved by the allocator now."""

    def reset_peak(self) -> None:
        """Start a new peak window."""

    def peaks(self) -> tuple[int, int]:
        """(peak allocated, peak reserved) since :meth:`reset_peak`, absolute bytes."""

    def release(self) -> None:
        """Return cached blocks (``empty_cache``)."""

    def run(self, n: int, m: int) -> float | None:
        """Build and run (N, M); the last step's ms. Raises torch.OutOfMemoryError."""


_LIBRARY_OOM = ("CUBLAS_STATUS_ALLOC_FAILED", "CUDNN_STATUS_ALLOC_FAILED", "out of memory")


def _is_oom(err: BaseException) -> bool:
    """The caching allocator's OOM, or a CUDA library's allocation failure."""
    if isinstance(err, torch.OutOfMemoryError):
        return True
    return isinstance(err, RuntimeError) and any(s in str(err) for s in _LIBRARY_OOM)


def probe(backend: FitBackend, n: int, m: int, predicted: int) -> Probe:
    """Run (N, M) once; an out-of-memory error is a result, not a failure.

    Everything the run made is local to it, so once the error (and its traceback, which
    holds the run's frames) is dropped, it is all freed, and ``empty_cache`` returns the
    cached blocks; if anything is still allocated, a garbage collection (for reference
    cycles) comes first. Allocated memory must then equal its starting value, or
    MemoryNotReleased.
    """
    backend.release()
    start, start_reserved = backend.allocated(), backend.reserved()
    backend.reset_peak()
    t0 = time.perf_counter()
    step_ms: float | None = None
    error: str | None = None
    try:
        step_ms = backend.run(n, m)
    except (torch.OutOfMemoryError, RuntimeError) as err:
        if not _is_oom(err):
            raise
        error = (str(err).strip().splitlines() or [type(err).__name__])[0][:240]
    peak_alloc, peak_reserved = backend.peaks()
    backend.release()
    if backend.allocated() != start:  # reference cycles: collect them, then look again
        gc.collect()
        backend.release()
    wall = time.perf_counter() - t0
    left = backend.allocated() - start
    if left:
        raise MemoryNotReleased(
            f"probe N={n} M={m} ({'OOM' if error else 'fit'}) left {left} bytes allocated "
            f"({backend.allocated()} now, {start} before)"
        )
    return Probe(
        n,
        m,
        error is None,
        peak_alloc - start,
        peak_reserved - start_reserved,
        step_ms,
        wall,
        predicted,
        error,
    )
