"""Start gpugauge in a pytest run: resolve the options, open the gate and history, make the session.

The plugin (:mod:`gpugauge.plugin`) is imported in every pytest run of an environment that
has gpugauge installed, so it imports none of this until a run uses gpugauge: a gpugauge
option is given, a collected test takes ``gauge`` or carries a gpugauge marker, or a bench
asks for its cases. This module then loads torch, the families, the gate and the history.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpugauge.core.phrasing import Note
from gpugauge.family.registry import registry
from gpugauge.judging import tracking
from gpugauge.judging.first_nights import FirstNights
from gpugauge.judging.judge import Judge
from gpugauge.regress.baselines import BaselineStore
from gpugauge.regress.gate import Gate
from gpugauge.regress.tolerances import load_tolerances
from gpugauge.results import benchmark_storage
from gpugauge.results.outcome import Skip, skip_reason, test_id
from gpugauge.runtime.benchmark_bridge import benchmark_disabled, foreign_note
from gpugauge.runtime.flags import getter
from gpugauge.runtime.options import check_destinations, resolve
from gpugauge.runtime.session import GaugeSession


def start(config: pytest.Config, note: Note, started: bool) -> GaugeSession:
    """The run's :class:`GaugeSession`; ``pytest.UsageError`` naming the option if one is bad.

    ``started``: the pytest session has started (gpugauge was first used while collecting):
    pytest-benchmark's writes are guarded and the fingerprint is taken now.
    """
    import torch

    messages = []
    try:
        registry()  # every declared family loads, or the run stops naming the one that fails
        get = getter(config)
        options = resolve(get, torch.cuda.is_available(), config.rootpath)
        check_destinations(options, get)  # before anything is measured
        benchmark_storage.guard(config, started)  # pytest-benchmark's own writes made atomic
        if options.update_baselines and benchmark_disabled(config):
            raise ValueError(
                "--gauge-update-baselines with --benchmark-disable: a run that does not measure "
                "never writes baselines"
            )
        gate = None
        if options.gate:
            store = BaselineStore(options.baselines_dir)
            store.validate_all()
            tolerances = load_tolerances(options.tolerances_dir)
            messages += [tolerances.skipped_line()] if tolerances.skipped else []
            gate = Gate(store, tolerances)
            for what, folder in (
                ("baselines", options.baselines_dir),
                ("tolerances", options.tolerances_dir),
            ):
                if not folder.is_dir():
                    fallback = "every result is new" if what == "baselines" else "built-in ones"
                    messages.append(f"gate: no {what} folder {folder}: {fallback}")
    except ValueError as err:  # also BaselineError, ToleranceError
        raise pytest.UsageError(str(err)) from None
    tracker = None
    target = tracking.target_of(config)
    if target is not None and not benchmark_disabled(config):
        try:  # now: a bad path or URL stops the run before it measures
            tracker, skipped = tracking.open_tracker(target, options.profile)
        except (OSError, ValueError) as err:  # HistoryError is a ValueError
            raise pytest.UsageError(f"--gauge-history: {err}") from None
        messages += [skipped] if skipped else []  # out of reach: a full disk, a server down
    nights = None
    # a new class's first nights, counted in the history; a run that measures nothing
    # (--benchmark-disable) judges nothing, and says so itself
    if options.first_nights and options.gate and not benchmark_disabled(config):
        why = next((m for m in messages if m.startswith("history NOT used")), "history off")
        nights = FirstNights(
            options.first_nights,
            tracker,
            "" if tracker else why,
            baselines=str(options.baselines_dir),
        )
    judge = None
    if gate is not None:
        judge = Judge(
            gate,
            tracker,
            nights,
            remeasure=not config.getoption("gauge_no_remeasure", False),
            new_host_to_confirm=options.confirm_new_host,
            require_baselines=options.require_baselines,
        )
    session = GaugeSession(
        options,
        config.rootpath,
        note,
        judge=judge,
        messages=messages,
        foreign_note=foreign_note(config),
        tracker=tracker,
        first_nights=nights,
    )
    config.pluginmanager.register(OutcomeWatch(session), "gpugauge-outcome")
    if started:
        session.fingerprint()  # outside any test's precision context (TF32 and such)
    return session


class OutcomeWatch:
    """The run's course for its saved outcome: selected, finished, skipped, interrupted.

    A plugin object registered per run, bound to its session: a test report and the
    interrupt hook carry no config to find the session by.
    """

    def __init__(self, session: GaugeSession) -> None:
        self.session = session

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        """How many tests the run selected: a saved run says how many of them ran."""
        self.session.course = replace(self.session.course, selected=len(session.items))

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Count the tests that ran to their end; keep each skip's reason."""
        course = self.session.course
        if report.when == "teardown":
            self.session.course = replace(course, finished=course.finished + 1)
        elif report.skipped and not hasattr(report, "wasxfail"):
            skip = Skip(test_id(report.nodeid), skip_reason(report.longrepr))
            self.session.course = replace(course, skipped=(*course.skipped, skip))

    def pytest_keyboard_interrupt(self, excinfo: pytest.ExceptionInfo[BaseException]) -> None:
        """Ctrl-C, or a signal raised as one: the saved run and the history must know."""
        self.session.course = replace(self.session.course, interrupted=excinfo.typename)
