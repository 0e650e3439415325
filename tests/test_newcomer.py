"""A pytest-benchmark user adopts gpugauge by installing it (issue 25).

What the wheel holds, a project of the user's own with no conftest or ini (the plugin found
through its entry point: autosave, ``pytest-benchmark compare``, ``gpugauge report``,
``gpugauge baseline``), and a command line whose help describes every command and option.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from gpugauge.__main__ import main

ROOT = Path(__file__).resolve().parents[1]
ENTRY_POINT = "gpugauge.plugin = gpugauge.plugin"


def _run(
    *args: str, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_the_wheel_holds_gpugauge_only_and_declares_the_plugin_and_families(tmp_path: Path) -> None:
    # built from a copy, so that the build leaves nothing in the checkout
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    for name in ("gpugauge", "models"):
        shutil.copytree(ROOT / name, src / name, ignore=shutil.ignore_patterns("*.pyc"))
    built = _run(
        sys.executable,
        "-m",
        "pip",
        "wheel",
        "--no-deps",
        "-q",
        "-w",
        str(tmp_path),
        str(src),
        cwd=tmp_path,
    )
    assert built.returncode == 0, built.stderr[-3000:]
    [wheel] = tmp_path.glob("gpugauge-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        [entry_points] = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
        declared = zf.read(entry_points).decode()
    top = {n.split("/")[0] for n in names}
    # no top-level `models` (or any other) to collide with a user's own packages
    assert {t for t in top if not t.endswith(".dist-info")} == {"gpugauge"}, top
    assert "gpugauge/models/vgg.py" in names  # the top-level models/, shipped inside
    with zipfile.ZipFile(wheel) as zf:  # as the folder's own package, not the checkout's pointer
        shipped = zf.read("gpugauge/models/__init__.py")
    assert shipped == (ROOT / "models" / "__init__.py").read_bytes()
    assert "[pytest11]" in declared
    assert ENTRY_POINT in declared
    # the built-in families, declared as any other family is; installed, that list is read
    assert "[gpugauge.families]" in declared
    site = tmp_path / "site"
    with zipfile.ZipFile(wheel) as zf:
        zf.extractall(site)
    listed = _run(
        sys.executable,
        "-c",
        "from gpugauge.family.entries import checkout_pyproject, entries\n"
        "from gpugauge.family.registry import registry\n"
        "print(checkout_pyproject(), [e.name for e in entries()], list(registry()))",
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(site)},
    )
    five = ["amp", "distributed", "layer_fit", "layers", "vgg_swap"]
    assert listed.stdout.strip() == f"None {five} {five}", listed.stdout + listed.stderr


def _readme_examples() -> str:
    """The README's example, then those of the page it links to for more."""
    pages = [(ROOT / name).read_text() for name in ("README.md", "docs/benchmarks.md")]
    return "\n\n".join(c for t in pages for c in re.findall(r"```python\n(.*?)```", t, re.S))


NEW_TEST = """import torch


def test_x(gauge):
    a = torch.randn(64, 64)
    b = torch.randn(64, 64)
    gauge(torch.mm, a, b)
"""


@pytest.mark.slow
def test_a_project_of_ones_own_with_no_conftest_or_ini(tmp_path: Path) -> None:
    project = tmp_path / "myproject"
    project.mkdir()
    found = _run(
        sys.executable,
        "-c",
        "import importlib.metadata as m; "
        "print([e.value for e in m.entry_points(group='pytest11')])",
        cwd=project,
    )
    if "gpugauge.plugin" not in found.stdout:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail("CI=true: gpugauge is not installed with its pytest11 entry point")
        pytest.skip("gpugauge is not installed here (pip install -e .): no entry point")
    (project / "test_x.py").write_text(NEW_TEST)
    (project / "test_readme_examples.py").write_text(_readme_examples())
    assert sorted(p.name for p in project.iterdir()) == ["test_readme_examples.py", "test_x.py"]

    ran = _run(
        sys.executable, "-m", "pytest", "--gauge-rounds", "3", "--benchmark-autosave", cwd=project
    )
    assert ran.returncode == 0, ran.stdout[-4000:] + ran.stderr[-2000:]
    assert "gpugauge results (CPU smoke check" in ran.stdout or "device-timed" in ran.stdout
    assert "report: python -m gpugauge report" in ran.stdout
    # every README example ran, from one file: no example shadows another's names
    for bid in ("test_x.py::test_x", "test_readme_examples.py::test_matmul", "softmax-256x256-cpu"):
        assert bid in ran.stdout
    assert "2 skipped" not in ran.stdout  # only the CUDA softmax case skips
    assert "PytestUnknownMarkWarning" not in ran.stdout  # the plugin registered its markers
    [saved] = (project / ".benchmarks").rglob("*.json")

    compare = shutil.which("pytest-benchmark", path=str(Path(sys.executable).parent))
    assert compare is not None
    compared = _run(compare, "compare", cwd=project)
    assert compared.returncode == 0, compared.stderr[-2000:]
    assert "test_x" in compared.stdout

    reported = _run(sys.executable, "-m", "gpugauge", "report", cwd=project)
    assert reported.returncode == 0, reported.stderr[-2000:]
    page = (project / "reports" / "report.md").read_text()
    assert "test_x.py::test_x" in page
    assert "## Charts not drawn" in page  # a first report: it says why

    recorded = _run(sys.executable, "-m", "gpugauge", "baseline", str(saved), cwd=project)
    assert recorded.returncode == 0, recorded.stderr[-2000:]
    written = [p.relative_to(project / "baselines") for p in (project / "baselines").rglob("*")]
    assert any(p.name == "custom.json" for p in written), written
    assert not [p for p in written if p.name.endswith(".lock")], written


def _parser() -> argparse.ArgumentParser:
    """The CLI's parser, as main() builds it."""
    seen: list[argparse.ArgumentParser] = []

    def capture(self: argparse.ArgumentParser, *args: object, **kwargs: object) -> None:
        seen.append(self)
        raise SystemExit(0)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(argparse.ArgumentParser, "parse_args", capture)
        with pytest.raises(SystemExit):
            main([])
    return seen[0]


def _undocumented(parser: argparse.ArgumentParser, where: str = "gpugauge") -> list[str]:
    """Subcommands without a help line, then options of OWN_COMMANDS without help."""
    out = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helped = {a.dest: a.help for a in action._choices_actions}
            for name, sub in action.choices.items():
                if not helped.get(name):
                    out.append(f"{where} {name}")
                if name in OWN_COMMANDS or where != "gpugauge":
                    out += _undocumented(sub, f"{where} {name}")
        elif action.help is None and not isinstance(action, argparse._HelpAction):
            out.append(f"{where} {'/'.join(action.option_strings) or action.dest}")
    return out


# every option of these has help; `check` and `history` are held to a help line each here
# (their options are their packages' own tests' business)
OWN_COMMANDS = ("report", "baseline", "env")


def test_every_command_and_option_has_help(capsys: pytest.CaptureFixture) -> None:
    parser = _parser()
    assert "Command line of gpugauge" not in (parser.description or "")
    assert _undocumented(parser) == []
    with pytest.raises(SystemExit):
        main(["--help"])
    top = capsys.readouterr().out
    for command in ("report", "baseline", "env", "check", "ab", "bisect", "confirm", "history"):
        assert re.search(rf"^    {command}\s+\S", top, re.M), f"{command} has no help line"
    with pytest.raises(SystemExit):
        main(["report", "--help"])
    assert "folder for <name>.md" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["baseline", "--help"])
    assert "<device-class>/<family>.json" in capsys.readouterr().out


def test_no_help_shows_docstring_markup() -> None:
    from gpugauge.cli import build_parser
    from gpugauge.core.commands import parsers

    helps = {p.prog: p.format_help() for p in parsers(build_parser())}
    assert {"gpugauge", "gpugauge check", "gpugauge check gate", "gpugauge history"} <= set(helps)
    assert [prog for prog, text in helps.items() if "``" in text] == []
    # a bare '%' in a help string is argparse's formatting ('10% apart' printed its dict)
    assert [prog for prog, text in helps.items() if "option_strings" in text] == []


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (
            [],
            "gpugauge: error: choose a command: report, baseline, env, check, ab, bisect, "
            "confirm, history",
        ),
        (["check"], "gpugauge check: error: choose a check: timer, gate"),
        (["history"], "gpugauge history: error: choose a history command: list, show,"),
    ],
)
def test_a_missing_command_names_its_choices(
    argv: list[str], said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1].startswith(said)


def test_version_is_the_packages(capsys: pytest.CaptureFixture[str]) -> None:
    import gpugauge
    from gpugauge.core.commands import version

    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out == f"gpugauge {version()}\n"
    assert version() == gpugauge.__version__  # the installed metadata agrees with the package


def test_version_without_an_installed_distribution(monkeypatch: pytest.MonkeyPatch) -> None:
    from importlib.metadata import PackageNotFoundError

    import gpugauge
    from gpugauge.core import commands

    def missing(name: str) -> str:
        raise PackageNotFoundError(name)

    monkeypatch.setattr(commands, "installed_version", missing)
    assert commands.version() == gpugauge.__version__


@pytest.mark.parametrize(
    ("doc", "package"),
    [("docs/method.md", "gpugauge/measure"), ("docs/history.md", "gpugauge/history")],
)
def test_a_page_that_lists_its_package_s_modules_lists_every_one(doc: str, package: str) -> None:
    """method.md and history.md say what each module of their package holds: all of them."""
    text = (ROOT / doc).read_text()
    modules = sorted(p.stem for p in (ROOT / package).glob("*.py") if p.stem != "__init__")
    missing = [m for m in modules if f"`{m}`" not in text]
    assert not missing, f"{doc} does not name {missing} of {package}/"
