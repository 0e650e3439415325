"""Modules and functions are named for what they hold (issue 37): the vague names stay gone.

``check/gate.py`` beside ``regress/gate.py``, ``timer.py`` beside ``timers.py``, a
``plain.py`` and a ``words.py`` told a reader nothing until opened; CHANGELOG.md lists the
new import paths.
"""

from __future__ import annotations

import importlib
import re
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


# Names several modules define on purpose: the hooks pytest calls by name, each command
# module's entry (``main``, ``add_parser``), and each family's record and workload (a family
# is a unit; its names are its own).
PROTOCOLS = {"main", "add_parser"}
FAMILIES = ROOT / "gpugauge" / "families"


def public_definitions(root: Path) -> dict[str, list[str]]:
    """Each public top-level name the harness defines, with the modules defining it."""
    import ast

    found: dict[str, list[str]] = {}
    for path in sorted((root / "gpugauge").rglob("*.py")):
        if FAMILIES in path.parents:
            continue
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                names = [node.name]
            elif isinstance(node, ast.Assign):
                names = [t.id for t in node.targets if isinstance(t, ast.Name)]
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                names = [node.target.id]
            else:
                names = []
            for name in names:
                if not name.startswith("_") and not name.startswith("pytest_"):
                    found.setdefault(name, []).append(str(path.relative_to(root)))
    return found


def test_no_public_name_is_defined_twice() -> None:
    """One name, one thing: a reader who meets ``resolve`` or ``Schedule`` knows which."""
    twice = {
        name: where
        for name, where in public_definitions(ROOT).items()
        if len(where) > 1 and name not in PROTOCOLS
    }
    assert not twice, "public names defined in several modules:\n" + "\n".join(
        f"  {name}: {', '.join(where)}" for name, where in sorted(twice.items())
    )


def test_every_listed_extension_point_exists() -> None:
    """The package's face lists the extension points; each name it lists must resolve."""
    listed = re.findall(r"^- ``(gpugauge\.[\w.]+)``", gpugauge.__doc__ or "", re.MULTILINE)
    assert len(listed) >= 7
    for dotted in listed:
        module, _, name = dotted.rpartition(".")
        assert hasattr(importlib.import_module(module), name), dotted
