"""Modules and functions are named for what they hold (issue 37): the vague names stay gone.

``check/gate.py`` beside ``regress/gate.py``, ``timer.py`` beside ``timers.py``, a
``plain.py`` and a ``words.py`` told a reader nothing until opened; CHANGELOG.md lists the
new import paths.
"""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

import gpugauge

ROOT = Path(gpugauge.__file__).parent.parent

RENAMED_MODULES = {
    "gpugauge.plain": "gpugauge.core.json_records",
    "gpugauge.words": "gpugauge.core.phrasing",
    "gpugauge.check.timer": "gpugauge.check.timer_report",
    "gpugauge.check.timers": "gpugauge.check.three_timers",
    "gpugauge.check.gate": "gpugauge.check.gate_report",
}
RENAMED_FUNCTIONS = {
    ("gpugauge.runtime.pipeline", "take"): "measure_case",
    ("gpugauge.runtime.benchmark_bridge", "hand_over"): "fill_benchmark_fixture",
}


@pytest.mark.parametrize(("old", "new"), sorted(RENAMED_MODULES.items()))
def test_a_renamed_module_is_found_only_by_its_new_name(old: str, new: str) -> None:
    def path(name: str) -> Path:  # by file: an editable install elsewhere may also answer
        return ROOT.joinpath(*name.split(".")).with_suffix(".py")

    assert not path(old).exists(), f"{old} is back: name it for what it holds"
    assert path(new).is_file()


@pytest.mark.parametrize(("where", "new"), sorted(RENAMED_FUNCTIONS.items()))
def test_a_renamed_function_is_found_only_by_its_new_name(where: tuple[str, str], new: str) -> None:
    module_name, old = where
    module = importlib.import_module(module_name)
    assert not hasattr(module, old), f"{module_name}.{old} is back"
    assert callable(getattr(module, new))
