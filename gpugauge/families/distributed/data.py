"""The distributed family's data in the rank: CIFAR-10-shaped epochs and synthetic batches.

Everything is made before any timing and held in host memory: a timed step only slices
its batch and copies it to the GPU. Nothing here imports pytest.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch.nn import functional

from gpugauge.families.distributed.cases import DistCase
from gpugauge.launch.worker import RankContext

CIFAR_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR_STD = (0.2023, 0.1994, 0.2010)
CROP, PAD = 32, 4  # the seed's RandomCrop(32, padding=4)

Batch = tuple[torch.Tensor, torch.Tensor]  # (images, labels)


def cifar_source(case: DistCase) -> tuple[torch.Tensor, torch.Tensor]:
    """uint8 N×H×W×C images and int64 labels, CIFAR-10's or generated.

    The local CIFAR-10 copy ``case.data`` names (its first ``images``), else random images.
    """
    if case.data != "generated":
        from torchvision.datasets import CIFAR10

        real = CIFAR10(case.data, train=True, download=False)
        if case.images > len(real.data):
            raise ValueError(f"{case.data} holds {len(real.data)} images, not {case.images}")
        images = torch.from_numpy(real.data[: case.images])
        return images, torch.tensor(real.targets[: case.images], dtype=torch.int64)
    g = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (case.images, 32, 32, 3), dtype=torch.uint8, generator=g)
    return images, torch.randint(0, case.classes, (case.images,), generator=g)


def seed_transforms(
    images: torch.Tensor, generator: torch.Generator, device: str = "cpu"
) -> torch.Tensor:
    """The seed's transforms of uint8 N×H×W×C images, all at once: N×C×32×32 floats.

    ToTensor, RandomCrop(32, padding=4) with zero padding, RandomHorizontalFlip(0.5),
    Normalize(CIFAR_MEAN, CIFAR_STD): each image its own crop and flip, drawn from
    ``generator`` (a CPU one: the draws are the same on any ``device``). The seed listed
    Normalize before ToTensor, which torchvision cannot apply to an image, so ToTensor
    comes first. The work runs on ``device`` and the result stays there: on a rank's GPU it
    leaves the host's cores to the processes starting beside it (an A/B's two sides launch
    at once), whose share of them had made it five times slower.
    """
    n = len(images)
    span = images.shape[2] + 2 * PAD - CROP + 1  # W: the images are square
    top = torch.randint(0, span, (n,), generator=generator)
    left = torch.randint(0, span, (n,), generator=generator)
    flip = torch.rand(n, generator=generator) < 0.5
    padded = functional.pad(images.to(device).permute(0, 3, 1, 2), (PAD,) * 4)  # zeros
    windows = padded.unfold(2, CROP, 1).unfold(3, CROP, 1)  # N×C×span×span×CROP×CROP, a view
    rows = torch.arange(n, device=device)
    out = windows[rows, :, top.to(device), left.to(device)]  # each image's own crop
    out = torch.where(flip.to(device).view(-1, 1, 1, 1), out.flip(-1), out)
    mean = torch.tensor(CIFAR_MEAN, device=device).view(1, -1, 1, 1)
    std = torch.tensor(CIFAR_STD, device=device).view(1, -1, 1, 1)
    out = out.to(torch.float32, memory_format=torch.contiguous_format)  # a step's slice: one block
    return out.div_(255).sub_(mean).div_(std)  # in place: an epoch is 600 MB


def on_host(x: torch.Tensor, pin: bool) -> torch.Tensor:
    """``x`` in host memory, page-locked if ``pin``, copied once from wherever it is."""
    if x.device.type == "cpu":
        return x.pin_memory() if pin else x
    host = torch.empty(x.shape, dtype=x.dtype, pin_memory=pin)
    return host.copy_(x)


def cifar_epochs(case: DistCase, ctx: RankContext, pin: bool) -> list[Batch]:
    """Every epoch's transformed images of this rank, in sampler order, in host memory.

    A DistributedSampler (shuffled, seed 0) orders each epoch and gives this rank its
    share; the seed's transforms are drawn anew for every epoch and rank, and run on the
    rank's device.
    """
    from torch.utils.data import DistributedSampler

    images, labels = cifar_source(case)
    sampler = DistributedSampler(
        range(len(labels)), num_replicas=ctx.world_size, rank=ctx.rank, shuffle=True, seed=0
    )
    out = []
    for epoch in range(case.epochs):
        sampler.set_epoch(epoch)
        order = torch.tensor(list(sampler), dtype=torch.int64)
        g = torch.Generator().manual_seed(1 + epoch * ctx.world_size + ctx.rank)
        x = on_host(seed_transforms(images[order], g, ctx.device), pin)
        y = labels[order]
        out.append((x, y.pin_memory() if pin else y))
    if torch.device(ctx.device).type == "cuda":
        torch.cuda.empty_cache()  # the transforms' GB goes back: the model's memory is its own
    return out


def synthetic_pool(case: DistCase, pin: bool, size: int = 4) -> list[Batch]:
    """A few distinct random batches (images, labels) in host memory, used in turn."""
    g = torch.Generator().manual_seed(1)
    pool = []
    for _ in range(size):
        x = torch.randn(case.step_images, 3, case.image, case.image, generator=g)
        y = torch.randint(0, case.classes, (case.step_images,), generator=g)
        pool.append((x.pin_memory(), y.pin_memory()) if pin else (x, y))
    return pool


def batches_of(
    case: DistCase, epochs: list[Batch] | None, pool: list[Batch] | None
) -> Callable[[int], Batch]:
    """Step i's (images, labels): epoch-ordered slices of the loaded data, or the pool."""
    per_step = case.step_images
    if epochs is not None:
        steps = case.steps_per_epoch

        def sliced(i: int) -> Batch:
            x, y = epochs[(i // steps) % len(epochs)]
            a = (i % steps) * per_step
            return x[a : a + per_step], y[a : a + per_step]

        return sliced
    assert pool is not None
    return lambda i: pool[i % len(pool)]
