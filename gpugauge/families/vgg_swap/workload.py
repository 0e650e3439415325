"""vgg_swap workload: VGG against VGG with every ReLU→MaxPool pair swapped (seed 004, Task-3).

Before anything is timed, each swapped case checks that the two models compute the same
function: fp32 eval outputs bitwise equal and training gradients equal up to rounding.
A training step is: zero grads (set to None), forward under autocast for bf16,
cross-entropy, backward, SGD step (:data:`LR`, momentum 0.9). Inference runs in eval mode
under ``torch.inference_mode``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from typing import Any, ClassVar

import torch
from torch import nn

from gpugauge.measure.ceilings import torch_dtype
from gpugauge.models.build import build_on
from gpugauge.models.vgg import swapped_twin, vgg


@dataclass(frozen=True)
class SwapCase:
    """One vgg_swap benchmark: model, variant, mode, precision, input and device."""

    family: ClassVar[str] = "vgg_swap"
    arch: str
    batch_norm: bool
    variant: str  # "normal" | "swapped"
    mode: str  # "infer" | "train"
    dtype: str  # "fp32" | "bf16" (autocast)
    batch: int
    image: int
    num_classes: int
    device: str  # "cpu" | "cuda"
    profile: str

    @property
    def id(self) -> str:
        """Readable id, also the pytest id: ``vgg16-swapped-train-bf16-b128-224px-cuda``."""
        bn = "_bn" if self.batch_norm else ""
        return (
            f"{self.arch}{bn}-{self.variant}-{self.mode}-{self.dtype}-b{self.batch}-"
            f"{self.image}px-{self.device}"
        )

    @property
    def workload(self) -> SwapCase:
        """The same case with the variant normalized: what normal and swapped share."""
        return replace(self, variant="normal")

    @property
    def group(self) -> str:
        """The pytest-benchmark group: the id without the variant, normal beside swapped.

        pytest-benchmark's tables and ``compare`` then set ``vgg16-normal-infer-...`` next
        to ``vgg16-swapped-infer-...`` (group ``vgg16-infer-fp32-b128-224px-cuda``).
        """
        return self.workload.id.replace("-normal-", "-", 1)

    def as_dict(self) -> dict[str, Any]:
        """Plain dict for JSON."""
        return asdict(self)


def cases(profile: str) -> list[SwapCase]:
    """Every case of a profile; CUDA cases exist on every machine and skip where no GPU is."""

    def grid(
        device: str, archs: list[tuple[str, bool]], dtypes: list[str], batch: int, image: int
    ) -> list[SwapCase]:
        return [
            SwapCase(arch, bn, variant, mode, dtype, batch, image, 1000, device, profile)
            for arch, bn in archs
            for mode in ("infer", "train")
            for dtype in dtypes
            for variant in ("normal", "swapped")
        ]

    vgg16 = [("vgg16", False)]
    if profile == "smoke":
        return grid("cpu", vgg16, ["fp32"], 2, 32) + grid("cuda", vgg16, ["fp32", "bf16"], 16, 64)
    if profile == "seed":
        return grid("cpu", vgg16, ["fp32"], 128, 224) + grid(
            "cuda", vgg16, ["fp32", "bf16"], 128, 224
        )
    every = [(a, bn) for a in ("vgg11", "vgg13", "vgg16", "vgg19") for bn in (False, True)]
    return grid("cpu", vgg16, ["fp32"], 16, 224) + grid("cuda", every, ["fp32", "bf16"], 128, 224)


def _inputs(case: SwapCase) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(case.batch, 3, case.image, case.image, generator=g)
    y = torch.randint(0, case.num_classes, (case.batch,), generator=g)
    return x.to(case.device), y.to(case.device)


def _model(case: SwapCase, swap: bool) -> nn.Module:
    return build_on(
        case.device,
        lambda: vgg(case.arch, batch_norm=case.batch_norm, swap=swap, num_classes=case.num_classes),
    )


def _autocast(case: SwapCase) -> contextlib.AbstractContextManager[Any]:
    if case.dtype == "fp32":
        return contextlib.nullcontext()
    return torch.autocast(torch.device(case.device).type, dtype=torch_dtype(case.dtype))


# The SGD step's learning rate: 0, so that every timed step does the same work on the
# same numbers. SGD still runs its momentum and update kernels (``add_`` with alpha 0),
# and the weights stay where they started. At lr 0.01 the one fixed batch drove VGG-16 to
# NaN by step 24 (a CPU smoke case, 2026-12-06): the rounds timed NaN arithmetic, which a
# CPU runs at another speed, and a fresh reference model beside them did not.
LR = 0.0
MOMENTUM = 0.9


def make_step(case: SwapCase) -> Callable[[], object]:
    """The callable timed for ``case``: one inference or one training step."""
    model = _model(case, swap=case.variant == "swapped")
    x, y = _inputs(case)
    if case.mode == "infer":
        model.eval()

        def infer() -> object:
            with torch.inference_mode(), _autocast(case):
                return model(x)

        return infer
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    loss_fn = nn.CrossEntropyLoss()

    def train() -> object:
        opt.zero_grad(set_to_none=True)
        with _autocast(case):
            loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        return loss

    return train


def check_swap_equivalence(case: SwapCase) -> dict[str, Any]:
    """Outputs (fp32, eval) of normal and swapped VGG are identical; gradients match."""
    normal = _model(case, swap=False)
    swapped = swapped_twin(
        normal, case.arch, batch_norm=case.batch_norm, num_classes=case.num_classes
    )
    x, y = _inputs(case)
    normal.eval()
    swapped.eval()
    with torch.inference_mode():
        out_n, out_s = normal(x), swapped(x)
    identical = bool(torch.equal(out_n, out_s))
    max_out_diff = float((out_n - out_s).abs().max())
    del out_n, out_s

    normal.train()
    swapped.train()
    for model in (normal, swapped):
        torch.manual_seed(1)  # the same dropout masks in both
        nn.functional.cross_entropy(model(x), y).backward()
    worst = 0.0
    for (name, p_n), p_s in zip(normal.named_parameters(), swapped.parameters(), strict=True):
        assert p_n.grad is not None, name
        assert p_s.grad is not None, name
        rel = float((p_n.grad - p_s.grad).norm() / p_n.grad.norm().clamp_min(1e-30))
        worst = max(worst, rel)
    return {
        "outputs_identical": identical,
        "max_output_abs_diff": max_out_diff,
        "max_grad_rel_diff": worst,
    }


# Non-deterministic GPU reductions in backward can reorder sums: allow rounding, no more.
GRAD_REL_TOL = 1e-4
