"""What a newcomer reads in ``--help`` is true (issue 51, build 4).

``gpugauge --help`` named reports, baselines, env, check and history in its prose but not
ab, bisect or confirm; ``history --help`` omitted ``ab``; ``env`` had no description;
``confirm --history HISTORY`` was ``PATH|URL`` elsewhere; ``ab --profile`` said
"(default: theirs)"; on a CPU the A/B said "same GPU"; and an A/B in a project without
``benches/`` failed with "0 tests collected" and no hint to pass ``--benches``.
"""

import argparse
import re
from collections import defaultdict

import pytest

from gpugauge.cli import build_parser
from gpugauge.core.commands import benches_hint, parsers


def _help(*argv: str) -> str:
    parser = build_parser()
    for name in argv:
        parser = next(
            a.choices[name]
            for a in parser._actions
            if isinstance(a, argparse._SubParsersAction) and name in a.choices
        )
    return parser.format_help()


def _commands(parser: argparse.ArgumentParser) -> list[str]:
    return [
        name
        for a in parser._actions
        if isinstance(a, argparse._SubParsersAction)
        for name in a.choices
    ]


def test_the_top_help_names_every_command_in_its_prose() -> None:
    parser = build_parser()
    commands = _commands(parser)
    assert {"report", "baseline", "env", "check", "ab", "bisect", "confirm", "history"} <= set(
        commands
    )
    prose = " ".join((parser.description or "").split())
    for name in commands:
        assert f"({name})" in prose, name
    listed = _help()
    for name in commands:
        assert re.search(rf"^\s+{name}\s", listed, re.M), name


def test_every_command_and_subcommand_has_a_help_line_and_a_description() -> None:
    top = build_parser()
    for p in parsers(top):
        for group in (a for a in p._actions if isinstance(a, argparse._SubParsersAction)):
            helped = {c.dest for c in group._choices_actions if c.help}
            assert helped == set(group.choices), f"{p.prog}: no help line for some command"
            if p is top:  # each command's own --help says what it does
                for name, sub in group.choices.items():
                    assert sub.description, f"gpugauge {name} --help has no description"


def test_history_help_lists_every_subcommand() -> None:
    text = _help("history")
    history = next(p for p in parsers(build_parser()) if p.prog == "gpugauge history")
    for name in _commands(history):
        assert f"gpugauge history {name}" in text, name


def test_an_option_is_spelled_the_same_in_every_command() -> None:
    spelled: dict[str, set[str]] = defaultdict(set)
    for p in parsers(build_parser()):
        for a in p._actions:
            if not a.option_strings or a.nargs == 0:
                continue
            usage = p._get_formatter()._format_args(a, a.dest.upper())
            for opt in a.option_strings:
                spelled[opt].add(usage)
    # --id: a glob of case ids where it selects (list, changes, export), one exact id
    # where it names a case to accept; the metavar says which
    mixed = {o: sorted(s) for o, s in spelled.items() if len(s) > 1 and o != "--id"}
    assert not mixed, mixed
    assert spelled["--history"] == {"PATH|URL"}


def test_help_says_what_is_true() -> None:
    ab = " ".join(_help("ab").split())
    assert "theirs" not in ab
    assert "smoke without a GPU and seed with one" in ab
    env = " ".join(_help("env").split())
    assert "environment fingerprint as JSON" in env


def test_ab_on_a_cpu_says_so() -> None:
    from gpugauge.ab.render import device_word
    from gpugauge.ab.result import CaseAB

    class Report:  # the fields device_word reads
        def __init__(self, device: str, ids: list[str]) -> None:
            self.device = device
            self.cases = tuple(CaseAB(i, f"t[{i}]") for i in ids)

    assert device_word(Report("Intel Xeon; torch 2.11.0; driver -", ["x"])) == "CPU"  # type: ignore[arg-type]
    assert device_word(Report("NVIDIA H200; torch 2.11.0; driver 580", ["a-cpu"])) == "CPU"  # type: ignore[arg-type]
    assert device_word(Report("NVIDIA H200; torch 2.11.0; driver 580", ["a-cuda"])) == "GPU"  # type: ignore[arg-type]


@pytest.mark.parametrize("command", ["ab", "bisect", "confirm"])
def test_a_failed_ab_without_benches_hints_at_the_option(
    command: str, tmp_path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    args = argparse.Namespace(command=command, benches="benches", pytest_args=[])
    benches_hint(args)
    err = capsys.readouterr().err
    assert f"gpugauge {command}: hint: there is no folder benches here" in err
    assert "--benches PATH" in err
    (tmp_path / "benches").mkdir()
    benches_hint(args)
    assert capsys.readouterr().err == ""
