"""distributed workload: one GPU against DataParallel and DDP (seed 004 Task-4, seeds 002, 000).

Three models, one spec (:class:`DistCase`):

- **vgg16**: 8192 synthetic 3×224×224 images, 1000 classes, batch 64 per GPU, one epoch
  timed after 5 warm-up steps; 1 GPU and DDP on N (seed 004).
- **resnet18**: the CIFAR ResNet-18 of ``models/resnet.py`` (``gpugauge.models.resnet``) on
  CIFAR-10-shaped data
  (50,000 images; a local CIFAR-10 copy when ``GPUGAUGE_CIFAR10`` names its torchvision
  root, generated images otherwise) through the seed's transforms, all applied before
  timing; SGD lr 0.1, momentum 0.9, weight decay 5e-4; per-GPU batch 32, 128, 512, ...;
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
gloo at tiny sizes: one process (the reference) and DDP on two.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any, ClassVar

CIFAR_ENV = "GPUGAUGE_CIFAR10"  # torchvision CIFAR-10 root (cifar-10-batches-py inside)
SEED_SCHEDULE = (1, 2, 5, 2)  # torch.profiler schedule: wait, warmup, active, repeat
# The ResNet-18 sweep multiplies the per-GPU batch by 4 from 32 and stops at the first
# out-of-memory, or at this cap: 4 x 8192 = 32768 exceeds the 25,000 images one of two
# ranks holds, so a larger batch would not be one full step.
RESNET_BATCHES = (32, 128, 512, 2048, 8192)
ALEXNET_BATCHES = (8, 16, 32, 128)
# the nightly's cases (DistCase.nightly says why): GPU-paced steps with samples enough
NIGHTLY_RESNET_BATCHES = (512, 2048)
NIGHTLY_DP_FROM = 2048
NIGHTLY_ALEXNET_FROM = 128
NIGHTLY_MIN_STEPS = 10  # full timed steps a gated case needs (8192 on one GPU has 6)
WARMUP_STEPS = 5  # untimed steps before a one-epoch timing (vgg16, alexnet)
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

    @property
    def full_steps(self) -> int:
        """Full-batch steps of the timed epoch: the samples a gate judges."""
        return self.steps_per_epoch - int(self.last_step_short)

    @property
    def nightly(self) -> bool:
        """Whether the nightly job gates this case: steps the GPUs pace, enough of them.

        Five runs on one 2x H100 host (docs/lab/distributed-evidence.md): VGG-16 at 64, ResNet-18 at
        512 and 2048 (DataParallel at 2048) and AlexNet at 128 kept the GPUs 92-100% busy and each
        step's median moved at most 0.4%. DataParallel at 512 was 57-66% busy (its scatter and
        replicate are host work) and moved 47.8-55.8 ms; ResNet-18 at 32 and 128 is launch-bound
        on one GPU (9.20 against 7.34 ms on an H200), and so are AlexNet's small batches. A
        case of fewer than :data:`NIGHTLY_MIN_STEPS` full steps is too few samples to gate:
        ResNet-18 at 8192, and at 2048 on 4 GPUs (6 full steps). The rest of the sweep stays in
        the seed and full runs.
        """
        if self.device != "cuda":
            return True
        if self.full_steps < NIGHTLY_MIN_STEPS:
            return False
        if self.model == "resnet18":
            return self.batch in NIGHTLY_RESNET_BATCHES and (
                self.mode != "dp" or self.batch >= NIGHTLY_DP_FROM
            )
        return self.model == "vgg16" or self.batch >= NIGHTLY_ALEXNET_FROM

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
        resnet("cpu", [1, 2], [2], 8, **tiny)
        + alexnet("cpu", [1, 2], [2], 64, 2, **tiny)
        + vgg("cpu", [1, 2], 1, 32, 2, **tiny)
    )
    if profile == "smoke":
        return cpu + (
            vgg("cuda", [1, 2], 16, 224, 256)
            + resnet("cuda", [2], [32, 128], 4096)
            + alexnet("cuda", [1, 2], [8, 32], 224, 40)
        )
    gpus = [1, 2, 4]  # a case on more GPUs than the host has is skipped, saying so
    return cpu + (
        vgg("cuda", gpus, 64, 224, 8192)
        + resnet("cuda", gpus, RESNET_BATCHES, 50_000)
        + alexnet("cuda", gpus, ALEXNET_BATCHES, 224, 40)
    )
