"""The steps every layer_fit run times, their inputs, and the clock and method timing them.

``train`` is zero grads (to None), forward, cross-entropy, backward, SGD step (lr 0.01,
momentum 0.9); ``infer`` is a forward in eval mode under ``torch.inference_mode``. The
seed timed with a warm-up of 5 and the average of 10 (:data:`SEED_METHOD`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import torch
from torch import nn

from gpugauge.measure.timing import CudaEventClock, HostClock, RoundClock, TimingPolicy
from gpugauge.models.stacked import CHANNELS

if TYPE_CHECKING:
    from gpugauge.families.layer_fit.memory_model import MemoryModel

SEED_METHOD = TimingPolicy(warmup_rounds=5, rounds=10)  # the seed: warm-up 5, average of 10
LR, MOMENTUM = 0.01, 0.9


def train_step(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> Callable[[], object]:
    """``train``: a step of SGD with momentum on (``x``, ``y``); the step returns the loss."""
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    loss_fn = nn.CrossEntropyLoss()
    model.train()

    def step() -> object:
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        return loss

    return step


def infer_step(model: nn.Module, x: torch.Tensor) -> Callable[[], object]:
    """``infer``: a forward of ``x`` in eval mode, no autograd; the step returns the output."""
    model.eval()

    def step() -> object:
        with torch.inference_mode():
            return model(x)

    return step


def inputs(
    model: MemoryModel, device: str, batch: int | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """A seeded input batch and labels, made on ``device``."""
    g = torch.Generator(device=device).manual_seed(0)
    b = batch or model.batch
    x = torch.randn(b, CHANNELS, model.image, model.image, device=device, generator=g)
    y = torch.randint(0, model.classes, (b,), device=device, generator=g)
    return x, y


def round_clock(devices: Sequence[str]) -> RoundClock:
    """The suite's clock for a round over ``devices``: CUDA events, or the host clock."""
    return CudaEventClock(tuple(devices)) if devices[0].startswith("cuda") else HostClock()
