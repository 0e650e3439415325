"""The pytest plugin: options, the ``gauge`` fixture, device skips, and end-of-run tables.

pytest finds it through the ``pytest11`` entry point ``gpugauge.plugin`` of an installed
gpugauge; a plain checkout loads it from the root ``conftest.py``
(``pytest_plugins = ["gpugauge.plugin"]``): both name the same module under the same
name, so it is registered once. It registers its own markers.

Installed, it is in every pytest run of the environment, so it costs nothing until a run
uses it: importing it and declaring its options load no torch, NVML, family or report code.
gpugauge starts (:mod:`gpugauge.runtime.startup`) when a gpugauge option is given (then in
``pytest_configure``, so that a bad value stops the run before it collects), or a bench
asks for its cases or options while collecting, or a collected test takes ``gauge`` or
carries a gpugauge marker. All run state lives in ``config.stash`` (a
:class:`GaugeSession`), closed in ``unconfigure``.
"""

from __future__ import annotations

import contextlib
import gc
import inspect
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import pytest

from gpugauge.core.phrasing import progress
from gpugauge.runtime import benchmark_bridge, flags
from gpugauge.runtime.benchmark_bridge import check_histogram, plain_benchmarks_line, saved_where
from gpugauge.runtime.markers import GAUGE_MARKERS, marker_lines

if TYPE_CHECKING:
    from gpugauge.results.measurement import Spec
    from gpugauge.runtime.gauge import Gauge
    from gpugauge.runtime.options import Options
    from gpugauge.runtime.session import GaugeSession

SESSION = pytest.StashKey["GaugeSession"]()
STARTED = pytest.StashKey[float]()  # time.monotonic() at the session's start
PROGRESS_AT = pytest.StashKey[float]()  # time.monotonic() of the last progress line
PROGRESS_EVERY_S = 30.0  # the least time between two progress lines, s
# per selected test, in run order: whether it does more than skip at once (progress)
COSTLY = pytest.StashKey[list[bool]]()
STARTED_WALL = pytest.StashKey[float]()  # time.time() at the session's start (file times)
START_FAILED = pytest.StashKey[pytest.UsageError]()  # why gpugauge could not start
FIXTURES = ("gauge", "gauge_session")  # a collected test that takes one uses gpugauge


def pytest_addoption(parser: pytest.Parser) -> None:
    """Declare the suite's options in one group."""
    group = parser.getgroup("gpugauge", "gpugauge benchmarks")
    flags.add_options(group)
    flags.add_history_options(group)


def _note_writer(config: pytest.Config) -> Callable[[str], None]:
    """Progress lines on the terminal, past output capture; silent under -q."""

    def note(text: str) -> None:
        reporter = config.pluginmanager.get_plugin("terminalreporter")
        if reporter is None or config.option.verbose < 0:
            return
        capman = config.pluginmanager.get_plugin("capturemanager")
        ctx = capman.global_and_fixture_disabled() if capman else contextlib.nullcontext()
        with ctx:
            reporter.ensure_newline()
            reporter.write_line(f"[gpugauge] {text}")

    return note


def given_options(config: pytest.Config) -> list[str]:
    """The gpugauge options this run sets to other than their defaults (their dests)."""
    return [d for d, default in flags.defaults().items() if config.getoption(d) != default]


def pytest_configure(config: pytest.Config) -> None:
    """Register the markers; start gpugauge now if one of its options is given."""
    for line in marker_lines():
        config.addinivalue_line("markers", line)
    check_histogram(config)
    if given_options(config):
        _start(config)


def _start(config: pytest.Config) -> GaugeSession:
    """The run's session, started on first use (see the module's docstring).

    A start that fails (a bad option, an unusable history) raises ``pytest.UsageError``,
    once: while collecting, that is a collection error of the bench that asked, and
    ``pytest_collection_modifyitems`` then ends the run with it as a usage error.
    """
    failed = config.stash.get(START_FAILED, None)
    if failed is not None:
        raise failed
    session = config.stash.get(SESSION, None)
    if session is None:
        from gpugauge.runtime.startup import start

        started = STARTED in config.stash
        try:
            session = start(config, _note_writer(config), started)
        except pytest.UsageError as err:
            config.stash[START_FAILED] = err
            raise
        config.stash[SESSION] = session
        if started:  # too late for the report header: say it as the first progress line
            session.note(_header(session))
    return session


def pytest_sessionstart(session: pytest.Session) -> None:
    """Take the fingerprint now, outside any test's precision context (TF32 and such)."""
    session.config.stash[STARTED] = time.monotonic()
    session.config.stash[STARTED_WALL] = time.time()
    gs = session.config.stash.get(SESSION, None)
    if gs is not None:
        gs.fingerprint()


def _uses_gauge(item: pytest.Item) -> bool:
    """A test that takes a gpugauge fixture or carries one of its markers."""
    if any(f in getattr(item, "fixturenames", ()) for f in FIXTURES):
        return True
    return any(m.name in GAUGE_MARKERS for m in item.iter_markers())


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Start gpugauge if a selected test uses it (its device skips, its results).

    A start that failed while collecting ends the run here, as the usage error it is.
    """
    failed = config.stash.get(START_FAILED, None)
    if failed is not None:
        raise failed
    if SESSION not in config.stash and any(_uses_gauge(item) for item in items):
        _start(config)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtestloop(session: pytest.Session) -> Iterator[object]:
    """A gpugauge run's tests run with start-up's objects frozen (:mod:`gpugauge.launch.heap`)."""
    config = session.config
    if SESSION not in config.stash or not session.items or config.option.collectonly:
        return (yield)
    from gpugauge.launch.heap import frozen

    with frozen():
        return (yield)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Any:
    """``--gauge-stop-after``: past the limit, let the test in hand finish and start no other.

    The session then ends as pytest ends a stopped one (exit status 2): results and
    pytest-benchmark's JSON are written, which a signal or a killed job would lose, and the
    run is kept out of the history and the baselines. Each test's wall seconds are kept for
    the run's JSON.
    """
    t0 = time.monotonic()
    gs = item.config.stash.get(SESSION, None)
    if gs is not None:
        gs.wall.current = item.nodeid
        _progress(item, gs, t0)
    yield
    if gs is not None:
        gs.test_seconds[item.nodeid] = round(time.monotonic() - t0, 3)
    limit = item.config.getoption("gauge_stop_after", None)
    started = item.config.stash.get(STARTED, None)
    late = limit and started is not None and time.monotonic() - started > limit
    if late and nextitem is not None:
        item.session.shouldstop = (
            f"--gauge-stop-after {limit:g} s passed: the tests after {item.name} were not run"
        )
    stop = item.session.shouldstop or item.session.shouldfail
    if gs is not None and stop:
        gs.course = replace(gs.course, stopped=str(stop))


def _progress(item: pytest.Item, gs: GaugeSession, now: float) -> None:
    """'12 of 93 tests done in 2 min; about 8 min left', at a test's start, every 30 s or more.

    A long run (a nightly is about 10 minutes) says how far it is at least once a minute
    where its tests take under half a minute each. The estimate leaves out the tests that
    skip at once (a CUDA case where no GPU is, a skip mark).
    """
    config = item.config
    started = config.stash.get(STARTED, now)
    if now - config.stash.get(PROGRESS_AT, started) < PROGRESS_EVERY_S or not gs.course.finished:
        return
    config.stash[PROGRESS_AT] = now
    items = item.session.items
    if COSTLY not in config.stash:
        config.stash[COSTLY] = [
            device_skip(it, gs.options) is None and it.get_closest_marker("skip") is None
            for it in items
        ]
    costly = config.stash[COSTLY]
    try:
        at = items.index(item)
    except ValueError:  # not among the collected items (a plugin's own): by count instead
        at = gs.course.finished
    counts = (sum(costly[:at]), sum(costly[at:]))
    gs.note(progress(now - started, gs.course.finished, gs.course.selected, costly=counts))


def pytest_unconfigure(config: pytest.Config) -> None:
    """Close NVML."""
    session = config.stash.get(SESSION, None)
    if session is not None:
        session.close()


NOT_LOADED = (
    "the gpugauge pytest plugin is not loaded in this run: install gpugauge "
    '(pip install -e . in its checkout registers it), or add pytest_plugins = ["gpugauge.plugin"] '
    "to your root conftest.py, or pass -p gpugauge.plugin"
)


def options(config: pytest.Config) -> Options:
    """The run's resolved options (for ``pytest_generate_tests`` in bench modules).

    Asking for them starts gpugauge in the run if nothing did yet.
    """
    if not config.pluginmanager.has_plugin("gpugauge.plugin"):
        raise pytest.UsageError(NOT_LOADED)
    return _start(config).options


def parametrize_cases(
    metafunc: pytest.Metafunc, argname: str, cases: Callable[[str], Sequence[Spec]]
) -> None:
    """Parametrize ``argname`` with the cases of the run's profile.

    Ids come from ``spec.id``; each case gets a ``gpu`` or ``cpu`` mark, so that the run's
    devices decide what is skipped, a case on N > 1 GPUs ``multi_gpu(N)``, a case the
    nightly job gates ``nightly`` (:func:`~gpugauge.results.measurement.in_nightly`), and a
    case of a registered family its family's mark (``-m vgg_swap``), and a skip with the
    reason where a module the family needs is not installed (``Family.needs``).
    """
    if argname not in metafunc.fixturenames:
        return
    profile = options(metafunc.config).profile  # starts gpugauge: its families are marked
    from gpugauge.family.registry import registry
    from gpugauge.results.measurement import devices_of, in_nightly

    families = registry()
    missing = {name: family.missing() for name, family in families.items()}
    params = []
    for c in cases(profile):
        devices = devices_of(c)
        marks = [pytest.mark.gpu if devices[0].startswith("cuda") else pytest.mark.cpu]
        if c.family in families:
            marks.append(getattr(pytest.mark, c.family))
            if missing[c.family]:
                marks.append(pytest.mark.skip(reason=missing[c.family]))
        gpus = sum(d.startswith("cuda") for d in devices)
        if gpus > 1:
            marks.append(pytest.mark.multi_gpu(gpus))
        if in_nightly(c):
            marks.append(pytest.mark.nightly)
        params.append(pytest.param(c, id=c.id, marks=marks))
    metafunc.parametrize(argname, params)


def _header(session: GaugeSession) -> str:
    """What will be measured, and where, in one line; the first nights mode when given."""
    o = session.options
    p = o.policy
    rounds = f"{p.rounds} fixed" if p.rounds else f"{p.min_rounds}+ adaptive (±{p.target_ci:.1%})"
    nights = session.first_nights
    return (
        f"gpugauge: profile={o.profile} devices={','.join(o.devices)} "
        f"warm-up={p.warmup_rounds} rounds={rounds} energy-window={o.energy_window_s:g}s"
        + (" extras=skipped" if o.skip_extras else "")
        + (" diagnostics=skipped" if o.skip_diagnostics and not o.skip_extras else "")
        + (f" {session.cpu_threads.describe()}" if "cpu" in o.devices else "")
        + (f" {nights.header()}" if nights is not None else "")
    )


def pytest_report_header(config: pytest.Config) -> str | None:
    """Say what will be measured, and where, when gpugauge has started by then."""
    session = config.stash.get(SESSION, None)
    return None if session is None else _header(session)


def device_skip(item: pytest.Item, o: Options) -> str | None:
    """Why the run's devices skip this device-marked case, or None where it runs."""
    if item.get_closest_marker("gpu") and "cuda" not in o.devices:
        if not o.cuda_available:
            return "needs a CUDA GPU; none is visible here"
        return "CUDA case, but --gauge-device selects only the CPU"
    if item.get_closest_marker("cpu") and "cpu" not in o.devices:
        return "CPU case; --gauge-device auto picked cuda (use --gauge-device all or cpu to run it)"
    marker = item.get_closest_marker("multi_gpu")
    if marker:
        import torch

        need = int(marker.args[0]) if marker.args else 2
        seen = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if seen < need:
            return f"needs {need} GPUs; {seen} visible"
    return None


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Skip device-marked cases the run does not cover, with the reason."""
    session = item.config.stash.get(SESSION, None)
    if session is None:  # no test of this run uses gpugauge
        return
    why = device_skip(item, session.options)
    if why is not None:
        pytest.skip(why)


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item: pytest.Item) -> None:
    """Let a failed test's memory go before the next test runs.

    pytest keeps the last failure in ``sys.last_traceback`` for post-mortem debugging, and
    its frames hold the test's locals: a model that ran out of memory would stay on the GPU
    and make every later case of the session run out too. By teardown the failure's report
    is written, so the frames' locals are cleared and the CUDA cache emptied.
    """
    tb = getattr(sys, "last_traceback", None)
    if tb is None or SESSION not in item.config.stash:  # passed, or not a gpugauge run
        return
    while tb is not None:
        frame = tb.tb_frame
        if frame.f_code.co_flags & inspect.CO_OPTIMIZED:  # a function's frame, not a module's
            # before Python 3.13, frame.clear() leaves the f_locals snapshot that pytest's
            # report read (it holds every local); 3.13's write-through proxy refuses clear()
            with contextlib.suppress(Exception):
                frame.f_locals.clear()
        with contextlib.suppress(RuntimeError):  # a frame still executing
            frame.clear()
        tb = tb.tb_next
    sys.last_type = sys.last_value = sys.last_traceback = None
    if hasattr(sys, "last_exc"):
        sys.last_exc = None
    gc.collect()
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        torch.cuda.empty_cache()


@pytest.fixture(scope="session")
def gauge_session(pytestconfig: pytest.Config) -> GaugeSession:
    """The run's state: options, NVML, fingerprint, ceilings, results so far."""
    return _start(pytestconfig)


@pytest.fixture
def gauge(
    gauge_session: GaugeSession, benchmark: Any, request: pytest.FixtureRequest
) -> Iterator[Gauge]:
    """Measure or record one result per test, saved through pytest-benchmark and gated.

    gauge(fn, *args, **kwargs) -> fn's result
        pytest-benchmark's call form: times fn(*args, **kwargs) as gauge.measure does,
        under a spec made from the test (id: its node id; family: its family marker, else
        "custom"; device: where the arguments' tensors live, else the run's device), and
        returns what one more, untimed call of fn returns.
    gauge.measure(spec, fn, *, setup=None, work=None, expected_memory=None,
    flush_l2=False, energy=True, values=None, artifacts=None, extra=None, reference=None)
        Time fn (one round) with CUDA events (on a CPU, perf_counter_ns less the time its
        one thread waited for a core; with more threads, the wall clock) under the run's
        policy, then its peak memory and NVML energy; spec.id is the result's id and
        baseline key, spec.family its baseline file, spec.device (or spec.devices) where
        one round runs; a string spec is an id for a spec made from the test. setup runs
        before each round, untimed; values adds registry metrics; artifacts names files;
        reference (a PairedReference) is the result this one is compared with, timed in
        alternating blocks with it where rounds are host-timed.
    gauge.record(measurement)
        Record a Measurement built elsewhere: a worker's Timing.from_dict(...), or a
        result with no timing such as Measurement(spec, values={"max_layers": 61}).
    gauge.phase(name): a context whose wall seconds the run's wall-time lines name.
    gauge.artifact_path(spec, name) -> Path in this run's artifact folder.
    gauge.compare(a, b, *, title, labels) -> speedup of b over a with its CI.
    A second measure/record in one test is refused (GaugeError): parametrize instead.
    """
    from gpugauge.runtime.gauge import Gauge

    gauge = Gauge(gauge_session, benchmark, request.node)
    yield gauge
    gauge.finish()


@pytest.hookimpl(optionalhook=True)
def pytest_benchmark_update_machine_info(config: pytest.Config, machine_info: dict) -> None:
    """pytest-benchmark knows nothing of GPUs: add the fingerprint to its machine_info."""
    session = config.stash.get(SESSION, None)
    if session is not None:
        machine_info["gpugauge"] = session.fingerprint()


@pytest.hookimpl(optionalhook=True)
def pytest_benchmark_update_json(config: pytest.Config, benchmarks: Any, output_json: dict) -> None:
    """Save the run's configuration and measured ceilings beside the benchmarks."""
    session = config.stash.get(SESSION, None)
    if session is not None:
        from gpugauge.measure.environment import SCHEMA_VERSION

        output_json["gpugauge"] = {
            "schema_version": SCHEMA_VERSION,
            "argv": sys.argv,
            "options": session.options.as_dict(),
            "ceilings": session.all_ceilings(),
            "tables": session.tables(),
            # only gauge.compare's: a family's comparisons are derived from the results
            "comparisons": [c.as_dict() for c in session.adhoc_comparisons],
            "history_run_id": session.tracker.run_id if session.tracker else None,
            "outcome": session.course.as_dict(),
            "test_seconds": dict(session.test_seconds),
            "wall_s": session.wall.as_dict(
                time.monotonic() - config.stash.get(STARTED, time.monotonic()),
                session.test_seconds,
            ),
        }


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Write baselines if asked (after a fully passing run); never raise from here."""
    gs = session.config.stash.get(SESSION, None)
    if gs is None:
        return
    gs.messages += gs.load_lines() + gs.gate_notes()
    if gs.first_nights is not None and gs.measurements:
        gs.messages += gs.first_nights.summary(gs.options.require_baselines)
    if gs.measurements:  # a run of plain pytest-benchmark tests alone is none of ours
        gs.messages += plain_benchmarks_line(session.config)
    gs.append_history()
    if not gs.options.update_baselines:
        return
    if session.shouldstop and exitstatus == pytest.ExitCode.INTERRUPTED:  # --gauge-stop-after
        gs.messages.append(f"baselines NOT written: the run was cut short ({session.shouldstop})")
        return
    try:
        gs.write_baselines(passed=exitstatus == pytest.ExitCode.OK)
    except (OSError, ValueError) as err:
        gs.messages.append(f"baselines NOT written: {err}")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.hookimpl(trylast=True)
def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Print the results and comparison tables, then where results went and the next step.

    Last of the plugins' summaries (after pytest-benchmark's tables, however the plugins
    were registered), so that a run's output ends with the next step.

    A run with no CUDA result says in its title that its numbers are host-timed and no
    GPU measurement (in the smoke profile: a smoke check of the suite).
    """
    _print_section(terminalreporter)


@pytest.hookimpl(tryfirst=True, specname="pytest_terminal_summary")
def pytest_terminal_summary_one_table(terminalreporter: Any) -> None:
    """Before pytest-benchmark's summary: no second table of gauge results, said so."""
    session = terminalreporter.config.stash.get(SESSION, None)
    if session is not None and session.measurements:
        session.messages += benchmark_bridge.hide_gauge_table(terminalreporter.config)


@pytest.hookimpl(wrapper=True, specname="pytest_terminal_summary")
def pytest_terminal_summary_guard(terminalreporter: Any) -> Iterator[None]:
    """A ``--benchmark-compare-fail`` regression: one line, the gpugauge section, exit 1.

    pytest-benchmark raises its PerformanceRegression out of its own summary, after
    printing which benchmarks regressed. Raised there it is a traceback, and the summaries
    after it, the gpugauge section among them, never print though the run was saved and
    added to the history. Caught here, it fails the run (exit status 1) as it means to.
    """
    try:
        return (yield)
    except Exception as err:
        if type(err).__name__ != "PerformanceRegression":
            raise
        terminalreporter.write_line(
            "pytest-benchmark: --benchmark-compare-fail: performance has regressed "
            "(the lines above); the run fails"
        )
        _print_section(terminalreporter)
        session = getattr(terminalreporter, "_session", None)
        if session is not None:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
        return None


def _print_section(terminalreporter: Any) -> None:
    """The gpugauge section, once per run: messages, tables, where the results went."""
    config = terminalreporter.config
    session = config.stash.get(SESSION, None)
    if session is None or session.printed or not (session.measurements or session.messages):
        return
    session.printed = True
    terminalreporter.write_sep("=", "gpugauge")  # the results table's title says what they are
    for message in session.messages:
        terminalreporter.write_line(message)
    for table in session.tables().values():
        terminalreporter.write_line(table)
        terminalreporter.write_line("")
    if session.measurements:
        started = config.stash.get(STARTED_WALL, time.time())
        for line in saved_where(config, started):
            terminalreporter.write_line(line)
        since = config.stash.get(STARTED, time.monotonic())
        for line in session.efficiency(time.monotonic() - since):
            terminalreporter.write_line(line)
