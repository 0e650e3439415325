"""Nothing a launch starts outlives it (issue 26), checked from the process list.

On the CPU with gloo and two ranks: SIGTERM or SIGINT to pytest running the distributed
family's CPU case, ``kill -9`` of torchrun, and a SIGSTOPped rank each leave zero
processes, and the stopped rank is named. ``/proc`` is the process list (no psutil).
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from gpugauge.launch import reaper
from gpugauge.launch.torchrun import Launch, LaunchError, heartbeats, launch, processes_mentioning

ROOT = Path(__file__).resolve().parents[1]
CALL = "tests.ranks_toy:run_rank"


def wait_for(cond: Callable[[], object], timeout_s: float, what: str) -> None:
    """Poll ``cond`` until it is true; fail naming ``what`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout_s:g} s")
        time.sleep(0.1)


def left_after(text: str, timeout_s: float = 20.0) -> list[str]:
    """Processes whose command line holds ``text`` once ``timeout_s`` has passed (or none)."""
    deadline = time.monotonic() + timeout_s
    while (found := processes_mentioning(text)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return found


@pytest.fixture
def no_leftovers(tmp_path: Path) -> Iterator[Path]:
    """A folder for one launch; whatever still mentions it at the end is SIGKILL-ed (the
    test has failed by then), so that a failure does not leave CI with workers."""
    yield tmp_path
    for line in processes_mentioning(str(tmp_path)):
        with contextlib.suppress(ProcessLookupError, ValueError):
            os.kill(int(line.split(":")[0]), signal.SIGKILL)


def beating(out: Path, ranks: int) -> Callable[[], bool]:
    return lambda: len(heartbeats(out, ranks)) == ranks


def test_kill_9_of_torchrun_leaves_no_worker(no_leftovers: Path) -> None:
    out = no_leftovers
    job = Launch(CALL, {"device": "cpu", "rounds": 3, "hang_rank": 1}, 2)

    def kill_torchrun() -> None:
        wait_for(beating(out, 2), 90, "both ranks' heartbeats")
        # torchrun's own command line, not the reaper's that holds it after "--"
        [torchrun] = [
            int(line.split(":")[0])
            for line in processes_mentioning(str(out))
            if line.split(": ", 1)[1].split()[1:3] == ["-m", "torch.distributed.run"]
        ]
        os.kill(torchrun, signal.SIGKILL)

    killer = threading.Thread(target=kill_torchrun, daemon=True)
    killer.start()
    started = time.monotonic()
    with pytest.raises(LaunchError, match=r"torchrun exit 137 \(SIGKILL\)"):
        launch(job, out, timeout_s=120, note=lambda _: None, grace_s=2)
    killer.join()
    assert time.monotonic() - started < 100
    assert left_after(str(out)) == []


@pytest.mark.slow
def test_a_stopped_rank_is_named_and_killed_before_the_timeout(no_leftovers: Path) -> None:
    out = no_leftovers
    job = Launch(CALL, {"device": "cpu", "rounds": 200_000}, 2, stall_s=4)
    stopped: list[int] = []

    def stop_rank_1() -> None:
        wait_for(beating(out, 2), 90, "both ranks' heartbeats")
        stopped.append(heartbeats(out, 2)[1].pid)
        os.kill(stopped[0], signal.SIGSTOP)

    stopper = threading.Thread(target=stop_rank_1, daemon=True)
    stopper.start()
    started = time.monotonic()
    with pytest.raises(LaunchError) as err:
        launch(job, out, timeout_s=150, note=lambda _: None, grace_s=2)
    stopper.join()
    message = str(err.value)
    assert time.monotonic() - started < 120  # the stall ended it, well before the timeout
    assert re.search(rf"rank 1 did not report for \d+ s \(pid {stopped[0]} on ", message)
    assert "stopped (state T)" in message
    assert "rank 0 was still reporting" in message
    assert "rank 0 did not report" not in message
    assert reaper.state(stopped[0]) is None  # the stopped process is gone, not left in T
    assert left_after(str(out)) == []


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
@pytest.mark.slow
def test_a_signal_to_pytest_stops_the_distributed_family_launch(
    no_leftovers: Path, sig: signal.Signals
) -> None:
    """pytest running the distributed family's gloo CPU case gets a signal mid-launch."""
    art = no_leftovers / "artifacts"
    cmd = [sys.executable, "-m", "pytest", "benches/test_distributed.py", "-q"]
    cmd += ["-p", "no:cacheprovider", "-k", "resnet18-ddp-2proc-b2-32px-cpu"]
    cmd += ["--gauge-device", "cpu", f"--gauge-artifacts-dir={art}"]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:

        def both_beating() -> bool:
            return len(list(art.glob("*/distributed/*/rank*.alive"))) == 2

        wait_for(both_beating, 120, "both ranks' heartbeats")
        proc.send_signal(sig)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert left_after(str(art)) == []


def test_the_reaper_ends_a_tree_whose_members_left_its_session(tmp_path: Path) -> None:
    """A grandchild in a session of its own, orphaned, is still found and ended."""
    marker = f"sleep-of-{tmp_path.name}"
    script = (
        "import subprocess, sys, time\n"
        f"subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)', {marker!r}],"
        " start_new_session=True)\n"
        "time.sleep(0.5)\n"  # then exit: the grandchild is orphaned, handed to the reaper
    )
    started = time.monotonic()
    cmd = [sys.executable, "-m", "gpugauge.launch.reaper", "--grace-s=1", "--"]
    done = subprocess.run([*cmd, sys.executable, "-c", script], cwd=ROOT, timeout=60, check=False)
    assert done.returncode == 0
    assert time.monotonic() - started < 30
    assert left_after(marker, 5) == []
