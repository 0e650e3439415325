"""Where the search's probes run: a simulated allocator, or the real model on a CUDA device.

:class:`CudaBackend` runs the real model (under an emulated budget if one is given);
:class:`SimulatedBackend` replays the memory model's allocations on a simulated allocator
that fails like CUDA's, so a CPU run exercises the search and the OOM handling.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn

from gpugauge.families.layer_fit.budget import GiB, MiB
from gpugauge.families.layer_fit.memory_model import MemoryModel
from gpugauge.families.layer_fit.steps import infer_step, inputs, train_step
from gpugauge.models.stacked import blocks


class SimulatedOutOfMemory(torch.OutOfMemoryError):
    """What the simulated allocator raises: an OutOfMemoryError, as CUDA's allocator's."""


class SimAllocator:
    """A device allocator that fails like CUDA's when a budget would be exceeded.

    Blocks are freed when the Python object holding them is collected, as tensors are, so
    a run that leaves references behind (an exception's traceback, say) leaks here too.
    """

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.allocated = 0
        self.reserved = 0
        self.peak_allocated = 0
        self.peak_reserved = 0

    def alloc(self, nbytes: int, what: str) -> SimBlock:
        """A block of ``nbytes``; SimulatedOutOfMemory if it does not fit."""
        if self.allocated + nbytes > self.capacity:
            raise SimulatedOutOfMemory(
                f"simulated allocator: out of memory allocating {nbytes / MiB:.1f} MiB for "
                f"{what}; {self.allocated / MiB:.1f} of {self.capacity / MiB:.1f} MiB in use"
            )
        self.allocated += nbytes
        self.reserved = max(self.reserved, self.allocated)
        self.peak_allocated = max(self.peak_allocated, self.allocated)
        self.peak_reserved = max(self.peak_reserved, self.reserved)
        return SimBlock(self, nbytes)

    def free(self, nbytes: int) -> None:
        """Return a block's bytes (called by the block)."""
        self.allocated -= nbytes

    def empty_cache(self) -> None:
        """Give back cached blocks: reserved falls to allocated."""
        self.reserved = self.allocated


class SimBlock:
    """Bytes held on the simulated device until this object is collected."""

    def __init__(self, allocator: SimAllocator, nbytes: int) -> None:
        self._allocator = allocator
        self.nbytes = nbytes

    def __del__(self) -> None:
        self._allocator.free(self.nbytes)


# what the simulated device needs beyond the model's prediction: a stand-in for terms a
# model misses (cuDNN workspace), so the search cannot succeed by trusting the model
SIM_UNMODELLED_BYTES = 96 * MiB


@dataclass
class SimulatedBackend:
    """Probes replay :meth:`MemoryModel.plan` plus ``unmodelled`` bytes on a SimAllocator."""

    model: MemoryModel
    mode: str
    budget: int
    unmodelled: int = SIM_UNMODELLED_BYTES
    allocator: SimAllocator = field(init=False)
    label: str = field(init=False)
    emulated: bool = True

    def __post_init__(self) -> None:
        self.allocator = SimAllocator(self.budget)
        self.label = f"simulated allocator, {self.budget / GiB:.4g} GiB"

    def headroom(self) -> int:
        """Budget left."""
        return self.budget - self.allocator.reserved

    def allocated(self) -> int:
        """Bytes allocated now."""
        return self.allocator.allocated

    def reserved(self) -> int:
        """Bytes reserved now."""
        return self.allocator.reserved

    def reset_peak(self) -> None:
        """Peaks restart from now."""
        self.allocator.peak_allocated = self.allocator.allocated
        self.allocator.peak_reserved = self.allocator.reserved

    def peaks(self) -> tuple[int, int]:
        """Peaks since the reset."""
        return self.allocator.peak_allocated, self.allocator.peak_reserved

    def release(self) -> None:
        """Empty the cache."""
        self.allocator.empty_cache()

    def run(self, n: int, m: int) -> float | None:
        """Allocate the predicted peak block by block, then free it all; no time."""
        held = [
            self.allocator.alloc(b, f"{what} of N={n} M={m}")
            for what, b in self.model.plan(n, m, self.mode)
        ]
        if self.unmodelled:
            held.append(self.allocator.alloc(self.unmodelled, "unmodelled workspace"))
        del held
        return None


@dataclass
class CudaBackend:
    """Probes build and run the real model on one CUDA device, ``steps`` steps each.

    With a ``budget``, the caching allocator is capped at it for the backend's lifetime
    (``torch.cuda.set_per_process_memory_fraction``, restored on :meth:`close`): an
    emulated small GPU. Without one, the whole device is the budget.
    """

    model: MemoryModel
    mode: str
    device: str = "cuda:0"
    budget: int | None = None
    steps: int = 2
    label: str = field(init=False)
    emulated: bool = field(init=False)
    _previous_fraction: float | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        dev = torch.device(self.device)
        total = torch.cuda.get_device_properties(dev).total_memory
        name = torch.cuda.get_device_name(dev)
        self.emulated = self.budget is not None
        if self.budget is not None:
            if self.budget > total:
                raise ValueError(f"budget {self.budget} B exceeds {name}'s {total} B")
            getter = getattr(torch.cuda, "get_per_process_memory_fraction", None)
            self._previous_fraction = getter(dev) if getter else 1.0
            torch.cuda.set_per_process_memory_fraction(self.budget / total, dev)
            self.label = f"{name}, {self.budget / GiB:.4g} GiB emulated (allocator cap)"
        else:
            self.label = f"{name}, whole device ({total / GiB:.1f} GiB)"
        self._warm()

    def _warm(self) -> None:
        """One small step first: cuBLAS/cuDNN handles and cuBLAS's workspace persist."""
        x, y = inputs(self.model, self.device, batch=2)
        with torch.device(self.device):
            torch.manual_seed(0)
            net = nn.Sequential(
                *blocks(1, 3, width=64, classes=self.model.classes, device=self.device)
            )
        train_step(net, x, y)()
        infer_step(net, x)()
        torch.cuda.synchronize(self.device)
        del net, x, y

    def close(self) -> None:
        """Lift the budget again."""
        if self._previous_fraction is not None:
            torch.cuda.set_per_process_memory_fraction(self._previous_fraction, self.device)
            self._previous_fraction = None

    def headroom(self) -> int:
        """Budget minus what this process already reserved, or the device's free memory."""
        if self.budget is not None:
            return self.budget - torch.cuda.memory_reserved(self.device)
        return torch.cuda.mem_get_info(self.device)[0]

    def allocated(self) -> int:
        """torch.cuda.memory_allocated."""
        return torch.cuda.memory_allocated(self.device)

    def reserved(self) -> int:
        """torch.cuda.memory_reserved."""
        return torch.cuda.memory_reserved(self.device)

    def reset_peak(self) -> None:
        """torch.cuda.reset_peak_memory_stats."""
        torch.cuda.reset_peak_memory_stats(self.device)

    def peaks(self) -> tuple[int, int]:
        """max_memory_allocated, max_memory_reserved."""
        return (
            torch.cuda.max_memory_allocated(self.device),
            torch.cuda.max_memory_reserved(self.device),
        )

    def release(self) -> None:
        """Synchronize, then empty_cache."""
        torch.cuda.synchronize(self.device)
        torch.cuda.empty_cache()

    def run(self, n: int, m: int) -> float | None:
        """Build (N, M) on the device, run ``steps`` steps; the last one's ms (CUDA events)."""
        torch.manual_seed(0)
        net = nn.Sequential(*blocks(n, m, self.model.width, self.model.classes, device=self.device))
        x, y = inputs(self.model, self.device)
        step = train_step(net, x, y) if self.mode == "train" else infer_step(net, x)
        for _ in range(self.steps - 1):
            step()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        step()
        end.record()
        end.synchronize()
        return start.elapsed_time(end)
