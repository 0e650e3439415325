"""The bridge to pytest-benchmark: a gpugauge result in its ``benchmark`` fixture, its options.

pytest-benchmark stores a gauge result like one of its own (``--benchmark-autosave``,
``--benchmark-json``, ``pytest-benchmark compare``), with two differences: its stats are the
result's device-timed rounds (seconds), not host times, and everything else the result
holds (metrics, memory, energy, the spec) is its ``extra_info``.

pytest-benchmark's timing options (``--benchmark-min-rounds``, ``--benchmark-warmup``, ...)
drive its own loop. They keep working for tests that take the ``benchmark`` fixture;
gauge tests are timed by gpugauge, which reads none of them, so the gpugauge section says
so once (:func:`foreign_note`) rather than refusing them for the whole run. Its saving
options say where a run's results went, which the section prints with the report command
that reads them (:func:`saved_where`).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:  # the plugin imports this module in every pytest run: nothing heavy
    from gpugauge.measure.timing import Timing
    from gpugauge.results.measurement import Measurement

# pytest-benchmark options that drive its own timing loop, which gpugauge does not use:
# (option dest, flag, the value that means "not given", what to use instead).
_FOREIGN_OPTIONS: tuple[tuple[str, str, Any, str], ...] = (
    (
        "benchmark_min_rounds",
        "--benchmark-min-rounds",
        5,
        "use --gauge-min-rounds N (or --gauge-rounds N)",
    ),
    ("benchmark_max_time", "--benchmark-max-time", 1.0, "use --gauge-max-time S"),
    (
        "benchmark_min_time",
        "--benchmark-min-time",
        5e-6,
        "a round is one call; use --gauge-rounds N",
    ),
    ("benchmark_precision", "--benchmark-precision", None, "use --gauge-target-ci F"),
    (
        "benchmark_confidence",
        "--benchmark-confidence",
        0.99,
        "the CI is 95%; use --gauge-target-ci F",
    ),
    (
        "benchmark_calibration_precision",
        "--benchmark-calibration-precision",
        10,
        "rounds are not calibrated; use --gauge-rounds N",
    ),
    (
        "benchmark_warmup",
        "--benchmark-warmup",
        False,
        "use --gauge-warmup N and --gauge-warmup-time S",
    ),
    (
        "benchmark_warmup_iterations",
        "--benchmark-warmup-iterations",
        100000,
        "use --gauge-warmup N",
    ),
    (
        "benchmark_timer",
        "--benchmark-timer",
        "time.perf_counter",
        "rounds are timed with CUDA events on a GPU, perf_counter_ns on a CPU",
    ),
    (
        "benchmark_disable_gc",
        "--benchmark-disable-gc",
        False,
        "the garbage collector stays on; the suite collects once before each benchmark",
    ),
    (
        "benchmark_cprofile",
        "--benchmark-cprofile",
        None,
        "rounds do not run through the benchmark fixture; use a profiler in the benchmark",
    ),
)


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


def _given(config: pytest.Config, dest: str, flag: str, unset: Any) -> bool:
    """Whether a pytest-benchmark option was set: on the command line, or to a new value."""
    if any(a == flag or str(a).startswith(f"{flag}=") for a in config.invocation_params.args):
        return True
    value = config.getoption(dest, unset)
    if isinstance(unset, float) and value is not None:
        return float(value) != unset
    return str(value) != str(unset)


def foreign_note(config: pytest.Config) -> str | None:
    """A line for the gpugauge section when pytest-benchmark timing options were given.

    They drive pytest-benchmark's own loop, so they keep working for tests that take the
    ``benchmark`` fixture; gauge tests are timed by gpugauge, which does not read them. The
    line names each option given and the gpugauge option to use instead; None if none was.
    """
    given = [
        f"{flag}: {instead}"
        for dest, flag, unset, instead in _FOREIGN_OPTIONS
        if _given(config, dest, flag, unset)
    ]
    if not given:
        return None
    return (
        "pytest-benchmark options apply to tests that use `benchmark`, not to gauge tests, "
        "which gpugauge times: " + "; ".join(given)
    )


def plain_benchmarks_line(config: pytest.Config) -> list[str]:
    """One line counting the tests timed by pytest-benchmark's own ``benchmark`` fixture.

    They are left out of gpugauge's results, gate, history and report, on purpose: their
    rounds are pytest-benchmark's calibrated host-timed loops (many calls per round), and
    they carry no spec (family, device, device class) to key a baseline or a history by,
    so judging them beside gauge results would compare what is not comparable. They stay
    in pytest-benchmark's own table, storage and ``--benchmark-compare``. Empty when none.
    """
    bs = getattr(config, "_benchmarksession", None)
    names = [
        str(getattr(b, "fullname", None) or getattr(b, "name", "?"))
        for b in getattr(bs, "benchmarks", None) or ()
        if "gpugauge_schema" not in (getattr(b, "extra_info", None) or {})
    ]
    if not names:
        return []
    shown = ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")
    count = f"{len(names)} test{'s' if len(names) != 1 else ''}"
    return [
        f"not in gpugauge's results, gate, history or report: {count} timed by "
        f"pytest-benchmark's own `benchmark` fixture ({shown}); pytest-benchmark's table "
        "shows them (take the `gauge` fixture to have a test judged here)"
    ]


# pytest-benchmark options that shape or add to its table: given, the table is wanted
_DISPLAY_OPTIONS = (
    "--benchmark-sort",
    "--benchmark-group-by",
    "--benchmark-columns",
    "--benchmark-name",
    "--benchmark-time-unit",
    "--benchmark-histogram",
    "--benchmark-verbose",
    "--benchmark-compare",
    "--benchmark-cprofile",
)
TABLE_HIDDEN = (
    "pytest-benchmark's table is not printed: gpugauge's results table holds these results "
    "(give any --benchmark-* display option, e.g. --benchmark-sort=min, to print it too)"
)


def _display_asked(config: pytest.Config) -> bool:
    """Whether a pytest-benchmark display option was given (command line, env or ini)."""
    args = [
        *map(str, config.invocation_params.args),
        *os.environ.get("PYTEST_ADDOPTS", "").split(),
        *config.getini("addopts"),
    ]
    return any(a == flag or a.startswith(f"{flag}=") for a in args for flag in _DISPLAY_OPTIONS)


def hide_gauge_table(config: pytest.Config) -> list[str]:
    """Keep pytest-benchmark's table off where every benchmark is a gauge result.

    Its 220-column table repeats gpugauge's numbers in its own layout (min, max, OPS, a
    one-iteration "Iterations" column), and a CPU run then printed two results tables.
    It stays where a test used pytest-benchmark's own ``benchmark`` fixture, or where a
    display option asks for it. pytest-benchmark still checks ``--benchmark-compare-fail``
    when quiet. The line that says so where it was turned off, else none.
    """
    bs = getattr(config, "_benchmarksession", None)
    benchmarks = getattr(bs, "benchmarks", None) or ()
    if bs is None or not benchmarks or getattr(bs, "quiet", True) or _display_asked(config):
        return []
    if any("gpugauge_schema" not in (getattr(b, "extra_info", None) or {}) for b in benchmarks):
        return []
    bs.quiet = True
    return [TABLE_HIDDEN]


def check_histogram(config: pytest.Config) -> None:
    """--benchmark-histogram needs the histogram extra: refuse it before any test runs."""
    if config.getoption("benchmark_histogram", None):
        try:
            import pygal  # noqa: F401
            import pygaljs  # noqa: F401
        except ImportError:
            raise pytest.UsageError(
                "--benchmark-histogram needs pygal and pygaljs, which are not installed: "
                "pip install 'gpugauge[histogram]'"
            ) from None


def benchmark_disabled(config: pytest.Config) -> bool:
    """--benchmark-disable in effect (pytest-benchmark's own rule)."""
    return bool(
        config.getoption("benchmark_disable", False)
        and not config.getoption("benchmark_enable", False)
    )


def saved_where(config: pytest.Config, since: float) -> list[str]:
    """Where this run's results went, and the report command that reads them.

    ``since`` is the session's start (``time.time()``): a run saved with
    ``--benchmark-autosave``/``--benchmark-save`` is the newest file written since then
    under pytest-benchmark's storage folder.
    """
    if benchmark_disabled(config):
        return ["results: none saved (--benchmark-disable measures nothing)"]
    lines = []
    json_path = config.getoption("benchmark_json", None)
    if json_path is not None:
        opened = hasattr(json_path, "write")  # a pytest-benchmark that opened it (FileType)
        path = Path(json_path.name if opened else json_path)
        lines += [
            f"results saved: {path}",
            f"report: python -m gpugauge report --current {path}",
        ]
    if config.getoption("benchmark_save", None) or config.getoption("benchmark_autosave", False):
        storage = getattr(getattr(config, "_benchmarksession", None), "storage", None)
        folder = getattr(storage, "path", None)
        if isinstance(folder, Path):
            runs = [p for p in folder.rglob("*.json") if p.stat().st_mtime >= since - 1]
            newest = max(runs, key=lambda p: p.stat().st_mtime, default=None)
            lines.append(f"results saved: {newest or folder}")
            default = folder.resolve() == (Path.cwd() / ".benchmarks").resolve()
            lines.append(
                "report: python -m gpugauge report" + ("" if default else f" --storage {folder}")
            )
    if not lines:
        lines.append(
            "results: not saved; add --benchmark-autosave (or --benchmark-json=FILE) "
            "for a report: python -m gpugauge report"
        )
    return lines
