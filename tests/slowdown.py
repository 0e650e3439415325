"""Test-only pytest plugin: make every gauge-timed round slower, as device time.

It proves that the gate fails a real slowdown. Load it explicitly, it is no product option:

    python3 -m pytest benches -k vgg_swap --gate -p tests.slowdown --slowdown-ms 5
    python3 -m pytest benches --gate -p tests.slowdown --slowdown-frac 0.03

``--slowdown-ms`` adds a fixed time to every round; ``--slowdown-frac`` adds that fraction
of the case's own baseline median (so a 3% slowdown is 3% for every case; needs --gate).
On a GPU the delay is device time inside the timed region, calibrated once per case:
copies of a buffer beyond L2 (memory-bound, drawing power like real work), the remainder a
spin kernel (see ``_gpu_delay``); on a CPU it is ``time.sleep``.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import pytest

from gpugauge.gauge import Gauge
from gpugauge.measure.environment import device_class
from gpugauge.results.measurement import devices_of


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--slowdown-ms",
        type=float,
        default=0.0,
        help="(test only) add this many ms to every timed round",
    )
    parser.addoption(
        "--slowdown-frac",
        type=float,
        default=0.0,
        help="(test only) add this fraction of the case's baseline median to every round",
    )


COPY_BYTES = 64 * 2**20  # beyond L2 (50 MiB on H100/H200): each copy runs at HBM bandwidth


def _gpu_delay(ms: float) -> Callable[[], None]:
    """Device work of ``ms`` that draws power as real work does: copies, then a spin.

    A spin kernel alone (``torch.cuda._sleep``) keeps one thread busy and draws almost no
    power, so on a GPU at its power limit the clock recovers during it and the case's own
    kernels run faster: 3% injected that way measured 1.7-2.1% on VGG-16 fp32 inference.
    Copies of a 64 MiB buffer are bound by memory bandwidth, so their length follows the
    memory clock (fixed under the power limit), not the SM clock that the limit moves, and
    the count calibrated here holds while the case runs. The remainder below one copy
    (about 35 µs on an H200) is a spin. The copies also evict L2; the layers family
    flushes L2 before every round anyway, and VGG-16's working set is far beyond L2, so
    for the suite's cases this adds nothing measurable (cases of 1.2 ms and more, which get
    copies at 3%, read 1.025-1.035x on an H200, run 24); a case whose data lives in L2
    would see more than was injected.
    """
    import torch

    src = torch.empty(COPY_BYTES // 4, device="cuda")
    dst = torch.empty_like(src)
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
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
            torch.cuda._sleep(spin)

    return delay


def _baseline_median_ms(gauge: Gauge, spec: Any) -> float | None:
    gate = gauge.session.gate
    if gate is None:
        return None
    stored = gate.store.load(device_class(devices_of(spec)), spec.family) or {}
    entry = stored.get(spec.id)
    times = entry.readings.get("time") if entry else None
    return statistics.median(times) if times else None


@pytest.fixture(autouse=True)
def _slow_every_round(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    fixed = request.config.getoption("slowdown_ms")
    frac = request.config.getoption("slowdown_frac")
    if fixed or frac:
        measure = Gauge.measure

        def slowed(self: Gauge, spec: Any, fn: Callable[[], object], **kw: Any) -> Any:
            ms = fixed
            if frac:
                base = _baseline_median_ms(self, spec)
                if base is None:
                    pytest.fail(f"--slowdown-frac: no baseline median for {spec.id}")
                ms += frac * base
            on_gpu = spec.device.startswith("cuda")
            delay = _gpu_delay(ms) if on_gpu else (lambda: time.sleep(ms / 1e3))

            def slower() -> object:
                out = fn()
                delay()
                return out

            return measure(self, spec, slower, **kw)

        monkeypatch.setattr(Gauge, "measure", slowed)
