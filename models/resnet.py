"""ResNet-18 for CIFAR-10, as in kuangliu/pytorch-cifar (the model seeds 002 and 003 trained).

Unlike torchvision's ImageNet ResNet, the stem is one 3×3 convolution with stride 1 and no
max-pooling, so a 32×32 image keeps its resolution into the first stage; the head is a
global average pool (4×4 at 32×32 input) and one linear layer. 11,173,962 parameters with
10 classes.
"""

from __future__ import annotations

from torch import Tensor, nn
from torch.nn import functional as F


class BasicBlock(nn.Module):
    """Two 3×3 convolutions with batch norm and a shortcut (1×1 conv when the shape changes)."""

    expansion = 1

    def __init__(self, in_planes: int, planes: int, stride: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_planes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride=1, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.shortcut = nn.Sequential()
        if stride != 1 or in_planes != planes:
            self.shortcut = nn.Sequential(
                nn.Conv2d(in_planes, planes, 1, stride=stride, bias=False),
                nn.BatchNorm2d(planes),
            )

    def forward(self, x: Tensor) -> Tensor:
        """relu(bn(conv(relu(bn(conv(x))))) + shortcut(x))."""
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.shortcut(x))


class ResNet(nn.Module):
    """CIFAR ResNet: 3×3 stem, four stages of ``blocks`` basic blocks, avg-pool, linear."""

    def __init__(self, blocks: tuple[int, int, int, int], num_classes: int = 10) -> None:
        super().__init__()
        self.in_planes = 64
        self.conv1 = nn.Conv2d(3, 64, 3, stride=1, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.layer1 = self._stage(64, blocks[0], 1)
        self.layer2 = self._stage(128, blocks[1], 2)
        self.layer3 = self._stage(256, blocks[2], 2)
        self.layer4 = self._stage(512, blocks[3], 2)
        self.linear = nn.Linear(512, num_classes)

    def _stage(self, planes: int, count: int, stride: int) -> nn.Sequential:
        layers = []
        for s in [stride] + [1] * (count - 1):
            layers.append(BasicBlock(self.in_planes, planes, s))
            self.in_planes = planes
        return nn.Sequential(*layers)

    def forward(self, x: Tensor) -> Tensor:
        """Logits of shape (batch, num_classes) for (batch, 3, 32, 32) images."""
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.layer4(self.layer3(self.layer2(self.layer1(out))))
        out = F.adaptive_avg_pool2d(out, 1).flatten(1)
        return self.linear(out)


def resnet18(num_classes: int = 10) -> ResNet:
    """ResNet-18: two basic blocks per stage."""
    return ResNet((2, 2, 2, 2), num_classes)
