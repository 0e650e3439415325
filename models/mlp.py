"""MLP: a fully connected classifier on flattened single-channel 28×28 images (MNIST-sized).

``mlp()`` is 784 → 512 → 512 → 10 with ReLU between: 669,706 parameters. Input
``(batch, 1, 28, 28)`` (flattened inside), 10 classes.
"""

from __future__ import annotations

import itertools

from torch import Tensor, nn

INPUT_SHAPE = (1, 28, 28)
NUM_CLASSES = 10


class MLP(nn.Module):
    """Linear layers of the given widths with ReLU between; the input is flattened first."""

    def __init__(self, widths: tuple[int, ...] = (784, 512, 512, NUM_CLASSES)) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        for i, (a, b) in enumerate(itertools.pairwise(widths)):
            layers.append(nn.Linear(a, b))
            if i < len(widths) - 2:
                layers.append(nn.ReLU(inplace=True))
        self.layers = nn.Sequential(*layers)

    def forward(self, x: Tensor) -> Tensor:
        """Logits of shape (batch, widths[-1])."""
        return self.layers(x.flatten(1))


def mlp(num_classes: int = NUM_CLASSES) -> MLP:
    """The MLP of the amp family: 784-512-512-``num_classes``."""
    return MLP((784, 512, 512, num_classes))
