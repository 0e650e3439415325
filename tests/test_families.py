"""The family registry: the core never names a family, and a new family needs only itself.

A toy family is added the way a user's package would add one: one package exposing a
``Family``, one registry line (an entry point of the ``gpugauge.families`` group), one bench
module. It must then appear in the run's tables, the gate and the report, with its chart.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from gpugauge.families import registry
from gpugauge.families.family import Family

ROOT = Path(__file__).resolve().parents[1]
CORE = ROOT / "gpugauge"
# A string equal to a family name that is not the family: (file, string, why).
ALLOWED = {("gpugauge/results/metrics.py", "layers"): "the unit of max_layers"}


def _core_modules() -> list[Path]:
    return [
        p
        for p in sorted(CORE.rglob("*.py"))
        if p.relative_to(CORE).parts[0] not in ("families", "models")
    ]


def _docstrings(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        first = body[0] if isinstance(body, list) and body else None
        if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
            ids.add(id(first.value))
    return ids


def test_registry_holds_the_five_families() -> None:
    assert list(registry()) == ["vgg_swap", "layers", "layer_fit", "distributed", "amp"]
    assert all(isinstance(f, Family) for f in registry().values())


@pytest.mark.parametrize("path", _core_modules(), ids=lambda p: str(p.relative_to(ROOT)))
def test_core_module_names_no_family(path: Path) -> None:
    """No import of a family package, no family name as a string or an identifier."""
    names = set(registry())
    rel = str(path.relative_to(ROOT))
    tree = ast.parse(path.read_text())
    docs = _docstrings(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            parts = node.module.split(".")
            if parts[:2] == ["gpugauge", "families"] and len(parts) > 2 and parts[2] in names:
                found.append(f"line {node.lineno}: imports {node.module}")
            if node.module == "gpugauge.families":
                found += [
                    f"line {node.lineno}: imports {a.name}" for a in node.names if a.name in names
                ]
        if isinstance(node, ast.Import):
            found += [
                f"line {node.lineno}: imports {a.name}"
                for a in node.names
                if a.name.split(".")[:2] == ["gpugauge", "families"]
                and len(a.name.split(".")) > 2
                and a.name.split(".")[2] in names
            ]
        if (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and id(node) not in docs
            and node.value in names
            and (rel, node.value) not in ALLOWED
        ):
            found.append(f"line {node.lineno}: the string {node.value!r}")
        if isinstance(node, ast.Name | ast.Attribute):
            ident = node.id if isinstance(node, ast.Name) else node.attr
            if ident in names:
                found.append(f"line {node.lineno}: the name {ident}")
    assert not found, f"{rel} names a family: {found}"


TOY_PACKAGE = '''
"""toy: a family a user adds: a sleep that takes longer with more of it."""

from gpugauge.families.family import Family
from gpugauge.results.comparisons import pair_up


def cases(profile):
    from toyfam.workload import cases

    return cases(profile)


class ToyChart:
    name = "toy"
    title = "toy family: median per case"

    def applies(self, data):
        return bool(data.current.measurements)

    def draw(self, data):
        import matplotlib.pyplot as plt

        ms = data.current.measurements
        fig, ax = plt.subplots()
        ax.bar([m.id for m in ms], [m.summary.median for m in ms])
        return fig


def comparisons(measurements):
    return pair_up(
        measurements, "toy", ("naps",), lambda p: p["naps"] == 1,
        lambda p: f"toy {p['device']}", lambda p: f"x{p['naps']}",
    )


FAMILY = Family("toy", "a family added by a test", cases, (ToyChart(),), comparisons)
'''

TOY_WORKLOAD = """
from dataclasses import asdict, dataclass
from typing import ClassVar


@dataclass(frozen=True)
class ToyCase:
    family: ClassVar[str] = "toy"
    naps: int
    device: str = "cpu"

    @property
    def id(self):
        return f"toy-x{self.naps}-{self.device}"

    def as_dict(self):
        return asdict(self)


def cases(profile):
    return [ToyCase(1), ToyCase(2)]
"""

TOY_BENCH = """
import time

import pytest

from gpugauge.plugin import parametrize_cases
from toyfam import cases

pytestmark = pytest.mark.toy


def pytest_generate_tests(metafunc):
    parametrize_cases(metafunc, "case", cases)


def test_toy(case, gauge):
    gauge.measure(case, lambda: time.sleep(0.002 * case.naps))
"""


def _toy_project(tmp_path: Path) -> Path:
    site = tmp_path / "site"
    pkg = site / "toyfam"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(textwrap.dedent(TOY_PACKAGE))
    (pkg / "workload.py").write_text(textwrap.dedent(TOY_WORKLOAD))
    dist = site / "toyfam-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: toyfam\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[gpugauge.families]\ntoy = toyfam:FAMILY\n")
    project = tmp_path / "project"
    project.mkdir()
    (project / "tolerances").mkdir()  # the built-in tolerances
    (project / "test_toy.py").write_text(textwrap.dedent(TOY_BENCH))
    (project / "conftest.py").write_text('pytest_plugins = ["gpugauge.plugin"]\n')
    return site


def _run(args: list[str], cwd: Path, site: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(ROOT)])}
    return subprocess.run(
        [sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )


@pytest.mark.slow
def test_a_toy_family_joins_through_the_registry_alone(tmp_path: Path) -> None:
    site = _toy_project(tmp_path)
    project = tmp_path / "project"
    common = [
        "-m",
        "pytest",
        "test_toy.py",
        "-p",
        "no:cacheprovider",
        "--gauge-rounds",
        "5",
        "--gauge-warmup",
        "1",
        "--gauge-baselines-dir",
        "baselines",
        "--gauge-tolerances-dir",
        "tolerances",
    ]
    first = _run([*common, "--gauge-update-baselines"], project, site)
    assert first.returncode == 0, first.stdout + first.stderr
    assert list((project / "baselines").rglob("toy.json")), first.stdout
    gated = _run([*common, "--gauge-gate", "--benchmark-json", "run.json"], project, site)
    out = gated.stdout
    assert gated.returncode == 0, out + gated.stderr
    for expected in ("toy-x1-cpu", "toy-x2-cpu", "gpugauge gate"):  # results, gate tables
        assert expected in out
    assert "toy cpu" in out  # its comparison, derived at the end of the run
    report = _run(
        [
            "-m",
            "gpugauge",
            "report",
            "--current",
            "run.json",
            "--out",
            "reports",
            "--baselines-dir",
            "baselines",
            "--tolerances-dir",
            "tolerances",
        ],
        project,
        site,
    )
    assert report.returncode == 0, report.stdout + report.stderr
    md = (project / "reports" / "report.md").read_text()
    assert "toy-x2-cpu" in md
    assert "toy cpu" in md
    assert (project / "reports" / "report-toy.png").is_file()
