"""The device's measured ceilings: copy bandwidth and matrix-product rate per dtype.

Roofline shares are taken against these, not datasheet numbers. They are measured with the
same timing primitive as every benchmark, once per pytest run and device.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from gpugauge.measure.timing import CudaEventClock, HostClock, TimingPolicy, measure

_POLICY = TimingPolicy(warmup_rounds=3, rounds=20)


@contextlib.contextmanager
def matmul_precision(dtype: str) -> Iterator[None]:
    """Allow TF32 for 'tf32', forbid it for 'fp32'; restore the flags afterwards."""
    import torch

    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    if dtype in ("tf32", "fp32"):
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = dtype == "tf32"
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


def torch_dtype(name: str) -> Any:
    """The storage dtype of a dtype name ('tf32' computes on float32 tensors)."""
    import torch

    return {
        "fp32": torch.float32,
        "tf32": torch.float32,
        "bf16": torch.bfloat16,
        "fp16": torch.float16,
    }[name]


@dataclass(frozen=True)
class Ceilings:
    """Measured peaks of one device: GB/s (bytes read + written) and TFLOP/s per dtype."""

    device: str
    copy_gbps: float
    copy_bytes: int
    matmul_tflops: dict[str, float] = field(default_factory=dict)
    matmul_n: int = 0

    def as_dict(self) -> dict[str, Any]:
        """Plain dict for JSON."""
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def _copy_ms(numel: int, dev: Any, clock: Any) -> float:
    import torch

    src = torch.randn(numel, device=dev)
    dst = torch.empty_like(src)
    return measure(lambda: dst.copy_(src), _POLICY, clock).summary.median


def measure_ceilings(device: str) -> Ceilings:
    """Time a large device-to-device copy and an n³ matrix product per dtype."""
    import torch

    dev = torch.device(device)
    on_gpu = dev.type == "cuda"
    clock = CudaEventClock(dev) if on_gpu else HostClock()
    numel = (256 if on_gpu else 32) * 2**20  # 1 GiB / 128 MiB of float32
    moved = 2 * numel * 4
    copy_gbps = moved / (_copy_ms(numel, dev, clock) / 1e3) / 1e9

    n = 8192 if on_gpu else 1024
    rates: dict[str, float] = {}
    for name in ("fp32", "tf32", "bf16", "fp16") if on_gpu else ("fp32",):
        a = torch.randn(n, n, device=dev, dtype=torch_dtype(name))
        b = torch.randn(n, n, device=dev, dtype=torch_dtype(name))
        with matmul_precision(name):
            t = measure(lambda a=a, b=b: torch.mm(a, b), _POLICY, clock)
        rates[name] = 2 * n**3 / (t.summary.median / 1e3) / 1e12
        del a, b
    if on_gpu:
        torch.cuda.empty_cache()
    return Ceilings(str(dev), copy_gbps, moved, rates, n)
