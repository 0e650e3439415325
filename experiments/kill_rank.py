"""Whether a DDP launch whose rank dies mid-run ends with a clear error, nothing left behind.

Question (issue 11): when one rank of a two-GPU DistributedDataParallel run is killed, does
the launcher notice, name the rank, stop the others and leave no process? Answer
(docs/lab/gpu-runs.md, run 16, two H200s; docs/lab/experiments.md, "kill_rank"): SIGKILL to rank 1
of a DDP x2 ResNet-18 launch 29 s in; the launch failed after 30 s (timeout 180 s) with a
``LaunchError`` naming both ranks' missing results and torchrun's root cause (rank 1,
exit code -9, SIGKILL); torchrun and both workers were listed before, none after.

Run from the checkout on two GPUs:

    python -m experiments.kill_rank --out DIR

Launches the seed's DDP x2 ResNet-18 series (batch 32) as the distributed benchmark does,
waits until rank 1 runs, lets it train 25 s, SIGKILLs it, then prints what the launch
raised and which processes were left; the same lines go to ``DIR/kill_rank.txt``. The
last line is ``crash check: pass`` or ``crash check: FAIL``.
"""

from __future__ import annotations

import argparse
import os
import signal
import tempfile
import threading
import time
from pathlib import Path

TIMEOUT_S = 180.0  # the whole launch
KILL_AFTER_S = 25.0  # after rank 1 is seen: well into its epochs (data loaded, steps running)


def _rank1_pid(folder: Path, t0: float) -> int | None:
    """The pid of the launch's rank-1 worker, once it runs (None after 120 s)."""
    from gpugauge.launch.torchrun import processes_mentioning

    while time.monotonic() - t0 < 120:
        for line in processes_mentioning(str(folder)):
            pid = int(line.split(":")[0])
            try:
                env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
            except OSError:
                continue
            if b"gpugauge.launch.worker" in cmd and b"RANK=1" in env:
                return pid
        time.sleep(0.2)
    return None


def kill_rank_mid_run() -> list[str]:
    """Launch, SIGKILL rank 1 mid-run, and report what happened, line by line."""
    from gpugauge.families.distributed.cases import DistCase
    from gpugauge.families.distributed.results import launch_series, series_dir
    from gpugauge.launch.torchrun import LaunchError, processes_mentioning

    case = DistCase("resnet18", "ddp", 2, 32, 32, 10, 50_000, 2, "cuda", "seed")
    root = Path(tempfile.mkdtemp(prefix="gg-crash-"))
    folder = series_dir(root, case)
    caught: list[BaseException] = []

    def run() -> None:
        try:
            launch_series([case], root, note=lambda _: None, timeout_s=TIMEOUT_S)
        except BaseException as err:  # handed to the main thread
            caught.append(err)

    t0 = time.monotonic()
    worker = threading.Thread(target=run)
    worker.start()
    pid = _rank1_pid(folder, t0)
    if pid is None:
        worker.join()
        return [f"rank 1 never started: {caught}", "crash check: FAIL"]
    time.sleep(KILL_AFTER_S)
    lines = [f"processes before the kill ({time.monotonic() - t0:.0f} s in):"]
    lines += [f"  {p}" for p in processes_mentioning(str(folder))]
    os.kill(pid, signal.SIGKILL)
    lines.append(f"SIGKILL sent to rank 1 (pid {pid})")
    worker.join()
    err = caught[0] if caught else None
    ok = isinstance(err, LaunchError) and "rank 1" in str(err)
    lines.append(
        f"launch ended after {time.monotonic() - t0:.0f} s (timeout {TIMEOUT_S:.0f} s): "
        f"{type(err).__name__ if err else 'no error'}"
    )
    lines += [f"  {ln}" for ln in str(err).splitlines()[:40]]
    left = processes_mentioning(str(root))
    lines.append(f"processes left after the launch: {left or 'none'}")
    lines.append(f"crash check: {'pass' if ok and not left else 'FAIL'}")
    return lines


def main() -> None:
    """Run the check, print its lines and keep them in ``--out``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", ".")))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    lines = kill_rank_mid_run()
    (args.out / "kill_rank.txt").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
