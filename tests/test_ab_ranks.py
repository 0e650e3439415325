"""gpugauge ab over cases a test times in processes it launches: torchrun ranks.

Real A/Bs of a throw-away repository whose test launches two gloo ranks with the suite's
launcher. Each rank runs a DDP step (an all-reduce keeps the ranks in lock-step) and a
host spin; one commit spins twice as long (two ranks on a small CI machine's cores scatter
a block's median by a third). A rank that timed rounds the other did not would
leave the other waiting in the all-reduce, so these A/Bs also show that every rank of a
launch times the same blocks.
"""

from __future__ import annotations

import json
import signal
import socket
import threading
import time
from dataclasses import replace
from itertools import pairwise
from multiprocessing import Pipe
from multiprocessing.connection import Client, Connection
from pathlib import Path
from typing import Any

import pytest

from gpugauge.ab import worker
from gpugauge.ab.config import ABConfig
from gpugauge.ab.runner import Coordinator
from gpugauge.ab.verdict import Schedule
from gpugauge.ab.worker import Channel, RankChannel, Relay, block_policy
from gpugauge.measure.timing import Timing, TimingPolicy
from tests.test_ab import SPIN, _ab, _git, _leftovers, interrupted, new_repo, processes, started_ab

RANK = (
    """\
import time

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from gpugauge.launch.case_timing import time_rank_case
from gpugauge.measure.timing import HostClock, TimingPolicy, measure


"""
    + SPIN
    + """

def run(spec, ctx):
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = DistributedDataParallel(nn.Linear(8, 8))
    x = torch.randn(4, 8)

    calls = [0]

    def step():
        model(x).sum().backward()  # an all-reduce of the gradients: ranks in lock-step
        spin({ms})
        calls[0] += 1{crash}

    # a reference the case does not pair: it runs as without an A/B
    reference = measure(step, TimingPolicy(warmup_rounds=1, rounds=3), HostClock())
    began = time.time()
    time.sleep({setup_s})  # the rest of the case's setup
    if {setup_s} and ctx.rank == 0:  # when this launch's setup ran, for the test to read
        with open(os.path.join(os.environ["TOY_MARKS"], f"setup-{{os.getpid()}}"), "w") as fh:
            fh.write(f"{{began}} {{time.time()}}")
    timing = time_rank_case(step, TimingPolicy(warmup_rounds=2, rounds=10), HostClock())
    counts = [len(reference.device_ms), len(timing.device_ms)]
    return {{"timing": timing.as_dict(), "values": {{}}, "extra": {{"counts": counts}}}}
"""
)

BENCH = """\
import json
import os
from pathlib import Path

from gpugauge.launch.torchrun import Launch, launch


def test_ranks(tmp_path, monkeypatch):
    here = str(Path(__file__).parent)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([here, os.environ.get("PYTHONPATH", "")]))
    ranks = launch(Launch("toy_rank:run", {"device": "cpu"}, 2), tmp_path, timeout_s=300)
    counts = [r.extra["counts"] for r in ranks]
    assert counts[0] == counts[1], counts  # every rank timed the same rounds
    marks = Path(os.environ["TOY_MARKS"])
    (marks / f"{os.getpid()}.json").write_text(json.dumps(counts[0]))
"""


# rank 0 ends at once, in the middle of a block (no exception, no word to its side)
CRASH = """
        if ctx.rank == 0 and calls[0] == 30:
            os._exit(1)"""


def _commit(
    repo: Path, ms: float, message: str, crash: str = "", setup_s: float = 0.0, marked: bool = False
) -> None:
    rank = RANK.format(ms=ms, crash=crash, setup_s=setup_s)
    (repo / "toy_rank.py").write_text("import os\n" + rank)
    mark = "import pytest\n\n\n@pytest.mark.launched\ndef test_ranks"
    (repo / "test_toy.py").write_text(BENCH.replace("def test_ranks", mark) if marked else BENCH)
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", message)


@pytest.fixture
def ranks_toy(tmp_path: Path) -> Path:
    repo = new_repo(tmp_path / "toy")
    _commit(repo, 3.0, "ranks")
    return repo


def test_a_rank_s_block_is_counts_of_rounds_alone() -> None:
    """No clock decides a rank's block: every rank of a launch must time the same rounds."""
    policy = TimingPolicy(warmup_rounds=7, warmup_s=1.0, settle=0.02, rounds=50, idle_s=0.5)
    order = {"block_s": 0.15, "rewarm_s": 0.02, "first_warm_s": 0.3, "min_rounds": 3}
    first = block_policy(policy, order, first=True, counted=True)
    assert (first.warmup_rounds, first.rounds) == (7, 3)  # the case's warm-up, least rounds
    assert first.warmup_s == first.settle == first.idle_s == first.min_time_s == 0
    later = block_policy(policy, order | {"rounds": 11}, first=False, counted=True)
    assert (later.warmup_rounds, later.rounds, later.warmup_s) == (1, 11, 0)
    # in one process the block is timed for its seconds, as before
    alone = block_policy(policy, order, first=True)
    assert alone.rounds is None
    assert alone.min_time_s == 0.15


def test_a_rank_block_s_median_is_the_slowest_rank_s_round_by_round(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """As the case's result (slowest_rank_rounds): a step ends when its last rank ends."""
    import torch.distributed as dist

    def all_gather_object(out: list[Any], obj: Any, group: Any = None) -> None:
        out[:] = [obj, [1.0, 9.0, 1.0]]  # the other rank: slow in the second round only

    monkeypatch.setattr(dist, "all_gather_object", all_gather_object)
    times = (5.0, 2.0, 3.0)
    own = Timing(times, times, "host", warmup_rounds=1, warmup_s=0.0, stop_reason="", noisy=False)
    said = RankChannel(None, object(), 2).stats(own)
    # rounds' slowest 5, 9, 3: median 5 (rank 0's own median is 3, the ranks' medians 3, 1)
    assert said["median_ms"] == 5.0
    assert said["rounds"] == 3


def test_every_side_launches_each_test_s_case_alone_a_gated_one_too() -> None:
    """A series launched at once would time its cases in its first test: none paired."""
    plain = dict(Coordinator(ABConfig((), Path("unused")), {}).settings("head"))
    gated = replace(ABConfig((), Path("unused")), head_as_is=True)
    as_is = dict(Coordinator(gated, {}).settings("head", as_is=True))
    assert plain[("gauge_launch_each",)] is True
    assert as_is[("gauge_launch_each",)] is True


KEY = b"k" * 16


def _relayed_ask(tmp_path: Path) -> tuple[Connection, Relay, Connection]:
    """A relay over a pipe to a stand-in coordinator, and a rank 0 whose first ask reached it."""
    coordinator, side = Pipe()
    relay = Relay(Channel(side), str(tmp_path / "r"), KEY)
    rank = Client(str(tmp_path / "r"), family="AF_UNIX", authkey=KEY)
    rank.send({"op": "measure"})
    assert coordinator.recv() == {"op": "measure"}
    return coordinator, relay, rank


def test_the_relay_passes_rank_0_s_asks_on_and_reports_a_rank_gone_inside_a_block(
    tmp_path: Path,
) -> None:
    coordinator, relay, rank = _relayed_ask(tmp_path)
    coordinator.send({"op": "block", "block_s": 0.1})
    assert rank.recv() == {"op": "block", "block_s": 0.1}
    assert not relay.quiet.is_set()  # a rank is connected: the test's done must wait
    rank.close()  # gone inside its block, without a word
    assert coordinator.poll(10)
    said = coordinator.recv()
    assert said["op"] == "block_failed"
    assert "ended inside a block" in said["error"]
    relay.wait_quiet()
    assert relay.quiet.is_set()
    # the next launch's rank 0 is served too; one that hangs up owing nothing says nothing
    rank = Client(str(tmp_path / "r"), family="AF_UNIX", authkey=KEY)
    rank.send({"op": "measure"})
    assert coordinator.recv() == {"op": "measure"}
    coordinator.send({"op": "solo"})
    assert rank.recv() == {"op": "solo"}
    rank.close()
    relay.wait_quiet()
    assert not coordinator.poll(0.5)


def test_the_test_s_end_waits_for_an_answer_the_relay_waits_for(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A rank 0 gone while its ask waits on the other side: its block fails before ``done``.

    The coordinator answers once the other side has spoken (its setup, its block), which
    may be long after the launch ended (its timeout, a crash); the side's ``done`` must
    not go out before, nor the relay's thread read the side's socket beside the test's end.
    """
    monkeypatch.setattr(worker, "RELAY_QUIET_S", 0.2)
    coordinator, relay, rank = _relayed_ask(tmp_path)
    rank.close()  # its launch timed out while the other side set up
    ended = threading.Event()
    end = threading.Thread(target=lambda: (relay.wait_quiet(), ended.set()), daemon=True)
    end.start()
    assert not ended.wait(1.0)  # the answer is still owed to the relay
    coordinator.send({"op": "block", "block_s": 0.1})
    assert ended.wait(10)
    said = coordinator.recv()
    assert said["op"] == "block_failed"
    assert "ended inside a block" in said["error"]
    assert not coordinator.poll(0.5)  # nothing more: the side's done comes next


def test_a_launch_s_clock_stands_still_while_rank_0_waits_for_the_other_side(
    tmp_path: Path,
) -> None:
    """Its limit counts its own work: a hang on the other side must not end it too."""
    coordinator, relay, rank = _relayed_ask(tmp_path)
    waiting = relay.clock()
    time.sleep(0.3)  # the other side sets up, times its block
    assert relay.clock() == waiting
    coordinator.send({"op": "block", "block_s": 0.1})
    assert rank.recv()["op"] == "block"
    running = relay.clock()
    time.sleep(0.3)  # this side times its block: its own time
    assert relay.clock() - running >= 0.29
    assert relay.clock() - waiting < 0.6  # the wait before its answer never counted
    rank.close()  # gone inside its block: the relay reports it, as it would any
    assert coordinator.poll(10)
    assert coordinator.recv()["op"] == "block_failed"
    relay.wait_quiet()


def test_an_own_clock_never_runs_backwards_read_from_another_thread() -> None:
    clock = worker.OwnClock()
    reads: list[float] = []
    stop = threading.Event()

    def read() -> None:
        while not stop.is_set():
            reads.append(clock())

    reader = threading.Thread(target=read)
    reader.start()
    for _ in range(200):
        with clock.stopped():
            time.sleep(0.0005)
        time.sleep(0.0005)
    stop.set()
    reader.join()
    assert len(reads) > 100
    assert all(b >= a for a, b in pairwise(reads))


def test_a_rank_gone_during_the_relay_s_handshake_leaves_it_serving(tmp_path: Path) -> None:
    coordinator, side = Pipe()
    Relay(Channel(side), str(tmp_path / "r"), KEY)
    gone = socket.socket(socket.AF_UNIX)
    gone.connect(str(tmp_path / "r"))
    gone.close()  # killed before the handshake
    time.sleep(0.5)
    got: list[Connection] = []
    t = threading.Thread(
        target=lambda: got.append(Client(str(tmp_path / "r"), family="AF_UNIX", authkey=KEY)),
        daemon=True,
    )
    t.start()
    t.join(10)
    assert got, "the next launch's rank 0 was never served"
    got[0].send({"op": "measure"})
    assert coordinator.poll(10)
    assert coordinator.recv() == {"op": "measure"}
    coordinator.send({"op": "solo"})  # the relay's thread waits for no answer past the test
    assert got[0].recv() == {"op": "solo"}
    got[0].close()


@pytest.fixture
def marks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The folder where the toy's ranks leave their marks (``TOY_MARKS``)."""
    folder = tmp_path / "marks"
    folder.mkdir()
    monkeypatch.setenv("TOY_MARKS", str(folder))
    return folder


@pytest.mark.slow
def test_a_slower_commit_of_a_launched_case_is_slower_and_a_a_is_not(
    ranks_toy: Path, tmp_path: Path, marks: Path
) -> None:
    _commit(ranks_toy, 6.0, "spin twice as long")
    slow = _ab(ranks_toy, "ab", "HEAD~1", "HEAD", out=tmp_path / "slow")
    assert slow.returncode == 1, slow.stdout + slow.stderr
    (case,) = json.loads((tmp_path / "slow" / "ab.json").read_text())["cases"]
    assert case["outcome"] == "slower", slow.stdout
    assert case["ci_low"] > 1.1  # 3 ms more on about 5 ms rounds
    assert len(case["pairs"]) >= Schedule().min_pairs
    assert len(case["rounds"]) == 1
    # the reference the rank timed besides ran as it would alone: 3 rounds in every process
    counts = [json.loads(p.read_text()) for p in marks.glob("*.json")]
    assert len(counts) == 4, counts
    assert all(c[0] == 3 for c in counts), counts
    # and the case's rounds are its blocks' rounds, the same on both ranks
    first = case["pairs"][0]["base"]
    assert first["rounds"] == 3  # a rank's first block: the order's least rounds
    same = _ab(ranks_toy, "ab", "HEAD", "HEAD", out=tmp_path / "same")
    assert same.returncode == 0, same.stdout + same.stderr
    (case,) = json.loads((tmp_path / "same" / "ab.json").read_text())["cases"]
    assert case["outcome"] in ("same", "need more samples"), same.stdout
    assert _leftovers(ranks_toy, tmp_path) == []


@pytest.mark.slow
def test_a_rank_that_dies_inside_a_block_fails_its_test_and_the_a_b_goes_on(
    ranks_toy: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TOY_MARKS", str(tmp_path))
    _commit(ranks_toy, 3.0, "rank 0 dies", crash=CRASH)
    run = _ab(ranks_toy, "ab", "HEAD~1", "HEAD", out=tmp_path / "dies", timeout=300)
    assert run.returncode == 1, run.stdout + run.stderr
    (case,) = json.loads((tmp_path / "dies" / "ab.json").read_text())["cases"]
    assert case["status"]["head"] == "failed", case["status"]
    assert case["status"]["base"] == "passed", case["status"]
    assert "ended inside a block" in (tmp_path / "dies" / "ab.json").read_text() + run.stdout
    assert _leftovers(ranks_toy, tmp_path) == []


def _setup_spans(marks: Path) -> list[tuple[float, float]]:
    """Each side's rank 0: when its setup began and ended (Unix seconds), earliest first."""
    return sorted(tuple(map(float, p.read_text().split())) for p in marks.glob("setup-*"))


@pytest.mark.slow
def test_a_launched_case_s_two_sides_start_their_launches_at_once(
    ranks_toy: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for marked in (False, True):
        marks = tmp_path / f"marks-{marked}"
        marks.mkdir()
        monkeypatch.setenv("TOY_MARKS", str(marks))
        _commit(ranks_toy, 3.0, f"4 s of setup, marked: {marked}", setup_s=4.0, marked=marked)
        out = tmp_path / f"marked-{marked}"
        run = _ab(ranks_toy, "ab", "HEAD", "HEAD", "--rounds", "1", out=out)
        # no verdict asked of one round of gloo ranks on a small machine's shared cores: a
        # loaded CI host read this A/A 1.35x "slower" (exit 1) once; both sides must pass
        assert run.returncode in (0, 1), run.stdout + run.stderr
        said = json.loads((out / "ab.json").read_text())
        assert said["problems"] == [], run.stdout
        (case,) = said["cases"]
        assert case["status"] == {"base": "passed", "head": "passed"}, run.stdout
        assert len(case["pairs"]) >= Schedule().min_pairs, run.stdout
        first, second = _setup_spans(marks)
        # in turn, the second side starts once the first is set up; marked, both at once
        assert (second[0] < first[1]) == marked, (first, second)
    assert _leftovers(ranks_toy, tmp_path) == []


@pytest.mark.slow
def test_a_side_that_injects_a_slowdown_sets_its_marked_launches_up_in_turn(
    ranks_toy: Path, tmp_path: Path, marks: Path
) -> None:
    # the worker's own "injects", from the side's command line: a rank sizes its slowdown
    # from a probe in its setup, which must not run beside the other side's setup
    _commit(ranks_toy, 3.0, "4 s of setup, marked", setup_s=4.0, marked=True)
    injects = "-p gpugauge.check.slowdown --gauge-inject-slowdown-ms 0.5"
    out = tmp_path / "injected"
    run = _ab(ranks_toy, "ab", "HEAD", "HEAD", "--rounds", "1", "--head-args", injects, out=out)
    assert run.returncode in (0, 1), run.stdout + run.stderr
    first, second = _setup_spans(marks)
    assert second[0] >= first[1], (first, second)  # the second set up after the first
    assert _leftovers(ranks_toy, tmp_path) == []


def _ranks_of(tmp: Path) -> list[int]:
    """The pids of ranks launched by an A/B's sides whose sockets lie under ``tmp``."""

    def rank_of_it(cmd: list[bytes], env: list[bytes]) -> bool:
        relay = [e for e in env if e.startswith(b"GPUGAUGE_AB_RANKS=")]
        return b"gpugauge.launch.worker" in cmd and bool(relay) and str(tmp).encode() in relay[0]

    return processes(rank_of_it)


@pytest.mark.slow
def test_a_stopped_ab_leaves_no_rank_running(ranks_toy: Path, tmp_path: Path) -> None:
    proc = started_ab(ranks_toy, tmp_path, "HEAD", "HEAD", "--block-time", "1", out=tmp_path / "x")
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and len(_ranks_of(tmp_path)) < 4:
        time.sleep(0.2)
    ranks = _ranks_of(tmp_path)
    assert len(ranks) == 4, "both sides' ranks never ran together"
    time.sleep(2)  # blocks of one second, alternating
    assert "interrupted" in interrupted(proc, ranks_toy, tmp_path, signal.SIGTERM)
    assert _ranks_of(tmp_path) == []
