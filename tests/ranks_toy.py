"""A tiny DDP workload for the launcher's tests: gloo on the CPU, a rank that can be slow,
crash, hang or abort at exit on purpose (test only)."""

from __future__ import annotations

import atexit
import os
import time
from typing import Any

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from gpugauge.launch.worker import RankContext
from gpugauge.measure.timing import HostClock, TimingPolicy, measure


def run_rank(spec: dict[str, Any], ctx: RankContext) -> dict[str, Any]:
    """Time a DDP training step; ``slow_rank`` sleeps ``sleep_s`` more every step."""
    import torch.distributed as dist

    if spec.get("crash_rank") == ctx.rank:
        raise RuntimeError(f"planned crash on rank {ctx.rank}")
    if spec.get("abort_at_exit_rank") == ctx.rank:  # as a native destructor can, at teardown
        atexit.register(os.abort)
    torch.manual_seed(0)
    model = DistributedDataParallel(nn.Linear(32, 32))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(16, 32)
    dist.barrier()
    if spec.get("hang_rank") == ctx.rank:
        time.sleep(3600)

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        model(x).sum().backward()
        opt.step()
        if ctx.rank == spec.get("slow_rank"):
            time.sleep(spec["sleep_s"])

    timing = measure(step, TimingPolicy(warmup_rounds=2, rounds=spec["rounds"]), HostClock())
    return {"timing": timing.as_dict(), "values": {}, "extra": {"world": ctx.world_size}}
