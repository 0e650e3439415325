"""Device or host work of a given length, added on purpose to a timed round.

``gpugauge check``'s injected slowdown (:mod:`gpugauge.check.slowdown`) adds it inside the
pytest process; a process the test launches (a torchrun rank) reads what to add from
``$GPUGAUGE_INJECT_SLOWDOWN`` (a fraction of its own step's median) and
``$GPUGAUGE_INJECT_SLOWDOWN_MS`` (:func:`injected_ms`), so that a slowdown is injected on
every rank. No pytest here:
the ranks import it.
"""

from __future__ import annotations

import math
import os
import time
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
    """
    import torch

    dev = torch.device(device)
    with torch.cuda.device(dev):
        src = torch.empty(COPY_BYTES // 4, device=dev)
        dst = torch.empty_like(src)
        start = torch.cuda.Event(enable_timing=True)
        stop = torch.cuda.Event(enable_timing=True)
        for _ in range(3):
            dst.copy_(src)
        start.record()
        for _ in range(20):
            dst.copy_(src)
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
            dst.copy_(src)
        if spin > 0:
            with torch.cuda.device(dev):
                torch.cuda._sleep(spin)

    return delay


def host_spin(ms: float, now: Callable[[], float] = time.perf_counter) -> Callable[[], None]:
    """Host work of ``ms``: a busy loop on ``now`` (seconds)."""
    seconds = ms / 1e3

    def delay() -> None:
        end = now() + seconds
        while now() < end:
            pass

    return delay
