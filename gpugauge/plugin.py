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
from gpugauge.results.measurement import Spec

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
    devices decide what is skipped.
    """
    if argname not in metafunc.fixturenames:
        return
    params = [
        pytest.param(
            c, id=c.id, marks=pytest.mark.gpu if c.device.startswith("cuda") else pytest.mark.cpu
        )
        for c in cases(options(metafunc.config).profile)
    ]
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
    if item.get_closest_marker("multi_gpu"):
        import torch

        if torch.cuda.device_count() < 2:
            pytest.skip(f"needs 2 or more GPUs; {torch.cuda.device_count()} visible")


@pytest.fixture(scope="session")
def gauge_session(pytestconfig: pytest.Config) -> GaugeSession:
    """The run's state: options, NVML, fingerprint, ceilings, results so far."""
    return pytestconfig.stash[SESSION]


@pytest.fixture
def gauge(gauge_session: GaugeSession, benchmark: Any) -> Gauge:
    """Measure one benchmark: ``gauge.measure(spec, fn)``."""
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
