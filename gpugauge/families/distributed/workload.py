"""distributed workload: one GPU against DataParallel and DDP (seed 004 Task-4, seeds 002, 000).

Three models, one spec (:class:`DistCase`):

- **vgg16**: 8192 synthetic 3×224×224 images, 1000 classes, batch 64 per GPU, one epoch
  timed after 5 warm-up steps; 1 GPU and DDP on N (seed 004).
- **resnet18**: the CIFAR ResNet-18 of ``gpugauge/models/resnet.py`` on CIFAR-10-shaped data
  (50,000 images; a local CIFAR-10 copy when ``GPUGAUGE_CIFAR10`` names its torchvision
  root, generated images otherwise) through the seed's transforms and a DataLoader with 2
  workers; SGD lr 0.1, momentum 0.9, weight decay 5e-4; per-GPU batch 32, 128, 512, ...;
  1 GPU, DataParallel and DDP on N; two epochs, the second timed (seed 002).
- **alexnet**: torchvision's AlexNet (weights=None, 224 px), 40·batch synthetic images
  (40 timed steps on one GPU, 20 on two), and the
  nvprof-style kernel table of the profiled steps (seed 000).

One *series* (model, mode, GPU count, device) runs in one torchrun launch: its cases
(batch sizes) in order, each a training run timed by the suite's primitive with fixed
rounds, one round per step (the host-to-device copy of the batch included; loading and
transforms done before, outside the timing). A series stops at the first batch that runs
out of memory; the rest of it is skipped with that reason. After the timed steps each case
runs the profiler with the seed's schedule (wait=1, warmup=2, active=5, repeat=2) and reads
its traces back (:mod:`gpugauge.measure.kernels`) for the compute/communication split; a
multi-GPU case also times an all-reduce of its gradient bytes on the same GPUs, the
reference of its bandwidth utilisation. With no GPU the same code runs on the CPU with
gloo, two processes, at tiny sizes.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import math
import os
import statistics
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar

import torch
from torch import nn

from gpugauge.check.delay import delay_for, injected_fraction
from gpugauge.history.capture import INJECTED_KEY
from gpugauge.launch.torchrun import Launch, LaunchError, launch, slowest_rank_rounds
from gpugauge.launch.worker import RankContext
from gpugauge.measure.kernels import CommSplit, comm_split, kernel_table, read_trace
from gpugauge.measure.profile import release_cupti_on_stop
from gpugauge.measure.timing import CudaEventClock, HostClock, RoundClock, Timing, TimingPolicy
from gpugauge.measure.timing import measure as time_rounds
from gpugauge.results.measurement import Measurement

CALL = "gpugauge.families.distributed.workload:run_series"
CIFAR_ENV = "GPUGAUGE_CIFAR10"  # torchvision CIFAR-10 root (cifar-10-batches-py inside)
CIFAR_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR_STD = (0.2023, 0.1994, 0.2010)
SEED_SCHEDULE = (1, 2, 5, 2)  # torch.profiler schedule: wait, warmup, active, repeat
# The ResNet-18 sweep multiplies the per-GPU batch by 4 from 32 and stops at the first
# out-of-memory, or at this cap: 4 x 8192 = 32768 exceeds the 25,000 images one of two
# ranks holds, so a larger batch would not be one full step.
RESNET_BATCHES = (32, 128, 512, 2048, 8192)
ALEXNET_BATCHES = (8, 16, 32, 128)
WARMUP_STEPS = 5  # untimed steps before a one-epoch timing (vgg16, alexnet)
ALLREDUCE_POLICY = TimingPolicy(warmup_rounds=5, rounds=20)
ALLREDUCE_POLICY_CPU = TimingPolicy(warmup_rounds=1, rounds=3)  # gloo at CI sizes: seconds
OPTIMIZERS = {  # model: (lr, momentum, weight decay)
    "vgg16": (0.01, 0.9, 0.0),
    "resnet18": (0.1, 0.9, 5e-4),  # seed 002
    "alexnet": (0.02, 0.9, 1e-4),  # seed 000: --lr 0.02; the ImageNet example's defaults
}


@dataclass(frozen=True)
class DistCase:
    """One distributed benchmark: model, parallelism, GPUs, per-GPU batch, data, device.

    ``gpus`` is the GPU count (on the CPU: the process count); ``batch`` is per GPU, so a
    step of N GPUs trains N·batch images. ``images`` is one epoch; ``epochs`` 2 times the
    second (the first warms up), 1 times the epoch after :data:`WARMUP_STEPS` steps.
    """

    family: ClassVar[str] = "distributed"
    model: str  # "vgg16" | "resnet18" | "alexnet"
    mode: str  # "single" | "dp" (DataParallel, one process) | "ddp" (one rank per GPU)
    gpus: int
    batch: int
    image: int
    classes: int
    images: int
    epochs: int
    device: str  # "cuda" | "cpu"
    profile: str
    schedule: tuple[int, int, int, int] = SEED_SCHEDULE
    workers: int = 2  # DataLoader workers (resnet18)
    data: str = "generated"  # or a CIFAR-10 root (resnet18)

    def __post_init__(self) -> None:
        problems = []
        if self.model not in OPTIMIZERS:
            problems.append(f"model {self.model!r} (one of {sorted(OPTIMIZERS)})")
        if self.mode not in ("single", "dp", "ddp"):
            problems.append(f"mode {self.mode!r} (single, dp or ddp)")
        if (self.mode == "single") != (self.gpus == 1):
            problems.append(f"{self.gpus} GPUs for mode {self.mode!r} (single is 1 GPU)")
        if self.mode == "dp" and self.device != "cuda":
            problems.append("DataParallel on the CPU (it needs GPUs)")
        if self.epochs not in (1, 2) or min(self.batch, self.images, self.image) < 1:
            problems.append(f"epochs {self.epochs}, batch {self.batch}, images {self.images}")
        if problems:
            raise ValueError(f"invalid distributed case: {'; '.join(problems)}")

    @property
    def id(self) -> str:
        """Readable id, also the pytest id: ``resnet18-ddp-2gpu-b128-32px-cuda``."""
        unit = "gpu" if self.device == "cuda" else "proc"
        return (
            f"{self.model}-{self.mode}-{self.gpus}{unit}-b{self.batch}-{self.image}px-{self.device}"
        )

    @property
    def devices(self) -> tuple[str, ...]:
        """Every device a step uses (the result's device class counts them)."""
        if self.device == "cuda":
            return tuple(f"cuda:{i}" for i in range(self.gpus))
        return ("cpu",) * self.gpus

    @property
    def ranks(self) -> int:
        """Processes torchrun starts: one per GPU for DDP, else one."""
        return self.gpus if self.mode == "ddp" else 1

    @property
    def series(self) -> tuple[Any, ...]:
        """What the cases launched together share (everything but the batch)."""
        return (self.model, self.mode, self.gpus, self.image, self.images, self.device)

    @property
    def step_images(self) -> int:
        """Images one process trains per step: the batch, times the GPUs for DataParallel."""
        return self.batch * (self.gpus if self.mode == "dp" else 1)

    @property
    def rank_images(self) -> int:
        """Images of one epoch on each rank (DistributedSampler pads to equal shares)."""
        return math.ceil(self.images / self.ranks)

    @property
    def steps_per_epoch(self) -> int:
        """Steps of one epoch on every rank (the last batch may be short)."""
        return math.ceil(self.rank_images / self.step_images)

    @property
    def last_step_short(self) -> bool:
        """Whether an epoch's last step trains fewer images than the others.

        Only ResNet-18 slices its epochs from loaded data; VGG-16 and AlexNet step through a
        pool of full synthetic batches, so every step of theirs is full.
        """
        return self.model == "resnet18" and self.rank_images % self.step_images != 0

    @property
    def profiled_steps(self) -> int:
        """Steps the profiler schedule takes."""
        wait, warm, active, repeat = self.schedule
        return (wait + warm + active) * repeat

    def reference(self) -> DistCase:
        """The one-GPU case this one is scaled against (same model, batch, data)."""
        return replace(self, mode="single", gpus=1)

    def budget_s(self) -> float:
        """A generous bound on this case's seconds (the launch timeout adds these up)."""
        per_step = {"vgg16": 0.15, "resnet18": 0.01, "alexnet": 0.03}[self.model]
        if self.device == "cpu":
            per_step = 5.0
        else:
            per_step *= max(
                1.0, self.batch / {"vgg16": 64, "resnet18": 256, "alexnet": 64}[self.model]
            )
        steps = self.steps_per_epoch * self.epochs + WARMUP_STEPS + self.profiled_steps + 10
        return 60.0 + 3.0 * steps * per_step

    def as_dict(self) -> dict[str, Any]:
        """Plain dict for JSON."""
        return asdict(self) | {"id": self.id}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> DistCase:
        """Read back :meth:`as_dict`."""
        fields = {k: v for k, v in d.items() if k != "id"}
        return cls(**{**fields, "schedule": tuple(fields["schedule"])})


def _cifar_source() -> str:
    return os.environ.get(CIFAR_ENV) or "generated"


def cases(profile: str) -> list[DistCase]:
    """Every case of a profile: GPU cases (skipped without GPUs) and tiny gloo CPU cases.

    Multi-GPU cases come after the one-GPU case of their batch, which scales them.
    """
    cifar = _cifar_source()

    def vgg(dev: str, gpus_list: Sequence[int], batch: int, image: int, images: int, **kw: Any):
        return [
            DistCase(
                "vgg16",
                "single" if g == 1 else "ddp",
                g,
                batch,
                image,
                1000,
                images,
                1,
                dev,
                profile,
                **kw,
            )
            for g in gpus_list
        ]

    def resnet(dev: str, gpus_list: Sequence[int], batches: Sequence[int], images: int, **kw: Any):
        modes = [("single", 1)] + [(m, g) for g in gpus_list if g > 1 for m in ("dp", "ddp")]
        return [
            DistCase("resnet18", m, g, b, 32, 10, images, 2, dev, profile, data=cifar, **kw)
            for m, g in modes
            if dev == "cuda" or m != "dp"
            for b in batches
        ]

    def alexnet(
        dev: str,
        gpus_list: Sequence[int],
        batches: Sequence[int],
        image: int,
        steps: int,
        **kw: Any,
    ):
        # one data set for every GPU count: ``steps`` steps on one GPU, steps/N on N
        return [
            DistCase(
                "alexnet",
                "single" if g == 1 else "ddp",
                g,
                b,
                image,
                1000,
                steps * b,
                1,
                dev,
                profile,
                **kw,
            )
            for g in gpus_list
            for b in batches
        ]

    tiny = {"schedule": (0, 1, 1, 1)}
    cpu = (
        resnet("cpu", [1, 2], [2], 8, workers=0, **tiny)
        + alexnet("cpu", [1, 2], [2], 64, 2, **tiny)
        + vgg("cpu", [1, 2], 1, 32, 2, **tiny)
    )
    if profile == "smoke":
        return cpu + (
            vgg("cuda", [1, 2], 16, 224, 256)
            + resnet("cuda", [2], [32, 128], 4096)
            + alexnet("cuda", [1, 2], [8, 32], 224, 40)
        )
    gpus = [1, 2] if profile == "seed" else [1, 2, 4]
    return cpu + (
        vgg("cuda", gpus, 64, 224, 8192)
        + resnet("cuda", gpus, RESNET_BATCHES, 50_000)
        + alexnet("cuda", gpus, ALEXNET_BATCHES, 224, 40)
    )


# --- in the rank ------------------------------------------------------------------------


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
    trainer.step_no = 0
    timing = time_rounds(trainer.step, policy, _clock(case, ctx))
    injected = injected_fraction() * timing.summary.median
    if injected:  # gpugauge check's slowdown, on every rank: the epoch again, each step longer
        delay = delay_for(injected, ctx.device)

        def slower() -> None:
            trainer.step()
            delay()

        trainer.step_no = 0
        timing = time_rounds(slower, policy, _clock(case, ctx))
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


# --- on the pytest side ----------------------------------------------------------------


@dataclass(frozen=True)
class CaseResult:
    """One case of a series launch: its slowest-rank timing and every rank's record."""

    case: DistCase
    ranks: tuple[dict[str, Any], ...]
    skipped: str | None = None  # why it did not run: out of memory here or before

    @property
    def timing(self) -> Timing:
        """Each step the slowest rank's time, ms."""
        return slowest_rank_rounds([Timing.from_dict(r["timing"]) for r in self.ranks])

    @property
    def full_step_ms(self) -> tuple[float, ...]:
        """The timed steps of full batches, ms: an epoch's short last step left out.

        Per-step ratios (weak scaling, efficiency) compare equal work only; at the largest
        batches an epoch is a few steps (ResNet-18 at 8192: 7 on one GPU, 2 with DP on
        four), and a short last one moves the median.
        """
        ms = self.timing.device_ms
        return ms[:-1] if self.case.last_step_short else ms

    @property
    def epoch_s(self) -> float:
        """The timed epoch, seconds: the sum of its steps."""
        return sum(self.timing.device_ms) / 1e3

    @property
    def split(self) -> CommSplit:
        """The trace split of the rank with the most exposed communication (cycle mean)."""
        per_rank = [_mean_split(r["splits"]) for r in self.ranks]
        return max(per_rank, key=lambda s: s.exposed_ms)

    def allreduce_ms(self) -> float | None:
        """Median time of the reference all-reduce (slowest rank per round), ms."""
        if "allreduce" not in self.ranks[0]:
            return None
        t = slowest_rank_rounds([Timing.from_dict(r["allreduce"]) for r in self.ranks])
        return t.summary.median


def _mean_split(splits: Sequence[dict[str, Any]]) -> CommSplit:
    keys = ("step_ms", "compute_ms", "comm_ms", "comm_kernel_ms", "exposed_ms")
    mean = {k: statistics.fmean(s[k] for s in splits) for k in keys}
    return CommSplit(steps=sum(s["steps"] for s in splits), timeline=splits[0]["timeline"], **mean)


def ring_bytes(grad_bytes: int, p: int) -> float:
    """Bytes each rank sends in a ring all-reduce: 2(P-1)/P of the buffer."""
    return grad_bytes * 2 * (p - 1) / p


def busbw_gbps(grad_bytes: int, p: int, ms: float) -> float:
    """nccl-tests' bus bandwidth of an all-reduce of ``grad_bytes`` taking ``ms``, GB/s."""
    return ring_bytes(grad_bytes, p) / (ms / 1e3) / 1e9


class SeriesRuns:
    """Series launched so far in this session: each case's result, or the launch's error."""

    def __init__(self, out_root: Path, note: Callable[[str], None] = print) -> None:
        self.out_root = out_root
        self.note = note
        self._done: dict[tuple[Any, ...], dict[str, CaseResult] | LaunchError] = {}

    def result(self, case: DistCase, selected: Sequence[DistCase]) -> CaseResult:
        """The case's result, launching its series (the selected cases of it) if needed."""
        key = case.series
        if key not in self._done:
            members = sorted(
                {c for c in selected if c.series == key} | {case}, key=lambda c: c.batch
            )
            try:
                self._done[key] = launch_series(members, self.out_root, note=self.note)
            except LaunchError as err:
                self._done[key] = err
                raise
        done = self._done[key]
        if isinstance(done, LaunchError):
            raise LaunchError(f"{case.id}: its series' launch failed: {done}")
        return done[case.id]

    def find(self, case: DistCase) -> CaseResult | None:
        """The result of the case with ``case``'s id if it ran this session, else None."""
        for done in self._done.values():
            r = done.get(case.id) if isinstance(done, dict) else None
            if r is not None and not r.skipped:
                return r
        return None


def series_dir(out_root: Path, case: DistCase) -> Path:
    """Where a series' ranks write: one folder per series key (everything but the batch).

    ``<root>/<model>-<mode>-<N><unit>-<px>-<images>img-<device>``: AlexNet's data grows
    with its batch, so each of its batches is a series of its own and needs its own folder.
    """
    unit = "gpu" if case.device == "cuda" else "proc"
    return out_root / (
        f"{case.model}-{case.mode}-{case.gpus}{unit}-{case.image}px-{case.images}img-{case.device}"
    )


def launch_series(
    members: Sequence[DistCase],
    out_root: Path,
    *,
    note: Callable[[str], None] = print,
    timeout_s: float | None = None,
) -> dict[str, CaseResult]:
    """Launch one series with torchrun and read every case back (skips carry the reason)."""
    first = members[0]
    if any(c.series != first.series for c in members):
        raise ValueError("a series launch takes cases that differ only in batch")
    folder = series_dir(out_root, first)
    spec = {"device": first.device, "cases": [c.as_dict() for c in members], "out": str(folder)}
    budget = timeout_s if timeout_s is not None else 60 + sum(c.budget_s() for c in members)
    ranks = launch(Launch(CALL, spec, first.ranks), folder, timeout_s=budget, note=note)
    return read_series(members, [r.extra for r in ranks])


def read_series(
    members: Sequence[DistCase], rank_extras: Sequence[dict[str, Any]]
) -> dict[str, CaseResult]:
    """Each case's result from every rank's ``extra``; a case that did not run says why."""
    out = {}
    for c in members:
        per_rank = tuple(e["cases"][c.id] for e in rank_extras)
        bad = [(i, p) for i, p in enumerate(per_rank) if p["status"] != "ok"]
        why = None
        if bad:
            i, p = bad[0]
            why = (
                f"out of memory at per-GPU batch {c.batch} on rank {i} ({p['error']}); "
                "the sweep stops here"
                if p["status"] == "oom"
                else p.get("reason", p["status"])
            )
        out[c.id] = CaseResult(c, per_rank, skipped=why)
    return out


def to_measurement(r: CaseResult, reference: CaseResult | None) -> Measurement:
    """The result recorded for a case: slowest-rank steps and the scaling/comm metrics.

    With the one-GPU ``reference`` (same model, batch, data): strong-scaling speedup
    T(1)/T(N) of epoch times, weak-scaling speedup N·t(1)/t(N) of median step times,
    efficiency t(1)/t(N), and the seed's subtraction: compute T(1)/N, communication
    T(N) − T(1)/N per epoch. The sweep's last batch says that the sweep ended at its cap.
    """
    c, timing = r.case, r.timing
    values: dict[str, float] = {"epoch_time": r.epoch_s, "throughput": c.images / r.epoch_s}
    split = r.split
    extra: dict[str, Any] = {
        "images_per_epoch": c.images,
        "steps_per_epoch": c.steps_per_epoch,
        "data": c.data if c.model == "resnet18" else "synthetic",
        "trace_split": split.as_dict(),
        "trace_split_per_rank": [_mean_split(p["splits"]).as_dict() for p in r.ranks],
        "grad_bytes": r.ranks[0]["grad_bytes"],
        "profiler_schedule": dict(
            zip(("wait", "warmup", "active", "repeat"), c.schedule, strict=True)
        ),
    }
    added = [p[INJECTED_KEY] for p in r.ranks if p.get(INJECTED_KEY)]
    if added:  # work added on purpose (gpugauge check): never a reference
        extra[INJECTED_KEY] = max(added)
    if c.model == "resnet18" and c.device == "cuda" and c.batch == RESNET_BATCHES[-1]:
        extra["sweep_end"] = (
            f"per-GPU batch {c.batch} fitted: the sweep ends at its cap, not at an out-of-memory"
        )
    if c.gpus > 1:
        values["comm_fraction"] = split.comm_fraction
        values["exposed_comm_fraction"] = split.exposed_fraction
        ref_ms = r.allreduce_ms()
        if ref_ms is not None:
            grad = r.ranks[0]["grad_bytes"]
            values["busbw"] = busbw_gbps(grad, c.gpus, ref_ms)
            extra["allreduce_reference"] = {
                "bytes": grad,
                "median_ms": ref_ms,
                "busbw_gbps": values["busbw"],
                "ring_bytes_per_rank": ring_bytes(grad, c.gpus),
            }
            if split.comm_kernel_ms > 0:
                values["busbw_utilization"] = ref_ms / split.comm_kernel_ms
                extra["achieved_busbw_gbps_trace"] = busbw_gbps(grad, c.gpus, split.comm_kernel_ms)
    if reference is not None and c.gpus > 1:
        t1, tn = reference.epoch_s, r.epoch_s
        values["speedup"] = t1 / tn
        full1, fulln = reference.full_step_ms, r.full_step_ms
        if full1 and fulln:
            s1, sn = statistics.median(full1), statistics.median(fulln)
            values["weak_speedup"] = c.gpus * s1 / sn
            values["efficiency"] = s1 / sn
            extra["full_steps"] = {"reference": len(full1), "this": len(fulln)}
        else:
            extra["full_steps"] = "no full-batch step in an epoch: no per-step scaling"
        comm_s = tn - t1 / c.gpus
        values["subtraction_comm_fraction"] = comm_s / tn
        sub = {"compute_s": t1 / c.gpus, "comm_s": comm_s, "reference": reference.case.id}
        ref_ms = extra.get("allreduce_reference", {}).get("median_ms")
        per_step = comm_s / c.steps_per_epoch * 1e3
        if ref_ms is not None and per_step > 0:
            sub["busbw_utilization"] = ref_ms / per_step
        extra["subtraction"] = sub
    elif c.gpus > 1:
        extra["scaling"] = f"no one-GPU result of {c.reference().id} in this run: no speedup"
    artifacts = {k: v for p in r.ranks for k, v in p["artifacts"].items()}
    return Measurement(c, timing=timing, values=values, artifacts=artifacts, extra=extra)


def _cli_number(kind: type, low: float, what: str) -> Callable[[str], Any]:
    """An argparse type: a finite ``kind`` of at least ``low`` (argparse names the option)."""

    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except (ValueError, OverflowError):
            raise argparse.ArgumentTypeError(f"{text!r} is not {what}") from None
        if not math.isfinite(value) or value < low or (kind is float and value == low):
            raise argparse.ArgumentTypeError(f"{text!r} is not {what}")
        return value

    parse.__name__ = what
    return parse


def main(argv: Sequence[str] | None = None) -> int:
    """Run one series across nodes: the same command on every node, a shared ``--out``.

    Prints the torchrun command, runs it, and (on the node whose ``--out`` then holds
    every rank's file) prints each case's slowest-rank median step time. ``--device cpu``
    runs the gloo CPU cases (CI, and a rendezvous tried out on one machine).
    """
    import shlex

    at_least_1 = _cli_number(int, 1, "a whole number >= 1")
    parser = argparse.ArgumentParser(description=main.__doc__.splitlines()[0])
    parser.add_argument("--model", choices=sorted(OPTIMIZERS), required=True)
    parser.add_argument("--mode", choices=["ddp", "single"], default="ddp")
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument("--nproc-per-node", type=at_least_1, required=True)
    parser.add_argument("--nnodes", type=at_least_1, default=1)
    parser.add_argument(
        "--node-rank", type=_cli_number(int, 0, "a whole number >= 0"), default=None
    )
    parser.add_argument("--rdzv-endpoint", default=None, help="host:port of node 0")
    parser.add_argument("--batch", type=at_least_1, action="append", help="per-GPU batch (repeat)")
    parser.add_argument("--profile", choices=["smoke", "seed", "full"], default="seed")
    parser.add_argument("--out", type=Path, required=True, help="folder shared by every node")
    parser.add_argument(
        "--timeout-s", type=_cli_number(float, 0, "a number of seconds > 0"), default=3600.0
    )
    parser.add_argument("--print-only", action="store_true", help="print the command only")
    args = parser.parse_args(argv)
    if not str(args.out).strip() or str(args.out) == ".":
        parser.error("--out: name the folder shared by every node")
    if args.nnodes > 1 and not args.rdzv_endpoint:
        parser.error(f"--nnodes {args.nnodes} needs --rdzv-endpoint host:port (node 0's)")
    if args.node_rank is not None and args.node_rank >= args.nnodes:
        parser.error(f"--node-rank {args.node_rank}: must be below --nnodes {args.nnodes}")
    gpus = args.nproc_per_node * args.nnodes
    members = sorted(
        {
            replace(c, mode=args.mode, gpus=gpus)
            for c in cases(args.profile)
            if c.model == args.model
            and c.device == args.device
            and c.mode == "single"
            and (not args.batch or c.batch in args.batch)
        },
        key=lambda c: c.batch,
    )
    if not members:
        parser.error(f"no {args.model} cases in profile {args.profile} for {args.batch}")
    folder = series_dir(args.out, members[0])
    spec = {"device": args.device, "cases": [c.as_dict() for c in members], "out": str(folder)}
    job = Launch(CALL, spec, args.nproc_per_node, args.nnodes, args.rdzv_endpoint, args.node_rank)
    print(shlex.join(job.command(folder)), flush=True)
    if args.print_only:
        return 0
    try:
        ranks = launch(job, folder, timeout_s=args.timeout_s)
    except LaunchError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    for cid, r in read_series(members, [x.extra for x in ranks]).items():
        print(f"{cid}: {r.skipped or f'median step {r.timing.summary.median:.3f} ms'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
