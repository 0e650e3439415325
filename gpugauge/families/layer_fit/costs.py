"""What a block of the stacked model costs per training step: FLOPs, or measured time.

The split planner balances time by these costs (:func:`~.plan.plan_split`).
"""

from __future__ import annotations

import itertools
from dataclasses import asdict, dataclass
from typing import Any

import torch
from torch import nn

from gpugauge.families.layer_fit.memory_model import MemoryModel
from gpugauge.families.layer_fit.steps import LR, MOMENTUM, SEED_METHOD, round_clock
from gpugauge.measure.timing import measure
from gpugauge.models.stacked import CHANNELS, conv_block, head_widths


@dataclass(frozen=True)
class BlockCosts:
    """Time of one training step of a conv block and of a W × W linear block.

    ``source`` says where they came from: FLOPs (a proxy: it misses that the head's
    linears at batch 16 are bound by memory traffic, weights, gradients and momentum) or
    a measurement on the device. Units: ms, or FLOPs for the proxy (only ratios matter).
    """

    conv: float
    linear: float
    source: str

    def per_block(self, model: MemoryModel, n: int, m: int) -> list[float]:
        """Cost of every block of (N, M): a linear scales with its weight count."""
        sizes = head_widths(m, model.width, model.classes)
        full = model.width * model.width
        head = [self.linear * a * b / full for a, b in itertools.pairwise(sizes)]
        return [self.conv] * n + head

    def as_dict(self) -> dict[str, Any]:
        """Plain dict for JSON."""
        return asdict(self)


def flop_costs(model: MemoryModel) -> BlockCosts:
    """Training FLOPs (forward + two backward products) of a conv and a W × W linear."""
    conv = 3 * 2 * model.batch * model.image**2 * CHANNELS * CHANNELS * 9
    linear = 3 * 2 * model.batch * model.width * model.width
    return BlockCosts(float(conv), float(linear), "flops")


COST_STACK = 8  # blocks timed together: the step's fixed kernels are spread over 8


def measure_costs(model: MemoryModel, device: str, batch: int | None = None) -> BlockCosts:
    """Device time of one training step (SGD + momentum) of each block kind, seed method.

    Each kind is timed as a stack of :data:`COST_STACK` blocks and divided, so that the
    step's fixed kernels (zeroing, the sum, the optimizer's) are a small part of it.
    ``batch`` (default the model's) times a GPipe micro-batch: a block's cost need not
    shrink in proportion to its batch.
    """
    batch = model.batch if batch is None else batch
    clock = round_clock((device,))
    out = []
    for net, shape in (
        (nn.Sequential(*(conv_block(device) for _ in range(COST_STACK))), None),
        (
            nn.Sequential(
                *(nn.Linear(model.width, model.width, device=device) for _ in range(COST_STACK))
            ),
            (batch, model.width),
        ),
    ):
        if shape is None:
            x = torch.randn(batch, CHANNELS, model.image, model.image, device=device)
        else:
            x = torch.randn(*shape, device=device)
        x.requires_grad_()
        opt = torch.optim.SGD(net.parameters(), lr=LR, momentum=MOMENTUM)

        def step(net: nn.Module = net, x: torch.Tensor = x, opt: Any = opt) -> None:
            opt.zero_grad(set_to_none=True)
            x.grad = None
            net(x).sum().backward()
            opt.step()

        out.append(measure(step, SEED_METHOD, clock).summary.mean / COST_STACK)
        del net, x, opt
    return BlockCosts(out[0], out[1], f"measured on {device} (seed method, {COST_STACK} stacked)")
