"""gpugauge ab, bisect and confirm around the A/B: a shared --out, failed sides, submodules.

Issue 49's fuzz round on toy repositories: each test here failed before its fix. The toys
and helpers are tests/test_ab.py's (real git, real pytest sides on the host clock).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpugauge.ab.command import OUT_LOCK, owning
from gpugauge.ab.sides import SideError
from tests.test_ab import (
    ROOT,
    _ab,
    _committed_class,
    _leftovers,
    _saved_run,
    _with_verdict,
    toy,  # noqa: F401  (the fixture)
)


@pytest.fixture
def repo(request: pytest.FixtureRequest) -> Path:
    """tests/test_ab.py's toy: a git repository whose one benchmark spins 3 ms a round."""
    return request.getfixturevalue("toy")


# --- one --out, one A/B ------------------------------------------------------------------


def test_a_lock_of_a_dead_process_is_taken_over_and_a_live_one_refuses(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / OUT_LOCK).write_text("999999999\n")  # an A/B killed outright: its pid is gone
    with owning(out):
        assert (out / OUT_LOCK).read_text() == f"{os.getpid()}\n"
        mine = rf"in use by another A/B \(pid {os.getpid()}\)"
        with pytest.raises(SideError, match=mine), owning(out):
            pass
    assert not (out / OUT_LOCK).exists()  # nothing left in the user's folder


@pytest.mark.slow
def test_a_second_ab_on_the_same_out_is_refused_and_the_first_keeps_its_record(
    repo: Path, tmp_path: Path
) -> None:
    out = tmp_path / "shared"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TMPDIR": str(tmp_path)}
    args = [sys.executable, "-m", "gpugauge", "ab", "HEAD", "HEAD", "--block-time", "0.1"]
    first = subprocess.Popen(
        [*args, "--out", str(out)], cwd=repo, env=env, stdout=subprocess.PIPE, text=True
    )
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and not (out / "base.log").exists():
        time.sleep(0.2)
    second = _ab(repo, "ab", "HEAD", "HEAD", out=out, timeout=60)
    said, _ = first.communicate(timeout=600)
    assert second.returncode == 2, second.stdout + second.stderr
    (line,) = second.stderr.strip().splitlines()
    assert f"--out {out} is in use by another A/B (pid {first.pid})" in line
    assert "gpugauge ab:" not in second.stdout  # no side started, nothing written
    assert first.returncode == 0, said
    data = json.loads((out / "ab.json").read_text())
    assert data["complete"] is True
    assert data["head"]["ref"] == "HEAD"
    assert not (out / OUT_LOCK).exists()
    assert _leftovers(repo, tmp_path) == []


# --- a copy that cannot be written is a warning ------------------------------------------


@contextlib.contextmanager
def unwritable(path: Path) -> Iterator[None]:
    """``path`` (a file) that no write replaces: immutable for root, else its folder read-only."""
    if os.geteuid() != 0:
        path.parent.chmod(0o555)
        try:
            yield
        finally:
            path.parent.chmod(0o755)
        return
    done = subprocess.run(["chattr", "+i", str(path)], capture_output=True, check=False)
    if done.returncode != 0:
        pytest.skip(f"chattr +i failed here: {done.stderr.decode().strip()}")
    try:
        yield
    finally:
        subprocess.run(["chattr", "-i", str(path)], check=True)


@pytest.mark.slow
def test_confirm_s_verdicts_and_status_stand_when_its_copies_cannot_be_written(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gpugauge.results.runs import load_run

    run = _saved_run(repo, tmp_path)
    _committed_class(repo, run)
    cls = "new host (0 of 5 runs): class baseline, host spread 5.0% (default: 0 other hosts)"
    gated = _with_verdict(run, 1.03, "unchanged", cls)  # passed: an A/A leaves it passed
    history = str(tmp_path / "h.sqlite")
    subprocess.run(
        [sys.executable, "-m", "gpugauge", "history", "import", str(gated), "--history", history],
        check=True,
        capture_output=True,
    )
    storage = tmp_path / "storage" / "Linux-CPython-3.11-64bit"
    storage.mkdir(parents=True)
    copy = storage / "0001_toy.json"
    copy.write_text(gated.read_text())
    (tmp_path / "a-file").write_text("")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(tmp_path / "a-file" / "summary.md"))
    confirm = ["confirm", str(gated), "--history", history, "--storage", str(storage.parent)]
    with unwritable(copy):
        done = _ab(repo, *confirm, out=tmp_path / "cleared")
    said = done.stdout + done.stderr
    assert done.returncode == 0, said  # nothing slower: the job passes
    assert "warning: $GITHUB_STEP_SUMMARY" in done.stderr, said
    assert f"warning: pytest-benchmark's copy {copy} not rewritten" in done.stderr, said
    stored = load_run(gated).verdicts["test_toy.py::test_spin"]
    assert stored["checks"][0]["basis"] == "same-GPU A/B", said  # the verdict was written
    assert (tmp_path / "cleared").is_dir()
    assert _leftovers(repo, tmp_path) == []
