"""The README's multi-node command, run: two torchrun agents on this machine (issue 26).

Each agent is ``python -m gpugauge.families.distributed.workload ... --nnodes 2
--node-rank N --rdzv-endpoint 127.0.0.1:PORT`` with a shared ``--out``, as on two nodes;
the c10d rendezvous runs on localhost, the ranks use gloo, and the distributed family's
CPU case (the CIFAR ResNet-18, the smallest) runs end to end. Both agents must print the
same result, and no process of either may remain.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpugauge.launch.torchrun import processes_mentioning

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    """A TCP port free on localhost a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_two_agents_rendezvous_on_localhost_and_leave_nothing(tmp_path: Path) -> None:
    out = tmp_path / "shared"
    endpoint = f"127.0.0.1:{free_port()}"
    agents = []
    for node in (0, 1):
        cmd = [sys.executable, "-m", "gpugauge.families.distributed.workload"]
        cmd += ["--model", "resnet18", "--device", "cpu", "--profile", "smoke"]
        cmd += ["--nproc-per-node", "1", "--nnodes", "2", "--node-rank", str(node)]
        cmd += ["--rdzv-endpoint", endpoint, "--out", str(out), "--timeout-s", "150"]
        agents.append(
            subprocess.Popen(
                cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
            )
        )
    try:
        outputs = [a.communicate(timeout=200)[0] for a in agents]
    finally:
        for a in agents:
            if a.poll() is None:
                a.kill()
                a.wait()
    for node, (a, text) in enumerate(zip(agents, outputs, strict=True)):
        assert a.returncode == 0, f"agent {node}:\n{text[-3000:]}"
        assert "--nnodes=2 --rdzv-backend=c10d" in text
        assert f"--node-rank={node}" in text
    lines = [[x for x in text.splitlines() if "median step" in x] for text in outputs]
    assert lines[0] == lines[1]
    assert lines[0][0].startswith("resnet18-ddp-2proc-b2-32px-cpu: median step")
    [series] = [p for p in out.iterdir() if p.is_dir()]
    ranks = [json.loads((series / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert [r["rank"] for r in ranks] == [0, 1]
    deadline = time.monotonic() + 10
    while processes_mentioning(str(out)) and time.monotonic() < deadline:
        time.sleep(0.2)
    left = processes_mentioning(str(out))
    for line in left:  # the test failed: do not leave them to CI
        with contextlib.suppress(ProcessLookupError, ValueError):
            os.kill(int(line.split(":")[0]), signal.SIGKILL)
    assert left == []
