"""LeNet-5 as in pytorch-cifar, for any input channel count and square image size.

conv(C, 6, 5) → ReLU → maxpool 2 → conv(6, 16, 5) → ReLU → maxpool 2 → 120 → 84 → classes,
no padding. Two sizes are used:

- ``lenet()``: CIFAR-sized input ``(batch, 3, 32, 32)``, 10 classes: 62,006 parameters
  (the amp family's training model, as in pytorch-cifar).
- ``lenet(in_channels=1, image=28)``: single-channel 28×28 (MNIST/Fashion-MNIST-sized),
  10 classes: 44,426 parameters; the small CNN of the CPU-against-GPU inference cases
  (seed 001).
"""

from __future__ import annotations

from torch import Tensor, nn

INPUT_SHAPE = (3, 32, 32)
SMALL_INPUT_SHAPE = (1, 28, 28)
NUM_CLASSES = 10


def _after_convs(image: int) -> int:
    """Spatial size after the two conv(5)+pool(2) stages."""
    side = (image - 4) // 2
    side = (side - 4) // 2
    if side < 1:
        raise ValueError(f"LeNet needs images of at least 16 px, got {image}")
    return side


class LeNet(nn.Module):
    """LeNet-5 with ReLU and max-pooling."""

    def __init__(self, in_channels: int = 3, image: int = 32, num_classes: int = NUM_CLASSES):
        super().__init__()
        side = _after_convs(image)
        self.features = nn.Sequential(
            nn.Conv2d(in_channels, 6, 5),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(2),
            nn.Conv2d(6, 16, 5),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(2),
        )
        self.classifier = nn.Sequential(
            nn.Linear(16 * side * side, 120),
            nn.ReLU(inplace=True),
            nn.Linear(120, 84),
            nn.ReLU(inplace=True),
            nn.Linear(84, num_classes),
        )

    def forward(self, x: Tensor) -> Tensor:
        """Logits of shape (batch, num_classes)."""
        return self.classifier(self.features(x).flatten(1))


def lenet(in_channels: int = 3, image: int = 32, num_classes: int = NUM_CLASSES) -> LeNet:
    """LeNet-5 for ``(batch, in_channels, image, image)`` inputs."""
    return LeNet(in_channels, image, num_classes)
