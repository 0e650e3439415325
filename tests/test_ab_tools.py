"""gpugauge ab, bisect and confirm around the A/B: a shared --out, failed sides, submodules.

Issue 49's fuzz round on toy repositories: each test here failed before its fix. The toys
and helpers are tests/test_ab.py's (real git, real pytest sides on the host clock).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpugauge.ab.command import OUT_LOCK, owning
from gpugauge.ab.result import ABReport, CaseAB
from gpugauge.ab.sides import SideError, SideSpec, checkouts
from gpugauge.ab.verdict import Schedule
from tests.test_ab import (
    BENCH,
    ROOT,
    _ab,
    _commit,
    _committed_class,
    _git,
    _leftovers,
    _pairs,
    _report,
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


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["ab", "HEAD", "-k", "no_such_case"], "matched no test pytest could run"),
        (["ab", "HEAD", "--base-python", "{nopytest}"], "cannot import pytest"),
    ],
    ids=["selects-nothing", "python-without-pytest"],
)
@pytest.mark.slow
def test_a_selection_of_nothing_is_bad_input_that_keeps_the_earlier_records(
    repo: Path, tmp_path: Path, args: list[str], named: str
) -> None:
    """A -k typo ran both sides, exited 1 and replaced the earlier A/B's table with "0
    cases"; a Python without pytest exited 1 (a review, 2026-12-06). Both are bad input
    now, found before the earlier records go; a later round's stale folder goes with them
    once an A/B runs."""
    nopytest = tmp_path / "python-without-pytest"
    nopytest.write_text("#!/bin/sh\necho 'No module named pytest' >&2\nexit 1\n")
    nopytest.chmod(0o755)
    out = tmp_path / "out"
    earlier = {
        out / "ab.json": '{"complete": true}\n',
        out / "ab.md": "earlier table\n",
        out / "base.json": "{}\n",
        out / "round-2" / "ab.json": '{"complete": true}\n',
    }
    for path, text in earlier.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    done = _ab(repo, *[a.format(nopytest=nopytest) for a in args], out=out, timeout=300)
    said = done.stdout + done.stderr
    assert done.returncode == 2, said
    assert "Traceback" not in said
    assert named in done.stderr, said
    assert {p: p.read_text() for p in earlier if p.exists()} == earlier
    assert _leftovers(repo, tmp_path) == []
    ran = _ab(repo, "ab", "HEAD", "--rounds", "1", out=out, timeout=300)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert not (out / "round-2").exists()  # the earlier A/B's second round went with it


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["ab", "no-such-ref"], "'no-such-ref' names no commit"),
        (["ab", "HEAD", "--base-python", "no-such-python-3"], "no-such-python-3"),
        (["bisect", "HEAD", "no-such-ref"], "'no-such-ref' names no commit"),
        (["ab", "HEAD", "--time-budget", "0"], "time budget is spent before the first test"),
        (["ab", "HEAD", "--deadline", str(int(time.time()) - 3600)], "time budget is spent"),
        (["bisect", "HEAD", "HEAD", "--time-budget", "0"], "time budget is spent"),
        (["ab", "HEAD", "--benches", "benchs"], "--benches: benchs: no such folder here"),
    ],
    ids=[
        "unknown-ref",
        "missing-python",
        "bisect-unknown-ref",
        "no-time",
        "deadline-past",
        "bisect-no-time",
        "benches-typo",
    ],
)
def test_a_refused_ab_keeps_the_earlier_ab_s_record_in_its_out(
    repo: Path, tmp_path: Path, args: list[str], named: str
) -> None:
    """A ref or Python that is not there is bad input: refused before anything in --out
    goes, so the earlier A/B's verdicts, its later rounds' and its setup answers stay."""
    out = tmp_path / "out"
    earlier = {
        out / "ab.json": '{"complete": true}\n',
        out / "ab.md": "earlier table\n",
        out / "round-2" / "ab.json": '{"complete": true}\n',
        out / "setup-memo" / "base" / "answer.json": "{}\n",
    }
    for path, text in earlier.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    done = _ab(repo, *args, out=out, timeout=120)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    assert [ln for ln in done.stderr.splitlines() if named in ln], done.stderr
    assert {p: p.read_text() for p in earlier if p.exists()} == earlier
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


# --- bisect: a side that fails is named; an untestable commit is skipped ---------------

BROKEN = "import no_such_module  # the benchmarks cannot be imported\n"


def _broken(repo: Path, message: str) -> str:
    """A commit whose benchmark file fails to import."""
    (repo / "test_toy.py").write_text(BROKEN)
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", message)
    return _git(repo, "rev-parse", "HEAD")


@pytest.mark.slow
def test_bisect_from_a_good_that_fails_names_it_not_nothing_to_bisect(
    repo: Path, tmp_path: Path
) -> None:
    good = _broken(repo, "benchmarks that do not import")
    _commit(repo, "\n    time.sleep(0.003)", "fixed, and sleeps")
    done = _ab(repo, "bisect", "HEAD~1", "HEAD", out=tmp_path / "bisect")
    said = done.stdout + done.stderr
    assert done.returncode == 1, said
    assert "nothing to bisect" not in said
    line = done.stderr.strip().splitlines()[0]
    assert line.startswith(f"gpugauge bisect: GOOD (HEAD~1 {good[:10]}) failed"), said
    assert f"(log: {tmp_path / 'bisect' / 'good-vs-bad' / 'base.log'})" in line
    assert "GOOD (HEAD~1" in (tmp_path / "bisect" / "bisect.txt").read_text()
    assert _leftovers(repo, tmp_path) == []


@pytest.mark.slow
def test_bisect_skips_a_commit_that_does_not_import_and_goes_on(repo: Path, tmp_path: Path) -> None:
    fine = _commit(repo, "  # 1", "commit 1")
    broken = _broken(repo, "commit 2 does not import")
    slower = _commit(repo, "\n    time.sleep(0.003)", "commit 3 sleeps")
    done = _ab(repo, "bisect", "HEAD~3", "HEAD", out=tmp_path / "bisect", timeout=1200)
    said = done.stdout + done.stderr
    assert done.returncode == 1, said  # its parent cannot confirm it
    assert f"bisect: {broken[:10]} untestable: skipped" in done.stdout, said
    # the search went on: commit 1 was tried after it (good, or undecided on a busy host)
    assert f"bisect: {fine[:10]} " in done.stdout.split(f"{broken[:10]} untestable")[1], said
    text = (tmp_path / "bisect" / "bisect.txt").read_text()
    assert f"suspect (not verified): {slower} commit 3 sleeps" in text, said
    assert f"its parent {broken[:10]} against it could not be tested" in text
    beside = text.split("may be the first slower one: ")[1].splitlines()[0]
    assert broken[:10] in beside, text
    assert f"skipped {broken[:10]}: untestable: head's pytest ended with exit status" in text
    assert _leftovers(repo, tmp_path) == []


def test_a_bisect_stopped_mid_search_keeps_what_it_learnt(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gpugauge.__main__ import main

    for i in range(1, 9):
        _commit(repo, f"  # {i}", f"commit {i}")
    commits = _git(repo, "rev-list", "--reverse", "HEAD~8..HEAD").split()
    asked = []

    def run_ab(
        args: object, base: str, head: str, out: Path, ids: object = None, budget: object = None
    ) -> ABReport:
        asked.append(head)
        if len(asked) == 3:  # Ctrl-C in the search's second step
            raise KeyboardInterrupt
        slower = commits.index(head) >= 4
        return _report((CaseAB("c", "t.py::t[c]", _pairs(1.05 if slower else 1.0)),))

    monkeypatch.setattr("gpugauge.ab.cli.run_ab", run_ab)
    monkeypatch.chdir(repo)
    assert main(["bisect", "HEAD~8", "HEAD", "--out", str(tmp_path / "b")]) == 130
    text = (tmp_path / "b" / "bisect.txt").read_text()
    assert "no culprit: the search stopped: interrupted" in text
    # commits[3] was good at the first step: the first slower one lies in 4..7
    assert f"still suspect: 4 commits ({commits[4][:10]}..{commits[7][:10]})" in text


def test_bisect_skips_a_commit_whose_build_skips_the_case_never_counting_it_good(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Commit 4 made the case slower and commit 5 skips its test (a review, 2026-12-06).

    Counted good, commit 5 moved the search past the culprit, named nowhere.
    """
    from gpugauge.__main__ import main

    for i in range(1, 9):
        _commit(repo, f"  # {i}", f"commit {i}")
    commits = _git(repo, "rev-list", "--reverse", "HEAD~8..HEAD").split()

    def run_ab(
        args: object, base: str, head: str, out: Path, ids: object = None, budget: object = None
    ) -> ABReport:
        if head == commits[5]:
            skipped = {"base": "passed", "head": "skipped: needs feature X"}
            return _report((CaseAB("c", "t.py::t[c]", status=skipped),))
        slower = head in commits[4:] and base not in commits[4:]
        return _report((CaseAB("c", "t.py::t[c]", _pairs(1.05 if slower else 1.0)),))

    monkeypatch.setattr("gpugauge.ab.cli.run_ab", run_ab)
    monkeypatch.chdir(repo)
    main(["bisect", "HEAD~8", "HEAD", "--out", str(tmp_path / "b")])
    text = (tmp_path / "b" / "bisect.txt").read_text()
    assert f"culprit: {commits[4]}" in text, text
    assert f"skipped {commits[5][:10]}: untestable: c: " in text, text


# --- benchmarks in a submodule ------------------------------------------------------------


def _benches_in_a_submodule(repo: Path, tmp_path: Path) -> None:
    """The toy's benchmark in a submodule at benches/, whose own repository is then gone.

    Only the main checkout's clone of it is left: the A/B must take it from there.
    """
    sub = tmp_path / "bench-repo"
    sub.mkdir()
    _git(sub, "init", "-q")
    _git(sub, "config", "user.email", "t@example.com")
    _git(sub, "config", "user.name", "t")
    (sub / "test_sub.py").write_text(BENCH.format(extra=""))
    _git(sub, "add", "-A")
    _git(sub, "commit", "-qm", "benches")
    _git(repo, "-c", "protocol.file.allow=always", "submodule", "add", "-q", str(sub), "benches")
    _git(repo, "commit", "-qm", "benches in a submodule")
    shutil.rmtree(sub)


def test_a_submodule_the_main_checkout_lacks_is_a_clear_error(repo: Path, tmp_path: Path) -> None:
    _benches_in_a_submodule(repo, tmp_path)
    _git(repo, "submodule", "deinit", "-q", "-f", "benches")
    specs = [SideSpec("base", "HEAD", sys.executable)]
    with (
        pytest.raises(SideError, match="submodule benches is not checked out in"),
        checkouts(repo, specs, parent=tmp_path),
    ):
        pass
    assert _leftovers(repo, tmp_path) == []


@pytest.mark.slow
def test_benches_in_a_submodule_are_a_b_d_from_the_main_checkout_s_clone(
    repo: Path, tmp_path: Path
) -> None:
    _benches_in_a_submodule(repo, tmp_path)
    done = _ab(repo, "ab", "HEAD", "HEAD", out=tmp_path / "sub")
    assert done.returncode == 0, done.stdout + done.stderr
    (case,) = json.loads((tmp_path / "sub" / "ab.json").read_text())["cases"]
    assert case["id"] == "benches/test_sub.py::test_spin"
    assert len(case["pairs"]) >= Schedule().min_pairs, case  # a round's first look
    assert _leftovers(repo, tmp_path) == []


# --- confirm --measure: the gated run as round 1's head side ----------------------------


@pytest.mark.slow
def test_confirm_measure_times_the_gated_run_as_round_one_s_head_and_judges_it(
    repo: Path, tmp_path: Path
) -> None:
    """A night in four processes a case: the gated run pairs its blocks with the reference."""
    from gpugauge.results.runs import load_run
    from gpugauge.results.verdicts import Basis

    # the reference commit predates the untimed marker: told to skip the count, it never runs
    # it (its test fails where it runs in an A/B), and the gated run still does
    (repo / "test_toy.py").write_text(BENCH.format(extra="").replace("@pytest.mark.untimed\n", ""))
    run = _saved_run(repo, tmp_path)  # the class baseline, 3 ms rounds, committed
    recorded = subprocess.run(
        [sys.executable, "-m", "gpugauge", "baseline", str(run)],
        cwd=repo,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
    )
    assert recorded.returncode == 0, recorded.stdout + recorded.stderr
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "baselines")
    (repo / "test_toy.py").write_text(BENCH.format(extra="\n    spin(0.3)"))  # 10% slower
    night = tmp_path / "results" / "night.json"
    history = tmp_path / "h.sqlite"
    gated = "--gauge-gate --gauge-require-baselines --gauge-confirm-new-host"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TMPDIR": str(tmp_path)}
    env["GPUGAUGE_HISTORY"] = str(history)  # the gated run's, as in the nightly

    def night_of(out: Path) -> subprocess.CompletedProcess:
        argv = ["confirm", str(night), "--measure", "--gated-args", gated, "--out", str(out)]
        return subprocess.run(
            [sys.executable, "-m", "gpugauge", *argv, "--block-time", "0.1"],
            cwd=repo,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )

    done = night_of(tmp_path / "ab")
    said = done.stdout + done.stderr
    assert done.returncode == 1, said  # the A/B found it slower: the night fails
    assert "the gated run is round 1's head side" in said, said
    assert " against WORKTREE; logs" in said, said
    assert "gpugauge gate:" in said, said  # the gated run's table, from its side's log
    (base_line,) = [x for x in said.splitlines() if x.startswith("  base: ")]
    assert "--gauge-gate" not in base_line, said  # an older base may not know the option
    stored = load_run(night).verdicts["test_toy.py::test_spin"]
    assert stored["verdict"] == "regressed", said
    assert stored["checks"][0]["basis"] == Basis.SAME_GPU_AB.value, said
    report = json.loads((tmp_path / "ab" / "ab.json").read_text())
    count = next(c for c in report["cases"] if c["id"].endswith("test_count"))
    assert count["status"]["head"] == "passed", count  # the untimed test ran in the gated run
    assert "marked untimed" in count["status"]["base"], count  # and not on the reference
    spin = next(c for c in report["cases"] if c["id"] == "test_toy.py::test_spin")
    assert spin["outcome"] == "slower", said
    assert len(spin["rounds"]) == 1, said  # its round 2
    again = night_of(tmp_path / "again")
    assert again.returncode == 2, again.stderr
    assert "exists: --measure writes" in again.stderr, again.stderr
    assert _leftovers(repo, tmp_path) == []


def _record_baselines(repo: Path, tmp_path: Path, message: str = "") -> None:
    """Record the toy's class baselines from a run of it; with ``message``, commit them."""
    run = _saved_run(repo, tmp_path)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TMPDIR": str(tmp_path)}
    recorded = subprocess.run(
        [sys.executable, "-m", "gpugauge", "baseline", str(run)],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
    )
    assert recorded.returncode == 0, recorded.stdout + recorded.stderr
    if message:
        _git(repo, "add", "-A")
        _git(repo, "commit", "-qm", message)


def _measured_night(repo: Path, tmp_path: Path, *extra: str) -> subprocess.CompletedProcess:
    """The nightly's confirm step on the toy, its gated run gated, on an empty history."""
    night = tmp_path / "night.json"
    argv = ["confirm", str(night), "--measure", "--gated-args=--gauge-gate", *extra]
    argv += ["--out", str(tmp_path / "ab"), "--block-time", "0.1"]
    return subprocess.run(
        [sys.executable, "-m", "gpugauge", *argv],
        cwd=repo,
        env={
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "TMPDIR": str(tmp_path),
            "GPUGAUGE_HISTORY": str(tmp_path / "h.sqlite"),
        },
        capture_output=True,
        text=True,
        timeout=600,
    )


PARAMETRIZED = (
    "@pytest.mark.parametrize('ms', [3.0])\ndef test_spin(gauge, ms):",
    "def test_spin(gauge):",
)


@pytest.mark.slow
@pytest.mark.parametrize("ids", ["same", "differ"])
def test_a_measured_night_whose_reference_cannot_run_its_tests_fails(
    repo: Path, tmp_path: Path, ids: str
) -> None:
    """Class verdicts alone pass 3% on a new host: a night without its A/B must not pass.

    ``differ``: a parametrized test, whose A/B case id (its parameter) is not its result's.
    """

    def bench(extra: str) -> str:
        text = BENCH.format(extra=extra)
        return text if ids == "same" else text.replace(PARAMETRIZED[1], PARAMETRIZED[0])

    good = bench("")
    (repo / "test_toy.py").write_text(good)
    _record_baselines(repo, tmp_path)
    # the commit that recorded the baselines cannot collect its tests
    (repo / "test_toy.py").write_text("import no_such_module_here\n" + good)
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "baselines, and a test file that does not import")
    # the working tree 4% slower: its class verdict passes, so only an A/B can catch it
    (repo / "test_toy.py").write_text(bench("\n    spin(0.12)"))
    done = _measured_night(repo, tmp_path)
    said = done.stdout + done.stderr
    assert done.returncode == 1, said
    case = "test_toy.py::test_spin" if ids == "same" else "3.0"
    lost = f"left 1 result this A/B was to decide undecided: {case} (not run there)"
    assert lost in said, said
    assert "(its pytest's exit status: 2; log: " in said, said
    assert "gpugauge gate:" in said, said  # the gated run itself ran and passed
    assert _leftovers(repo, tmp_path) == []


@pytest.mark.slow
def test_an_a_b_started_from_inside_a_side_gives_its_sides_their_own_roles(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A coordinator's environment may hold a side's variables (an A/B run from a gated run)."""
    from gpugauge.ab import worker

    for var in (worker.AS_IS_ENV, worker.FOLLOWS_ENV, worker.RANKS_ENV):
        monkeypatch.setenv(var, "1")
    done = _ab(repo, "ab", "HEAD", "HEAD", "--rounds", "1", out=tmp_path / "ab", timeout=300)
    said = done.stdout + done.stderr
    assert done.returncode == 0, said  # no side waits on the other's selection
    cases = {c["nodeid"]: c for c in json.loads((tmp_path / "ab" / "ab.json").read_text())["cases"]}
    # both sides left the count out (a side run as is runs it, and the A/B lists it), and
    # paired their blocks (a side that took itself for a process a test launched pairs
    # none); an A/A's verdict on a CPU is the noise's
    assert list(cases) == ["test_toy.py::test_spin"], said
    assert len(cases["test_toy.py::test_spin"]["pairs"]) >= Schedule().min_pairs, said
    assert _leftovers(repo, tmp_path) == []


@pytest.mark.slow
def test_a_measured_night_whose_budget_ends_before_any_pair_does_not_blame_the_reference(
    repo: Path, tmp_path: Path
) -> None:
    """The budget's skips and the untimed count the reference deselects are not its failure."""
    _record_baselines(repo, tmp_path, "baselines, at a commit that runs every test")
    (repo / "test_toy.py").write_text(BENCH.format(extra="\n    spin(0.12)"))  # owed an A/B
    done = _measured_night(repo, tmp_path, "--time-budget", "2")
    said = done.stdout + done.stderr
    assert "its time budget was spent before this test" in said, said  # no pair was made
    assert "this A/B was to decide undecided" not in said, said
    assert done.returncode == 0, said  # the gated run passed, and so does the night
    assert _leftovers(repo, tmp_path) == []


@pytest.mark.slow
def test_a_result_whose_baseline_a_later_commit_recorded_is_not_owed_by_the_night_s_reference(
    repo: Path, tmp_path: Path
) -> None:
    """The night's reference recorded most baselines; another's result gets its own A/B."""
    first = BENCH.format(extra="") + (
        "\n\n@pytest.mark.amp\ndef test_spin3(gauge):\n    gauge(lambda: spin(2.5))\n"
    )
    later = first + (
        "\n\n@pytest.mark.layers\ndef test_spin2(gauge):\n    gauge(lambda: spin(2.0))\n"
    )
    (repo / "test_toy.py").write_text(first)
    _record_baselines(repo, tmp_path, "custom's and amp's baselines")  # at the first commit
    (repo / "test_toy.py").write_text(later)
    (tmp_path / "run.json").unlink()
    _record_baselines(repo, tmp_path)
    _git(repo, "checkout", "--", "baselines")  # custom's and amp's stay the first commit's
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "a layers test and its baseline")
    (repo / "test_toy.py").write_text(later.replace("spin(2.0)", "spin(2.08)"))  # owed an A/B
    files = sorted(p.name for p in (repo / "baselines").rglob("*.json"))
    assert files == ["amp.json", "custom.json", "layers.json"], files
    done = _measured_night(repo, tmp_path)
    said = done.stdout + done.stderr
    assert "test_toy.py::test_spin2: on head only" in said, said  # the night's reference lacks it
    assert "this A/B was to decide undecided" not in said, said  # and owes it no A/B
    second = _git(repo, "rev-parse", "HEAD")[:10]
    assert f"A/B 1 of 1, against {second}" in said, said  # its own reference A/Bs it
    assert _leftovers(repo, tmp_path) == []


@pytest.mark.slow
def test_a_measured_night_whose_gated_run_has_no_gate_is_bad_input(
    repo: Path, tmp_path: Path
) -> None:
    """Without --gauge-gate the night would judge nothing: refused before it measures."""
    _record_baselines(repo, tmp_path, "baselines")
    done = _measured_night(repo, tmp_path, "--gated-args=--gauge-rounds=3")  # the last counts
    said = done.stdout + done.stderr
    assert done.returncode == 2, said
    assert "no --gauge-gate was given for it" in said, said
    assert "gpugauge ab:" not in said, said  # no side started
    assert _leftovers(repo, tmp_path) == []


def test_a_reference_fails_the_night_for_each_owed_test_it_left_unpaired_itself() -> None:
    from gpugauge.ab.budget import BUDGET_SPENT
    from gpugauge.ab.confirm_command import head_failed, reference_lost
    from gpugauge.ab.result import UNTIMED_SKIPPED

    def case(name: str = "c", pairs: int = 0, **status: str) -> CaseAB:
        only = "head" if "base" not in status else ""
        # a case's id is its parameter; what it owes is known by node id
        return CaseAB(name, f"t.py::test[{name}]", _pairs(1.0, pairs), only=only, status=status)

    def lost(*cases: CaseAB, owed: tuple[str, ...] = ("c",)) -> list[str]:
        return reference_lost(_report(cases), {f"t.py::test[{n}]" for n in owed})

    assert lost(case(head="passed")) == ["c (not run there)"]  # run 134: it selected none
    assert lost(case(base="failed", head="passed")) == ["c (failed there)"]
    own = "skipped: needs a newer torch"  # both sides share one GPU: the build's own doing
    assert lost(case(base=own, head="passed")) == [f"c ({own} there)"]
    both = {"base": "passed", "head": "passed"}
    unpaced = CaseAB("c", "t.py::test[c]", status=both, timed_alone="head")
    assert lost(unpaced) == ["c (no timing call there)"]  # an old harness's calls go unpaired
    # the A/B's own skips are not the reference's doing
    assert lost(case(base=f"skipped: {BUDGET_SPENT}", head="passed")) == []
    assert lost(case(base=f"skipped: {UNTIMED_SKIPPED}", head="passed")) == []
    cpu = "skipped: CPU case"  # both sides skip it: the A/B's selection, not the reference
    assert lost(case(base=cpu, head=cpu)) == []
    assert lost(case(head="failed")) == []  # head's failure says it
    # a test the night owes no A/B (another reference's, a new one, within the floor)
    assert lost(case(head="passed"), owed=()) == []
    # a failure after some pairs: decided stands, undecided is lost (a review, 2026-12-06)
    assert lost(case(pairs=4, base="failed", head="passed")) == []  # same, from 4 pairs
    assert lost(case(pairs=1, base="failed", head="passed")) == ["c (failed there)"]
    later = case(pairs=4, base="passed", head="passed").with_round(
        case(pairs=1, base="failed", head="passed")
    )
    assert lost(later) == ["c (failed there)"]  # round 2 cut short: need more samples
    # the working tree failing an owed test in any round fails the night too
    assert head_failed(_report((later,)), {"t.py::test[c]"}) == []
    broken = case(pairs=4, base="passed", head="passed").with_round(
        case(pairs=1, base="passed", head="failed")
    )
    assert head_failed(_report((broken,)), {"t.py::test[c]"}) == ["c (round 2)"]
    assert head_failed(_report((broken,)), set()) == []  # not owed
    # one paired case hides no other
    paired = case("p", pairs=4, base="passed", head="passed")
    assert lost(paired, case(head="passed"), owed=("p", "c")) == ["c (not run there)"]


def test_the_measured_night_a_bs_against_the_commit_of_most_of_this_host_s_baselines(
    repo: Path,
) -> None:
    from gpugauge.ab.measured import baselines_commit, host_classes

    classes = host_classes(["NVIDIA H200", "NVIDIA H200"])
    assert {"nvidia-h200", "2x-nvidia-h200"} < classes
    assert not any(c.startswith("3x-") for c in classes)

    def accept(cls: str, *families: str) -> str:
        folder = repo / "baselines" / cls
        folder.mkdir(parents=True, exist_ok=True)
        for f in families:
            (folder / f"{f}.json").write_text(f'{{"{cls}": 1}}\n')
        _git(repo, "add", "-A")
        _git(repo, "commit", "-qm", f"baselines {cls}")
        return _git(repo, "rev-parse", "HEAD")

    baselines = repo / "baselines"
    assert baselines_commit(repo, baselines, classes) is None  # none yet: the run runs alone
    h200 = accept("nvidia-h200", "layers", "amp")
    accept("nvidia-h100-80gb-hbm3", "layers", "amp", "vgg_swap")  # another host's class
    two = accept("2x-nvidia-h200", "distributed")
    assert baselines_commit(repo, baselines, classes) == h200  # two of this host's three
    assert baselines_commit(repo, baselines, {"2x-nvidia-h200"}) == two
    newer = accept("2x-nvidia-h200", "layer_fit", "split")  # now two files each: the newest
    assert baselines_commit(repo, baselines, classes) == newer


def test_a_gated_run_with_nothing_to_a_b_against_keeps_its_profile(tmp_path: Path) -> None:
    """A host with no committed baseline runs the gated run as plain pytest: seed, not full."""
    from gpugauge.ab.confirm_command import gated_alone
    from gpugauge.cli import build_parser

    night = str(tmp_path / "night.json")
    gated = ["--gated-args", "--gauge-gate --benchmark-autosave"]
    args = build_parser().parse_args(
        ["confirm", night, "--measure", "--profile", "seed", "-m", "nightly", *gated]
    )
    argv = gated_alone(args)
    assert argv[1:3] == ["-m", "pytest"]
    assert argv[argv.index("--gauge-profile") + 1] == "seed"
    assert argv[argv.index("-m", 3) + 1] == "nightly"
    assert "--gauge-gate" in argv
    assert argv[-1] == f"--benchmark-json={tmp_path / 'night.json'}"


def test_the_gated_run_s_table_is_read_from_its_side_s_log(tmp_path: Path) -> None:
    from gpugauge.ab.measured import gate_summary

    log = tmp_path / "head.log"
    log.write_text(
        "collected 3 items\n\ngpugauge gate: 1 regressed\nrow a\nrow b\n\nresults saved\n"
        "efficiency: timed rounds 1 s and warm-up 0 s of 3 s (25%)\n=== 3 passed ===\n"
    )
    said = gate_summary(log)
    assert said.splitlines() == ["gpugauge gate: 1 regressed", "row a", "row b"]
    assert gate_summary(tmp_path / "missing.log") == ""


def test_a_gated_run_that_saved_nothing_fails_the_night_and_one_saved_is_kept(
    tmp_path: Path,
) -> None:
    from gpugauge.ab.launch import ABError
    from gpugauge.ab.measured import keep_gated_run

    run = tmp_path / "results" / "nightly.json"
    run.parent.mkdir()
    with pytest.raises(ABError, match="the gated run saved no results"):
        keep_gated_run(tmp_path / "head.json", run)  # its pytest broke: exit 1, not 2
    assert not run.exists()
    (tmp_path / "head.json").write_text('{"benchmarks": []}\n')
    keep_gated_run(tmp_path / "head.json", run)
    assert run.read_text() == '{"benchmarks": []}\n'
    (tmp_path / "head.json").write_text("{}\n")
    keep_gated_run(tmp_path / "head.json", run)  # kept once: a later call changes nothing
    assert run.read_text() == '{"benchmarks": []}\n'
