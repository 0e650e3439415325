"""The setup memo: a build's setup answers kept for its later processes."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpugauge.runtime.setup_memo import SetupMemo


def _counted(value: object) -> tuple[list[int], object]:
    calls: list[int] = []

    def work_out() -> object:
        calls.append(1)
        return value

    return calls, work_out


def test_without_a_folder_every_process_works_its_answer_out() -> None:
    calls, work_out = _counted({"max_n": 12})
    memo = SetupMemo(None)
    assert memo.kept("split-single", "search", work_out) == ({"max_n": 12}, False)
    assert memo.kept("split-single", "search", work_out) == ({"max_n": 12}, False)
    assert len(calls) == 2


def test_a_later_process_reads_the_answer_an_earlier_one_kept(tmp_path: Path) -> None:
    calls, work_out = _counted([("conv", 3)])
    first = SetupMemo(tmp_path / "memo").kept("split-single", "cut-fit", work_out)
    later = SetupMemo(tmp_path / "memo").kept("split-single", "cut-fit", work_out)
    # the answer as read back: both processes see lists, never a tuple in one of them
    assert first == ([["conv", 3]], False)
    assert later == ([["conv", 3]], True)
    assert len(calls) == 1
    # another result or another name is another answer
    assert SetupMemo(tmp_path / "memo").kept("split-naive", "cut-fit", work_out)[1] is False
    assert len(calls) == 2


@pytest.mark.parametrize("broken", ["", "{", "[1]", '{"other": 1}'])
def test_an_entry_that_cannot_be_read_is_worked_out_again(tmp_path: Path, broken: str) -> None:
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "search.json").write_text(broken)
    calls, work_out = _counted(7)
    assert SetupMemo(tmp_path).kept("r", "search", work_out) == (7, False)
    assert SetupMemo(tmp_path).kept("r", "search", work_out) == (7, True)
    assert len(calls) == 1


@pytest.mark.parametrize("folder", [None, "memo"])
def test_an_answer_that_is_not_json_is_refused_and_nothing_is_kept(
    tmp_path: Path, folder: str | None
) -> None:
    # refused alike with the memo and without it: a test must not pass only without it
    memo = SetupMemo(None if folder is None else tmp_path / folder)
    with pytest.raises(TypeError):
        memo.kept("r", "search", lambda: {"runner": object()})
    with pytest.raises(ValueError, match="Out of range float"):
        memo.kept("r", "search", lambda: {"error_fraction": float("nan")})
    assert not list(tmp_path.rglob("*.json"))


def test_an_answer_kept_under_another_provenance_is_worked_out_again(tmp_path: Path) -> None:
    # another commit, torch or GPU wrote it: a folder reused across builds reads nothing
    calls, work_out = _counted(62)
    built = {"environment": {"git": {"commit": "a" * 40}}, "spec": {"fc": 62}}
    other = {"environment": {"git": {"commit": "b" * 40}}, "spec": {"fc": 62}}
    assert SetupMemo(tmp_path, built).kept("r", "search", work_out) == (62, False)
    assert SetupMemo(tmp_path, built).kept("r", "search", work_out) == (62, True)
    assert SetupMemo(tmp_path, other).kept("r", "search", work_out) == (62, False)
    assert len(calls) == 2
    # this process's own answer replaces a kept one
    assert SetupMemo(tmp_path, other).kept("r", "search", lambda: 61, fresh=True) == (61, False)
    assert SetupMemo(tmp_path, other).kept("r", "search", work_out) == (61, True)
