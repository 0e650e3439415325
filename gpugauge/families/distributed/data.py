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


def seed_transforms(images: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """The seed's transforms of uint8 N×H×W×C images, all at once: N×C×32×32 floats.

    ToTensor, RandomCrop(32, padding=4) with zero padding, RandomHorizontalFlip(0.5),
    Normalize(CIFAR_MEAN, CIFAR_STD): each image its own crop and flip, drawn from
    ``generator``. The seed listed Normalize before ToTensor, which torchvision cannot
    apply to an image, so ToTensor comes first. The crops are cut offset by offset (81
    offsets), not image by image: a DataLoader of per-image transforms spent seconds of
    every launch on them.
    """
    n = len(images)
    padded = functional.pad(images.permute(0, 3, 1, 2), (PAD,) * 4)  # N×C×40×40, zeros
    span = padded.shape[-1] - CROP + 1
    top = torch.randint(0, span, (n,), generator=generator)
    left = torch.randint(0, span, (n,), generator=generator)
    flip = torch.rand(n, generator=generator) < 0.5
    out = torch.empty(n, padded.shape[1], CROP, CROP, dtype=images.dtype)
    offset = top * span + left
    for k in offset.unique().tolist():
        i, j = divmod(k, span)
        idx = (offset == k).nonzero().squeeze(1)
        out[idx] = padded[idx, :, i : i + CROP, j : j + CROP]
    flipped = flip.nonzero().squeeze(1)
    out[flipped] = out[flipped].flip(-1)
    mean = torch.tensor(CIFAR_MEAN).view(1, -1, 1, 1)
    std = torch.tensor(CIFAR_STD).view(1, -1, 1, 1)
    return out.float().div_(255).sub_(mean).div_(std)  # in place: an epoch is 600 MB


def cifar_epochs(case: DistCase, ctx: RankContext, pin: bool) -> list[Batch]:
    """Every epoch's transformed images of this rank, in sampler order, in host memory.

    A DistributedSampler (shuffled, seed 0) orders each epoch and gives this rank its
    share; the seed's transforms are drawn anew for every epoch and rank.
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
        x, y = seed_transforms(images[order], g), labels[order]
        out.append((x.pin_memory(), y.pin_memory()) if pin else (x, y))
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
