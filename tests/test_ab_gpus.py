"""gpugauge ab --gpus: one A/B spread over a host's GPUs, each with its own pair of processes.

Real A/Bs of tests/test_ab.py's toy repository (real git, real pytest sides on the host
clock). A CPU machine has no GPU to hand out, but the sides see ``CUDA_VISIBLE_DEVICES``
all the same: each toy test writes down which GPU its process saw.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from gpugauge.ab.claims import Claims
from gpugauge.ab.gpus import named_twice, one_report, parse_gpus, resolved, unknown_gpus
from gpugauge.ab.render import cost_line, efficiency_line, summary_line, terminal
from gpugauge.ab.result import ABReport, CaseAB, SideInfo
from tests.test_ab import (
    ROOT,
    SPIN,
    _ab,
    _git,
    _leftovers,
    _pairs,
    interrupted,
    started_ab,
    toy,  # noqa: F401  (the fixture)
)

SIDE = SideInfo("base", "a", "a" * 40, "python3", "/x")

# four tests of 1-4 ms; each process notes the GPU it saw, by its test, round and place
SPREAD = (
    """\
import os
import time
from pathlib import Path

import pytest


"""
    + SPIN
    + """

@pytest.mark.parametrize("ms", [1.0, 2.0, 3.0, 4.0])
def test_spin(gauge, ms):
    seen = Path(os.environ["TOY_MARKS"]) / f"{ms}-{os.getpid()}"
    seen.write_text(os.environ.get("CUDA_VISIBLE_DEVICES", "none"))
    gauge(lambda: spin(ms))
"""
)


def _spread(repo: Path, tmp: Path) -> Path:
    """The toy with four tests, committed; the folder where its processes note their GPU."""
    (repo / "test_toy.py").write_text(SPREAD)
    _git(repo, "commit", "-qam", "four tests")
    marks = tmp / "marks"
    marks.mkdir()
    return marks


def test_gpus_are_named_once_each_as_cuda_names_them() -> None:
    assert parse_gpus("0,1") == ("0", "1")
    assert parse_gpus(" 3 ") == ("3",)
    uuid = "GPU-6a1e0e49-0000-0000-0000-000000000000"
    assert parse_gpus(f"{uuid},1") == (uuid, "1")
    for bad, said in [("", "such as 0,1"), ("0,,1", "such as 0,1"), ("0,0", "0 named twice")]:
        with pytest.raises(ValueError, match=said):
            parse_gpus(bad)


def test_a_gpu_the_host_lacks_is_named() -> None:
    host = ("GPU-6a1e0e49-aaaa", "GPU-53da3442-bbbb")
    assert unknown_gpus(("0", "1"), host) == []
    assert unknown_gpus(("0", "2", "3"), host) == ["2", "3"]
    assert unknown_gpus(("GPU-53da", "GPU-ffff", "MIG-1234"), host) == ["GPU-ffff"]
    assert unknown_gpus(("0",), ()) == ["0"]
    with pytest.raises(ValueError, match="this host has no GPU 2"):
        resolved(("0", "2"), None, host)


def test_gpus_count_within_the_gpus_this_process_may_use() -> None:
    host = tuple(f"GPU-{i}" for i in range(4))
    # a job given GPUs 2 and 3 keeps to them: its 0 and 1 are the host's 2 and 3
    assert resolved(("0", "1"), ("2", "3"), host) == ("2", "3")
    assert resolved(("all",), ("2", "3"), host) == ("2", "3")
    assert resolved(("all",), None, host) == ("0", "1", "2", "3")
    assert resolved(("GPU-1",), ("2", "3"), host) == ("GPU-1",)
    with pytest.raises(ValueError, match="no GPU 2 among the 2 this process may use"):
        resolved(("2",), ("2", "3"), host)
    with pytest.raises(ValueError, match="is empty"):
        resolved(("all",), (), host)
    with pytest.raises(ValueError, match="no NVIDIA driver"):
        resolved(("all",), None, None)
    assert resolved(("0", "1"), None, None) == ("0", "1")  # no NVML: as named
    assert parse_gpus(" all ") == ("all",)


def test_the_first_gpu_to_reach_a_test_takes_it() -> None:
    claims = Claims()
    assert claims.take("t::a", "0")
    assert not claims.take("t::a", "1")
    assert claims.take("t::a", "0")  # its later rounds: still its own
    assert claims.take("t::b", "1")
    # many GPUs at once: each test is taken once
    won: list[tuple[str, str]] = []

    def walk(gpu: str) -> None:
        won.extend((f"t::{i}", gpu) for i in range(200) if claims.take(f"t::{i}", gpu))

    threads = [threading.Thread(target=walk, args=(str(g),)) for g in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(test for test, _ in won) == sorted(f"t::{i}" for i in range(200))


def test_a_spread_report_counts_every_gpu_s_seconds_against_its_wall() -> None:
    one = CaseAB("a", "t::a", _pairs(1.0), wall_s=9.0, phases={"setup": 1.0, "blocks": 8.0})
    two = CaseAB("b", "t::b", _pairs(1.0), wall_s=9.0, phases={"setup": 1.0, "blocks": 8.0})
    gpu0 = ABReport(SIDE, SIDE, (one,), "H200", 12.0, start_s=2.0, gpus=("0",))
    gpu1 = ABReport(SIDE, SIDE, (two,), "H200", 11.0, start_s=2.0, gpus=("1",))
    report = one_report([gpu0, gpu1], ("0", "1"), 12.5)
    assert [c.id for c in report.cases] == ["a", "b"]
    assert report.device == "H200"
    assert report.device_s == 25.0  # two GPUs held for the A/B's 12.5 s
    assert report.as_dict()["gpus"] == ["0", "1"]
    assert report.rest_s == pytest.approx(25.0 - 18.0)
    assert summary_line(report).endswith("; 12 s on 2 GPUs (0, 1)")
    assert cost_line(report).startswith("time (of 2 GPUs x 12 s): setups 2 s, paired blocks 16 s")
    assert "sides' start 4 s" in cost_line(report)
    assert "of 25 s on 2 GPUs (0, 1) (64%)" in efficiency_line(report)  # 16 s of blocks
    assert "same GPU per case (of 2)" in terminal(report)
    # one GPU says nothing of GPUs
    alone = ABReport(SIDE, SIDE, (one,), "H200", 12.0)
    assert alone.device_s == 12.0
    assert "GPU" not in summary_line(alone)


@pytest.mark.slow
def test_a_spread_ab_pairs_each_test_on_one_gpu_and_shares_them(
    toy: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    marks = _spread(toy, tmp_path)
    os.environ["TOY_MARKS"] = str(marks)
    try:
        done = _ab(toy, "ab", "HEAD", "HEAD", "--gpus", "0,1", out=tmp_path / "out")
    finally:
        del os.environ["TOY_MARKS"]
    assert done.returncode == 0, done.stdout + done.stderr
    data = json.loads((tmp_path / "out" / "ab.json").read_text())
    assert data["gpus"] == ["0", "1"]
    assert data["complete"] is True
    cases = {c["id"]: c for c in data["cases"]}
    assert sorted(cases) == ["1.0", "2.0", "3.0", "4.0"]  # each test once
    for case in cases.values():
        assert case["outcome"] in ("same", "need more samples")
        assert len(case["rounds"]) == 1  # and its second round, on the same GPU
    # every process of a test saw one GPU; both GPUs took tests; no process saw both
    by_test: dict[str, set[str]] = {}
    for mark in marks.iterdir():
        by_test.setdefault(mark.name.split("-")[0], set()).add(mark.read_text())
    assert all(len(gpus) == 1 for gpus in by_test.values()), by_test
    assert set().union(*by_test.values()) == {"0", "1"}, by_test
    for gpu in ("0", "1"):
        folder = tmp_path / "out" / f"gpu-{gpu}"
        assert (folder / "base.log").is_file()
        assert (folder / "round-2" / "head.log").is_file()
    assert "4 cases: 0 slower, 0 faster" in done.stdout
    assert "on 2 GPUs (0, 1)" in done.stdout
    assert "GPU 0 |" in done.stdout
    assert "GPU 1 |" in done.stdout
    assert _leftovers(toy, tmp_path) == []


@pytest.mark.slow
@pytest.mark.parametrize("when", ["starting", "pairing"])
def test_a_stopped_spread_ab_stops_every_gpu_s_sides_and_keeps_what_they_finished(
    toy: Path,  # noqa: F811
    tmp_path: Path,
    when: str,
) -> None:
    # stopped while the sides start, or once a GPU has finished a test: a Ctrl-C must reach
    # every GPU's coordinator, not only the one whose thread received it
    marks = _spread(toy, tmp_path)
    out = tmp_path / "stopped"
    args = ("HEAD", "HEAD", "--gpus", "0,1", "--block-time", "0.5")
    proc = started_ab(toy, tmp_path, *args, out=out, env={"TOY_MARKS": str(marks)})
    deadline = time.monotonic() + (4 if when == "starting" else 300)
    while time.monotonic() < deadline and not (out / "ab.json").exists():
        time.sleep(0.2)
    interrupted(proc, toy, tmp_path)
    assert not list(out.rglob(".*.partial.json"))
    if when == "pairing":  # the tests finished before the stop, over both GPUs
        data = json.loads((out / "ab.json").read_text())
        assert data["complete"] is False
        assert data["gpus"] == ["0", "1"]
        assert data["cases"]
        assert all(c["pairs"] for c in data["cases"])


def test_confirm_s_gated_run_is_not_spread(toy: Path) -> None:  # noqa: F811
    done = subprocess.run(
        [sys.executable, "-m", "gpugauge", "confirm", "run.json", "--measure", "--gpus", "0,1"],
        cwd=toy,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2
    assert "--gpus" in done.stderr


def test_two_names_of_one_gpu_are_refused() -> None:
    host = ("GPU-6a1e0e49-aaaa", "GPU-53da3442-bbbb")
    assert named_twice(("0", "1"), host) == []
    assert named_twice(("0", "GPU-6a1e"), host) == ["0 and GPU-6a1e"]
    assert unknown_gpus(("GPU-",), host) == ["GPU-"]  # the start of both names neither
    with pytest.raises(ValueError, match="0 and GPU-6a1e name one GPU"):
        resolved(("0", "GPU-6a1e"), None, host)
