"""A pytest plugin that makes every round timed by ``gauge.measure`` slower, on purpose.

It proves that the gate fails a real slowdown: ``gpugauge check gate`` loads it for its
injected run. Load it explicitly; it changes nothing unless one of its options is given:

    python -m pytest benches --gate -p gpugauge.check.slowdown --inject-slowdown 0.03
    python -m pytest benches -k vgg_swap -p gpugauge.check.slowdown --inject-slowdown-ms 5

``--inject-slowdown F`` adds F times the case's own baseline median to every timed round
(0.03: 3% for every case, long or short; needs ``--gate`` for the baselines);
``--inject-slowdown-ms MS`` adds a fixed time. The added work runs inside the timed
round, after the case's own work, on the stream the case ran on. Each result records what
was added in ``extra["injected_slowdown_ms"]``.

On a GPU the added work is sized once per case (see :func:`gpu_delay`): copies of a
buffer beyond L2, then a spin kernel for the remainder. On a CPU it is a host spin (a busy
loop on ``perf_counter``: a sleep wakes up a scheduler tick late on a loaded host).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import pytest

from gpugauge.gauge import Gauge
from gpugauge.history.capture import INJECTED_KEY
from gpugauge.measure.environment import device_class
from gpugauge.results.measurement import devices_of

COPY_BYTES = 64 * 2**20  # beyond L2 (50 MiB on H100/H200): each copy runs at HBM bandwidth


def _non_negative(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number >= 0") from None
    if not value >= 0:  # also rejects nan
        raise argparse.ArgumentTypeError(f"{text!r} is not a number >= 0")
    return value


def pytest_addoption(parser: pytest.Parser) -> None:
    """The injection's options, in the ``gpugauge check`` group."""
    group = parser.getgroup("gpugauge-check", "gpugauge check")
    group.addoption(
        "--inject-slowdown",
        type=_non_negative,
        default=0.0,
        metavar="FRACTION",
        help="add this fraction of each case's baseline median to every timed round, as "
        "device work (0.03 = 3%%; needs --gate)",
    )
    group.addoption(
        "--inject-slowdown-ms",
        type=_non_negative,
        default=0.0,
        metavar="MS",
        help="add this many milliseconds to every timed round, as device work",
    )


def pytest_configure(config: pytest.Config) -> None:
    """A fraction of the baseline needs the baselines: say so before any case runs."""
    if config.getoption("inject_slowdown") and not config.getoption("gate"):
        raise pytest.UsageError(
            "--inject-slowdown is a fraction of each case's baseline median: add --gate "
            "(or use --inject-slowdown-ms)"
        )


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


def baseline_median_ms(gauge: Gauge, spec: Any) -> float | None:
    """The median time of ``spec``'s stored baseline, ms; None without --gate or a baseline."""
    gate = gauge.session.gate
    if gate is None:
        return None
    stored = gate.store.load(device_class(devices_of(spec)), spec.family) or {}
    entry = stored.get(spec.id)
    times = entry.readings.get("time") if entry else None
    return statistics.median(times) if times else None


def slowed_measure(
    measure: Callable[..., Any], fixed_ms: float, fraction: float
) -> Callable[..., Any]:
    """``Gauge.measure`` with the injected work added to the end of every round."""

    def slowed(self: Gauge, spec: Any, fn: Callable[[], object], **kw: Any) -> Any:
        if isinstance(spec, str):  # an id: the test's own spec, as gauge.measure makes it
            spec = self.call_spec(id=spec)
        ms = fixed_ms
        if fraction:
            base = baseline_median_ms(self, spec)
            if base is None:
                pytest.fail(
                    f"--inject-slowdown: no baseline median for {spec.id} in "
                    f"{self.options.baselines_dir} (its device class has no baseline of it)",
                    pytrace=False,
                )
            ms += fraction * base
        device = devices_of(spec)[0]
        delay = gpu_delay(ms, device) if device.startswith("cuda") else host_spin(ms)

        def slower() -> object:
            out = fn()
            delay()
            return out

        kw["extra"] = {**(kw.get("extra") or {}), INJECTED_KEY: ms}
        return measure(self, spec, slower, **kw)

    return slowed


@pytest.fixture(autouse=True)
def _inject_slowdown(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """While a test runs, ``Gauge.measure`` adds the injected work (restored afterwards)."""
    fixed = request.config.getoption("inject_slowdown_ms")
    fraction = request.config.getoption("inject_slowdown")
    if fixed or fraction:
        monkeypatch.setattr(Gauge, "measure", slowed_measure(Gauge.measure, fixed, fraction))
