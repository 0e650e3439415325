"""Test-only pytest plugin: make every gauge-timed round slower by a fixed time.

It proves that the gate fails a real slowdown. Load it explicitly, it is no product option:

    python3 -m pytest benches -k vgg_swap --gate -p tests.slowdown --slowdown-ms 5

On a GPU the delay is ``torch.cuda._sleep`` (device time inside the timed region,
calibrated once); on a CPU it is ``time.sleep``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from gpugauge.gauge import Gauge


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--slowdown-ms",
        type=float,
        default=0.0,
        help="(test only) add this many ms to every timed round",
    )


def _gpu_delay(ms: float) -> Callable[[], None]:
    import torch

    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    cycles = 10_000_000
    torch.cuda._sleep(cycles)  # warm-up
    start.record()
    torch.cuda._sleep(cycles)
    stop.record()
    stop.synchronize()
    need = int(cycles * ms / start.elapsed_time(stop))
    return lambda: torch.cuda._sleep(need)


@pytest.fixture(autouse=True)
def _slow_every_round(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    ms = request.config.getoption("slowdown_ms")
    if ms:
        measure = Gauge.measure

        def slowed(self: Gauge, spec: Any, fn: Callable[[], object], **kw: Any) -> Any:
            delay = (
                _gpu_delay(ms) if spec.device.startswith("cuda") else lambda: time.sleep(ms / 1e3)
            )

            def slower() -> object:
                out = fn()
                delay()
                return out

            return measure(self, spec, slower, **kw)

        monkeypatch.setattr(Gauge, "measure", slowed)
