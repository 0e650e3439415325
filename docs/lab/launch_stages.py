"""Where one rank's launch of a distributed case spends its seconds, stage by stage (issue 48).

Runs the rank's stages in this process, one case at a time, as
:func:`gpugauge.families.distributed.rank.run_case` does (no torchrun): loading the
data, building the model, the probe, the warm-up steps, the timed epoch, the profiled
steps and reading their traces. Host seconds of stages that each end on a synchronized
device: bookkeeping of a launch, not a measurement of GPU work.

    python3 docs/lab/launch_stages.py vgg16-single-1gpu-b64-224px-cuda ...
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed as dist

from gpugauge.families.distributed import data as D
from gpugauge.families.distributed import rank as R
from gpugauge.families.distributed.cases import WARMUP_STEPS, cases
from gpugauge.launch.worker import RankContext
from gpugauge.measure.kernels import read_trace


def stages(case_id: str) -> dict[str, float]:
    """Each stage's seconds for ``case_id`` (synchronized at each stage's end)."""
    case = next(c for c in cases("seed") if c.id == case_id)
    ctx = RankContext(0, 0, 1, "cuda:0", "nccl")
    out: dict[str, float] = {}

    def mark(name: str, t0: float) -> float:
        torch.cuda.synchronize()
        now = time.perf_counter()
        out[name] = round(now - t0, 3)
        return now

    t = time.perf_counter()
    if case.model == "resnet18":
        data = D.cifar_epochs(case, ctx, pin=True)
    else:
        data = D.synthetic_pool(case, pin=True)
    t = mark("data", t)
    epochs, pool = (data, None) if case.model == "resnet18" else (None, data)
    with torch.device(ctx.device):  # as run_case builds it (run 130's code: on the CPU)
        model = R.build_model(case)
    trainer = R.Trainer(case, ctx, model, D.batches_of(case, epochs, pool))
    t = mark("model on the GPU", t)
    trainer.probe()
    t = mark("probe", t)
    steps = case.steps_per_epoch
    warm = steps if case.epochs == 2 else WARMUP_STEPS
    for _ in range(warm):
        trainer.step()
    t = mark(f"warm-up ({warm} steps)", t)
    for _ in range(steps):
        trainer.step()
    t = mark(f"an epoch ({steps} steps)", t)
    with tempfile.TemporaryDirectory() as d:
        traces = R.profile_steps(trainer, Path(d), 0)
        t = mark(f"profiled steps ({case.profiled_steps})", t)
        for p in traces:
            read_trace(p)
        t = mark("reading traces", t)
    return out


def main(ids: list[str]) -> None:
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29533")
    t0 = time.perf_counter()
    dist.init_process_group("nccl", rank=0, world_size=1)
    print(json.dumps({"process group": round(time.perf_counter() - t0, 3)}))
    for case_id in ids:
        print(json.dumps({"case": case_id, **stages(case_id)}), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1:])
