"""The distributed family in the rank: models, the training step, one series run.

torchrun starts :func:`run_series` in every rank (``CALL`` of
:mod:`gpugauge.families.distributed.results`); each case is timed by the suite's
primitive, profiled with the seed's schedule and, on several GPUs, followed by an
all-reduce of its gradient bytes. Nothing here imports pytest.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch
from torch import nn

from gpugauge.check.delay import delay_for, injected_ms, injection_asked
from gpugauge.families.distributed.cases import OPTIMIZERS, WARMUP_STEPS, DistCase
from gpugauge.families.distributed.data import Batch, batches_of, cifar_epochs, synthetic_pool
from gpugauge.launch.case_timing import time_rank_case
from gpugauge.launch.worker import RankContext
from gpugauge.measure.kernels import comm_split, kernel_table, read_trace
from gpugauge.measure.profile import release_cupti_on_stop
from gpugauge.measure.timing import CudaEventClock, HostClock, RoundClock, Timing, TimingPolicy
from gpugauge.measure.timing import measure as time_rounds
from gpugauge.measure.wall import AROUND, PROFILED, WallLedger
from gpugauge.results.measurement import INJECTED_KEY

# a rank's phases beside the run's own (AROUND: its timing call; PROFILED: the seed's
# profiler schedule, its traces read back), host seconds each (a case's ``phases``)
DATA = "data"  # the series' loaded epochs or a case's synthetic batches
MODEL_BUILD = "model build"  # the model, its wrapper and optimizer, and the probe step
REFERENCE = "all-reduce reference"

ALLREDUCE_POLICY = TimingPolicy(warmup_rounds=5, rounds=20)
ALLREDUCE_POLICY_CPU = TimingPolicy(warmup_rounds=1, rounds=3)  # gloo at CI sizes: seconds


def build_model(case: DistCase) -> nn.Module:
    """The case's model, seeded, on the current default device (see :func:`run_case`)."""
    torch.manual_seed(0)
    if case.model == "vgg16":
        from gpugauge.models.vgg import vgg

        return vgg("vgg16", num_classes=case.classes)
    if case.model == "resnet18":
        from gpugauge.models.resnet import resnet18

        return resnet18(num_classes=case.classes)
    import torchvision

    return torchvision.models.alexnet(weights=None, num_classes=case.classes)


@dataclass
class Trainer:
    """A model wrapped for the case's mode, its optimizer, and a step that counts."""

    case: DistCase
    ctx: RankContext
    model: nn.Module
    batch: Callable[[int], Batch]
    step_no: int = 0
    opt: torch.optim.Optimizer = field(init=False)
    device: str = field(init=False)

    def __post_init__(self) -> None:
        c, ctx = self.case, self.ctx
        self.device = ctx.device
        base = self.model.to(self.device)
        if c.mode == "dp":
            self.model = nn.DataParallel(base, device_ids=list(range(c.gpus)))
        elif c.mode == "ddp":
            ids = [ctx.local_rank] if c.device == "cuda" else None
            self.model = nn.parallel.DistributedDataParallel(base, device_ids=ids)
        lr, momentum, wd = OPTIMIZERS[c.model]
        self.opt = torch.optim.SGD(base.parameters(), lr=lr, momentum=momentum, weight_decay=wd)

    @property
    def grad_bytes(self) -> int:
        """Bytes of the gradients one step reduces."""
        return sum(p.numel() * p.element_size() for p in self.model.parameters() if p.requires_grad)

    def step(self) -> None:
        """One training step: copy the batch in, forward, loss, backward, SGD step."""
        x, y = self.batch(self.step_no)
        self.step_no += 1
        x = x.to(self.device, non_blocking=True)
        y = y.to(self.device, non_blocking=True)
        self.opt.zero_grad(set_to_none=True)
        nn.functional.cross_entropy(self.model(x), y).backward()
        self.opt.step()

    def probe(self) -> str | None:
        """One forward and backward without gradient sync; the out-of-memory message, if any.

        Every rank learns whether any rank ran out (a MIN all-reduce of a flag), so that
        no rank waits in a collective for one that stopped.
        """
        sync = (
            self.model.no_sync()
            if isinstance(self.model, nn.parallel.DistributedDataParallel)
            else contextlib.nullcontext()
        )
        error = None
        try:
            with sync:
                x, y = self.batch(0)
                out = self.model(x.to(self.device, non_blocking=True))
                nn.functional.cross_entropy(out, y.to(self.device, non_blocking=True)).backward()
                del out
        except torch.cuda.OutOfMemoryError as err:
            error = str(err).splitlines()[0][:300]
        self.opt.zero_grad(set_to_none=True)
        if self.case.mode == "ddp":
            import torch.distributed as dist

            flag = torch.tensor([0.0 if error else 1.0], device=self.device)
            dist.all_reduce(flag, op=dist.ReduceOp.MIN)
            if error is None and flag.item() == 0.0:
                error = "another rank ran out of memory"
        return error


def _clock(case: DistCase, ctx: RankContext) -> RoundClock:
    if case.device != "cuda":
        return HostClock()
    return CudaEventClock(
        [f"cuda:{i}" for i in range(case.gpus)] if case.mode == "dp" else ctx.device
    )


def profile_steps(trainer: Trainer, folder: Path, rank: int) -> list[Path]:
    """Run the profiler schedule over training steps; one Chrome trace per cycle."""
    from torch.profiler import ProfilerActivity, profile, schedule

    release_cupti_on_stop()
    wait, warm, active, repeat = trainer.case.schedule
    acts = [ProfilerActivity.CPU]
    if trainer.case.device == "cuda":
        acts.append(ProfilerActivity.CUDA)
    paths: list[Path] = []

    def ready(p: Any) -> None:
        path = folder / f"trace-rank{rank}-cycle{len(paths)}.json.gz"
        p.export_chrome_trace(str(path))
        paths.append(path)

    sched = schedule(wait=wait, warmup=warm, active=active, repeat=repeat)
    with profile(activities=acts, schedule=sched, on_trace_ready=ready) as prof:
        for _ in range(trainer.case.profiled_steps):
            trainer.step()
            prof.step()
    return paths


def allreduce_reference(nbytes: int, case: DistCase, ctx: RankContext) -> Timing:
    """Time an all-reduce of ``nbytes`` (fp32) on this case's GPUs (or gloo ranks).

    DDP: ``dist.all_reduce`` on every rank. DataParallel (one process): NCCL's
    single-process all-reduce over one buffer per GPU, ``torch.cuda.nccl.all_reduce``.
    """
    numel = nbytes // 4
    if case.mode == "dp":
        bufs = [torch.ones(numel, device=f"cuda:{i}") for i in range(case.gpus)]

        def fn() -> None:
            torch.cuda.nccl.all_reduce(bufs)

    else:
        import torch.distributed as dist

        buf = torch.ones(numel, device=ctx.device)

        def fn() -> None:
            dist.all_reduce(buf)

    policy = ALLREDUCE_POLICY if case.device == "cuda" else ALLREDUCE_POLICY_CPU
    return time_rounds(fn, policy, _clock(case, ctx))


PROBE_ROUNDS = 10  # steps an injected slowdown's length is measured on


def step_probe_ms(trainer: Trainer, policy: TimingPolicy) -> float:
    """The median step after the case's warm-up, ms: what an injected fraction is of.

    Timed apart from the case's rounds, so that the case is timed once, with the slowdown
    in it: an A/B pairs that one call.
    """
    probe = replace(policy, rounds=min(policy.rounds or PROBE_ROUNDS, PROBE_ROUNDS))
    return time_rounds(trainer.step, probe, _clock(trainer.case, trainer.ctx)).summary.median


def profiled(trainer: Trainer, folder: Path) -> dict[str, Any]:
    """The profiled steps' trace split and kernel table (AlexNet's written out), as a dict."""
    case, rank = trainer.case, trainer.ctx.rank
    traces = profile_steps(trainer, folder, rank)
    activities = [read_trace(p) for p in traces]
    table = kernel_table([x for a in activities for x in a])
    files = {f"trace_rank{rank}": str(traces[0])}
    if case.model == "alexnet":
        csv_path, md_path = folder / f"kernels-rank{rank}.csv", folder / f"kernels-rank{rank}.md"
        csv_path.write_text(table.to_csv())
        title = f"{case.id}, rank {rank}: {len(traces)} x {case.schedule[2]} profiled steps"
        md_path.write_text(table.to_markdown(title))
        files |= {f"kernels_rank{rank}_csv": str(csv_path), f"kernels_rank{rank}_md": str(md_path)}
    return {
        "splits": [comm_split(a, case.schedule[2]).as_dict() for a in activities],
        "kernel_rows": len(table.rows),
        "artifacts": files,
    }


def run_case(
    case: DistCase,
    ctx: RankContext,
    folder: Path,
    data: Any,
    wall: WallLedger | None = None,
    extras: bool = True,
) -> dict[str, Any]:
    """Time, profile and (multi-GPU) all-reduce one case on this rank; a plain dict.

    ``wall`` gets the host seconds of each phase, charged to the case's id. ``extras``
    False (an A/B's side, whose results are compared by time alone) skips the profiled
    steps and the all-reduce reference.
    """
    wall = wall or WallLedger()
    wall.current = case.id
    folder.mkdir(parents=True, exist_ok=True)
    epochs, pool = (data, None) if case.model == "resnet18" else (None, data)
    with wall.phase(MODEL_BUILD):
        # made where it trains: no host copy of VGG-16's 138 M parameters (on an H200 a
        # process's first VGG-16 took 4 s to move)
        with torch.device(ctx.device):
            model = build_model(case)
        trainer = Trainer(case, ctx, model, batches_of(case, epochs, pool))
        oom = trainer.probe()
    if oom is not None:
        return {"status": "oom", "error": oom}
    steps = case.steps_per_epoch
    warm = steps if case.epochs == 2 else WARMUP_STEPS
    policy = TimingPolicy(warmup_rounds=warm, rounds=steps)
    with wall.phase(AROUND):
        injected = injected_ms(step_probe_ms(trainer, policy)) if injection_asked() else 0.0
        trainer.step_no = 0
        added = delay_for(injected, ctx.device) if injected else contextlib.nullcontext(None)
        with added as delay:

            def step() -> None:
                trainer.step()
                if delay is not None:  # gpugauge check's slowdown, on every rank
                    delay()

            timing = time_rank_case(step, policy, _clock(case, ctx))
    result: dict[str, Any] = {
        "status": "ok",
        "timing": timing.as_dict(),
        "grad_bytes": trainer.grad_bytes,
        "splits": [],
        "artifacts": {},
    }
    if extras:
        with wall.phase(PROFILED):
            result |= profiled(trainer, folder)
    if injected:
        result[INJECTED_KEY] = injected
    if case.gpus > 1 and extras:
        with wall.phase(REFERENCE):
            result["allreduce"] = allreduce_reference(trainer.grad_bytes, case, ctx).as_dict()
    return result


def run_series(spec: dict[str, Any], ctx: RankContext) -> dict[str, Any]:
    """Rank function (torchrun): run the series' cases in order, stop at the first OOM.

    Each case's result holds the host seconds of its phases (``phases``); the series'
    loaded data is the first case's.
    """
    series = [DistCase.from_dict(c) for c in spec["cases"]]
    out = Path(spec["out"])
    extras = bool(spec.get("extras", True))
    if series[0].device == "cpu":
        torch.set_num_threads(1)  # one core per process: N processes get N cores, as N GPUs
    pin = series[0].device == "cuda"
    wall = WallLedger(current=series[0].id)
    with wall.phase(DATA):
        loaded = cifar_epochs(series[0], ctx, pin) if series[0].model == "resnet18" else None
    results: dict[str, Any] = {}
    stop: str | None = None
    for case in series:
        if stop is not None:
            results[case.id] = {"status": "skipped", "reason": stop}
            continue
        wall.current = case.id
        with wall.phase(DATA):
            data = loaded if loaded is not None else synthetic_pool(case, pin)
        r = run_case(case, ctx, out / case.id, data, wall, extras)
        results[case.id] = {**r, "phases": dict(wall.seconds.get(case.id, {}))}
        if r["status"] == "oom":
            stop = (
                f"per-GPU batch {case.batch} ran out of memory in {case.id} "
                f"({r['error']}); the sweep stopped there"
            )
        del data
        gc.collect()
        if case.device == "cuda":
            torch.cuda.empty_cache()
    return {"timing": None, "values": {}, "extra": {"cases": results}}
