"""Device or host work of a given length, added on purpose to a timed round.

``gpugauge check``'s injected slowdown (:mod:`gpugauge.check.slowdown`) adds it inside the
pytest process; a process the test launches (a torchrun rank) reads what to add from
``$GPUGAUGE_INJECT_SLOWDOWN`` (a fraction of its own step's median) and
``$GPUGAUGE_INJECT_SLOWDOWN_MS`` (:func:`injected_ms`), so that a slowdown is injected on
every rank. No pytest here:
the ranks import it.
"""

from __future__ import annotations

import ctypes
import math
import os
import time
import weakref
from collections.abc import Callable

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


def injected_ms(median_ms: float) -> float:
    """What a rank adds to a step whose median is ``median_ms``: fraction plus fixed, ms."""
    return injected_fraction() * median_ms + _env_number(INJECT_MS_ENV, "milliseconds >= 0")


def delay_for(ms: float, device: str) -> Callable[[], None]:
    """``ms`` of added work on ``device``: device work on a GPU, a host spin on a CPU."""
    return gpu_delay(ms, device) if device.startswith("cuda") else host_spin(ms)


def gpu_delay(ms: float, device: str = "cuda") -> Callable[[], None]:
    """Device work of ``ms`` on ``device`` that draws power as real work does.

    A spin kernel alone (``torch.cuda._sleep``) keeps one thread busy and draws almost no
    power, so on a GPU at its power limit the clock recovers during it and the case's own
    kernels run faster: 3% injected that way measured 1.7-2.1% on VGG-16 fp32 inference
    (docs/gpu-runs.md, run 12). Copies of a 64 MiB buffer are bound by memory bandwidth,
    so their length follows the memory clock (fixed under the power limit), not the SM
    clock that the limit moves, and the count calibrated here holds while the case runs.
    The remainder below one copy (about 35 µs on an H200) is a spin. The copies also evict
    L2: the layers family flushes L2 before every round anyway and VGG-16's working set is
    far beyond L2, so for the suite's cases this adds nothing measurable (runs 24, 49, 52);
    a case whose data lives in L2 would see more than was injected.

    The two buffers come from the CUDA driver (:class:`DriverBuffers`), not from PyTorch's
    caching allocator, so the injected work takes nothing from a case's memory budget.
    """
    import torch

    dev = torch.device(device)
    with torch.cuda.device(dev):
        torch.cuda.synchronize(dev)  # the device's primary context is current on this thread
        buffers = DriverBuffers(COPY_BYTES)

        def copy() -> None:
            buffers.copy(torch.cuda.current_stream(dev).cuda_stream)

        start = torch.cuda.Event(enable_timing=True)
        stop = torch.cuda.Event(enable_timing=True)
        for _ in range(3):
            copy()
        start.record()
        for _ in range(20):
            copy()
        stop.record()
        stop.synchronize()
        per_copy_ms = start.elapsed_time(stop) / 20
        copies = int(ms // per_copy_ms)
        cycles = 10_000_000
        torch.cuda._sleep(cycles)  # warm-up
        start.record()
        torch.cuda._sleep(cycles)
        stop.record()
        stop.synchronize()
        spin = int(cycles * (ms - copies * per_copy_ms) / start.elapsed_time(stop))

    def delay() -> None:
        for _ in range(copies):
            copy()
        if spin > 0:
            with torch.cuda.device(dev):
                torch.cuda._sleep(spin)

    weakref.finalize(delay, buffers.free)
    return delay


class DriverBuffers:
    """Two device buffers of ``nbytes`` from the CUDA driver API, outside PyTorch's allocator.

    Why: a case with a memory budget caps PyTorch's caching allocator
    (``set_per_process_memory_fraction``) and layer_fit fits its model to within one block
    of the cap, so injected work whose buffers came from the allocator ran that case out
    of memory (docs/gpu-runs.md, run 65). The cap does not count the driver's own
    allocations. Made on the current device (its context current on this thread).
    """

    def __init__(self, nbytes: int) -> None:
        self.nbytes = nbytes
        self._cuda = ctypes.CDLL("nvcuda.dll" if os.name == "nt" else "libcuda.so.1")
        self._ptrs: list[int] = []
        try:
            for _ in range(2):
                ptr = ctypes.c_uint64()
                self._check(self._cuda.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(nbytes)))
                self._ptrs.append(ptr.value)
        except BaseException:
            self.free()
            raise

    def _check(self, result: int) -> None:
        if result:
            name = ctypes.c_char_p()
            self._cuda.cuGetErrorName(result, ctypes.byref(name))
            what = name.value.decode() if name.value else f"error {result}"
            raise RuntimeError(f"CUDA driver call failed: {what} ({self.nbytes} bytes a buffer)")

    def copy(self, stream: int) -> None:
        """Copy the first buffer to the second on ``stream`` (a ``cudaStream_t`` as int)."""
        src, dst = self._ptrs
        self._check(
            self._cuda.cuMemcpyDtoDAsync_v2(
                ctypes.c_uint64(dst),
                ctypes.c_uint64(src),
                ctypes.c_size_t(self.nbytes),
                ctypes.c_void_p(stream),
            )
        )

    def free(self) -> None:
        """Give the buffers back (after the work queued on them); safe to call twice."""
        while self._ptrs:
            ptr = self._ptrs.pop()
            self._cuda.cuCtxSynchronize()
            self._cuda.cuMemFree_v2(ctypes.c_uint64(ptr))


def host_spin(ms: float, now: Callable[[], float] = time.perf_counter) -> Callable[[], None]:
    """Host work of ``ms``: a busy loop on ``now`` (seconds)."""
    seconds = ms / 1e3

    def delay() -> None:
        end = now() + seconds
        while now() < end:
            pass

    return delay
