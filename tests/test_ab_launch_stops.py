"""gpugauge ab over launched tests (torchrun ranks) that are stopped, crash or hang.

What a stop or a failure of one side must leave: the other side's test as it would run
alone, no process of either side's launches, a side that ends by itself once its launch
has ended. The toy is :mod:`tests.test_ab_ranks`'s: two gloo ranks, marked ``launched`` so
that both sides start and end their launches at once.
"""

from __future__ import annotations

import json
import signal
import threading
import time
from multiprocessing import Pipe
from multiprocessing.connection import Client
from pathlib import Path
from typing import Any

import pytest

from gpugauge.ab import worker
from gpugauge.ab.runner import Coordinator
from gpugauge.ab.worker import Channel, Relay
from tests.test_ab import _ab, _git, _leftovers, _Scripted, processes, started_ab
from tests.test_ab_ranks import KEY, _commit, ranks_toy  # noqa: F401 (fixture)


def _commit_launched(
    repo: Path, message: str, crash: str = "", timeout_s: float = 300, rank_head: str = ""
) -> None:
    """A commit of the toy, marked launched; its launch's timeout and the rank's first lines."""
    _commit(repo, 3.0, message, crash=crash, marked=True)
    test = repo / "test_toy.py"
    test.write_text(test.read_text().replace("timeout_s=300", f"timeout_s={timeout_s:g}"))
    rank = repo / "toy_rank.py"
    rank.write_text(
        rank.read_text().replace("def run(spec, ctx):\n", f"def run(spec, ctx):\n{rank_head}")
    )
    _git(repo, "commit", "-qa", "--amend", "--no-edit")


def _launched_by(tmp: Path) -> list[int]:
    """Every process that an A/B's sides launched (reaper, torchrun, ranks) under ``tmp``.

    They carry the side's relay address, a socket under the A/B's folder in ``tmp``.
    """

    def launched(cmd: list[bytes], env: list[bytes]) -> bool:
        relay = [e for e in env if e.startswith(b"GPUGAUGE_AB_RANKS=")]
        return bool(relay) and str(tmp).encode() in relay[0] and b"_gpugauge_ab_worker" not in cmd

    return processes(launched)


# --- a stop


class _Interrupted:
    """What pluggy hands a hook wrapper whose test a Ctrl-C stopped."""

    excinfo = (KeyboardInterrupt, KeyboardInterrupt(), None)


class _Item:
    nodeid = "test_toy.py::test_ranks"


def test_a_side_stopped_while_its_launch_waits_for_an_order_ends_by_itself(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The coordinator stops its sides (SIGINT) and answers nothing more.

    The relay's thread waits for the answer to rank 0's last ask, holding the relay's
    lock; the test's end must not wait for that rank to hang up, nor take the lock: the
    side would never end but by the SIGKILL after the stop's grace.
    """
    monkeypatch.setattr(worker, "RELAY_QUIET_S", 0.2)
    coordinator, side = Pipe()
    channel = Channel(side)
    relay = Relay(channel, str(tmp_path / "r"), KEY)
    monkeypatch.setattr(worker, "CHANNEL", channel)
    monkeypatch.setattr(worker, "RELAY", relay)
    coordinator.send({"op": "go"})
    hook = worker.pytest_runtest_protocol(_Item(), None)  # type: ignore[arg-type]
    next(hook)  # the test runs: it launches its ranks
    assert coordinator.recv()["op"] == "test"
    rank = Client(str(tmp_path / "r"), family="AF_UNIX", authkey=KEY)
    rank.send({"op": "measure"})
    assert coordinator.recv() == {"op": "measure"}  # the coordinator is stopping: no answer
    rank.close()  # its launch stopped by the side's Ctrl-C

    def end() -> None:
        with pytest.raises(StopIteration):
            hook.send(_Interrupted())

    ended = threading.Thread(target=end, daemon=True)
    ended.start()
    ended.join(10)
    stuck = ended.is_alive()
    coordinator.send({"op": "solo"})  # lets the relay's thread go, either way
    ended.join(10)
    assert not stuck, "the side's test end waits for the stopped coordinator's answer"
    assert not coordinator.poll(0.5)  # nor its "done": a stopping coordinator reads none


@pytest.mark.slow
def test_a_stopped_ab_leaves_no_launched_process_even_where_ranks_end_slowly(
    ranks_toy: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    # ranks that take their time to end on SIGTERM (a CUDA context, NCCL, data workers)
    slow_end = "    import signal\n    signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    _commit_launched(ranks_toy, "ranks that ignore SIGTERM", rank_head=slow_end)
    out = tmp_path / "x"
    proc = started_ab(
        ranks_toy, tmp_path, "HEAD", "HEAD", "--rounds", "1", "--block-time", "1", out=out
    )
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and len(_launched_by(tmp_path)) < 8:
            time.sleep(0.2)
        assert len(_launched_by(tmp_path)) == 8, "both sides' launches never ran together"
        time.sleep(2)  # blocks of one second, alternating
        proc.send_signal(signal.SIGINT)
        said, _ = proc.communicate(timeout=60)
        assert proc.returncode == 130, said
        left = _launched_by(tmp_path)  # as the command returns: nothing of it runs
    finally:
        if proc.poll() is None:
            proc.kill()
        time.sleep(8)  # the reapers' grace, so that the next test starts clean
    assert left == []
    assert _leftovers(ranks_toy, tmp_path) == []
    assert not list(out.glob(".*.partial.json"))


# --- a failure on one side

HANG = """
        if ctx.rank == 1 and calls[0] == 30:
            time.sleep(3600)"""


@pytest.mark.slow
def test_a_rank_that_hangs_fails_its_own_side_only(
    ranks_toy: Path,  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TOY_MARKS", str(tmp_path))
    _commit_launched(ranks_toy, "base: a launch of 40 s at most", timeout_s=40)
    _commit_launched(ranks_toy, "head: rank 1 hangs in a block", crash=HANG, timeout_s=40)
    run = _ab(ranks_toy, "ab", "HEAD~1", "HEAD", "--rounds", "1", out=tmp_path / "h", timeout=300)
    assert run.returncode == 1, run.stdout + run.stderr
    assert "did not finish within 40 s" in (tmp_path / "h" / "head.log").read_text()
    assert _launched_by(tmp_path) == []
    (case,) = json.loads((tmp_path / "h" / "ab.json").read_text())["cases"]
    assert case["status"] == {"base": "passed", "head": "failed"}, run.stdout


class _FailsBeforeItsCall(_Scripted):
    """A side whose test fails in its setup, before its timing call (a rank 0 that died)."""

    def expect(self, *ops: str) -> dict:
        if self.last["op"] == "go":
            return {"op": "done", "outcome": "failed"}
        return super().expect(*ops)


@pytest.mark.parametrize("launched", [True, False])
def test_a_side_that_failed_before_its_timing_call_is_named_failed(launched: bool) -> None:
    """Not "made no such call": the side's test failed, the table's verdict must say so."""
    from gpugauge.ab.config import ABConfig

    coordinator = Coordinator(ABConfig((), Path("unused")), {}, note=lambda _: None)
    coordinator._launched = {"t.py::t"} if launched else set()
    blocks: list[Any] = []
    case = coordinator._paired(
        _Scripted("base", blocks), _FailsBeforeItsCall("head", blocks), "t.py::t"
    )
    assert case.status == {"base": "passed", "head": "failed"}
    assert case.timed_alone == ""
    assert "made no such call" not in case.unpaired_reason
    assert "head: failed" in case.unpaired_reason
