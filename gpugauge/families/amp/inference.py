"""amp's CPU against GPU inference (seed 001): the model run on both, its outputs compared.

The GPU case carries its CPU side (:func:`cpu_reference`): on a GPU host ``--gauge-device auto``
skips the CPU cases, and the two must be checked against each other before either is timed.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any

import torch
from torch import nn

from gpugauge.families.amp.workload import INFER_MODEL, InferCase, image_batch
from gpugauge.measure.timing import HostClock, TimingPolicy, measure
from gpugauge.results.measurement import Measurement


@dataclass(frozen=True)
class Agreement:
    """CPU against GPU outputs of the same model and input: worst error against a tolerance.

    ``rel_err`` is max |gpu - cpu| / max |cpu| over all logits; it must be at most
    ``tolerance``. ``argmax_agree`` is the share of inputs whose predicted class is the same
    (the seed's 'Correctness' compared across devices); reported, not judged.
    """

    max_abs_err: float
    max_abs_ref: float
    tolerance: float
    argmax_agree: float
    tf32: dict[str, Any]

    @property
    def rel_err(self) -> float:
        """Worst error relative to the largest reference logit."""
        return self.max_abs_err / self.max_abs_ref if self.max_abs_ref > 0 else self.max_abs_err

    @property
    def ok(self) -> bool:
        """Whether the outputs agree within the tolerance."""
        return self.rel_err <= self.tolerance

    def as_dict(self) -> dict[str, Any]:
        """Plain dict for JSON."""
        return {**asdict(self), "rel_err": self.rel_err, "ok": self.ok}


# TF32 rounds conv/matmul inputs to a 10-bit mantissa (relative 2^-11 ≈ 5e-4 per operand);
# without it only the summation order differs from the CPU.
AGREE_TOL_TF32 = 1e-2
AGREE_TOL_FP32 = 1e-4


def agreement_tolerance(flags: dict[str, Any]) -> float:
    """The tolerance of :class:`Agreement` under these TF32 flags."""
    tf32 = flags["cudnn_allow_tf32"] or flags["cuda_matmul_allow_tf32"]
    return AGREE_TOL_TF32 if tf32 else AGREE_TOL_FP32


def compare_outputs(ref: torch.Tensor, out: torch.Tensor, flags: dict[str, Any]) -> Agreement:
    """Agreement of ``out`` with the CPU reference ``ref`` (both logits, same shape)."""
    if ref.shape != out.shape:
        raise ValueError(f"output shapes differ: {tuple(ref.shape)} vs {tuple(out.shape)}")
    ref, out = ref.detach().double().cpu(), out.detach().double().cpu()
    return Agreement(
        max_abs_err=float((out - ref).abs().max()),
        max_abs_ref=float(ref.abs().max()),
        tolerance=agreement_tolerance(flags),
        argmax_agree=float((out.argmax(1) == ref.argmax(1)).double().mean()),
        tf32=flags,
    )


@dataclass
class Inference:
    """The small CNN and one input batch on a device; calling it runs one inference."""

    model: nn.Module
    x: torch.Tensor

    def __call__(self) -> torch.Tensor:
        """Logits of the batch (inference mode)."""
        with torch.inference_mode():
            return self.model(self.x)


def make_inference(case: InferCase, device: str) -> Inference:
    """The seed-001 model (the same weights on every device) and its input on ``device``."""
    torch.manual_seed(0)
    model = INFER_MODEL.build().eval()
    x, _ = image_batch((case.batch, *INFER_MODEL.input_shape), INFER_MODEL.num_classes)
    return Inference(model.to(device), x.to(device))


def cpu_reference(
    case: InferCase, device_run: Inference, policy: TimingPolicy, flags: dict[str, Any]
) -> tuple[Measurement, dict[str, Any]]:
    """The CPU side of a GPU inference case: agreement with the CPU, then CPU timing.

    On a GPU host ``--gauge-device auto`` skips the CPU cases, so the GPU case carries the CPU
    side: the same model and input on the CPU, checked against ``device_run``'s output
    (:class:`Agreement`, under ``flags``), then timed with ``perf_counter`` per round under
    ``policy``. Returns the CPU measurement (not recorded: it is compared with the GPU
    result) and what goes into the GPU result's ``extra``.
    """
    cpu = make_inference(case, "cpu")
    agree = compare_outputs(cpu(), device_run(), flags)
    timing = measure(cpu, policy, HostClock())
    median = timing.summary.median
    side = {
        "agreement": agree.as_dict(),
        "cpu": {
            "timing": timing.as_dict(),
            "median_ms": median,
            "throughput_items_per_s": case.batch / (median / 1e3),
            "num_threads": torch.get_num_threads(),
        },
    }
    return Measurement(replace(case, device="cpu"), timing=timing), side
