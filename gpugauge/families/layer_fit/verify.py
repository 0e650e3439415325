"""Verification of the split's schedules: their gradients against the eager naive split's."""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import Any

import torch

from gpugauge.families.layer_fit.memory_model import MemoryModel
from gpugauge.families.layer_fit.runner import SplitRunner


def check_pipeline(
    model: MemoryModel,
    n: int,
    m: int,
    cut: int,
    devices: Sequence[str],
    schedule: str,
    micro_batches: int,
    threads: bool = False,
    graphs: bool = False,
) -> dict[str, Any]:
    """A schedule's gradients against the eager naive split's after one step, same weights.

    Runs in full fp32 (TF32 off): the schedules sum the same per-sample terms in another
    order, so only rounding may differ. ``graphs``: the schedule replayed from CUDA graphs
    (``naive`` too), whose static buffers are ordered across devices by events alone. A
    missing event is a race that timing may hide, so the graphed step also runs with each
    CUDA device held back (a spin kernel before every step) while the other and the copies
    go on, then with every copy held back (a spin on its stream first), and for two steps
    against the same schedule issued op by op (the events that carry over a step; after
    two steps the update has grown the schedules' rounding differences tenfold, so the
    naive split is no reference there; graphs replay its kernels, so they should agree
    exactly: ``max_vs_eager``). Returns the largest relative difference and each
    comparison's.
    """
    stalls: list[str | None] = [None]
    if graphs:
        stalls += [d for d in dict.fromkeys(devices) if d.startswith("cuda")] + ["copies"]
    runner = partial(SplitRunner, model, n, m, cut, devices, threads)  # graphs or not
    runs: dict[str, float] = {}
    with torch.backends.cudnn.flags(enabled=True, benchmark=False, allow_tf32=False):
        naive = _gradients_after(runner(False), "naive", 1, 1)
        for stall in stalls:
            got = _gradients_after(runner(graphs), schedule, micro_batches, 1, stall)
            runs[f"naive, 1 step, {stall or 'none'} held"] = _worst_rel_diff(naive, got)
        if graphs:
            eager = _gradients_after(runner(False), schedule, micro_batches, 2)
            for stall in stalls:
                got = _gradients_after(runner(True), schedule, micro_batches, 2, stall)
                runs[f"eager, 2 steps, {stall or 'none'} held"] = _worst_rel_diff(eager, got)
    vs_eager = [v for k, v in runs.items() if k.startswith("eager")]
    return {
        "max_grad_rel_diff": max(runs.values()),
        "max_vs_eager": max(vs_eager) if vs_eager else None,
        "against": runs,
        "parameters": len(naive),
        "schedule": schedule,
        "micro_batches": micro_batches,
        "graphs": graphs,
    }


def _worst_rel_diff(ref: Sequence[torch.Tensor], got: Sequence[torch.Tensor]) -> float:
    return max(
        float((a - b).norm() / a.norm().clamp_min(1e-30)) for a, b in zip(ref, got, strict=True)
    )


STALL_CYCLES = 100_000_000  # a spin kernel of about 50 ms at 2 GHz


def _gradients_after(
    runner: SplitRunner,
    schedule: str,
    micro_batches: int,
    steps: int,
    stall: str | None = None,
) -> list[torch.Tensor]:
    """Every gradient after ``steps`` steps of ``runner``'s ``schedule`` (seeded weights).

    ``stall``: a CUDA device to hold back before every step, or ``"copies"`` (graphs):
    every cross-device copy held back on its stream.
    """
    step = runner.schedule(schedule, micro_batches)
    if stall == "copies" and runner.graphed is not None:
        runner.graphed.forth.hold_cycles = runner.graphed.back.hold_cycles = STALL_CYCLES // 10
    for _ in range(steps):
        if stall not in (None, "copies"):
            with torch.cuda.device(stall):
                torch.cuda._sleep(STALL_CYCLES)
        step()
    return runner.gradients()
