"""``gpugauge history``: import (idempotent), list, show, changes, export, accept, errors."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from gpugauge.__main__ import main as gpugauge_main
from gpugauge.history.cli import main
from gpugauge.history.records import HistoryError
from gpugauge.history.store import History
from gpugauge.history.synthetic import CASE, Scenario, series
from tests.fakes import result, run_json, save_run

HOSTS = (("GPU-1111", 0.0, 0), ("GPU-2222", 0.02, 0))


@pytest.fixture
def stepped(tmp_path: Path) -> str:
    """Two hosts, 16 nights, a 4% step with a torch change on night 10."""
    path = str(tmp_path / "h.sqlite")
    points = series(Scenario(hosts=HOSTS, nights=16, step=0.04, step_night=10), 5)
    with History.open(path) as h:
        for p in points:
            h.append(p.run, [p.result])
    return path


def test_import_is_idempotent_and_keeps_saved_verdicts(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    data = run_json([result("relu", 2.0), result("conv", 9.0)])
    data["benchmarks"][0]["extra_info"]["gate"] = {
        "id": "relu",
        "verdict": "regressed",
        "note": "",
        "checks": [  # as the gate writes a check (a partial one is refused: test_bad_inputs)
            {"metric": "time", "baseline": 2.0, "current": 2.2, "ratio": 1.1, "ci_low": 1.08,
             "ci_high": 1.12, "tolerance": 0.03, "verdict": "regressed"}
        ],
    }  # fmt: skip
    saved = tmp_path / "0001_run.json"
    saved.write_text(json.dumps(data))
    other = save_run(tmp_path / "0002_run.json", [result("relu", 2.1)])
    hist = str(tmp_path / "h.sqlite")
    assert main(["import", str(saved), str(other), "--history", hist, "--host", "GPU-abc"]) == 0
    assert main(["import", str(saved), "--history", hist]) == 0
    out = capsys.readouterr().out
    assert "2 runs added" in out
    assert "already in the history" in out
    assert "0 runs added" in out
    with History.open(hist) as h:
        # both runs have one time: the history orders them by run id, a hash of the file
        relu = sorted(h.points("relu"), key=lambda p: p.metric.median)
        assert [p.run.host for p in relu] == ["GPU-abc", "GPU-abc"]
        assert relu[0].result.verdict == "regressed"
        assert relu[0].metric.verdict == "regressed"
        assert not relu[0].accepted
        assert relu[1].result.verdict is None  # saved without --gauge-gate: no reference
        assert not relu[1].accepted
        assert relu[0].run.time.isoformat().startswith("2026-11-22T10:00:00")
        assert relu[0].metric.n == 8


def test_importing_what_is_not_a_run_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"benchmarks": []}')
    assert main(["import", str(bad), "--history", str(tmp_path / "h.sqlite")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"gpugauge history import: {bad}: no gpugauge results")
    assert "\n" not in err


def test_list_counts_runs_per_host(stepped: str, capsys: pytest.CaptureFixture) -> None:
    assert gpugauge_main(["history", "list", "--history", stepped]) == 0
    out = capsys.readouterr().out
    assert "GPU-1111" in out
    assert "GPU-2222" in out
    assert out.count(" 16 ") == 2


def test_show_prints_the_trend_with_its_change_points(
    stepped: str, capsys: pytest.CaptureFixture
) -> None:
    assert main(["show", CASE, "--history", stepped]) == 0
    out = capsys.readouterr().out
    assert "32 runs on 2 hosts" in out
    assert any(bar in out for bar in "▁▂▃▄▅▆▇█")
    assert "◆" in out
    assert "torch 2.11.0 → 2.12.0" in out
    assert main(["show", CASE, "--host", "GPU-1111", "--last", "3", "--history", stepped]) == 0
    shown = capsys.readouterr().out
    assert "3 runs on 1 host" in shown


def test_changes_say_what_changed(stepped: str, capsys: pytest.CaptureFixture) -> None:
    assert main(["changes", "--history", stepped]) == 0
    said = capsys.readouterr().out.strip().splitlines()
    offers = [ln for ln in said if ln.startswith("  the commit behind it")]
    lines = [ln for ln in said if ln not in offers]
    # each step (slower, between two commits) offers the bisect that finds its commit
    assert len(offers) == len(lines)
    assert all("gpugauge bisect " in ln for ln in offers)
    scopes = {line.split("(")[1].split(",")[0] for line in lines}
    assert scopes == {"host GPU-1111", "host GPU-2222", "class synthetic-gpu"}
    assert all("torch 2.11.0 → 2.12.0" in line for line in lines)
    assert all(" 1.04" in line or " 1.03" in line for line in lines)
    assert main(["changes", "--metric", "all", "--history", stepped]) == 0
    every = capsys.readouterr().out.strip().splitlines()
    assert set(said) <= set(every)  # time's, and those of any other metric held
    assert main(["changes", "--id", "other*", "--metric", "all", "--history", stepped]) == 0
    assert "no results match --id 'other*'" in capsys.readouterr().out


def test_export_writes_every_metric_row(
    stepped: str, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    out = tmp_path / "h.csv"
    assert main(["export", "--csv", str(out), "--history", stepped]) == 0
    with out.open() as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 32
    assert {r["host"] for r in rows} == {"GPU-1111", "GPU-2222"}
    assert rows[0]["torch"] == "2.11.0"
    with History.open(stepped) as h:
        frame = h.to_frame()
    assert list(frame.columns) == list(rows[0])
    assert len(frame) == 32


def test_accept_and_undo(stepped: str, capsys: pytest.CaptureFixture) -> None:
    assert main(["accept", "n003-GPU-1111", "--undo", "--history", stepped]) == 0
    assert "1 result of run n003-GPU-1111 no longer accepted" in capsys.readouterr().out
    with History.open(stepped) as h:
        assert not h.points(CASE, host="GPU-1111")[3].accepted


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["show", "no-such-case"], "no case 'no-such-case'"),
        (["list", "--history", "mysql://x/y"], "unsupported scheme 'mysql'"),
        (["show", CASE, "--class", "nvidia-b200"], "--class 'nvidia-b200': case"),
    ],
)
def test_errors_are_one_line(
    stepped: str, argv: list[str], said: str, capsys: pytest.CaptureFixture
) -> None:
    if "--history" not in argv:
        argv = [*argv, "--history", stepped]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert said in err
    assert "\n" not in err


def test_the_default_history_is_the_env_var_or_beside_the_benchmarks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("GPUGAUGE_HISTORY", raising=False)
    History.open(tmp_path / ".benchmarks" / "gpugauge-history.sqlite").close()
    assert main(["list"]) == 0
    assert "no results" in capsys.readouterr().out
    monkeypatch.setenv("GPUGAUGE_HISTORY", str(tmp_path / "elsewhere.sqlite"))
    assert main(["list"]) == 2
    assert "elsewhere.sqlite: no such file" in capsys.readouterr().err


def _tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


@pytest.mark.parametrize("command", [["list"], ["show", CASE], ["changes"], ["export"]])
@pytest.mark.parametrize(
    ("content", "said"),
    [
        (None, "no such file"),
        (b"", "not a gpugauge history"),
        (b"some notes, not a database\n" * 20, "not a SQLite database"),
    ],
)
def test_reading_commands_never_create_or_change_a_history(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture,
    command: list[str],
    content: bytes | None,
    said: str,
) -> None:
    """A missing file, an empty one or another file: one line, exit 2, nothing written."""
    monkeypatch.chdir(tmp_path)
    named = tmp_path / "x" / "h.sqlite"
    if content is not None:
        named.parent.mkdir()
        named.write_bytes(content)
    before = _tree(tmp_path)
    if command == ["export"]:
        command = ["export", "--csv", str(tmp_path / "out.csv")]
    for how in ("option", "env", "default"):
        argv = [*command, "--history", str(named)] if how == "option" else command
        monkeypatch.delenv("GPUGAUGE_HISTORY", raising=False)
        if how == "env":
            monkeypatch.setenv("GPUGAUGE_HISTORY", str(named))
        if how == "default":
            if content is None:
                named = Path(".benchmarks") / "gpugauge-history.sqlite"
            else:
                continue
        assert main(argv) == 2, how
        err = capsys.readouterr().err.strip()
        assert err.startswith(f"gpugauge history {command[0]}: history {named}: {said}"), err
        assert "\n" not in err
        assert _tree(tmp_path) == before, how
        assert not (tmp_path / "x").exists() or content is not None


def test_reading_a_history_leaves_its_file_as_it_was(
    stepped: str, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """No -wal or -shm left behind, not a byte of the history changed."""
    before = _tree(tmp_path)
    for argv in (["list"], ["show", CASE], ["changes"]):
        assert main([*argv, "--history", stepped]) == 0
    assert _tree(tmp_path) == before


def test_every_subcommand_has_help(capsys: pytest.CaptureFixture) -> None:
    for sub in ("list", "show", "changes", "export", "import", "accept"):
        with pytest.raises(SystemExit):
            main([sub, "--help"])
        text = capsys.readouterr().out
        assert "--history PATH|URL" in text
    with pytest.raises(HistoryError):
        History.open("ftp://nowhere")


def test_a_run_of_injected_work_is_not_imported(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    from dataclasses import replace

    slowed = replace(result("x-cpu"), extra={"injected_slowdown_ms": 1.0})
    path = save_run(tmp_path / "injected.json", [slowed])
    assert main(["import", str(path), "--history", str(tmp_path / "h.sqlite")]) == 2
    assert "injected on purpose" in capsys.readouterr().err


def test_show_marks_a_step_from_zero_by_its_values() -> None:
    from gpugauge.history.changepoints import case_changes
    from gpugauge.history.render import trend_text

    from .test_history_synthetic import _memory_series

    points = _memory_series([0, 0, 0, 154e6, 154e6])
    text = trend_text(points, case_changes(points), "memory")
    assert "◆ from 0 to 1.54e+08 (host)" in text
    assert "inf" not in text


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["show", CASE, "--metric", "bogus"], f"--metric 'bogus': case '{CASE}' holds no such"),
        (["show", CASE, "--host", "bogus"], f"--host 'bogus': case '{CASE}' has no runs on it"),
        (["changes", "--metric", "bogus"], "--metric 'bogus': the history holds no such metric"),
        (["changes", "--metric", "memory"], "--metric 'memory': the history holds no such"),
    ],
)
def test_a_filter_value_the_history_does_not_hold_is_refused(
    stepped: str, argv: list[str], said: str, capsys: pytest.CaptureFixture
) -> None:
    """Not answered as if there were no data: exit 2, the option and what is held."""
    assert main([*argv, "--history", stepped]) == 2
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert said in err
    assert "\n" not in err
    assert captured.out == ""
    held = "GPU-1111, GPU-2222" if "--host" in argv else "time"
    assert err.endswith(held), err


@pytest.mark.parametrize("command", [["list"], ["changes"], ["export", "--csv", "x.csv"]])
def test_an_id_glob_that_matches_nothing_says_so(
    stepped: str,
    command: list[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture,
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main([*command, "--id", "nomatch*", "--history", stepped]) == 0
    out = capsys.readouterr().out
    assert "no results match --id 'nomatch*' (the history holds 32 results of 1 cases)" in out
    assert "holds no results" not in out
    assert "no change points" not in out


def test_show_of_one_host_shows_its_runs_only(stepped: str, capsys: pytest.CaptureFixture) -> None:
    assert main(["show", CASE, "--host", "GPU-2222", "--history", stepped]) == 0
    out = capsys.readouterr().out
    assert "16 runs on 1 host" in out
    assert "GPU-1111" not in out


@pytest.mark.parametrize("value", ["0", "-3", "two", "1.5"])
def test_last_takes_a_whole_number_from_one(
    stepped: str, value: str, capsys: pytest.CaptureFixture
) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["show", CASE, "--last", value, "--history", stepped])
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "argument --last" in err
    assert "whole number >= 1" in err


def test_every_integer_option_of_the_history_cli_refuses_zero() -> None:
    """--last (show's and changes') is the only one; a new integer option must validate too."""
    import argparse

    from gpugauge.core.arguments import positive_int
    from gpugauge.history.cli import add_parser

    parser = argparse.ArgumentParser()
    hist = add_parser(parser.add_subparsers())
    subs = next(a for a in hist._actions if isinstance(a, argparse._SubParsersAction))
    typed = [
        (name, a.option_strings, a.type)
        for name, sub in subs.choices.items()
        for a in sub._actions
        if a.type is int or a.type is positive_int
    ]
    assert typed == [("show", ["--last"], positive_int), ("changes", ["--last"], positive_int)]


@pytest.mark.parametrize("existing", [False, True])
def test_an_import_with_one_bad_file_writes_nothing(
    tmp_path: Path, existing: bool, capsys: pytest.CaptureFixture
) -> None:
    """Every file read and checked first: a truncated one, named, and no run added."""
    good = save_run(tmp_path / "good.json", [result("relu", 2.0)])
    other = save_run(tmp_path / "other.json", [result("conv", 9.0)])
    trunc = tmp_path / "trunc.json"
    trunc.write_text(other.read_text()[:200])
    hist = tmp_path / "h.sqlite"
    if existing:
        History.open(hist).close()
    before = hist.read_bytes() if existing else None
    assert main(["import", str(good), str(trunc), "--history", str(hist)]) == 2
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert err.startswith(f"gpugauge history import: {trunc}"), err
    assert "\n" not in err
    assert "added" not in captured.out
    if existing:
        assert hist.read_bytes() == before
        with History.open(hist, read_only=True) as h:
            assert h.runs() == []
    else:
        assert not hist.exists()
    assert main(["import", str(good), str(other), "--history", str(hist)]) == 0
    assert "2 runs added" in capsys.readouterr().out


def test_the_history_help_says_every_measured_run_appends(
    capsys: pytest.CaptureFixture,
) -> None:
    with pytest.raises(SystemExit):
        gpugauge_main(["history", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "gated runs append" not in text
    assert "every measured pytest run appends" in text
    assert "--gauge-no-history" in text


def _two_runs(tmp_path: Path, ids: tuple[str, ...]) -> str:
    """A history of runs with these ids (one result each, case 'relu')."""
    from dataclasses import replace

    path = str(tmp_path / "runs.sqlite")
    points = series(Scenario(hosts=HOSTS[:1], nights=len(ids)), 1)
    with History.open(path) as h:
        for p, run_id in zip(points, ids, strict=True):
            h.append(replace(p.run, id=run_id), [p.result])
    return path


def test_accept_takes_the_run_id_that_show_prints(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    full = "60ee3c9175d74a1b8c0d2e4f6a8b0c2d"
    hist = _two_runs(tmp_path, (full, "60ee3c0000000000000000000000000b"))
    assert main(["show", CASE, "--history", hist]) == 0
    shown = next(w for w in capsys.readouterr().out.split() if w.startswith("60ee3c91"))
    assert shown.endswith("…")
    assert main(["accept", shown.rstrip("…"), "--undo", "--history", hist]) == 0
    assert f"1 result of run {full} no longer accepted" in capsys.readouterr().out
    with History.open(hist) as h:
        assert [p.accepted for p in h.points(CASE)] == [False, True]


@pytest.mark.parametrize(
    ("given", "said"),
    [
        ("60ee3c", "run id '60ee3c' is ambiguous: 2 runs begin with it (60ee3c91"),
        ("60ee3", "no run '60ee3'; a prefix needs 6 characters or more"),
        ("70ee3c9175", "no run '70ee3c9175'"),
    ],
)
def test_accept_refuses_an_ambiguous_short_or_unknown_run(
    tmp_path: Path, given: str, said: str, capsys: pytest.CaptureFixture
) -> None:
    hist = _two_runs(tmp_path, ("60ee3c9175d74a1b", "60ee3c0000000000"))
    assert main(["accept", given, "--history", hist]) == 2
    err = capsys.readouterr().err.strip()
    assert said in err
    assert "\n" not in err


def test_accept_help_says_where_the_run_id_is_shown(capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit):
        main(["accept", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "history show ID" in text
    assert "unique prefix" in text


def test_accept_of_a_case_the_run_does_not_hold_is_refused(
    stepped: str, capsys: pytest.CaptureFixture
) -> None:
    argv = ["accept", "n003-GPU-1111", "--id", "lnear-fwd", "--history", stepped]
    assert main(argv) == 2
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert f"run n003-GPU-1111 holds no case 'lnear-fwd'; it holds {CASE}" in err
    assert "\n" not in err
    assert "accepted" not in captured.out
    with History.open(stepped) as h:
        assert all(p.accepted for p in h.points(CASE))


@pytest.mark.parametrize("when", ["before", "after"])
def test_ctrl_c_during_import_is_one_line_saying_what_was_stored(
    tmp_path: Path, when: str, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """It printed a KeyboardInterrupt traceback, even when the run was stored (issue 38).

    A real SIGINT reaches the process just before the transaction, or just after it
    committed; the one line says which, read back from the history.
    """
    import os
    import signal

    saved = save_run(tmp_path / "0001_run.json", [result("relu", 2.0)])
    hist = str(tmp_path / "h.sqlite")
    real = History.append_runs

    def interrupted(self: History, runs: list) -> list[bool]:
        if when == "before":
            os.kill(os.getpid(), signal.SIGINT)
        added = real(self, runs)
        os.kill(os.getpid(), signal.SIGINT)
        return added

    monkeypatch.setattr(History, "append_runs", interrupted)
    code = main(["import", str(saved), "--history", hist])
    err = capsys.readouterr().err
    assert code == 130
    assert "Traceback" not in err
    assert len(err.strip().splitlines()) == 1
    stored = "1 run of 1 new stored" if when == "after" else "0 runs of 1 new stored"
    assert err.strip() == f"gpugauge history import: stopped by SIGINT; {stored}"
    monkeypatch.undo()
    with History.open(hist) as h:
        assert len(h.runs()) == (1 if when == "after" else 0)


def test_a_signal_while_reading_is_one_line(
    stepped: str, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    import os
    import signal

    real = History.metrics

    def interrupted(self: History, *args: str) -> list[str]:
        os.kill(os.getpid(), signal.SIGTERM)
        return real(self, *args)

    monkeypatch.setattr(History, "metrics", interrupted)
    assert main(["changes", "--history", stepped]) == 130
    err = capsys.readouterr().err
    assert err.strip() == "gpugauge history changes: stopped by SIGTERM; nothing was written"


def test_a_slower_step_between_two_commits_offers_the_bisect_that_finds_it() -> None:
    from datetime import UTC, datetime

    from gpugauge.history.changepoints import ChangePoint
    from gpugauge.history.render import changes_text

    def step(ratio: float, before: str | None, after: str | None, case: str) -> ChangePoint:
        return ChangePoint(
            case,
            "time",
            "host GPU-1",
            "run-9",
            datetime(2026, 11, 27, tzinfo=UTC),
            9,
            2.0,
            2.0 * ratio,
            ratio,
            ratio,
            ratio,
            0.001,
            8,
            8,
            commit=after,
            commit_before=before,
        )

    slower = step(1.04, "aaa111", "bbb222", "relu-fwd-bf16-seed-cuda")
    assert slower.bisect_command() == "gpugauge bisect aaa111 bbb222 -k relu-fwd-bf16-seed-cuda"
    assert "gpugauge bisect aaa111 bbb222" in changes_text([slower])
    node = step(1.04, "aaa111", "bbb222", "test_x.py::test_spin")
    assert node.bisect_command() == "gpugauge bisect aaa111 bbb222 -- test_x.py::test_spin"
    assert step(0.96, "aaa111", "bbb222", "c").bisect_command() is None  # faster
    assert step(1.04, "aaa111", "aaa111", "c").bisect_command() is None  # the same commit
    assert step(1.04, None, "bbb222", "c").bisect_command() is None  # a commit unknown
