"""The stacked model of the layer-fit search (seed 004, Task-1): N conv blocks, then M linears.

A conv block is ``Conv2d(64, 64, 3, padding=1)`` then an in-place ``ReLU``: it keeps the
shape (16, 64, 112, 112) at the seed's input, so every block costs the same. The seed does
not give its fully connected head; ours is global average pooling to (batch, 64), then M
``Linear`` layers: 64 → W, (M − 2) × (W → W), W → 1000 classes, with an in-place ReLU after
every one but the last (M = 1 is a single 64 → 1000 layer). ``HEAD_WIDTH`` W = 3328 is
chosen so that, trained with SGD and momentum, the head's M = 62 layers take the memory that
the seed's 11 GB GPU had left beside 61 conv blocks (see ``docs/layer_fit.md``).

The model is a flat list of blocks (:func:`blocks`), so a split over devices is a cut
between two blocks: the head's pooling belongs to its first linear block.
"""

from __future__ import annotations

import itertools

from torch import nn

CHANNELS = 64
HEAD_WIDTH = 3328  # W: 13 · 256
CLASSES = 1000


def conv_block(device: object = None) -> nn.Sequential:
    """Conv2d(64, 64, 3, padding=1) + ReLU(inplace): 36,928 parameters."""
    return nn.Sequential(
        nn.Conv2d(CHANNELS, CHANNELS, 3, padding=1, device=device), nn.ReLU(inplace=True)
    )


def head_widths(m: int, width: int = HEAD_WIDTH, classes: int = CLASSES) -> list[int]:
    """Feature sizes along the head: ``[64, W, ..., W, classes]``, M + 1 entries."""
    if m < 1:
        raise ValueError(f"the head needs at least one linear layer, got M={m}")
    return [CHANNELS, *([width] * (m - 1)), classes]


def head_blocks(
    m: int, width: int = HEAD_WIDTH, classes: int = CLASSES, device: object = None
) -> list[nn.Module]:
    """The M linear blocks; the first also pools and flattens, all but the last end in ReLU.

    ``device`` is one device, or a sequence of M (one per block).
    """
    sizes = head_widths(m, width, classes)
    where = _placement(device, m)
    out: list[nn.Module] = []
    for i, (a, b) in enumerate(itertools.pairwise(sizes)):
        parts: list[nn.Module] = [nn.AdaptiveAvgPool2d(1), nn.Flatten()] if i == 0 else []
        parts.append(nn.Linear(a, b, device=where[i]))
        if i < m - 1:
            parts.append(nn.ReLU(inplace=True))
        out.append(nn.Sequential(*parts))
    return out


def blocks(
    n: int, m: int, width: int = HEAD_WIDTH, classes: int = CLASSES, device: object = None
) -> list[nn.Module]:
    """N conv blocks then M linear blocks, in order: the units a split cuts between.

    ``device`` is one device for all, or a sequence of N + M devices (one per block).
    """
    if n < 0:
        raise ValueError(f"the conv stack cannot have {n} blocks")
    where = _placement(device, n + m)
    return [conv_block(where[i]) for i in range(n)] + head_blocks(m, width, classes, where[n:])


def _placement(device: object, count: int) -> list[object]:
    if isinstance(device, list | tuple):
        if len(device) != count:
            raise ValueError(f"{len(device)} devices given for {count} blocks")
        return list(device)
    return [device] * count


def stacked(
    n: int, m: int, width: int = HEAD_WIDTH, classes: int = CLASSES, device: object = None
) -> nn.Sequential:
    """The whole model on one device: ``nn.Sequential`` of :func:`blocks`."""
    return nn.Sequential(*blocks(n, m, width, classes, device))
