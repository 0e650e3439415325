"""Device or host work of a given length, added on purpose to a timed round.

``gpugauge check``'s injected slowdown (:mod:`gpugauge.check.slowdown`) adds it inside the
pytest process; a process the test launches (a torchrun rank) reads what to add from
``$GPUGAUGE_INJECT_SLOWDOWN`` (a fraction of its own step's median) and
``$GPUGAUGE_INJECT_SLOWDOWN_MS`` (:func:`injected_ms`), so that a slowdown is injected on
every rank. No pytest here:
the ranks import it.
"""

from __future__ import annotations

import contextlib
import ctypes
import math
import os
import time
from collections.abc import Callable, Iterator
from typing import Any

INJECT_ENV = "GPUGAUGE_INJECT_SLOWDOWN"  # a fraction of the step's own median
INJECT_MS_ENV = "GPUGAUGE_INJECT_SLOWDOWN_MS"  # and/or a fixed length, ms
COPY_BYTES = 64 * 2**20  # beyond L2 (50 MiB on H100/H200): each copy runs at HBM bandwidth


def _env_number(name: str, what: str) -> float:
    """A finite number >= 0 from ``$name``; 0 when unset; ValueError naming it otherwise."""
    text = os.environ.get(name, "").strip()
    if not text:
        return 0.0
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value >= 0):
        raise ValueError(f"${name}={text!r}: give {what}")
    return value


def injected_fraction() -> float:
    """The fraction of a step's median to add to it, from the environment; 0 when unset."""
    return _env_number(INJECT_ENV, "a fraction >= 0 (0.03 = 3%)")


def injection_asked() -> bool:
    """Whether the environment asks a rank to add work to its steps."""
    return injected_ms(1.0) > 0


def injected_ms(median_ms: float) -> float:
    """What a rank adds to a step whose median is ``median_ms``: fraction plus fixed, ms."""
    return injected_fraction() * median_ms + _env_number(INJECT_MS_ENV, "milliseconds >= 0")


@contextlib.contextmanager
def delay_for(ms: float, device: str) -> Iterator[Callable[[], None]]:
    """``ms`` of added work on ``device``: device work on a GPU, a host spin on a CPU.

    The device work's buffers are freed on exit, never by the garbage collector, whose
    free (a device synchronize) could land inside another case's timed round.
    """
    if not device.startswith("cuda"):
        yield host_spin(ms)
        return
    delay = GpuDelay(ms, device)
    try:
        yield delay
    finally:
        delay.close()


class GpuDelay:
    """Device work of ``ms`` on ``device`` that draws power as real work does; call per round.

    A spin kernel alone (``torch.cuda._sleep``) keeps one thread busy and draws almost no
    power, so on a GPU at its power limit the clock recovers during it and the case's own
    kernels run faster: 3% injected that way measured 1.7-2.1% on VGG-16 fp32 inference
    (docs/check.md). Copies of a 64 MiB buffer are bound by memory bandwidth, so their
    length follows the memory clock (fixed under the power limit), not the SM clock that
    the limit moves, and the count calibrated here holds while the case runs. The
    remainder below one copy (about 35 µs on an H200) is a spin. The copies also evict L2:
    the layers family flushes L2 before every round anyway and VGG-16's working set is far
    beyond L2, so for the suite's cases this adds nothing measurable (3% injected read
    1.027-1.028x); a case whose data lives in L2 would see more than was injected.

    The two buffers come from the CUDA driver (:class:`DriverBuffers`), not from PyTorch's
    caching allocator, so the injected work takes nothing from a case's memory budget.
    :meth:`close` frees them (:func:`delay_for` does).
    """

    def __init__(self, ms: float, device: str = "cuda") -> None:
        import torch

        self._torch = torch
        self.device = torch.device(device)
        with torch.cuda.device(self.device):
            torch.cuda.synchronize(self.device)  # the primary context is current here
            self._buffers: DriverBuffers | None = DriverBuffers(COPY_BYTES)
            try:
                self.copies, self.spin = self._calibrate(ms)
            except BaseException:
                self.close()
                raise

    def _copy(self) -> None:
        assert self._buffers is not None
        self._buffers.copy(self._torch.cuda.current_stream(self.device).cuda_stream)

    def _calibrate(self, ms: float) -> tuple[int, int]:
        """(copies, spin cycles) that add up to ``ms`` on this device."""
        cuda = self._torch.cuda
        start = cuda.Event(enable_timing=True)
        stop = cuda.Event(enable_timing=True)
        for _ in range(3):
            self._copy()
        start.record()
        for _ in range(20):
            self._copy()
        stop.record()
        stop.synchronize()
        per_copy_ms = start.elapsed_time(stop) / 20
        copies = int(ms // per_copy_ms)
        cycles = 10_000_000
        cuda._sleep(cycles)  # warm-up
        start.record()
        cuda._sleep(cycles)
        stop.record()
        stop.synchronize()
        return copies, int(cycles * (ms - copies * per_copy_ms) / start.elapsed_time(stop))

    def __call__(self) -> None:
        """Queue the work on the device's current stream, after what is queued there."""
        if self._buffers is None:
            raise RuntimeError("this injected delay was closed: its buffers are freed")
        with self._torch.cuda.device(self.device):
            for _ in range(self.copies):
                self._copy()
            if self.spin > 0:
                self._torch.cuda._sleep(self.spin)

    def close(self) -> None:
        """Free the buffers once the work queued on them is done; safe to call twice."""
        buffers, self._buffers = self._buffers, None
        if buffers is not None:
            with self._torch.cuda.device(self.device):
                buffers.free()


class DriverBuffers:
    """Two device buffers of ``nbytes`` from the CUDA driver API, outside PyTorch's allocator.

    Why: a case with a memory budget caps PyTorch's caching allocator
    (``set_per_process_memory_fraction``) and layer_fit fits its model to within one block of
    the cap, so injected work whose buffers came from the allocator ran that case out of memory.
    The cap does not count the driver's own allocations. Made in the context current on this
    thread, which :meth:`free` makes current again while it frees them.
    """

    def __init__(self, nbytes: int, cuda: Any = None) -> None:
        self.nbytes = nbytes
        self._cuda = cuda or ctypes.CDLL("nvcuda.dll" if os.name == "nt" else "libcuda.so.1")
        self._ctx = ctypes.c_void_p()
        self._check("cuCtxGetCurrent", self._cuda.cuCtxGetCurrent(ctypes.byref(self._ctx)))
        if not self._ctx.value:
            raise RuntimeError("no CUDA context is current on this thread: use the device first")
        self._ptrs: list[int] = []
        try:
            for _ in range(2):
                ptr = ctypes.c_uint64()
                size = ctypes.c_size_t(nbytes)
                self._check("cuMemAlloc", self._cuda.cuMemAlloc_v2(ctypes.byref(ptr), size))
                self._ptrs.append(ptr.value)
        except BaseException:
            self.free()
            raise

    def _check(self, call: str, result: int) -> None:
        """RuntimeError naming the driver call and its error; nothing for CUDA_SUCCESS."""
        if result:
            name = ctypes.c_char_p()
            self._cuda.cuGetErrorName(result, ctypes.byref(name))
            what = name.value.decode() if name.value else f"error {result}"
            size = f" of {self.nbytes} bytes" if call == "cuMemAlloc" else ""
            raise RuntimeError(f"CUDA driver call {call}{size} failed: {what}")

    def copy(self, stream: int) -> None:
        """Copy the first buffer to the second on ``stream`` (a ``cudaStream_t`` as int)."""
        src, dst = self._ptrs
        self._check(
            "cuMemcpyDtoDAsync",
            self._cuda.cuMemcpyDtoDAsync_v2(
                ctypes.c_uint64(dst),
                ctypes.c_uint64(src),
                ctypes.c_size_t(self.nbytes),
                ctypes.c_void_p(stream),
            ),
        )

    def free(self) -> None:
        """Give the buffers back after the work queued in their context; safe to call twice."""
        if not self._ptrs:
            return
        self._check("cuCtxPushCurrent", self._cuda.cuCtxPushCurrent_v2(self._ctx))
        try:
            self._check("cuCtxSynchronize", self._cuda.cuCtxSynchronize())
            while self._ptrs:
                self._check("cuMemFree", self._cuda.cuMemFree_v2(ctypes.c_uint64(self._ptrs[-1])))
                self._ptrs.pop()
        finally:
            popped = ctypes.c_void_p()
            self._cuda.cuCtxPopCurrent_v2(ctypes.byref(popped))


def host_spin(ms: float, now: Callable[[], float] = time.thread_time) -> Callable[[], None]:
    """Host work of ``ms``: a busy loop on ``now`` (seconds), the thread's CPU time.

    CPU time, not wall time: a CPU case's rounds leave out the time its thread waited for a
    core (:class:`~gpugauge.measure.clocks.RunQueueClock`), and a spin on a wall clock that
    other processes preempt would add less than ``ms`` to them; on any clock this adds ``ms``
    or more.
    """
    seconds = ms / 1e3

    def delay() -> None:
        end = now() + seconds
        while now() < end:
            pass

    return delay
