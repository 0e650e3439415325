"""The README as a newcomer reads it: each example runs on its own, every repository path it
names exists, its options table lists every option, and CI runs its test command."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
TEXT = README.read_text()
FENCE = re.compile(r"```(\w*)\n(.*?)```", re.S)
PYTHON_BLOCKS = [code for lang, code in FENCE.findall(TEXT) if lang == "python"]


def _section(title: str) -> str:
    start = TEXT.index(f"\n## {title}\n")
    end = TEXT.find("\n## ", start + 1)
    return TEXT[start : end if end > 0 else None]


def test_the_readme_is_a_page_a_newcomer_reads() -> None:
    assert len(PYTHON_BLOCKS) >= 3
    own = _section("Write your own benchmark")
    assert own.index("gauge(fn, *args, **kwargs)") < own.index("gauge.measure(spec, fn)")
    assert own.index("gauge.measure(spec, fn)") < own.index("A family of your own")


@pytest.mark.parametrize(
    "code", PYTHON_BLOCKS, ids=[f"block{i}" for i in range(len(PYTHON_BLOCKS))]
)
@pytest.mark.slow
def test_each_example_runs_on_its_own(pytester: pytest.Pytester, code: str) -> None:
    """Each block alone: a test module runs under pytest, anything else as a script.

    The test modules get the plugin the way a plain checkout loads it (a conftest naming
    it) and nothing else: no markers in an ini, no other block's imports.
    """
    if "def test_" not in code:
        done = subprocess.run(
            [sys.executable, "-c", code], cwd=pytester.path, capture_output=True, text=True
        )
        assert done.returncode == 0, done.stderr
        return
    pytester.makeconftest('pytest_plugins = ["gpugauge.plugin"]\n')
    pytester.makepyfile(test_example=code)
    saved = pytester.path / "out.json"
    result = pytester.runpytest(
        "-p", "no:cacheprovider", "--gauge-rounds", "3", f"--benchmark-json={saved}"
    )
    outcomes = result.parseoutcomes()
    assert outcomes.get("passed", 0) >= 1, result.stdout.str()
    assert not outcomes.get("failed"), result.stdout.str()
    assert not outcomes.get("errors"), result.stdout.str()
    assert saved.exists()


def _named_paths() -> set[str]:
    """Repository paths the README names: inline code and link targets outside code blocks."""
    prose = FENCE.sub("", TEXT)
    tokens = re.findall(r"`([^`\s]+)`", prose) + re.findall(r"\]\(([^)\s]+)\)", prose)
    top = {p.name for p in ROOT.iterdir()}
    out = set()
    for token in tokens:
        if any(c in token for c in "<>{}|=:") or token.startswith(("-", "http")):
            continue
        first = token.split("/")[0]
        if ("/" in token and first in top) or re.fullmatch(r"[\w.-]+\.(py|md|toml|yml|ini)", token):
            out.add(token)
    return out


def test_every_path_the_readme_names_exists() -> None:
    paths = _named_paths()
    assert {"docs/method.md", "docs/vgg_swap.md", "docs/layers.md", ".ci/run"} <= paths
    missing = sorted(p for p in paths if not list(ROOT.glob(p.rstrip("/"))))
    assert not missing, f"README.md names paths that do not exist: {missing}"


def test_each_family_has_a_paragraph_and_a_page() -> None:
    from gpugauge.families import registry

    families = _section("Families")
    for name in registry():
        assert f"**{name}**" in families
        assert f"(docs/{name}.md)" in families
        assert (ROOT / "docs" / f"{name}.md").is_file()


def test_the_options_table_lists_every_option(pytester: pytest.Pytester) -> None:
    pytester.makeconftest('pytest_plugins = ["gpugauge.plugin"]\n')
    helped = pytester.runpytest("--help").stdout.lines
    start = helped.index("gpugauge benchmarks:")
    options = set()
    for line in helped[start + 1 :]:
        if line and not line.startswith(" "):
            break  # the next group
        options.update(re.findall(r"^  (--[a-z0-9-]+)", line))
    assert "--gauge-stop-after" in options
    table = _section("Options")
    missing = sorted(o for o in options if f"`{o}" not in table)
    assert not missing, f"options missing from the README's table: {missing}"


def test_ci_runs_the_readme_test_command() -> None:
    quick = _section("Quick start")
    assert "python -m pytest benches -k vgg_swap --benchmark-autosave" in quick
    assert 'pip install -e ".[dev]" && python -m pytest tests' in quick
    ci = (ROOT / ".ci" / "run").read_text()
    assert 'pip install -q -e ".[dev]"' in ci
    assert "\npython -m pytest tests\n" in ci
    assert "apt-get install -y -qq chromium chromium-driver" in ci
