import torch

from gpugauge.models.resnet import resnet18


def test_cifar_resnet18_matches_pytorch_cifar() -> None:
    model = resnet18()
    assert sum(p.numel() for p in model.parameters()) == 11_173_962
    assert model(torch.randn(2, 3, 32, 32)).shape == (2, 10)
    assert model.conv1.stride == (1, 1)  # CIFAR stem: no downsampling before stage 1
