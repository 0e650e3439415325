"""``gpugauge confirm``'s exit status is the job's: a result the run file stores as
regressed fails it, even where the reader leaves that result out as unreadable."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gpugauge.__main__ import main
from gpugauge.ab.overruled import still_regressed
from gpugauge.results.runs import load_run
from tests.fakes import result, run_json, time_gate


def _gated(verdicts: dict[str, str]) -> dict[str, Any]:
    """A gated run of one result per id, each stored with its verdict; the JSON."""
    data = run_json([result(rid, 3.0) for rid in verdicts])
    for bench, (rid, verdict) in zip(data["benchmarks"], verdicts.items(), strict=True):
        bench["fullname"] = f"t.py::{rid}"
        ratio = 1.2 if verdict == "regressed" else 1.0
        bench["extra_info"]["gate"] = time_gate(rid, ratio, verdict, "class baseline")
    return data


def _unreadable(bench: dict[str, Any]) -> None:
    """One round's time made negative: a reading :func:`load_run` refuses."""
    bench["extra_info"]["timing"]["device_ms"][0] = -1.0


def _schemaless(bench: dict[str, Any]) -> None:
    """The result's schema key lost: a gate verdict says it is gpugauge's all the same."""
    del bench["extra_info"]["gpugauge_schema"]


def _listed_metric(bench: dict[str, Any]) -> None:
    """A check's metric name made a list: the reader raised TypeError, not a refusal."""
    bench["extra_info"]["gate"]["checks"][0]["metric"] = ["time"]


def _held_twice(bench: dict[str, Any]) -> None:
    """The result stored under the id of the run's other one, as its second copy."""
    bench["extra_info"]["id"] = "a"


@pytest.mark.parametrize("left_out", [_unreadable, _schemaless, _listed_metric, _held_twice])
@pytest.mark.parametrize("stored", ["regressed", "not a verdict"])
def test_a_regressed_result_the_reader_leaves_out_still_fails_confirm(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    stored: str,
    left_out: Any,
) -> None:
    """A run whose regressed result holds a reading the reader refuses (a hand edit, a
    truncated round): confirm said "nothing to confirm" and exited 0, the regression
    gone from the job's status and no warning said. It fails, naming the result. So does
    one that lost its schema key, holds a check it cannot hash, or repeats an id (a
    review, 2026-12-06: exit 0, exit 0 and a TypeError)."""
    data = _gated({"a": "unchanged", "b": "regressed"})
    data["benchmarks"][1]["extra_info"]["gate"]["verdict"] = stored
    left_out(data["benchmarks"][1])
    run = tmp_path / "run.json"
    run.write_text(json.dumps(data))
    assert [m.id for m in load_run(run).measurements] == ["a"]  # b is left out
    rid = "a" if left_out is _held_twice else "b"
    assert still_regressed(run) == [rid]
    monkeypatch.chdir(tmp_path)
    assert main(["confirm", str(run), "--out", str(tmp_path / "ab")]) == 1
    out = capsys.readouterr()
    assert f"regressed after the A/Bs: {rid}" in out.out
    assert "left out a result that cannot be read" in out.err


def test_an_unreadable_result_that_passed_does_not_fail_confirm(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The unreadable result stored as unchanged, and one never gated: exit 0, as before."""
    data = _gated({"a": "unchanged", "b": "unchanged", "c": "unchanged"})
    _unreadable(data["benchmarks"][1])
    _unreadable(data["benchmarks"][2])
    del data["benchmarks"][2]["extra_info"]["gate"]
    run = tmp_path / "run.json"
    run.write_text(json.dumps(data))
    assert still_regressed(run) == []
    monkeypatch.chdir(tmp_path)
    assert main(["confirm", str(run), "--out", str(tmp_path / "ab")]) == 0


def test_confirm_keeps_its_a_bs_in_the_history_of_its_storage(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """A run saved with --benchmark-storage X was added to X's history: confirm --storage X
    keeps its A/Bs there, as report --storage reads it, not in .benchmarks' (a review,
    2026-12-07)."""
    import argparse

    from gpugauge.ab.confirm_command import _history_of
    from gpugauge.history.store import ENV_VAR, History

    monkeypatch.delenv(ENV_VAR, raising=False)
    monkeypatch.chdir(tmp_path)
    data = run_json([result("a")])
    data["gpugauge"]["history_run_id"] = "run-1"
    run = tmp_path / "run.json"
    run.write_text(json.dumps(data))
    store = tmp_path / "elsewhere"
    store.mkdir()
    args = argparse.Namespace(run=run, history=None, storage=store)
    assert _history_of(args) is None  # no history there yet: said, not created
    assert f"history {store / 'gpugauge-history.sqlite'}: no such file" in capsys.readouterr().err
    with History.open(store / "gpugauge-history.sqlite"):
        pass
    assert _history_of(args) is None
    assert "elsewhere/gpugauge-history.sqlite: holds no run 'run-1'" in capsys.readouterr().err
    assert not (tmp_path / ".benchmarks").exists()
