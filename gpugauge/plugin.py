"""The pytest plugin: options, the ``gauge`` fixture, device skips, and end-of-run tables.

Loaded by the root ``conftest.py``. All run state lives in ``config.stash`` (a
:class:`GaugeSession`), created in ``pytest_configure`` and closed in ``unconfigure``.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Sequence
from typing import Any

import pytest

from gpugauge.gauge import Gauge, GaugeSession, Note
from gpugauge.measure.environment import SCHEMA_VERSION
from gpugauge.options import Options, add_options, resolve
from gpugauge.regress.baselines import BaselineStore
from gpugauge.regress.gate import Gate
from gpugauge.regress.tolerances import load_tolerances
from gpugauge.results.measurement import Spec, devices_of

SESSION = pytest.StashKey[GaugeSession]()


def pytest_addoption(parser: pytest.Parser) -> None:
    """Declare the suite's options in one group."""
    add_options(parser.getgroup("gpugauge", "gpugauge benchmarks"))


def _note_writer(config: pytest.Config) -> Note:
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


def pytest_configure(config: pytest.Config) -> None:
    """Resolve and validate the options; keep the run's state in the stash."""
    import torch

    try:
        options = resolve(config.getoption, torch.cuda.is_available(), config.rootpath)
        gate = None
        if options.gate:
            store = BaselineStore(options.baselines_dir)
            store.validate_all()
            gate = Gate(store, load_tolerances(options.tolerances_dir))
    except ValueError as err:  # also BaselineError, ToleranceError
        raise pytest.UsageError(str(err)) from None
    config.stash[SESSION] = GaugeSession(options, config.rootpath, _note_writer(config), gate=gate)


def pytest_unconfigure(config: pytest.Config) -> None:
    """Close NVML."""
    session = config.stash.get(SESSION, None)
    if session is not None:
        session.close()


def options(config: pytest.Config) -> Options:
    """The run's resolved options (for ``pytest_generate_tests`` in bench modules)."""
    return config.stash[SESSION].options


def parametrize_cases(
    metafunc: pytest.Metafunc, argname: str, cases: Callable[[str], Sequence[Spec]]
) -> None:
    """Parametrize ``argname`` with the cases of the run's profile.

    Ids come from ``spec.id``; each case gets a ``gpu`` or ``cpu`` mark, so that the run's
    devices decide what is skipped, and a case on N > 1 GPUs ``multi_gpu(N)``.
    """
    if argname not in metafunc.fixturenames:
        return
    params = []
    for c in cases(options(metafunc.config).profile):
        devices = devices_of(c)
        marks = [pytest.mark.gpu if devices[0].startswith("cuda") else pytest.mark.cpu]
        gpus = sum(d.startswith("cuda") for d in devices)
        if gpus > 1:
            marks.append(pytest.mark.multi_gpu(gpus))
        params.append(pytest.param(c, id=c.id, marks=marks))
    metafunc.parametrize(argname, params)


def pytest_report_header(config: pytest.Config) -> str:
    """Say what will be measured, and where."""
    o = options(config)
    p = o.policy
    rounds = f"{p.rounds} fixed" if p.rounds else f">= {p.min_rounds} adaptive (±{p.target_ci:.1%})"
    return (
        f"gpugauge: profile={o.profile} devices={','.join(o.devices)} "
        f"warm-up={p.warmup_rounds} rounds={rounds} energy-window={o.energy_window_s:g}s"
    )


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Skip device-marked cases the run does not cover, with the reason."""
    o = options(item.config)
    if item.get_closest_marker("gpu") and "cuda" not in o.devices:
        if not o.cuda_available:
            pytest.skip("needs a CUDA GPU; none is visible here")
        pytest.skip("CUDA case, but --device selects only the CPU")
    if item.get_closest_marker("cpu") and "cpu" not in o.devices:
        pytest.skip("CPU case; --device auto picked cuda (use --device all or cpu to run it)")
    marker = item.get_closest_marker("multi_gpu")
    if marker:
        import torch

        need = int(marker.args[0]) if marker.args else 2
        seen = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if seen < need:
            pytest.skip(f"needs {need} GPUs; {seen} visible")


@pytest.fixture(scope="session")
def gauge_session(pytestconfig: pytest.Config) -> GaugeSession:
    """The run's state: options, NVML, fingerprint, ceilings, results so far."""
    return pytestconfig.stash[SESSION]


@pytest.fixture
def gauge(gauge_session: GaugeSession, benchmark: Any) -> Gauge:
    """Measure or record one result per test, saved through pytest-benchmark and gated.

    gauge.measure(spec, fn, *, setup=None, work=None, expected_memory=None,
    flush_l2=False, energy=True, values=None, artifacts=None, extra=None)
        Time fn (one round) with CUDA events (perf_counter on a CPU) under the run's
        policy, then its peak memory and NVML energy; spec.id is the result's id and
        baseline key, spec.devices (optional) the devices one round spans. setup runs
        before each round, untimed; values adds registry metrics; artifacts names files.
    gauge.record(measurement)
        Record a Measurement built elsewhere: a worker's Timing.from_dict(...), or a
        result with no timing such as Measurement(spec, values={"max_layers": 61}).
    gauge.artifact_path(spec, name) -> Path in this run's artifact folder.
    gauge.compare(a, b, *, title, labels) -> speedup of b over a with its CI.
    A second measure/record in one test is refused (GaugeError): parametrize instead.
    """
    return Gauge(gauge_session, benchmark)


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
        output_json["gpugauge"] = {
            "schema_version": SCHEMA_VERSION,
            "argv": sys.argv,
            "options": session.options.as_dict(),
            "ceilings": session.all_ceilings(),
            "comparisons": [c.as_dict() for c in session.comparisons],
            "tables": session.tables(),
            "gate": [r.as_dict() for r in session.gate_results],
        }


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Write baselines if asked (after a fully passing run); never raise from here."""
    gs = session.config.stash.get(SESSION, None)
    if gs is None or not gs.options.update_baselines:
        return
    try:
        gs.write_baselines(passed=exitstatus == pytest.ExitCode.OK)
    except (OSError, ValueError) as err:
        gs.messages.append(f"baselines NOT written: {err}")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Print the results and comparison tables."""
    session = terminalreporter.config.stash.get(SESSION, None)
    if session is None or not (session.measurements or session.messages):
        return
    terminalreporter.write_sep("=", "gpugauge")
    for message in session.messages:
        terminalreporter.write_line(message)
    for table in session.tables().values():
        terminalreporter.write_line(table)
        terminalreporter.write_line("")
