"""AlexNet as torchvision builds it (one-GPU variant, "One weird trick"): 61,100,840 parameters.

Input ``(batch, 3, 224, 224)``, 1000 classes. Same module indices as torchvision's, so
state dicts are interchangeable. The adaptive average pool to 6×6 lets smaller images
through (the smoke profile uses 64 px).
"""

from __future__ import annotations

from torch import Tensor, nn

INPUT_SHAPE = (3, 224, 224)
NUM_CLASSES = 1000

# (out channels, kernel, stride, padding, max-pool after)
CONVS: list[tuple[int, int, int, int, bool]] = [
    (64, 11, 4, 2, True),
    (192, 5, 1, 2, True),
    (384, 3, 1, 1, False),
    (256, 3, 1, 1, False),
    (256, 3, 1, 1, True),
]


class AlexNet(nn.Module):
    """Five convolutions, three fully connected layers with dropout."""

    def __init__(self, num_classes: int = NUM_CLASSES, dropout: float = 0.5) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        channels = 3
        for out, k, s, p, pool in CONVS:
            layers += [nn.Conv2d(channels, out, k, s, p), nn.ReLU(inplace=True)]
            if pool:
                layers.append(nn.MaxPool2d(kernel_size=3, stride=2))
            channels = out
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d((6, 6))
        self.classifier = nn.Sequential(
            nn.Dropout(dropout),
            nn.Linear(256 * 6 * 6, 4096),
            nn.ReLU(inplace=True),
            nn.Dropout(dropout),
            nn.Linear(4096, 4096),
            nn.ReLU(inplace=True),
            nn.Linear(4096, num_classes),
        )

    def forward(self, x: Tensor) -> Tensor:
        """Logits of shape (batch, num_classes)."""
        return self.classifier(self.avgpool(self.features(x)).flatten(1))


def alexnet(num_classes: int = NUM_CLASSES) -> AlexNet:
    """AlexNet for ``(batch, 3, H, W)`` inputs, H and W >= 63."""
    return AlexNet(num_classes)
