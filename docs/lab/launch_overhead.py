"""What a torchrun launch of one rank costs before and after its rank function (issue 48).

Launches :func:`rank_fn` through :func:`gpugauge.launch.torchrun.launch`, as the
distributed family does, and prints a timeline in seconds from the launch's start: the
rank's process start (from /proc), its rank function's start, its first CUDA use, a
VGG-16 moved to the GPU twice (the first move of a process, then another), and the
launch's end. Host seconds of bookkeeping, each stage ending on a synchronized device.

    PYTHONPATH=. python3 docs/lab/launch_overhead.py [--cpu]
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


def _process_start() -> float:
    """When the calling process started, Unix seconds (from /proc: 10 ms steps)."""
    ticks = os.sysconf("SC_CLK_TCK")
    with open("/proc/self/stat") as fh:
        start = int(fh.read().rsplit(")", 1)[1].split()[19])
    with open("/proc/stat") as fh:
        boot = next(int(line.split()[1]) for line in fh if line.startswith("btime"))
    return boot + start / ticks


def rank_fn(spec: dict[str, Any], ctx: Any) -> dict[str, Any]:
    """Stamp the rank's stages (Unix seconds)."""
    stamps = {"rank process start": _process_start(), "rank function start": time.time()}
    if spec["device"] == "cuda":
        import torch

        torch.zeros(1, device=ctx.device)
        torch.cuda.synchronize()
        stamps["first CUDA tensor"] = time.time()
        from gpugauge.models.vgg import vgg

        for k in (1, 2):
            model = vgg("vgg16", num_classes=1000)
            stamps[f"VGG-16 built on the CPU ({k})"] = time.time()
            model.to(ctx.device)
            torch.cuda.synchronize()
            stamps[f"VGG-16 moved to the GPU ({k})"] = time.time()
            del model
    return {"timing": None, "values": {}, "extra": {"stamps": stamps}}


def main(argv: list[str]) -> None:
    from gpugauge.launch.torchrun import Launch, launch

    device = "cpu" if "--cpu" in argv else "cuda"
    here = str(Path(__file__).resolve().parent)  # the launcher puts its root before this
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [here, os.environ.get("PYTHONPATH")]))
    with tempfile.TemporaryDirectory() as d:
        t0 = time.time()
        ranks = launch(
            Launch("launch_overhead:rank_fn", {"device": device}, 1),
            Path(d),
            timeout_s=120,
            note=lambda _: None,
        )
        end = time.time()
        written = (Path(d) / "rank0.json").stat().st_mtime
    stamps = {**ranks[0].extra["stamps"], "rank result written": written, "launch end": end}
    order = sorted(stamps.items(), key=lambda kv: kv[1])
    print(json.dumps({k: round(v - t0, 3) for k, v in order}))


if __name__ == "__main__":
    main(sys.argv[1:])
