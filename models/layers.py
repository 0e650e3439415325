"""Single layers of the seeds' Task-2, each with formulas for what one call must cost.

A :class:`LayerDef` is one registry entry: a module factory, input shapes by size name,
and a :class:`Cost` that counts FLOPs, the fewest bytes moved (each input read once, each
output written once) and the bytes a call should allocate. To add a layer, add one entry
to :data:`LAYERS`, with one of the costs below or a new one.

Conventions: forward+backward computes the input's gradient and every parameter's
(a layer inside a network); FLOPs count a multiply-add as 2, as
``torch.utils.flop_counter`` does; pooling and ReLU count one operation per comparison.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import torch
from torch import nn

Shape = tuple[int, ...]
INDEX_BYTES = 8  # max-pooling indices are int64


@dataclass(frozen=True)
class Dims:
    """Element counts of one call, found by running the layer on the meta device."""

    input: int
    output: int
    output_shape: Shape
    weight: int
    bias: int
    macs_per_output: int  # multiply-adds per output element (weight numel / out features)

    @classmethod
    def of(cls, make: Callable[[], nn.Module], shape: Shape) -> Dims:
        """Measure a layer's dims without memory or compute."""
        with torch.device("meta"):
            layer = make()
            out = layer(torch.empty(shape))
        w = getattr(layer, "weight", None)
        b = getattr(layer, "bias", None)
        return cls(
            input=math.prod(shape),
            output=out.numel(),
            output_shape=tuple(out.shape),
            weight=0 if w is None else w.numel(),
            bias=0 if b is None else b.numel(),
            macs_per_output=0 if w is None else w[0].numel(),
        )


class Cost(Protocol):
    """FLOPs, bytes moved and bytes allocated by one call (``backward``: fwd+bwd)."""

    def flops(self, d: Dims, backward: bool) -> float:
        """Floating-point operations."""

    def bytes_moved(self, d: Dims, backward: bool, itemsize: int, indices: bool) -> float:
        """Fewest bytes read plus written."""

    def allocated(self, d: Dims, backward: bool, itemsize: int, indices: bool) -> dict[str, int]:
        """Bytes the call should allocate, by part (inputs and weights exist before it)."""


class InplaceElementwise:
    """An in-place elementwise op (ReLU(inplace=True)): read and write each element once."""

    def flops(self, d: Dims, backward: bool) -> float:
        """One op per element forward; one per element backward (the mask)."""
        return d.input * (2 if backward else 1)

    def bytes_moved(self, d: Dims, backward: bool, itemsize: int, indices: bool) -> float:
        """Forward: read x, write x. Backward: read grad_out and the output, write grad_in."""
        return d.input * itemsize * (5 if backward else 2)

    def allocated(self, d: Dims, backward: bool, itemsize: int, indices: bool) -> dict[str, int]:
        """Nothing forward (in place); the input's gradient backward."""
        return {"grad_input": d.input * itemsize} if backward else {}


@dataclass(frozen=True)
class MaxPool:
    """Max-pooling with a ``kernel``×``kernel`` window; int64 indices where they are kept."""

    kernel: int

    def flops(self, d: Dims, backward: bool) -> float:
        """kernel² comparisons per output forward; one scatter per output backward."""
        return d.output * self.kernel**2 + (d.output if backward else 0)

    def bytes_moved(self, d: Dims, backward: bool, itemsize: int, indices: bool) -> float:
        """Forward reads x, writes y (and indices); backward reads grad_out, indices."""
        idx = d.output * INDEX_BYTES if indices else 0
        fwd = (d.input + d.output) * itemsize + idx
        bwd = d.output * itemsize + idx + d.input * itemsize
        return fwd + (bwd if backward else 0)

    def allocated(self, d: Dims, backward: bool, itemsize: int, indices: bool) -> dict[str, int]:
        """Output, indices (kept on CUDA, and for backward), and grad_in backward."""
        parts = {"output": d.output * itemsize}
        if indices:
            parts["indices"] = d.output * INDEX_BYTES
        if backward:
            parts["grad_input"] = d.input * itemsize
        return parts


class Affine:
    """Convolution or linear: y = x·W + b, 2 FLOPs per multiply-add."""

    def flops(self, d: Dims, backward: bool) -> float:
        """Forward 2·out·macs; backward twice that (grad input and grad weight)."""
        fwd = 2 * d.output * d.macs_per_output
        return fwd * (3 if backward else 1)

    def bytes_moved(self, d: Dims, backward: bool, itemsize: int, indices: bool) -> float:
        """Forward reads x, W, b, writes y; backward reads grad_out, x, W, writes grads."""
        fwd = d.input + d.weight + d.bias + d.output
        bwd = (d.output + d.input + d.weight) + (d.input + d.weight + d.bias)
        return (fwd + (bwd if backward else 0)) * itemsize

    def allocated(self, d: Dims, backward: bool, itemsize: int, indices: bool) -> dict[str, int]:
        """Output, and backward the gradients of input, weight and bias."""
        parts = {"output": d.output * itemsize}
        if backward:
            parts |= {
                "grad_input": d.input * itemsize,
                "grad_weight": d.weight * itemsize,
                "grad_bias": d.bias * itemsize,
            }
        return parts


@dataclass(frozen=True)
class LayerDef:
    """One registry entry: how to build the layer, its inputs, and its cost."""

    name: str
    make: Callable[[], nn.Module]
    shapes: dict[str, Shape]
    cost: Cost
    dtypes: tuple[str, ...]
    inplace: bool = False
    workspace: str | None = None  # what may allocate beyond the counted tensors

    def dims(self, size: str) -> Dims:
        """Element counts at the named input size."""
        return Dims.of(self.make, self.shapes[size])


_IMAGES = {"seed": (256, 3, 224, 224), "seed_x2": (512, 3, 224, 224), "smoke": (8, 3, 64, 64)}
# tf32 changes only matrix units' arithmetic, so elementwise layers skip it.
_ALL = ("fp32", "tf32", "bf16", "fp16")
_NO_TF32 = ("fp32", "bf16", "fp16")

LAYERS: dict[str, LayerDef] = {
    d.name: d
    for d in [
        LayerDef(
            "relu",
            lambda: nn.ReLU(inplace=True),
            _IMAGES,
            InplaceElementwise(),
            _NO_TF32,
            inplace=True,
        ),
        LayerDef(
            "maxpool",
            lambda: nn.MaxPool2d(kernel_size=2, stride=2, padding=0),
            _IMAGES,
            MaxPool(2),
            _NO_TF32,
        ),
        LayerDef(
            "conv",
            lambda: nn.Conv2d(3, 128, kernel_size=3, padding=1),
            _IMAGES,
            Affine(),
            _ALL,
            workspace="cuDNN workspace for the chosen algorithm",
        ),
        LayerDef(
            "linear",
            lambda: nn.Linear(512 * 7 * 7, 4096),
            {"seed": (256, 25088), "seed_x2": (512, 25088), "smoke": (8, 25088)},
            Affine(),
            _ALL,
            workspace="cuBLAS workspace and split-K buffers",
        ),
    ]
}
