"""How families are declared and loaded: one entry-point group, read from a checkout or an install.

Real files only: ``pyproject.toml`` files, ``.dist-info`` folders and modules written to
``tmp_path`` and put on ``sys.path``, read by :mod:`importlib.metadata` as an install is.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from gpugauge.family.entries import (
    Declaration,
    FamilyError,
    checkout_pyproject,
    declared_in,
    entries,
    gather,
)
from gpugauge.family.registry import load, registry

ROOT = Path(__file__).resolve().parents[1]
PROJECT = '[project]\nname = "{name}"\n\n[project.entry-points."gpugauge.families"]\n{lines}'


def _dist(site: Path, name: str, lines: str) -> None:
    """An installed distribution's metadata, as pip leaves it: its entry points."""
    info = site / f"{name}-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[gpugauge.families]\n{lines}")


def test_a_checkout_declares_the_built_in_families_in_its_pyproject() -> None:
    assert checkout_pyproject() == ROOT / "pyproject.toml"
    own = declared_in(ROOT / "pyproject.toml")
    assert [e.name for e in own] == ["amp", "distributed", "layer_fit", "layers", "vgg_swap"]
    assert [e.name for e in entries()] == [e.name for e in own]  # nothing else installed here
    assert list(registry()) == [e.name for e in own]


def test_only_gpugauge_s_own_pyproject_beside_the_package_is_read(tmp_path: Path) -> None:
    package = tmp_path / "gpugauge"
    package.mkdir()
    assert checkout_pyproject(package) is None  # an installed wheel: nothing beside it
    (tmp_path / "pyproject.toml").write_text(PROJECT.format(name="other", lines=""))
    assert checkout_pyproject(package) is None  # someone else's project
    (tmp_path / "pyproject.toml").write_text(PROJECT.format(name="gpugauge", lines=""))
    assert checkout_pyproject(package) == tmp_path / "pyproject.toml"


@pytest.mark.parametrize(
    ("lines", "says"),
    [
        ("toy = 3\n", "family toy = 3 must be a 'module:attribute'"),
        ('toy = "toyfam"\n', "family toy (PATH): 'toyfam' is not 'module:attribute'"),
        (
            '"to-y" = "toyfam:FAMILY"\n',
            "family 'to-y' (PATH): the name must be a Python identifier",
        ),
        ("toy = [\n", "PATH: cannot read the families it declares"),
    ],
)
def test_a_bad_declaration_names_the_file_and_the_family(
    tmp_path: Path, lines: str, says: str
) -> None:
    path = tmp_path / "pyproject.toml"
    path.write_text(PROJECT.format(name="gpugauge", lines=lines))
    with pytest.raises(FamilyError) as err:
        declared_in(path)
    assert says.replace("PATH", str(path)) in str(err.value)


def test_installed_families_join_the_checkout_s_own_in_name_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _dist(tmp_path, "toyfam", "toy = toyfam:FAMILY\nbear = toyfam:BEAR\n")
    # a stale install of gpugauge itself (an editable install made before a family was added)
    _dist(tmp_path, "gpugauge", "old = gpugauge.families.old:FAMILY\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    own = [Declaration("amp", "gpugauge.families.amp:FAMILY", "pyproject.toml")]
    got = gather(own)
    assert [(e.name, e.source) for e in got] == [
        ("amp", "pyproject.toml"),
        ("bear", "installed by toyfam"),
        ("toy", "installed by toyfam"),
    ]
    # installed, not a checkout: gpugauge's own metadata is read instead
    assert [e.name for e in gather(None)] == ["bear", "old", "toy"]


def test_a_family_declared_twice_names_both(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _dist(tmp_path, "theirs", "amp = theirs.amp:FAMILY\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    own = [Declaration("amp", "gpugauge.families.amp:FAMILY", "pyproject.toml")]
    with pytest.raises(FamilyError) as err:
        gather(own)
    assert str(err.value) == (
        "family amp is declared twice: gpugauge.families.amp:FAMILY (pyproject.toml) "
        "and theirs.amp:FAMILY (installed by theirs)"
    )


BROKEN = """
from gpugauge.family import Family

NOT_ONE = 3
MISNAMED = Family("other", "a family under another name", lambda profile: [])
"""


@pytest.mark.parametrize(
    ("target", "says"),
    [
        (
            "brokenfam.nowhere:FAMILY",
            "family toy (brokenfam.nowhere:FAMILY, test) failed to load: ModuleNotFoundError",
        ),
        ("brokenfam:MISSING", "failed to load: AttributeError"),
        (
            "brokenfam:NOT_ONE",
            "family toy (brokenfam:NOT_ONE, test) is a int, not a gpugauge Family",
        ),
        ("brokenfam:MISNAMED", "is named 'other': an entry point's name is its family's name"),
    ],
)
def test_a_declared_family_that_does_not_load_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, target: str, says: str
) -> None:
    (tmp_path / "brokenfam.py").write_text(BROKEN)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "brokenfam", raising=False)
    with pytest.raises(FamilyError) as err:
        load(Declaration("toy", target, "test"))
    assert says in str(err.value)


UNRELATED = "def test_plain():\n    assert True\n"
BENCH = """
from gpugauge.plugin import parametrize_cases


def pytest_generate_tests(metafunc):
    parametrize_cases(metafunc, "case", lambda profile: [])


def test_bench(case):
    pass
"""


@pytest.mark.slow
def test_a_bad_declaration_stops_only_a_run_that_uses_gpugauge(tmp_path: Path) -> None:
    """The plugin is in every pytest run: a broken family must not break an unrelated one."""
    checkout = tmp_path / "checkout"
    shutil.copytree(
        ROOT / "gpugauge", checkout / "gpugauge", ignore=shutil.ignore_patterns("*.pyc")
    )
    table = '[project.entry-points."gpugauge.families"]\n'
    text = (ROOT / "pyproject.toml").read_text().replace(table, table + 'toy = "nowhere:FAMILY"\n')
    (checkout / "pyproject.toml").write_text(text)
    project = tmp_path / "project"
    project.mkdir()
    (project / "conftest.py").write_text('pytest_plugins = ["gpugauge.plugin"]\n')
    (project / "test_plain.py").write_text(UNRELATED)
    (project / "test_bench.py").write_text(textwrap.dedent(BENCH))
    env = {**os.environ, "PYTHONPATH": str(checkout)}

    def pytest_run(*args: str) -> subprocess.CompletedProcess[str]:
        cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args]
        return subprocess.run(cmd, cwd=project, env=env, capture_output=True, text=True)

    plain = pytest_run("test_plain.py")
    assert plain.returncode == 0, plain.stdout + plain.stderr
    used = pytest_run("test_bench.py", "--gauge-no-history")
    assert used.returncode != 0
    assert "family toy (nowhere:FAMILY, " in used.stdout + used.stderr
    assert "failed to load: ModuleNotFoundError" in used.stdout + used.stderr
