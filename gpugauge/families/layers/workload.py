"""layers workload: per-layer time, memory, energy and roofline (seed 004, Task-2).

Each case times one layer call on a cold L2 (flushed before every round, outside the
timing). ``fwd`` runs under ``torch.inference_mode``; ``fwdbwd`` is forward then
``backward`` with a fixed random grad_output, computing the input's and the parameters'
gradients; gradients are set to None before every round, outside the timing. For the
in-place ReLU each fwdbwd round gets a fresh clone of the input (outside the timing, but
inside the energy window, where it is said so). Precision: fp32 with TF32 off, tf32 with it
on, bf16 and fp16 with the layer and input cast.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any, ClassVar

import torch

from gpugauge.measure.ceilings import torch_dtype
from gpugauge.measure.memory import ExpectedMemory
from gpugauge.measure.roofline import Work
from gpugauge.models.build import build_on
from gpugauge.models.layers import LAYERS, LayerDef

MODES = ("fwd", "fwdbwd")


@dataclass(frozen=True)
class LayerCase:
    """One layers benchmark: layer, mode, precision, input size and device."""

    family: ClassVar[str] = "layers"
    layer: str
    mode: str  # "fwd" | "fwdbwd"
    dtype: str
    size: str  # a key of the layer's shapes: "seed", "smoke", "seed_x2"
    device: str

    @property
    def id(self) -> str:
        """Readable id, also the pytest id: ``conv-fwd-bf16-seed-cuda``."""
        return f"{self.layer}-{self.mode}-{self.dtype}-{self.size}-{self.device}"

    @property
    def defn(self) -> LayerDef:
        """The layer's registry entry."""
        return LAYERS[self.layer]

    @property
    def shape(self) -> tuple[int, ...]:
        """Input shape."""
        return self.defn.shapes[self.size]

    @property
    def backward(self) -> bool:
        """Whether the round includes the backward pass."""
        return self.mode == "fwdbwd"

    @property
    def keeps_indices(self) -> bool:
        """Max-pooling keeps int64 indices on CUDA always, on a CPU only for backward."""
        return self.device == "cuda" or self.backward

    def work(self) -> Work:
        """FLOPs and bytes of one round, from the layer's formulas."""
        d, cost = self.defn.dims(self.size), self.defn.cost
        itemsize = torch_dtype(self.dtype).itemsize
        return Work(
            cost.flops(d, self.backward),
            cost.bytes_moved(d, self.backward, itemsize, self.keeps_indices),
            self.dtype,
        )

    def expected_memory(self) -> ExpectedMemory:
        """Bytes one round should allocate, by part."""
        d = self.defn.dims(self.size)
        itemsize = torch_dtype(self.dtype).itemsize
        parts = self.defn.cost.allocated(d, self.backward, itemsize, self.keeps_indices)
        return ExpectedMemory(parts, self.defn.workspace)

    def as_dict(self) -> dict[str, Any]:
        """Plain dict for JSON."""
        return {**asdict(self), "shape": list(self.shape)}


def cases(profile: str) -> list[LayerCase]:
    """Every case of a profile; CUDA cases skip where no GPU is visible."""

    def grid(device: str, sizes: tuple[str, ...], fp32_only: bool) -> list[LayerCase]:
        return [
            LayerCase(name, mode, dtype, size, device)
            for size in sizes
            for name, defn in LAYERS.items()
            for mode in MODES
            for dtype in (("fp32",) if fp32_only else defn.dtypes)
        ]

    if profile == "smoke":
        return grid("cpu", ("smoke",), True) + grid("cuda", ("smoke",), False)
    if profile == "seed":
        return grid("cpu", ("seed",), True) + grid("cuda", ("seed",), False)
    return grid("cpu", ("seed",), True) + grid("cuda", ("seed", "seed_x2"), False)


def make_round(case: LayerCase) -> tuple[Callable[[], object], Callable[[], None] | None]:
    """The timed callable of ``case`` and the setup to run before each round (or None)."""
    dtype = torch_dtype(case.dtype)
    layer = build_on(case.device, case.defn.make).to(dtype)
    x = torch.randn(case.shape, device=case.device, dtype=dtype)
    if not case.backward:
        layer.requires_grad_(False)

        def forward() -> object:
            with torch.inference_mode():
                return layer(x)

        return forward, None

    grad_out = torch.randn(case.defn.dims(case.size).output_shape, device=case.device, dtype=dtype)
    leaf = x.requires_grad_()
    params = list(layer.parameters())
    current = [leaf]

    def setup() -> None:
        leaf.grad = None
        for p in params:
            p.grad = None
        # an in-place layer cannot write a leaf that requires grad: give it a fresh copy
        current[0] = leaf.clone() if case.defn.inplace else leaf

    def forward_backward() -> object:
        layer(current[0]).backward(grad_out)
        return None

    return forward_backward, setup
