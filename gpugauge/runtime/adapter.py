"""The pytest-benchmark adapter: a gpugauge result handed to the ``benchmark`` fixture.

pytest-benchmark then stores it like one of its own (``--benchmark-autosave``,
``--benchmark-json``, ``pytest-benchmark compare``), with two differences: its stats are the
result's device-timed rounds (seconds), not host times, and everything else the result
holds (metrics, memory, energy, the spec) is its ``extra_info``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from typing import Any

from gpugauge.measure.timing import Timing
from gpugauge.results.measurement import Measurement


def plain_params(params: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """A test's parameters as JSON values, so pytest-benchmark stores and groups by them.

    A spec parameter becomes its id, and its fields become parameters of their own (so
    ``--benchmark-group-by=param:mode`` works); other values that JSON cannot hold, their repr.
    """
    if params is None:
        return None
    out: dict[str, Any] = {}
    fields: dict[str, Any] = {}
    for name, value in params.items():
        if hasattr(value, "as_dict") and hasattr(value, "id"):
            out[name] = value.id
            fields.update(value.as_dict())
        else:
            out[name] = value
    for name, value in {**fields, **out}.items():
        try:
            json.dumps(value, allow_nan=False)
        except (TypeError, ValueError):
            value = repr(value)
        out[name] = value
    return out


def stored_options(t: Timing) -> dict[str, Any]:
    """What pytest-benchmark stores as a benchmark's ``options``: what gpugauge did (s, ms)."""
    p = t.policy
    return {
        "timer": t.clock,
        "rounds": p.rounds,
        "min_rounds": p.min_rounds,
        "max_rounds": p.max_rounds,
        "max_time": p.budget_s,
        "target_ci": p.target_ci,
        "regime": t.regime,
        "min_time": p.min_time_s,
        "warmup": t.warmup_rounds,
        "warmup_time": t.warmup_s,
        "flush_l2": t.l2_flushed,
        "disable_gc": False,
        "stop_reason": t.stop_reason,
        "measured_by": "gpugauge",
    }


def fill_benchmark_fixture(bench: Any, m: Measurement, started: float) -> None:
    """Give pytest-benchmark's fixture ``bench`` the result ``m``, as if it had timed it.

    ``started`` is ``time.perf_counter()`` at the test's start: a result with no timing (a
    search) is stored with the test's host wall time, labelled so, because pytest-benchmark
    saves only rows with stats.
    """
    bench.extra_info.update(m.as_dict())  # the fingerprint is the run's: machine_info
    # read by pytest-benchmark when the stats are made: set them first
    bench.group = bench.group or getattr(m.spec, "group", None) or m.spec.family
    bench.params = plain_params(bench.params)
    if not bench.disabled:
        # pytest-benchmark has no public API for externally timed rounds: this is what its
        # pedantic mode does per round (Metadata.update takes seconds).
        stats = bench._make_stats(1)
        if m.timing is not None:
            stats.options = stored_options(m.timing)
            for ms in m.timing.device_ms:
                stats.update(ms / 1e3)
        else:
            # the wall time is no metric of the result, which the gate and report read
            # from extra_info
            stats.options = {
                "timer": "host wall time of the test (result has no timing)",
                "measured_by": "gpugauge",
            }
            stats.update(time.perf_counter() - started)
    # no public API either to say the fixture was used (it warns otherwise)
    bench._mode = "gpugauge.record"
