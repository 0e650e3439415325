"""The README as a newcomer reads it: each example runs on its own, every repository path it
names exists, every command it gives parses (pytest's options with the plugin, gpugauge's
subcommands and options, pip's extras), its options table lists every option, and CI runs
its test command."""

from __future__ import annotations

import argparse
import re
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
TEXT = README.read_text()
# the README's first example, then the page its "Write your own benchmark" links to
WRITING = (ROOT / "docs" / "benchmarks.md").read_text()
FENCE = re.compile(r"```(\w*)\n(.*?)```", re.S)
PYTHON_BLOCKS = [
    code for page in (TEXT, WRITING) for lang, code in FENCE.findall(page) if lang == "python"
]
BASH_BLOCKS = [code for lang, code in FENCE.findall(TEXT) if lang == "bash"]
PYTHONS = ("python", "python3")


def _section(title: str) -> str:
    start = TEXT.index(f"\n## {title}\n")
    end = TEXT.find("\n## ", start + 1)
    return TEXT[start : end if end > 0 else None]


def test_the_readme_is_a_page_a_newcomer_reads() -> None:
    """A user's page: its first example in the README, the next two a link away."""
    assert len(PYTHON_BLOCKS) >= 3
    own = _section("Write your own benchmark")
    assert own.index("gauge(fn, *args, **kwargs)") < own.index("docs/benchmarks.md")
    assert WRITING.index("gauge.measure(spec, fn)") < WRITING.index("A family of your own")
    assert len(TEXT.splitlines()) <= 280, "README.md: a user's page; lab notes go to docs/"


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


def _commands() -> list[list[str]]:
    """The commands of the README's bash blocks, one per line or ``&&`` part, comments off."""
    out: list[list[str]] = []
    for block in BASH_BLOCKS:
        for line in block.splitlines():
            command: list[str] = []
            for word in [*shlex.split(line, comments=True), "&&"]:
                if word != "&&":
                    command.append(word)
                elif command:
                    out.append(command)
                    command = []
    return out


def _inline_commands() -> list[list[str]]:
    """Commands in the prose's inline code: ``python -m pytest ...``, ``gpugauge ...``."""
    spans = re.findall(r"`([^`]+)`", FENCE.sub("", TEXT))
    return [
        shlex.split(span)
        for span in spans
        if span.startswith(("python -m pytest ", "python -m gpugauge ", "gpugauge "))
    ]


def _module_args(command: list[str], module: str) -> list[str] | None:
    """The arguments of ``python -m MODULE ...`` (``gpugauge ...`` for the CLI), else None."""
    if command[:1] == [module] and module == "gpugauge":
        return command[1:]
    if command[:1] and command[0] in PYTHONS and command[1:3] == ["-m", module]:
        return command[3:]
    return None


def test_the_readme_gives_its_commands_in_bash_blocks() -> None:
    """Every command is one the tests below check; a new kind of command needs a check."""
    commands = _commands()
    assert ["python", "-m", "pytest", "tests"] in commands
    known = ("pytest", "gpugauge", "venv")
    unchecked = [
        " ".join(c)
        for c in commands
        if c[:2] != ["pip", "install"]
        and c[0] != "."
        and not (c[0] in PYTHONS and c[1] == "-m" and c[2] in known)
    ]
    assert not unchecked, f"README commands no test checks: {unchecked}"


def test_the_readme_pytest_commands_parse(pytester: pytest.Pytester) -> None:
    """Each option is one pytest knows with the plugin loaded; each path given exists."""
    runs = [a for c in _commands() + _inline_commands() if (a := _module_args(c, "pytest"))]
    assert len(runs) >= 4
    for args in runs:
        config = pytester.parseconfig("-p", "gpugauge.plugin", *args)  # UsageError if unknown
        missing = [a for a in config.args if not (ROOT / a).exists()]
        assert not missing, f"{args}: no such path in the repository: {missing}"
    # the options the prose names outside a command
    named = set(re.findall(r"(--(?:gauge|benchmark)-[a-z0-9-]*[a-z0-9])", TEXT))
    helped = "\n".join(pytester.runpytest("-p", "gpugauge.plugin", "--help").stdout.lines)
    unknown = sorted(o for o in named if not re.search(rf"^ +{o}\b", helped, re.M))
    assert not unknown, f"README options pytest does not know: {unknown}"


def _subparser(parser: argparse.ArgumentParser, words: list[str]) -> argparse.ArgumentParser:
    """The parser of the subcommand the leading words name (``check gate``), or a failure."""
    for word in words:
        subs = next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)
        if subs is None or word.startswith("-"):
            break
        assert word in subs.choices, f"gpugauge has no command {word!r} ({', '.join(subs.choices)})"
        parser = subs.choices[word]
    return parser


def test_the_readme_gpugauge_commands_parse() -> None:
    """Each subcommand exists and knows the options given; a full command parses whole."""
    from gpugauge.cli import build_parser

    whole = [a for c in _commands() if (a := _module_args(c, "gpugauge"))]
    named = [a for c in _inline_commands() if (a := _module_args(c, "gpugauge"))]
    assert len(whole) >= 5
    assert ["check", "timer"] in named
    for args in whole + named:
        parser = _subparser(build_parser(), args)
        options = [a.split("=")[0] for a in args if a.startswith("--")]
        unknown = [o for o in options if o not in parser._option_string_actions]
        assert not unknown, f"gpugauge {' '.join(args)}: unknown options {unknown}"
    for args in whole:
        try:
            build_parser().parse_args(args)
        except SystemExit as exit_:
            pytest.fail(f"gpugauge {' '.join(args)} does not parse (exit {exit_.code})")


def test_the_readme_pip_extras_exist() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = set(project["optional-dependencies"])
    installs = [c for c in _commands() if c[:2] == ["pip", "install"]]
    asked = {
        e
        for c in installs
        for w in c
        if (m := re.fullmatch(r"\.\[(.+)\]", w))
        for e in m[1].split(",")
    }
    assert asked == {"families", "dev"}
    assert asked <= extras


def test_each_family_has_a_paragraph_and_a_page() -> None:
    from gpugauge.family.registry import registry

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


def test_the_options_table_gives_the_profiles_own_defaults() -> None:
    """The defaults it states by profile (smoke, seed, full) are the settings the code has."""
    from gpugauge.core.profiles import PROFILE_SETTINGS

    def three(field: str) -> str:
        return ", ".join(f"{v[field]:g}" for v in PROFILE_SETTINGS.values())

    row = next(x for x in TEXT.splitlines() if x.startswith("| `--gauge-min-rounds N`"))
    assert f"F is {three('target_ci')} and S {three('budget_s')} (smoke, seed, full)" in row
    row = next(x for x in TEXT.splitlines() if x.startswith("| `--gauge-warmup N`"))
    assert f"and seconds ({three('warmup_s')} by profile)" in row
    row = next(x for x in TEXT.splitlines() if x.startswith("| `--gauge-min-time S`"))
    assert f"at least S seconds ({three('min_time_s')} by profile)" in row


def test_ci_runs_the_readme_test_command() -> None:
    quick = _section("Quick start")
    assert "python -m pytest benches -k vgg_swap --benchmark-autosave" in quick
    assert 'pip install -e ".[dev]" && python -m pytest tests' in quick
    ci = (ROOT / ".ci" / "run").read_text()
    assert 'pip install -q -e ".[dev]"' in ci
    assert "\npython -m pytest tests\n" in ci
    assert "apt-get install -y -qq chromium chromium-driver" in ci


def test_the_guides_gpugauge_commands_parse() -> None:
    """Each ``gpugauge`` command in a guide's bash blocks parses whole, as the README's do.

    A guide's example is copied as often as the README's: docs/ab.md's ``--gated-args
    "--gauge-gate"`` read the lone option as one of argparse's own.
    """
    from gpugauge.cli import build_parser

    checked = 0
    for page in sorted((ROOT / "docs").glob("*.md")):
        for lang, block in FENCE.findall(page.read_text()):
            if lang != "bash":
                continue
            for line in block.replace("\\\n", " ").splitlines():
                words = shlex.split(line, comments=True)
                args = _module_args(words, "gpugauge") if words else None
                if not args:
                    continue
                # a value the page leaves to the reader ($(date ...), <placeholders>)
                args = [re.sub(r"\$\(\(.*\)\)|\$\w+", "1800000000", a) for a in args]
                try:
                    build_parser().parse_args(args)
                except SystemExit as exit_:
                    pytest.fail(f"{page.name}: gpugauge {' '.join(args)} (exit {exit_.code})")
                checked += 1
    assert checked >= 5
