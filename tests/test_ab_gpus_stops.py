"""gpugauge ab --gpus: a stop reaches every GPU's sides, however busy; each test runs once.

From a review (helper-18). A side busy in a long test, one that hangs at its exit, sides
still connecting, and one GPU in round 2 while another is in round 1 must all stop at a
Ctrl-C or at an error on another GPU, within seconds.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

from tests.test_ab import (
    SPIN,
    _ab,
    _git,
    _leftovers,
    interrupted,
    started_ab,
    toy,  # noqa: F401  (the fixture)
)

# four tests; GPU "1"'s processes die in their first test, GPU "0"'s take 60 s in theirs
# (WHEN=hang: every process takes 60 s to exit after its last test instead)
TOY = (
    "import os\nimport threading\nimport time\nfrom pathlib import Path\n\nimport pytest\n\n\n"
    + SPIN
    + """

WHEN = os.environ.get("TOY_WHEN", "")
GPU = os.environ.get("CUDA_VISIBLE_DEVICES", "none")
ROUND2 = any("round-2" in a for a in __import__("sys").argv)


@pytest.mark.parametrize("ms", [1.0, 2.0, 3.0, 4.0])
def test_spin(gauge, ms):
    if WHEN == "die" and GPU == "1":
        os._exit(3)
    if WHEN == "die" and GPU == "0":
        time.sleep(60)
    if WHEN == "busy":
        time.sleep(60)
    if WHEN == "mixed" and (GPU == "1" and not ROUND2 or GPU == "0" and ROUND2):
        (Path(os.environ["TOY_MARKS"]) / f"{GPU}-{int(ROUND2) + 1}").write_text("")
        time.sleep(60)  # GPU 1 busy in round 1, GPU 0 in round 2
    if WHEN == "hang":  # a side that hangs at its exit (a non-daemon thread left behind)
        threading.Thread(target=time.sleep, args=(60,)).start()
    gauge(lambda: spin(ms))
"""
)


def _start(repo: Path, tmp: Path, when: str, *more: str) -> tuple[subprocess.Popen, Path]:
    (repo / "test_toy.py").write_text(TOY)
    if when == "slowstart":  # the sides take a minute to connect: a plugin before the worker
        (repo / "slowplug.py").write_text("import time\n\ntime.sleep(60)\n")
        (repo / "pytest.ini").write_text("[pytest]\naddopts = -p no:cacheprovider -p slowplug\n")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "toy")
    out = tmp / "out"
    (tmp / "marks").mkdir(exist_ok=True)
    env = {"TOY_WHEN": when, "TOY_MARKS": str(tmp / "marks")}
    rounds = () if "--rounds" in more else ("--rounds", "1")
    args = ("HEAD", "HEAD", *more, "--block-time", "0.1", *rounds)
    return started_ab(repo, tmp, *args, out=out, env=env), out


@pytest.mark.slow
def test_an_error_on_one_gpu_stops_the_other_gpu_s_busy_sides(toy: Path, tmp_path: Path) -> None:  # noqa: F811
    t0 = time.monotonic()
    proc, _ = _start(toy, tmp_path, "die", "--gpus", "0,1")
    said, _ = proc.communicate(timeout=120)
    took = time.monotonic() - t0
    assert proc.returncode == 1, said
    assert took < 45, (took, said)  # not GPU 0's 60 s test run out
    assert _leftovers(toy, tmp_path) == []


@pytest.mark.slow
def test_a_ctrl_c_stops_sides_busy_in_a_long_test(toy: Path, tmp_path: Path) -> None:  # noqa: F811
    proc, _ = _start(toy, tmp_path, "busy", "--gpus", "0,1")
    time.sleep(12)  # both GPUs' sides inside their first (60 s) test
    interrupted(proc, toy, tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("gpus", [(), ("--gpus", "0,1")])
def test_a_ctrl_c_stops_sides_that_hang_at_their_exit(toy: Path, tmp_path: Path, gpus) -> None:  # noqa: F811
    proc, out = _start(toy, tmp_path, "hang", *gpus)
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:  # every test done: the sides are at their exit
        try:
            if len(json.loads((out / "ab.json").read_text())["cases"]) == 4:
                break
        except (OSError, ValueError, KeyError):
            pass
        time.sleep(0.5)
    time.sleep(2)
    interrupted(proc, toy, tmp_path)


@pytest.mark.slow
def test_a_ctrl_c_stops_sides_that_are_still_connecting(toy: Path, tmp_path: Path) -> None:  # noqa: F811
    proc, _ = _start(toy, tmp_path, "slowstart", "--gpus", "0,1")
    time.sleep(6)
    interrupted(proc, toy, tmp_path)


@pytest.mark.slow
def test_a_ctrl_c_in_round_2_on_one_gpu_and_round_1_on_another(toy: Path, tmp_path: Path) -> None:  # noqa: F811
    proc, out = _start(toy, tmp_path, "mixed", "--gpus", "0,1", "--rounds", "2")
    marks = tmp_path / "marks"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not (marks / "0-2").exists():
        time.sleep(0.5)
    assert (marks / "1-1").exists()
    assert (marks / "0-2").exists()
    interrupted(proc, toy, tmp_path)
    assert not list(out.rglob(".*.partial.json"))
    data = json.loads((out / "ab.json").read_text())
    assert data["complete"] is False
    assert len(data["cases"]) == 3  # GPU 0's round 1


def test_the_merged_report_judges_every_case_with_the_spread_of_every_gpu_s_processes() -> None:
    from gpugauge.ab.gpus import one_report
    from gpugauge.ab.result import ABReport, CaseAB, SideInfo
    from tests.test_ab import _pairs

    side = SideInfo("base", "a", "a" * 40, "python3", "/x")

    def case(name: str, first: float, second: float) -> CaseAB:
        c = CaseAB(name, f"t::{name}", _pairs(first, 6), calls=1)
        return c.with_round(CaseAB(name, f"t::{name}", _pairs(second, 6), calls=1))

    spread = tuple(case(f"a{i}", 1.0, 1.01 + 0.004 * i) for i in range(5))
    still = tuple(case(f"b{i}", 1.0, 1.005 + 0.001 * i) for i in range(5))
    gpu0 = ABReport(side, side, spread, "H200", 5.0, gpus=("0",)).pooled()
    gpu1 = ABReport(side, side, still, "H200", 5.0, gpus=("1",)).pooled()
    merged = one_report([gpu0, gpu1], ("0", "1"), 6.0)
    both = ABReport(side, side, (*gpu0.cases, *gpu1.cases), "H200", 6.0).process_sd
    assert gpu0.process_sd != both != gpu1.process_sd
    assert {c.process_sd for c in merged.cases} == {both}


TWO_BUILDS = (
    "import time\n\nimport pytest\n\n\n"
    + SPIN
    + """

@pytest.mark.parametrize("ms", [1.0, 2.0, 3.0, 4.0])
def test_spin(gauge, ms):
    gauge(lambda: spin(ms))
"""
)


@pytest.mark.slow
def test_a_test_only_head_has_runs_once_over_the_gpus(toy: Path, tmp_path: Path) -> None:  # noqa: F811
    (toy / "test_toy.py").write_text(TWO_BUILDS)
    _git(toy, "commit", "-qam", "four")
    (toy / "test_toy.py").write_text(
        TWO_BUILDS + "\n\ndef test_new(gauge):\n    time.sleep(0.5)\n    gauge(lambda: spin(1.0))\n"
    )
    _git(toy, "commit", "-qam", "and a new one")
    out = tmp_path / "out"
    done = _ab(toy, "ab", "HEAD~1", "HEAD", "--gpus", "0,1", "--rounds", "1", out=out)
    assert done.returncode == 0, done.stdout + done.stderr
    cases = json.loads((out / "ab.json").read_text())["cases"]
    assert sorted(c["id"] for c in cases) == ["1.0", "2.0", "3.0", "4.0", "test_toy.py::test_new"]
