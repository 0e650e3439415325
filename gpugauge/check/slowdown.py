"""A pytest plugin that makes every round timed by ``gauge.measure`` slower, on purpose.

It proves that the gate fails a real slowdown: ``gpugauge check gate`` loads it for its
injected run. Load it explicitly; it changes nothing unless one of its options is given:

    python -m pytest benches --gauge-gate -p gpugauge.check.slowdown --gauge-inject-slowdown 0.03
    python -m pytest benches -k vgg_swap -p gpugauge.check.slowdown --gauge-inject-slowdown-ms 5

``--gauge-inject-slowdown F`` adds F times the case's own baseline median to every timed round
(0.03: 3% for every case, long or short; read from ``--gauge-baselines-dir``, gated or not, so
that one side of a ``gpugauge ab`` can be slowed);
``--gauge-inject-slowdown-ms MS`` adds a fixed time. The added work runs inside the timed
round, after the case's own work, on the stream the case ran on. Each result records what
was added in ``extra["injected_slowdown_ms"]``.

On a GPU the added work is sized once per case (:class:`~gpugauge.check.delay.GpuDelay`):
copies of a buffer beyond L2, then a spin kernel for the remainder, freed when the case's
measurement ends. On a CPU it is a host spin (a busy loop on the thread's CPU time: a sleep
wakes up a scheduler tick late on a loaded host, and CPU rounds leave out preemption).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any

import pytest

from gpugauge.check.delay import INJECT_ENV, INJECT_MS_ENV, delay_for
from gpugauge.core.arguments import number
from gpugauge.measure.environment import device_class
from gpugauge.regress.baselines import BaselineStore
from gpugauge.results.measurement import INJECTED_KEY, devices_of
from gpugauge.runtime.gauge import Gauge

MOST_FRACTION = 10.0  # an injected fraction of the baseline median: up to an 11x step
MOST_MS = 60_000.0  # an injected time per timed round, ms: a minute
slowdown_fraction = number(
    float,
    0,
    f"a fraction >= 0 of the baseline median (at most {MOST_FRACTION:g})",
    high=MOST_FRACTION,
)
slowdown_ms = number(float, 0, f"a number of ms >= 0 (at most {MOST_MS:g})", high=MOST_MS)


def pytest_addoption(parser: pytest.Parser) -> None:
    """The injection's options, in the ``gpugauge check`` group."""
    group = parser.getgroup("gpugauge-check", "gpugauge check")
    group.addoption(
        "--gauge-inject-slowdown",
        type=slowdown_fraction,
        default=0.0,
        metavar="FRACTION",
        help="add this fraction of each case's baseline median (from --gauge-baselines-dir) to "
        "every timed round, as device work (0.03 = 3%%)",
    )
    group.addoption(
        "--gauge-inject-slowdown-own",
        action="store_true",
        default=False,
        help="with --gauge-inject-slowdown: a case with no baseline gets the fraction of its own "
        "median, timed just before it (else it fails)",
    )
    group.addoption(
        "--gauge-inject-slowdown-ms",
        type=slowdown_ms,
        default=0.0,
        metavar="MS",
        help="add this many milliseconds to every timed round, as device work",
    )


def pytest_configure(config: pytest.Config) -> None:
    """Refuse ``--gauge-inject-slowdown-own`` alone: it changes nothing without a fraction."""
    own = config.getoption("gauge_inject_slowdown_own")
    if own and not config.getoption("gauge_inject_slowdown"):
        raise pytest.UsageError(
            "--gauge-inject-slowdown-own needs --gauge-inject-slowdown FRACTION above 0: "
            "alone it injects nothing"
        )


def baseline_median_ms(gauge: Gauge, spec: Any) -> float | None:
    """The median time of ``spec``'s stored baseline, ms; None without a baseline of it."""
    gate = gauge.session.gate
    store = gate.store if gate is not None else BaselineStore(gauge.options.baselines_dir)
    stored = store.load(device_class(devices_of(spec)), spec.family) or {}
    entry = stored.get(spec.id)
    times = entry.readings.get("time") if entry else None
    return statistics.median(times) if times else None


OWN_ROUNDS = 20


def own_median_ms(
    fn: Callable[[], object], devices: tuple[str, ...], setup: Callable[[], object] | None
) -> float:
    """The case's own median, ms: a few rounds with the suite's timer, before the case's own.

    Taken in the first moments of work (a boost clock on a power-capped GPU), so it may lie
    a little under the sustained median: the injection is then a little under its fraction.
    """
    from gpugauge.measure.timing import TimingPolicy, measure
    from gpugauge.runtime.pipeline import clock_for

    policy = TimingPolicy(warmup_rounds=3, rounds=OWN_ROUNDS)
    return measure(fn, policy, clock_for(devices), between=setup).summary.median


def slowed_measure(
    measure: Callable[..., Any], fixed_ms: float, fraction: float, own: bool = False
) -> Callable[..., Any]:
    """``Gauge.measure`` with the injected work added to the end of every round."""

    def slowed(self: Gauge, spec: Any, fn: Callable[[], object], **kw: Any) -> Any:
        if isinstance(spec, str):  # an id: the test's own spec, as gauge.measure makes it
            spec = self.call_spec(id=spec)
        ms = fixed_ms
        if fraction:
            base = baseline_median_ms(self, spec)
            if base is None and not own:
                pytest.fail(
                    f"--gauge-inject-slowdown: no baseline median for {spec.id} in "
                    f"{self.options.baselines_dir} (its device class has no baseline of it; "
                    "--gauge-inject-slowdown-own sizes it from the case's own median instead)",
                    pytrace=False,
                )
            if base is None:
                base = own_median_ms(fn, devices_of(spec), kw.get("setup"))
            ms += fraction * base
        kw["extra"] = {**(kw.get("extra") or {}), INJECTED_KEY: ms}
        # the re-measurement of a regression is taken inside ``measure``, with this delay
        with delay_for(ms, devices_of(spec)[0]) as delay:

            def slower() -> object:
                out = fn()
                delay()
                return out

            return measure(self, spec, slower, **kw)

    return slowed


@pytest.fixture(autouse=True)
def _inject_slowdown(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """While a test runs, ``Gauge.measure`` adds the injected work (restored afterwards)."""
    fixed = request.config.getoption("gauge_inject_slowdown_ms")
    fraction = request.config.getoption("gauge_inject_slowdown")
    if fixed or fraction:
        own = request.config.getoption("gauge_inject_slowdown_own")
        monkeypatch.setattr(Gauge, "measure", slowed_measure(Gauge.measure, fixed, fraction, own))
        # the processes a test launches (torchrun's ranks) add it too
        monkeypatch.setenv(INJECT_ENV, repr(fraction))
        monkeypatch.setenv(INJECT_MS_ENV, repr(fixed))
