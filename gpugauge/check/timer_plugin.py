"""The timer check inside a pytest run: each case timed by the suite, do_bench and a bare loop.

``gpugauge check timer`` runs the benchmarks with this plugin, so that do_bench times
exactly what the suite times: the same callable, with the same TF32 flags, on the
family's own cases, whatever family they come from:

    python -m pytest benches -k layers --gauge-profile seed --gauge-energy-window 0 \
        -p gpugauge.check.timer_plugin --gauge-timer-check-json rows.json

After ``gauge.measure`` has timed and recorded a case as usual, the same callable is timed
again by the suite's own timer (:func:`gpugauge.check.three_timers.cold_timing`), by
``triton.testing.do_bench`` and by a bare CUDA-event loop, interleaved, all three with
do_bench's L2 flush before every round (:func:`gpugauge.check.three_timers.compare_timers`); the
case's own median is kept beside. A case that runs a setup step before every round
(do_bench would time it with the round) or that is not on one GPU is skipped with that
reason. The rows are written to the JSON file when the session ends.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import pytest

from gpugauge.check.three_timers import DEFAULT_THRESHOLD
from gpugauge.core.arguments import path_option
from gpugauge.results.files import atomic_write_json
from gpugauge.results.measurement import devices_of
from gpugauge.runtime.gauge import Gauge

ROWS = pytest.StashKey[list[dict[str, Any]]]()
NOT_COMPARED = pytest.StashKey[list[dict[str, str]]]()


def pytest_addoption(parser: pytest.Parser) -> None:
    """The timer check's options, in the ``gpugauge check`` group."""
    group = parser.getgroup("gpugauge-check", "gpugauge check")
    group.addoption(
        "--gauge-timer-check-json",
        type=path_option,
        default=None,
        metavar="FILE",
        help="also time each GPU case with triton.testing.do_bench and a bare CUDA-event "
        "loop; the rows go to FILE (gpugauge check timer)",
    )
    group.addoption(
        "--gauge-timer-check-threshold",
        type=float,
        default=DEFAULT_THRESHOLD,
        metavar="FRACTION",
        help="a row outside this fraction of do_bench whose blocks spread more than half "
        f"of it is timed again (gpugauge check timer's --threshold; default {DEFAULT_THRESHOLD:g})",
    )
    group.addoption(
        "--gauge-timer-check-op",
        action="append",
        default=[],
        metavar="PATTERN",
        help="only the cases whose id matches this shell-style pattern (repeat for more)",
    )


def pytest_configure(config: pytest.Config) -> None:
    """Room for the rows, kept in the run's stash."""
    if config.getoption("gauge_timer_check_json") is not None:
        config.stash[ROWS] = []
        config.stash[NOT_COMPARED] = []


def item_case_id(item: pytest.Item) -> str:
    """A benchmark's case id: its parameter id (the spec id), or its name."""
    callspec = getattr(item, "callspec", None)
    return callspec.id if callspec is not None else item.name


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Keep only the cases ``--gauge-timer-check-op`` patterns select (all when none is given)."""
    from gpugauge.check.three_timers import selected

    patterns = config.getoption("gauge_timer_check_op")
    if not patterns:
        return
    keep = [i for i in items if selected(item_case_id(i), patterns)]
    dropped = [i for i in items if not selected(item_case_id(i), patterns)]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = keep


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Write the rows (atomically: an interrupted write leaves the old file or none)."""
    path = session.config.getoption("gauge_timer_check_json")
    if path is not None and ROWS in session.config.stash:
        atomic_write_json(
            path,
            {
                "rows": session.config.stash[ROWS],
                "not_compared": session.config.stash[NOT_COMPARED],
            },
        )


def three_ways(
    measure: Callable[..., Any],
    rows: list[dict[str, Any]],
    not_compared: list[dict[str, str]],
    threshold: float = DEFAULT_THRESHOLD,
) -> Callable[..., Any]:
    """``Gauge.measure`` that then times the same callable with do_bench and a bare loop."""
    from gpugauge.check.three_timers import cold_timing, compare_timers, do_bench_flush

    def measured(self: Gauge, spec: Any, fn: Callable[[], object], **kw: Any) -> Any:
        if isinstance(spec, str):  # an id: the test's own spec, as gauge.measure makes it
            spec = self.call_spec(id=spec)
        devices = devices_of(spec)
        why = None
        if len(devices) != 1 or not devices[0].startswith("cuda"):
            why = f"not on one GPU ({', '.join(devices)})"
        elif kw.get("setup") is not None:
            why = "a setup step runs before every round: do_bench would time it too"
        if why is not None:
            not_compared.append({"op": spec.id, "why": why})
            pytest.skip(f"gpugauge check timer: {spec.id}: {why}")
        m = measure(self, spec, fn, **kw)
        if m.timing is None:
            return m
        device, case_ms = devices[0], m.timing.summary.median
        nvml_device, flush = self.session.nvml_device(device), do_bench_flush(device)
        suite = partial(cold_timing, fn, self.options.policy, device, flush, nvml_device)
        self.session.note(f"{spec.id}: the suite's timer, do_bench and a bare loop, interleaved")
        row = compare_timers(spec.id, fn, suite, flush, nvml_device, case_ms, threshold)
        rows.append(row.as_dict())
        self.session.note(
            f"{spec.id}: suite {row.suite_ms:.4g} ms (the case: {row.case_ms:.4g} ms), "
            f"do_bench {row.do_bench_ms:.4g} ms ({row.vs_do_bench:+.2%}), bare {row.bare_ms:.4g} ms"
        )
        return m

    return measured


@pytest.fixture(autouse=True)
def _timer_check(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """While a test runs, ``Gauge.measure`` also times three ways (restored afterwards)."""
    stash = request.config.stash
    if ROWS in stash:
        threshold = request.config.getoption("gauge_timer_check_threshold")
        measured = three_ways(Gauge.measure, stash[ROWS], stash[NOT_COMPARED], threshold)
        monkeypatch.setattr(Gauge, "measure", measured)
