"""Tests of the harness itself: CPU only, real torch, fakes for the clock and NVML."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

# pytester's in-process runs restore sys.modules afterwards, so whatever they imported
# first is imported again later. For two packages that breaks: torchvision (the
# fingerprint) loads triton's native module, whose second import aborts the interpreter,
# and matplotlib (the report) ends up with two GridSpec classes. Load both once here,
# before any pytester run takes its snapshot.
import torchvision  # noqa: F401

import gpugauge.report.charts  # noqa: F401

pytest_plugins = ["pytester"]

ROOT = Path(__file__).resolve().parents[1]


SLOW = (
    "slow: an end-to-end test of several seconds (pytest or torchrun in processes of their "
    "own, a synthetic history of many nights); deselected unless -m selects (-m slow: only "
    "them, as .ci/run runs them; -m 'slow or not slow': every test) or the test is named by "
    "its node id"
)


def pytest_configure(config: pytest.Config) -> None:
    """Register the ``slow`` marker; take SIGINT as Python does, however pytest was started.

    A shell's background job (``&`` in a script) starts with SIGINT ignored, and Python
    then leaves it ignored: the tests that send one (Ctrl-C during an import, a signal to
    a child pytest) would see nothing happen. With Python's own handler here, this process
    and every child it starts (which then starts with SIGINT at its default) take it as an
    interactive run does. A background job gets no Ctrl-C from the terminal either way.
    """
    config.addinivalue_line("markers", SLOW)
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_report_header(config: pytest.Config) -> str | None:
    """Say that the slow tests are left out, and how to run them."""
    if _deselects_slow(config):
        return "slow end-to-end tests deselected: python -m pytest tests -m slow runs them"
    return None


def _deselects_slow(config: pytest.Config) -> bool:
    """Left out by default: unless -m was given, or a test was named by its node id."""
    named = any("::" in str(arg) for arg in config.args)
    return not config.option.markexpr and not named


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Warnings are errors in the harness's own tests (not in benchmarks on foreign stacks).

    The ``slow`` tests are deselected unless asked for (:func:`_deselects_slow`).
    """
    for item in items:
        if Path(str(item.path)).is_relative_to(Path(__file__).parent):
            item.add_marker(pytest.mark.filterwarnings("error"), append=False)
    if _deselects_slow(config):
        slow = [item for item in items if item.get_closest_marker("slow")]
        if slow:
            config.hook.pytest_deselected(items=slow)
            items[:] = [item for item in items if not item.get_closest_marker("slow")]


class FakeClock:
    """A RoundClock whose rounds take preset times; ``t`` is its own seconds counter."""

    name = "fake"

    def __init__(self, samples_ms: Iterator[float]) -> None:
        self._samples = samples_ms
        self._pending: list[float] = []
        self.t = 0.0
        self.syncs = 0
        self.begins = 0
        self.head_starts: list[float] = []

    def prepare(self, rounds: int, head_start_s: float = 0.0) -> None:
        self._pending = []
        self.head_starts.append(head_start_s)

    def begin(self) -> None:
        self.begins += 1

    def end(self) -> None:
        ms = next(self._samples)
        self.t += ms / 1e3
        self._pending.append(ms)

    def collect(self) -> list[float]:
        self.syncs += 1
        out, self._pending = self._pending, []
        return out

    def synchronize(self) -> None:
        self.syncs += 1


def noisy_ms(median: float, cv: float, seed: int = 0) -> Iterator[float]:
    """Endless normal samples around ``median`` with coefficient of variation ``cv``."""
    rng = np.random.default_rng(seed)
    while True:
        yield float(median * (1 + cv * rng.standard_normal()))


@pytest.fixture
def gauge_pytester(pytester: pytest.Pytester) -> pytest.Pytester:
    """A pytester dir that loads the gpugauge plugin like the repository root does."""
    pytester.makeconftest('pytest_plugins = ["gpugauge.plugin"]\n')
    pytester.makeini(
        "[pytest]\nmarkers =\n    gpu: needs CUDA\n    cpu: runs on the CPU\n"
        "    multi_gpu: needs 2 GPUs\n"
    )
    return pytester
