import pytest
import torch
import torchvision

from gpugauge.models.vgg import CFGS, swapped_twin, vgg


def n_params(m: torch.nn.Module) -> int:
    return sum(p.numel() for p in m.parameters())


def test_vgg16_has_torchvisions_parameter_count() -> None:
    with torch.device("meta"):
        assert n_params(vgg("vgg16")) == 138_357_544


@pytest.mark.parametrize("arch", sorted(CFGS))
@pytest.mark.parametrize("bn", [False, True])
@pytest.mark.parametrize("swap", [False, True])
def test_state_dict_matches_torchvision(arch: str, bn: bool, swap: bool) -> None:
    with torch.device("meta"):  # shapes only: no memory, no init cost
        ours = vgg(arch, batch_norm=bn, swap=swap).state_dict()
        ref = getattr(torchvision.models, f"{arch}_bn" if bn else arch)(weights=None).state_dict()
    assert {k: v.shape for k, v in ours.items()} == {k: v.shape for k, v in ref.items()}


def test_swap_moves_every_pool_before_its_relu() -> None:
    names = [type(m).__name__ for m in vgg("vgg11", swap=True).features]
    pools = [i for i, n in enumerate(names) if n == "MaxPool2d"]
    assert len(pools) == 5
    assert all(names[i + 1] == "ReLU" and names[i - 1] == "Conv2d" for i in pools)


@pytest.mark.slow
def test_unswapped_equals_torchvision_with_the_same_weights() -> None:
    ours = vgg("vgg11").eval()
    ref = torchvision.models.vgg11(weights=None).eval()
    ref.load_state_dict(ours.state_dict())
    x = torch.randn(2, 3, 32, 32)
    with torch.inference_mode():
        assert torch.equal(ours(x), ref(x))


@pytest.mark.parametrize("bn", [False, True])
@pytest.mark.slow
def test_swapped_twin_computes_the_same_function(bn: bool) -> None:
    torch.manual_seed(0)
    normal = vgg("vgg11", batch_norm=bn, num_classes=10).eval()
    twin = swapped_twin(normal, "vgg11", batch_norm=bn, num_classes=10).eval()
    x = torch.randn(2, 3, 32, 32)
    with torch.inference_mode():
        assert torch.equal(normal(x), twin(x))


def test_unknown_arch_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="unknown VGG 'vgg99'"):
        vgg("vgg99")
