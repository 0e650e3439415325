"""The distributed family in the rank: models, data, the training step, one series run.

torchrun starts :func:`run_series` in every rank (``CALL`` of
:mod:`gpugauge.families.distributed.results`); each case is timed by the suite's
primitive, profiled with the seed's schedule and, on several GPUs, followed by an
all-reduce of its gradient bytes. Nothing here imports pytest.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch
from torch import nn

from gpugauge.check.delay import delay_for, injected_ms, injection_asked
from gpugauge.families.distributed.cases import OPTIMIZERS, WARMUP_STEPS, DistCase
from gpugauge.history.capture import INJECTED_KEY
from gpugauge.launch.case_timing import time_rank_case
from gpugauge.launch.worker import RankContext
from gpugauge.measure.kernels import comm_split, kernel_table, read_trace
from gpugauge.measure.profile import release_cupti_on_stop
from gpugauge.measure.timing import CudaEventClock, HostClock, RoundClock, Timing, TimingPolicy
from gpugauge.measure.timing import measure as time_rounds

CIFAR_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR_STD = (0.2023, 0.1994, 0.2010)
ALLREDUCE_POLICY = TimingPolicy(warmup_rounds=5, rounds=20)
ALLREDUCE_POLICY_CPU = TimingPolicy(warmup_rounds=1, rounds=3)  # gloo at CI sizes: seconds


def build_model(case: DistCase) -> nn.Module:
    """The case's model, seeded, on the CPU."""
    torch.manual_seed(0)
    if case.model == "vgg16":
        from gpugauge.models.vgg import vgg

        return vgg("vgg16", num_classes=case.classes)
    if case.model == "resnet18":
        from gpugauge.models.resnet import resnet18

        return resnet18(num_classes=case.classes)
    import torchvision

    return torchvision.models.alexnet(weights=None, num_classes=case.classes)


class CifarShaped(torch.utils.data.Dataset):
    """CIFAR-10 (uint8 H×W×C images and labels) through the seed's transforms.

    ToTensor, RandomCrop(32, padding=4), RandomHorizontalFlip(0.5), Normalize(mean, std);
    the seed listed Normalize before ToTensor, which torchvision cannot apply to an image,
    so ToTensor comes first.
    """

    def __init__(self, images: Any, labels: Sequence[int]) -> None:
        from torchvision import transforms

        self.images, self.labels = images, list(labels)
        self.transform = transforms.Compose(
            [
                transforms.RandomCrop(32, padding=4),
                transforms.RandomHorizontalFlip(0.5),
                transforms.Normalize(CIFAR_MEAN, CIFAR_STD),
            ]
        )

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        img = torch.as_tensor(self.images[i]).permute(2, 0, 1).float().div_(255)  # ToTensor
        return self.transform(img), self.labels[i]


def cifar_dataset(case: DistCase) -> CifarShaped:
    """The local CIFAR-10 copy ``case.data`` names (its first ``images``), else generated."""
    if case.data != "generated":
        from torchvision.datasets import CIFAR10

        real = CIFAR10(case.data, train=True, download=False)
        if case.images > len(real.data):
            raise ValueError(f"{case.data} holds {len(real.data)} images, not {case.images}")
        return CifarShaped(real.data[: case.images], real.targets[: case.images])
    g = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (case.images, 32, 32, 3), dtype=torch.uint8, generator=g)
    labels = torch.randint(0, case.classes, (case.images,), generator=g).tolist()
    return CifarShaped(images, labels)


def cifar_epochs(
    case: DistCase, ctx: RankContext, pin: bool
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Every epoch's transformed images of this rank, in sampler order, in host memory.

    Loaded once per series through a DataLoader (``case.workers`` workers), before any
    timing: the timed steps then only slice a batch and copy it to the GPU.
    """
    from torch.utils.data import DataLoader, DistributedSampler

    ds = cifar_dataset(case)
    sampler = DistributedSampler(
        ds, num_replicas=ctx.world_size, rank=ctx.rank, shuffle=True, seed=0
    )
    out = []
    for epoch in range(case.epochs):
        sampler.set_epoch(epoch)
        loader = DataLoader(ds, batch_size=256, sampler=sampler, num_workers=case.workers)
        xs, ys = zip(*loader, strict=True)
        x, y = torch.cat(xs), torch.cat(ys)
        out.append((x.pin_memory(), y.pin_memory()) if pin else (x, y))
    return out


def synthetic_pool(
    case: DistCase, pin: bool, size: int = 4
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """A few distinct random batches (images, labels) in host memory, used in turn."""
    g = torch.Generator().manual_seed(1)
    pool = []
    for _ in range(size):
        x = torch.randn(case.step_images, 3, case.image, case.image, generator=g)
        y = torch.randint(0, case.classes, (case.step_images,), generator=g)
        pool.append((x.pin_memory(), y.pin_memory()) if pin else (x, y))
    return pool


def batches_of(
    case: DistCase,
    epochs: list[tuple[torch.Tensor, torch.Tensor]] | None,
    pool: list[tuple[torch.Tensor, torch.Tensor]] | None,
) -> Callable[[int], tuple[torch.Tensor, torch.Tensor]]:
    """Step i's (images, labels): epoch-ordered slices of the loaded data, or the pool."""
    per_step = case.step_images
    if epochs is not None:
        steps = case.steps_per_epoch

        def sliced(i: int) -> tuple[torch.Tensor, torch.Tensor]:
            x, y = epochs[(i // steps) % len(epochs)]
            a = (i % steps) * per_step
            return x[a : a + per_step], y[a : a + per_step]

        return sliced
    assert pool is not None
    return lambda i: pool[i % len(pool)]


@dataclass
class Trainer:
    """A model wrapped for the case's mode, its optimizer, and a step that counts."""

    case: DistCase
    ctx: RankContext
    model: nn.Module
    batch: Callable[[int], tuple[torch.Tensor, torch.Tensor]]
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


def run_case(case: DistCase, ctx: RankContext, folder: Path, data: Any) -> dict[str, Any]:
    """Time, profile and (multi-GPU) all-reduce one case on this rank; a plain dict."""
    folder.mkdir(parents=True, exist_ok=True)
    epochs, pool = (data, None) if case.model == "resnet18" else (None, data)
    trainer = Trainer(case, ctx, build_model(case), batches_of(case, epochs, pool))
    oom = trainer.probe()
    if oom is not None:
        return {"status": "oom", "error": oom}
    steps = case.steps_per_epoch
    warm = steps if case.epochs == 2 else WARMUP_STEPS
    policy = TimingPolicy(warmup_rounds=warm, rounds=steps)
    injected = injected_ms(step_probe_ms(trainer, policy)) if injection_asked() else 0.0
    trainer.step_no = 0
    added = delay_for(injected, ctx.device) if injected else contextlib.nullcontext(None)
    with added as delay:

        def step() -> None:
            trainer.step()
            if delay is not None:  # gpugauge check's slowdown, on every rank
                delay()

        timing = time_rank_case(step, policy, _clock(case, ctx))
    traces = profile_steps(trainer, folder, ctx.rank)
    activities = [read_trace(p) for p in traces]
    splits = [comm_split(a, case.schedule[2]) for a in activities]
    table = kernel_table([x for a in activities for x in a])
    files = {f"trace_rank{ctx.rank}": str(traces[0])}
    if case.model == "alexnet":
        csv_path, md_path = (
            folder / f"kernels-rank{ctx.rank}.csv",
            folder / f"kernels-rank{ctx.rank}.md",
        )
        csv_path.write_text(table.to_csv())
        title = f"{case.id}, rank {ctx.rank}: {len(traces)} x {case.schedule[2]} profiled steps"
        md_path.write_text(table.to_markdown(title))
        files |= {
            f"kernels_rank{ctx.rank}_csv": str(csv_path),
            f"kernels_rank{ctx.rank}_md": str(md_path),
        }
    result: dict[str, Any] = {
        "status": "ok",
        "timing": timing.as_dict(),
        "splits": [s.as_dict() for s in splits],
        "grad_bytes": trainer.grad_bytes,
        "kernel_rows": len(table.rows),
        "artifacts": files,
    }
    if injected:
        result[INJECTED_KEY] = injected
    if case.gpus > 1:
        result["allreduce"] = allreduce_reference(trainer.grad_bytes, case, ctx).as_dict()
    return result


def run_series(spec: dict[str, Any], ctx: RankContext) -> dict[str, Any]:
    """Rank function (torchrun): run the series' cases in order, stop at the first OOM."""
    series = [DistCase.from_dict(c) for c in spec["cases"]]
    out = Path(spec["out"])
    if series[0].device == "cpu":
        torch.set_num_threads(1)  # one core per process: N processes get N cores, as N GPUs
    pin = series[0].device == "cuda"
    loaded = cifar_epochs(series[0], ctx, pin) if series[0].model == "resnet18" else None
    results: dict[str, Any] = {}
    stop: str | None = None
    for case in series:
        if stop is not None:
            results[case.id] = {"status": "skipped", "reason": stop}
            continue
        data = loaded if loaded is not None else synthetic_pool(case, pin)
        r = run_case(case, ctx, out / case.id, data)
        results[case.id] = r
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
