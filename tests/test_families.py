"""The family registry: the harness never imports or names a family; a new one needs only itself.

A toy family is added as one folder plus one registration line, both ways a family
registers: as a package of its own whose distribution installs an entry point, and as a
built-in one, a folder under ``gpugauge/families/`` of a checkout plus a line in its
``pyproject.toml``, run with nothing installed. Either way it must then appear in the run's
tables, the gate, the results history and the report, with its chart.
"""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest

from gpugauge.family import Family
from gpugauge.family.registry import registry
from tests.test_import_graph import imports, modules

ROOT = Path(__file__).resolve().parents[1]
CORE = ROOT / "gpugauge"
# the family side: the built-in families and the models they build; the rest is the harness
FAMILY_SIDE = ("gpugauge.families", "gpugauge.models")
# A string equal to a family name that is not the family: (file, string, why).
ALLOWED = {("gpugauge/results/metrics.py", "layers"): "the unit of max_layers"}


def _on_family_side(module: str) -> bool:
    return any(module == side or module.startswith(side + ".") for side in FAMILY_SIDE)


def _harness() -> dict[str, Path]:
    return {name: path for name, path in modules(ROOT).items() if not _on_family_side(name)}


def _docstrings(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        first = body[0] if isinstance(body, list) and body else None
        if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
            ids.add(id(first.value))
    return ids


def test_the_registry_holds_every_declared_family_with_its_bench_and_page() -> None:
    """Derived, not listed (issue 50): a family is its folder, its bench file, its docs page
    and one entry point; the registry, this test and ``.ci/run`` take the list from there."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    declared = project["project"]["entry-points"]["gpugauge.families"]
    assert list(registry()) == sorted(declared)
    assert all(isinstance(f, Family) for f in registry().values())
    for name in registry():
        assert (ROOT / "benches" / f"test_{name}.py").is_file(), name
        assert (ROOT / "docs" / f"{name}.md").is_file(), name
        assert (ROOT / "gpugauge" / "families" / name).is_dir(), name
    assert "registry()" in (ROOT / ".ci" / "run").read_text()  # the CI's loop, not a list


def test_the_harness_never_imports_a_family() -> None:
    """Any import, at any level: the harness reaches a family through the registry alone."""
    names = modules(ROOT)
    found = [
        f"{name} imports {target}"
        for name, path in _harness().items()
        for target in sorted(imports(name, path, names))
        if _on_family_side(target)
    ]
    assert not found, found


@pytest.mark.parametrize(
    "path", sorted(_harness().values()), ids=lambda p: str(p.relative_to(ROOT))
)
def test_core_module_names_no_family(path: Path) -> None:
    """No family name as a string or an identifier (its docstrings may say one)."""
    names = set(registry())
    rel = str(path.relative_to(ROOT))
    tree = ast.parse(path.read_text())
    docs = _docstrings(tree)
    found = []
    for node in ast.walk(tree):
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

from gpugauge.family import Family
from gpugauge.results.comparisons import pair_up


def cases(profile):
    from PKG.workload import cases

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
from PKG import cases

pytestmark = pytest.mark.toy


def pytest_generate_tests(metafunc):
    parametrize_cases(metafunc, "case", cases)


def test_toy(case, gauge):
    gauge.measure(case, lambda: time.sleep(0.002 * case.naps))
"""


def _toy_installed(tmp_path: Path) -> list[Path]:
    """A package of the user's own: its folder, and its distribution's one entry point."""
    site = tmp_path / "site"
    _toy_folder(site / "toyfam", "toyfam")
    dist = site / "toyfam-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: toyfam\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[gpugauge.families]\ntoy = toyfam:FAMILY\n")
    return [site, ROOT]


def _toy_built_in(tmp_path: Path) -> list[Path]:
    """A checkout with a built-in family added: its folder, and one line of pyproject.toml.

    Run with nothing of it installed (the GPU runners' way): the checkout's own table is read.
    """
    checkout = tmp_path / "checkout"
    shutil.copytree(CORE, checkout / "gpugauge", ignore=shutil.ignore_patterns("__pycache__"))
    _toy_folder(checkout / "gpugauge" / "families" / "toy", "gpugauge.families.toy")
    table = '[project.entry-points."gpugauge.families"]\n'
    text = (ROOT / "pyproject.toml").read_text()
    assert table in text
    line = 'toy = "gpugauge.families.toy:FAMILY"\n'
    (checkout / "pyproject.toml").write_text(text.replace(table, table + line))
    return [checkout]


def _toy_folder(folder: Path, package: str) -> None:
    folder.mkdir(parents=True)
    (folder / "__init__.py").write_text(textwrap.dedent(TOY_PACKAGE.replace("PKG", package)))
    (folder / "workload.py").write_text(textwrap.dedent(TOY_WORKLOAD))


def _project(tmp_path: Path, package: str) -> Path:
    project = tmp_path / "project"
    project.mkdir()
    (project / "tolerances").mkdir()  # the built-in tolerances
    (project / "test_toy.py").write_text(textwrap.dedent(TOY_BENCH.replace("PKG", package)))
    (project / "conftest.py").write_text('pytest_plugins = ["gpugauge.plugin"]\n')
    return project


def _run(args: list[str], cwd: Path, path: list[Path]) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(map(str, path))}
    env.pop("GPUGAUGE_HISTORY", None)
    return subprocess.run(
        [sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )


ROUTES = {
    "installed": (_toy_installed, "toyfam"),
    "built-in": (_toy_built_in, "gpugauge.families.toy"),
}


@pytest.mark.slow
@pytest.mark.parametrize("route", list(ROUTES))
def test_a_toy_family_joins_through_its_registration_alone(tmp_path: Path, route: str) -> None:
    add, package = ROUTES[route]
    path = add(tmp_path)
    project = _project(tmp_path, package)
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
        "--gauge-history",
        "history.sqlite",
    ]
    first = _run([*common, "--gauge-update-baselines", "-m", "toy"], project, path)
    assert first.returncode == 0, first.stdout + first.stderr
    assert "2 passed" in first.stdout  # its marker selects it
    assert list((project / "baselines").rglob("toy.json")), first.stdout
    gated = _run([*common, "--gauge-gate", "--benchmark-json", "run.json"], project, path)
    out = gated.stdout
    assert gated.returncode == 0, out + gated.stderr
    for expected in ("toy-x1-cpu", "toy-x2-cpu", "gpugauge gate"):  # results, gate tables
        assert expected in out
    assert "toy cpu" in out  # its comparison, derived at the end of the run
    history = _run(
        ["-m", "gpugauge", "history", "list", "--history", "history.sqlite"], project, path
    )
    assert history.returncode == 0, history.stdout + history.stderr
    assert "toy-x1-cpu" in history.stdout
    assert "toy-x2-cpu" in history.stdout
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
            "--history",
            "history.sqlite",
        ],
        project,
        path,
    )
    assert report.returncode == 0, report.stdout + report.stderr
    md = (project / "reports" / "report.md").read_text()
    assert "toy-x2-cpu" in md
    assert "toy cpu" in md
    assert (project / "reports" / "report-toy.png").is_file()
