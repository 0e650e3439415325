"""VGG-11/13/16/19, with or without batch norm, and with ReLU and MaxPool optionally swapped.

Built from a cfg table like torchvision's, with the same module indices, so parameter names,
shapes and counts equal torchvision's (VGG-16: 138,357,544). ``swap=True`` turns every
ReLU→MaxPool pair into MaxPool→ReLU. ReLU is monotone, so it commutes with max-pooling:
the swapped model computes the same function and the same gradients, and the ReLU runs on
a quarter of the elements.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

CFGS: dict[str, list[int | str]] = {
    "vgg11": [64, "M", 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M"],
    "vgg13": [64, 64, "M", 128, 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M"],
    "vgg16": [
        64,
        64,
        "M",
        128,
        128,
        "M",
        256,
        256,
        256,
        "M",
        512,
        512,
        512,
        "M",
        512,
        512,
        512,
        "M",
    ],
    "vgg19": [
        64,
        64,
        "M",
        128,
        128,
        "M",
        256,
        256,
        256,
        256,
        "M",
        512,
        512,
        512,
        512,
        "M",
        512,
        512,
        512,
        512,
        "M",
    ],
}


def make_features(cfg: list[int | str], batch_norm: bool, swap: bool) -> nn.Sequential:
    """Conv stack from a cfg; with ``swap`` each MaxPool goes before the ReLU it follows."""
    layers: list[nn.Module] = []
    channels = 3
    for v in cfg:
        if v == "M":
            pool = nn.MaxPool2d(kernel_size=2, stride=2)
            if swap:
                relu = layers.pop()
                layers += [pool, relu]
            else:
                layers.append(pool)
            continue
        assert isinstance(v, int)
        layers.append(nn.Conv2d(channels, v, kernel_size=3, padding=1))
        if batch_norm:
            layers.append(nn.BatchNorm2d(v))
        layers.append(nn.ReLU(inplace=True))
        channels = v
    return nn.Sequential(*layers)


class VGG(nn.Module):
    """VGG with torchvision's classifier: 512·7·7 → 4096 → 4096 → num_classes."""

    def __init__(
        self, features: nn.Sequential, num_classes: int = 1000, dropout: float = 0.5
    ) -> None:
        super().__init__()
        self.features = features
        self.avgpool = nn.AdaptiveAvgPool2d((7, 7))
        self.classifier = nn.Sequential(
            nn.Linear(512 * 7 * 7, 4096),
            nn.ReLU(True),
            nn.Dropout(dropout),
            nn.Linear(4096, 4096),
            nn.ReLU(True),
            nn.Dropout(dropout),
            nn.Linear(4096, num_classes),
        )
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
                nn.init.zeros_(m.bias)
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)
            elif isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, 0, 0.01)
                nn.init.zeros_(m.bias)

    def forward(self, x: Tensor) -> Tensor:
        """Logits of shape (batch, num_classes)."""
        x = self.avgpool(self.features(x))
        return self.classifier(x.flatten(1))


def vgg(
    arch: str = "vgg16", *, batch_norm: bool = False, swap: bool = False, num_classes: int = 1000
) -> VGG:
    """Build a VGG by name ('vgg11', 'vgg13', 'vgg16', 'vgg19')."""
    if arch not in CFGS:
        raise ValueError(f"unknown VGG {arch!r}; choose from {sorted(CFGS)}")
    return VGG(make_features(CFGS[arch], batch_norm, swap), num_classes)


def swapped_twin(model: VGG, arch: str, *, batch_norm: bool, num_classes: int) -> VGG:
    """A swapped VGG holding a copy of ``model``'s weights (module indices are unchanged)."""
    with torch.device(next(model.parameters()).device):  # no host copy of 138 M parameters
        twin = vgg(arch, batch_norm=batch_norm, swap=True, num_classes=num_classes)
    twin.load_state_dict(model.state_dict())
    return twin
