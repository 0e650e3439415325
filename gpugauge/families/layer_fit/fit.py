"""layer_fit workload: how many layers fit a memory budget, and the model split over two GPUs.

Seed 004, Task-1 found by hand that 61 conv + 62 fc layers of the stacked model
(:mod:`models.stacked`) fit an 11 GB GTX 1080 Ti at input (16, 64, 112, 112) and 62 + 62
did not, then split 138 conv + 62 fc over two GPUs. This module finds the frontier itself:

- :class:`MemoryModel` predicts the bytes a step of (N, M) holds at its peak, as
  parameter, gradient, optimizer-state, activation and workspace terms, each tensor
  rounded as PyTorch's CUDA caching allocator rounds it.
- :func:`search_frontier` finds the largest N that fits, for one M, by exponential then
  binary search (galloping from a start guess: the model's prediction, or 1).
- :func:`probe` runs one (N, M) on a :class:`FitBackend`, survives an out-of-memory error,
  frees everything, and checks that allocated memory is back at its starting value.
  :class:`CudaBackend` runs the real model (under an emulated budget if one is given);
  :class:`SimulatedBackend` replays the model's allocations on a simulated allocator that
  fails like CUDA's, so a CPU run exercises the search and the OOM handling.
- :func:`plan_split` chooses where to cut the model over two devices, from the memory
  model (balance memory) and from per-block costs (balance time); :class:`SplitRunner`
  runs the naive split and a GPipe-style pipelined one.

Modes: ``train`` is zero grads (to None), forward, cross-entropy, backward, SGD step
(lr 0.01, momentum 0.9); it keeps every activation for backward. ``infer`` is a forward
in eval mode under ``torch.inference_mode``; each activation is freed as soon as the next
block has consumed it.
"""

from __future__ import annotations

import contextlib
import gc
import itertools
import math
import multiprocessing
import os
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, ClassVar, Protocol

import torch
from torch import nn

from gpugauge.families.layer_fit.graphed import GraphedSplit
from gpugauge.families.layer_fit.pipe import CopyStreams, Workers, held_parts, receive, send
from gpugauge.measure.allocator import check_allocator, use_allocator
from gpugauge.measure.environment import apply_torch_flags, torch_flags
from gpugauge.measure.kernels import device_overlap, read_trace
from gpugauge.measure.memory import allocator_events
from gpugauge.measure.profile import Schedule, profile_steps
from gpugauge.measure.timing import CudaEventClock, HostClock, RoundClock, TimingPolicy, measure
from gpugauge.models.stacked import CHANNELS, CLASSES, HEAD_WIDTH, blocks, conv_block, head_widths
from gpugauge.report.tables import fmt_bytes, render

MiB = 2**20
GiB = 2**30
LARGE_SEGMENT = 20 * MiB  # the caching allocator's segment for tensors of 1-10 MiB
MODES = ("infer", "train")
SEED_INPUT = (16, CHANNELS, 112, 112)
SEED_BUDGET = "11GiB"
SEED_METHOD = TimingPolicy(warmup_rounds=5, rounds=10)  # the seed: warm-up 5, average of 10
LR, MOMENTUM = 0.01, 0.9


# ---------------------------------------------------------------------------- budgets


def parse_budget(text: str) -> int | None:
    """'11GiB' / '512MiB' / '11GB' -> bytes; 'device' -> None (the whole device)."""
    if text == "device":
        return None
    units = {"GiB": GiB, "MiB": MiB, "GB": 10**9, "MB": 10**6}
    for unit, scale in units.items():
        if text.endswith(unit):
            number = text[: -len(unit)]
            try:
                value = float(number)
            except ValueError:
                break
            if value <= 0:
                break
            return int(value * scale)
    raise ValueError(f"budget {text!r}: give 'device' or a size such as '11GiB', '512MiB'")


def budget_label(text: str) -> str:
    """The id part of a budget: '11gib', 'device'."""
    return text.lower()


# ----------------------------------------------------------------------- memory model


def allocator_bytes(nbytes: int) -> int:
    """Bytes PyTorch's CUDA caching allocator sets aside for one tensor of ``nbytes``.

    Sizes round up to 512 B; a tensor of 10 MiB or more gets a segment of its own, rounded
    up to 2 MiB (the remainder is unusable unless it exceeds 1 MiB, and then only by
    another large tensor, which this model does not have). Tensors over 1 MiB and under
    10 MiB are carved out of 20 MiB segments: as many as fit in one (the model's are of
    one size: a micro-batch's activations), each counted at its share of the segment
    (a 6.1 MiB activation, batch 2 of the seed's, costs 6.7 MiB). Tensors of 1 MiB or
    less share 2 MiB segments and are counted at their rounded size.
    """
    if nbytes <= 0:
        return 0
    rounded = _round_up(nbytes, 512)
    if rounded <= MiB:
        return rounded
    if rounded < 10 * MiB:
        return _round_up(LARGE_SEGMENT // (LARGE_SEGMENT // rounded), 512)
    return _round_up(rounded, 2 * MiB)


def _round_up(n: int, step: int) -> int:
    """``n`` rounded up to a multiple of ``step``."""
    return -(-n // step) * step


@dataclass(frozen=True)
class Terms:
    """Predicted bytes held at the peak of one step, by term (allocator-rounded)."""

    params: int
    grads: int
    optimizer: int
    activations: int
    workspace: int
    peak_at: str  # "backward" (top of the backward pass: train), "forward" (infer)

    @property
    def total(self) -> int:
        """Sum of the terms, bytes."""
        return self.params + self.grads + self.optimizer + self.activations + self.workspace

    def as_dict(self) -> dict[str, Any]:
        """Terms and total, bytes."""
        return {**asdict(self), "total": self.total}


@dataclass(frozen=True)
class MemoryModel:
    """Analytic peak memory of the stacked model, per term; see ``docs/layer_fit.md``.

    ``train`` (SGD with momentum, steady state: grads set to None before the step,
    momentum buffers kept from the step before) peaks at the top of the backward pass,
    when every activation is still held and the head's gradients have just been made:

        params + momentum(all params) + grads(head) + (N + 3) · A + head activations + ws

    with A one conv activation (batch · 64 · H · W · 4 bytes): the input, the N ReLU
    outputs (conv i saves its input, ReLU i its output: the same tensors), and two
    gradients in flight (the one a ReLU's backward reads and the one it writes). If the
    head is so large that params + grads + momentum of all layers exceed that, the peak is
    in the optimizer step instead. ``infer`` holds the parameters, the input and at most
    two block outputs (the one being read and the one being written). ``workspace_bytes``
    is cuDNN's convolution workspace, which PyTorch shrinks when memory is short.
    """

    batch: int = SEED_INPUT[0]
    image: int = SEED_INPUT[2]
    width: int = HEAD_WIDTH
    classes: int = CLASSES
    workspace_bytes: int = 0
    itemsize: int = 4

    def activation(self, micro_batches: int = 1) -> int:
        """One conv block's output for a batch of ``batch / micro_batches``, bytes."""
        return allocator_bytes(self._per_sample * (self.batch // micro_batches))

    @property
    def _per_sample(self) -> int:
        return CHANNELS * self.image * self.image * self.itemsize

    def block_tensors(self, n: int, m: int) -> list[list[int]]:
        """Per block, the bytes of each of its parameter tensors (weight, bias)."""
        conv = [CHANNELS * CHANNELS * 9 * self.itemsize, CHANNELS * self.itemsize]
        sizes = head_widths(m, self.width, self.classes)
        head = [[a * b * self.itemsize, b * self.itemsize] for a, b in itertools.pairwise(sizes)]
        return [conv] * n + head

    def head_outputs(self, m: int) -> list[int]:
        """Per head block, the feature count of its output."""
        return head_widths(m, self.width, self.classes)[1:]

    def stage(
        self,
        n: int,
        m: int,
        first: int,
        last: int,
        mode: str,
        micro_batches: int = 1,
        held: int | None = None,
    ) -> Terms:
        """Peak of blocks ``[first, last)`` of the (N, M) model on one device.

        A stage after the first receives its input from the device before it (one tensor
        per micro-batch, which needs a gradient). ``held`` is how many micro-batches'
        activations the stage holds at its peak: all of them under GPipe (the default),
        so that activations shrink with the micro-batch size only in the two gradients in
        flight; one or two under 1F1B (:func:`held_parts`), whose stage after the first
        also holds the input of the part sent ahead.
        """
        total = n + m
        if not 0 <= first < last <= total:
            raise ValueError(f"stage [{first}, {last}) is not inside {total} blocks")
        if mode not in MODES:
            raise ValueError(f"mode {mode!r}; modes are {MODES}")
        if self.batch % micro_batches:
            raise ValueError(f"batch {self.batch} does not split into {micro_batches} parts")
        mb = self.batch // micro_batches
        held = micro_batches if held is None else held
        if not 1 <= held <= micro_batches:
            raise ValueError(f"a stage holds 1 to {micro_batches} micro-batches, not {held}")
        tensors = self.block_tensors(n, m)[first:last]
        params = sum(allocator_bytes(t) for blk in tensors for t in blk)
        head = range(max(first, n), last)
        head_params = sum(allocator_bytes(t) for j in head for t in tensors[j - first])
        convs = max(0, min(last, n) - first)
        act = self.activation(micro_batches)
        outs = self.head_outputs(m)

        def small(features: int) -> int:
            return held * allocator_bytes(mb * features * self.itemsize)

        if first == 0:
            received, image_input, input_grad = (
                allocator_bytes(self._per_sample * self.batch),
                True,
                False,
            )
        elif first <= n:
            received, image_input, input_grad = min(held + 1, micro_batches) * act, True, True
        else:
            received = min(held + 1, micro_batches) * allocator_bytes(
                mb * outs[first - 1 - n] * self.itemsize
            )
            image_input, input_grad = False, True
        labels = allocator_bytes(self.batch * 8) if last == total else 0

        if mode == "infer":
            if first != 0 or last != total or micro_batches != 1:
                raise ValueError("infer is predicted for the whole model on one device only")
            widest = max(outs) if m else 0
            acts = received + min(convs, 2) * act + 2 * allocator_bytes(mb * widest * 4)
            return Terms(params, 0, 0, acts, self.workspace_bytes, "forward")

        head_acts = sum(small(outs[j - n]) for j in head)
        if n in head:  # the pooled input of the first linear
            head_acts += small(CHANNELS)
        if last == total:  # log-softmax output kept by cross-entropy
            head_acts += small(self.classes)
        if convs:
            in_flight = 2 * act
        elif n in head and image_input and input_grad:
            in_flight = act  # the mean's gradient, expanded back to image shape
        else:
            in_flight = 0
        acts = received + labels + held * convs * act + in_flight + head_acts
        return Terms(params, head_params, params, acts, self.workspace_bytes, "backward")

    def predict(self, n: int, m: int, mode: str) -> Terms:
        """Peak of one step of the whole (N, M) model on one device."""
        return self.stage(n, m, 0, n + m, mode)

    def frontier(self, m: int, budget: int, mode: str, cap: int) -> int:
        """Largest N in [0, cap] whose predicted peak fits ``budget`` bytes (0: none does)."""
        lo, hi = 0, cap + 1
        if self.predict(1, m, mode).total > budget:
            return 0
        lo = 1
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if self.predict(mid, m, mode).total <= budget:
                lo = mid
            else:
                hi = mid
        return lo

    def plan(self, n: int, m: int, mode: str) -> list[tuple[str, int]]:
        """The predicted peak as allocations (term, bytes), in the order a step makes them.

        What the simulated backend allocates; the bytes sum to ``predict().total``.
        """
        t = self.predict(n, m, mode)
        tensors = self.block_tensors(n, m)
        out = [("params", allocator_bytes(x)) for blk in tensors for x in blk]
        if t.optimizer:
            out += [("optimizer", allocator_bytes(x)) for blk in tensors for x in blk]
        # activations as conv-sized tensors, the remainder as one small tensor
        act = self.activation()
        whole, rest = divmod(t.activations, act)
        out += [("activations", act)] * whole + ([("activations", rest)] if rest else [])
        if t.grads:
            out.append(("grads", t.grads))
        if t.workspace:
            out.append(("workspace", t.workspace))
        return out


# ------------------------------------------------------------------------------ probes


@dataclass(frozen=True)
class Probe:
    """One tried (N, M): whether it fit, its peaks above the start (bytes) and its time."""

    n: int
    m: int
    fits: bool
    peak_allocated_bytes: int
    peak_reserved_bytes: int
    step_ms: float | None  # the last step, device-timed; None for an OOM or a simulation
    wall_s: float  # the whole probe: build, steps, cleanup
    predicted_bytes: int
    error: str | None = None

    def as_dict(self) -> dict[str, Any]:
        """Plain dict for JSON."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Probe:
        """Read back :meth:`as_dict`."""
        return cls(**data)


class MemoryNotReleased(RuntimeError):
    """A probe left memory allocated: the next probe would see a smaller budget."""


class FitBackend(Protocol):
    """Where probes run: a real device, or the simulated allocator."""

    label: str
    emulated: bool

    def headroom(self) -> int:
        """Bytes a probe may still take before the budget stops it."""

    def allocated(self) -> int:
        """Bytes allocated now."""

    def reserved(self) -> int:
        """Bytes reserved by the allocator now."""

    def reset_peak(self) -> None:
        """Start a new peak window."""

    def peaks(self) -> tuple[int, int]:
        """(peak allocated, peak reserved) since :meth:`reset_peak`, absolute bytes."""

    def release(self) -> None:
        """Return cached blocks (``empty_cache``)."""

    def run(self, n: int, m: int) -> float | None:
        """Build and run (N, M); the last step's ms. Raises torch.OutOfMemoryError."""


_LIBRARY_OOM = ("CUBLAS_STATUS_ALLOC_FAILED", "CUDNN_STATUS_ALLOC_FAILED", "out of memory")


def _is_oom(err: BaseException) -> bool:
    """The caching allocator's OOM, or a CUDA library's allocation failure."""
    if isinstance(err, torch.OutOfMemoryError):
        return True
    return isinstance(err, RuntimeError) and any(s in str(err) for s in _LIBRARY_OOM)


def probe(backend: FitBackend, n: int, m: int, predicted: int) -> Probe:
    """Run (N, M) once; an out-of-memory error is a result, not a failure.

    Everything the run made is local to it, so once the error (and its traceback, which
    holds the run's frames) is dropped, it is all freed, and ``empty_cache`` returns the
    cached blocks; if anything is still allocated, a garbage collection (for reference
    cycles) comes first. Allocated memory must then equal its starting value, or
    MemoryNotReleased.
    """
    backend.release()
    start, start_reserved = backend.allocated(), backend.reserved()
    backend.reset_peak()
    t0 = time.perf_counter()
    step_ms: float | None = None
    error: str | None = None
    try:
        step_ms = backend.run(n, m)
    except (torch.OutOfMemoryError, RuntimeError) as err:
        if not _is_oom(err):
            raise
        error = (str(err).strip().splitlines() or [type(err).__name__])[0][:240]
    peak_alloc, peak_reserved = backend.peaks()
    backend.release()
    if backend.allocated() != start:  # reference cycles: collect them, then look again
        gc.collect()
        backend.release()
    wall = time.perf_counter() - t0
    left = backend.allocated() - start
    if left:
        raise MemoryNotReleased(
            f"probe N={n} M={m} ({'OOM' if error else 'fit'}) left {left} bytes allocated "
            f"({backend.allocated()} now, {start} before)"
        )
    return Probe(
        n,
        m,
        error is None,
        peak_alloc - start,
        peak_reserved - start_reserved,
        step_ms,
        wall,
        predicted,
        error,
    )


# ------------------------------------------------------------------------------ search


def probe_bound(max_n: int) -> int:
    """The most probes a search may take for one M: 2·⌈log2(N_max)⌉ + 4."""
    return 2 * math.ceil(math.log2(max(max_n, 2))) + 4


@dataclass(frozen=True)
class SearchResult:
    """The largest N that fit one M, and every probe taken to find it, in order."""

    max_n: int
    probes: tuple[Probe, ...]
    cap: int
    start: int

    @property
    def censored(self) -> bool:
        """The cap itself fit: the true frontier is at least ``max_n``."""
        return self.max_n == self.cap

    @property
    def bound(self) -> int:
        """The probe budget this result had to keep."""
        return probe_bound(self.max_n)

    def as_dict(self) -> dict[str, Any]:
        """Plain dict for JSON."""
        return {
            "max_n": self.max_n,
            "probe_count": len(self.probes),
            "probe_bound": self.bound,
            "cap": self.cap,
            "censored": self.censored,
            "start": self.start,
            "probes": [p.as_dict() for p in self.probes],
        }


def search_frontier(
    try_n: Callable[[int], Probe],
    cap: int,
    start: int = 1,
    on_probe: Callable[[Probe], object] | None = None,
) -> SearchResult:
    """Largest N in [1, cap] for which ``try_n(N).fits`` (0 if even N = 1 does not fit).

    Gallops from ``start``: up by 1, 2, 4, ... past the last fit until one does not fit, or
    down by 1, 2, 4, ... until one fits; then bisects the gap. Fitting must be monotone in
    N (more layers never need less memory). From start 1 that is the exponential search
    1, 2, 4, 8, ...; from a good guess it takes a few probes either side of it.
    """
    if cap < 1:
        raise ValueError(f"cap must be >= 1, got {cap}")
    start = min(max(start, 1), cap)
    probes: list[Probe] = []

    def fits(n: int) -> bool:
        p = try_n(n)
        probes.append(p)
        if on_probe is not None:
            on_probe(p)
        return p.fits

    lo, hi = 0, cap + 1  # largest known fit (0: none), smallest known miss
    step = 1
    if fits(start):
        lo = start
        while lo < cap:
            n = min(lo + step, cap)
            if not fits(n):
                hi = n
                break
            lo, step = n, step * 2
    else:
        hi = start
        while hi > 1:
            n = max(hi - step, 1)
            if fits(n):
                lo = n
                break
            hi, step = n, step * 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid
    return SearchResult(lo, tuple(probes), cap, start)


# ----------------------------------------------------------------------------- backends


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


def _train_step(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> Callable[[], object]:
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


def _infer_step(model: nn.Module, x: torch.Tensor) -> Callable[[], object]:
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
        _train_step(net, x, y)()
        _infer_step(net, x)()
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
        step = _train_step(net, x, y) if self.mode == "train" else _infer_step(net, x)
        for _ in range(self.steps - 1):
            step()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        step()
        end.record()
        end.synchronize()
        return start.elapsed_time(end)


# ------------------------------------------------------------------------------- cases


@dataclass(frozen=True)
class FitCase:
    """One frontier search: mode, head size M, budget and where it runs.

    On ``cpu`` the search runs against the memory model on the simulated allocator.
    ``start`` is 'model' (gallop from the model's predicted N) or 'one' (exponential from 1).
    """

    family: ClassVar[str] = "layer_fit"
    mode: str
    fc: int
    budget: str  # "11GiB" or "device"
    device: str  # "cuda" | "cpu" (simulated)
    cap: int
    start: str = "model"
    batch: int = SEED_INPUT[0]
    image: int = SEED_INPUT[2]
    width: int = HEAD_WIDTH
    profile: str = "seed"

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"mode {self.mode!r}; modes are {MODES}")
        if self.start not in ("model", "one"):
            raise ValueError(f"start {self.start!r}: 'model' or 'one'")
        if self.device == "cpu" and self.budget == "device":
            raise ValueError("a simulated search needs a budget, not 'device'")
        parse_budget(self.budget)

    @property
    def id(self) -> str:
        """``fit-train-m62-11gib-cuda``; simulated: ``fit-train-m62-11gib-sim-cpu``."""
        where = "sim-cpu" if self.device == "cpu" else self.device
        start = "" if self.start == "model" else "-from1"
        return f"fit-{self.mode}-m{self.fc}-{budget_label(self.budget)}{start}-{where}"

    @property
    def memory_model(self) -> MemoryModel:
        """The analytic model at this case's shapes."""
        return MemoryModel(batch=self.batch, image=self.image, width=self.width)

    @property
    def budget_bytes(self) -> int | None:
        """The budget in bytes; None for the whole device."""
        return parse_budget(self.budget)

    def as_dict(self) -> dict[str, Any]:
        """Plain dict for JSON."""
        return asdict(self)


@contextlib.contextmanager
def backend_for(case: FitCase) -> Iterator[FitBackend]:
    """The case's backend, closed (budget lifted) afterwards."""
    if case.device == "cpu":
        assert case.budget_bytes is not None
        yield SimulatedBackend(case.memory_model, case.mode, case.budget_bytes)
        return
    backend = CudaBackend(case.memory_model, case.mode, "cuda:0", case.budget_bytes)
    try:
        yield backend
    finally:
        backend.close()


def run_search(
    case: FitCase, backend: FitBackend, on_probe: Callable[[Probe], object] | None = None
) -> dict[str, Any]:
    """Search the case's frontier on ``backend``; the result with prediction and error."""
    model = case.memory_model
    backend.release()  # cached blocks (the warm-up's) are room a probe can use
    headroom = backend.headroom()
    predicted = model.frontier(case.fc, headroom, case.mode, case.cap)
    start = predicted if case.start == "model" else 1

    def try_n(n: int) -> Probe:
        return probe(backend, n, case.fc, model.predict(n, case.fc, case.mode).total)

    result = search_frontier(try_n, case.cap, max(start, 1), on_probe)
    measured = result.max_n
    return {
        **result.as_dict(),
        "predicted_max_n": predicted,
        "error_layers": predicted - measured,
        "error_fraction": None if measured == 0 else (predicted - measured) / measured,
        "headroom_bytes": headroom,
        "backend": backend.label,
        "emulated": backend.emulated,
        "budget": case.budget,
        "mode": case.mode,
        "fc": case.fc,
        "terms_at_frontier": model.predict(max(measured, 1), case.fc, case.mode).as_dict(),
        "within_bound": len(result.probes) <= result.bound,
    }


def search_case(case: FitCase, isolate: bool | None = None) -> dict[str, Any]:
    """:func:`run_search` of ``case``; on a GPU (or with ``isolate``) in a fresh process.

    A GPU search runs out of memory on purpose, and a process remembers that: see
    :func:`in_fresh_process`.
    """
    if not (case.device != "cpu" if isolate is None else isolate):
        return _search(case)
    return in_fresh_process(f"{case.id}: the search", _search, case)


def _search(case: FitCase) -> dict[str, Any]:
    with backend_for(case) as backend:
        return run_search(case, backend)


def in_fresh_process(what: str, fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)`` in a spawned process with this one's numerics flags (cuDNN, TF32).

    For work that runs out of memory on purpose (a frontier search, fitting a cut). A
    process remembers it: each thread keeps the first cuDNN plan that ran for a
    convolution's shapes (the autograd engine's threads, one per device, live as long as
    the process), and a plan whose workspace could not be allocated is skipped for a
    slower one. After a case had run out of memory on its device, the naive split read
    220 ms on two H200s; alone, 147 ms (its own attempts' fallbacks; fitted this way, 100
    ms: docs/layer_fit.md). The cached memory is returned
    first (a whole-device budget is the free memory); ``fn``'s error is raised here, and
    the child's death as a RuntimeError naming ``what``.
    """
    if torch.cuda.is_available():
        gc.collect()
        torch.cuda.empty_cache()
    spawn = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=1, mp_context=spawn) as pool:
        try:
            return pool.submit(_child, torch_flags(), fn, args).result()
        except BrokenProcessPool as err:
            raise RuntimeError(f"{what}: its process died ({err})") from err


def _child(flags: dict[str, Any], fn: Callable[..., Any], args: tuple[Any, ...]) -> Any:
    """:func:`in_fresh_process`'s child: the parent's numerics flags, then the work."""
    apply_torch_flags(flags)
    return fn(*args)


# head sizes searched at 11 GiB: the seed's 61 and 62, a small head, and none to speak of
SEED_HEADS = (1, 32, 61, 62)


def cases(profile: str) -> list[FitCase]:
    """Searches of a profile: CPU cases run on the simulated allocator at the seed's shapes."""
    sim = [FitCase("train", m, SEED_BUDGET, "cpu", 4096, profile=profile) for m in SEED_HEADS]
    sim += [
        FitCase("train", 62, SEED_BUDGET, "cpu", 4096, start="one", profile=profile),
        FitCase("infer", 62, SEED_BUDGET, "cpu", 4096, profile=profile),
        FitCase("infer", 250, SEED_BUDGET, "cpu", 4096, profile=profile),
    ]
    gpu = [FitCase("train", 62, SEED_BUDGET, "cuda", 4096, profile=profile)]
    if profile == "smoke":
        return sim + gpu
    gpu = [FitCase("train", m, SEED_BUDGET, "cuda", 4096, profile=profile) for m in SEED_HEADS]
    gpu += [
        FitCase("train", 62, SEED_BUDGET, "cuda", 4096, start="one", profile=profile),
        FitCase("infer", 62, SEED_BUDGET, "cuda", 4096, profile=profile),
        FitCase("infer", 250, SEED_BUDGET, "cuda", 4096, profile=profile),
        FitCase("train", 62, "device", "cuda", 4096, profile=profile),
        FitCase("infer", 62, "device", "cuda", 4096, profile=profile),
    ]
    if profile == "full":
        gpu += [
            FitCase("train", m, SEED_BUDGET, "cuda", 4096, profile=profile) for m in (8, 16, 48, 70)
        ]
    return sim + gpu


# ------------------------------------------------------------------------------- split


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


@dataclass(frozen=True)
class Cut:
    """A split after block ``k``: device 0 holds blocks [0, k), device 1 the rest."""

    k: int
    n: int
    m: int
    bytes: tuple[int, int]  # predicted peak per device
    cost: tuple[float, float]  # per-device step cost (BlockCosts units)

    @property
    def layers(self) -> tuple[tuple[int, int], tuple[int, int]]:
        """(conv, fc) blocks on each device."""
        c0 = min(self.k, self.n)
        return (c0, self.k - c0), (self.n - c0, self.m - (self.k - c0))

    def memory_share(self, budgets: tuple[float, float]) -> float:
        """The fuller device's predicted peak / its budget."""
        return max(b / cap for b, cap in zip(self.bytes, budgets, strict=True))

    def time_share(self) -> float:
        """The slower device's share of the total cost (0.5 = balanced)."""
        return max(self.cost) / sum(self.cost)

    def as_dict(self) -> dict[str, Any]:
        """Plain dict for JSON."""
        return {**asdict(self), "layers": self.layers}


class SplitError(ValueError):
    """No cut puts the model within both devices' budgets."""


@dataclass(frozen=True)
class SplitPlan:
    """Where to cut (N, M) over two devices: by memory, by time, and the one chosen.

    ``chosen`` is the most time-balanced cut whose predicted peaks fit both budgets (with
    ``margin`` of each budget left free); ``limiting`` is the device with less predicted
    headroom under it.
    """

    n: int
    m: int
    micro_batches: int
    budgets: tuple[float, float]
    by_memory: Cut
    by_time: Cut
    chosen: Cut
    costs: BlockCosts
    margin: float
    schedule: str = "naive"

    @property
    def predicted_step(self) -> float:
        """The chosen cut's step by the bubble model, in the costs' units (ms if measured).

        Naive: one stage after the other. Pipelined over two stages whose micro-batch
        costs are a >= b: m · a + b, the slower stage busy m slots and the other's one
        slot of fill or drain (GPipe's bubble, which 1F1B shares; (m + 1) · a when the cut
        is balanced), with no launch gaps and no time for the copies: the ideal the
        schedules can approach.
        """
        cost = self.chosen.cost  # one micro-batch's, per stage
        if self.schedule in PIPELINED:
            return self.micro_batches * max(cost) + min(cost)
        return sum(cost)

    @property
    def limiting(self) -> int:
        """Index of the device closer to its budget under the chosen cut."""
        b, caps = self.chosen.bytes, self.budgets
        return 0 if b[0] / caps[0] >= b[1] / caps[1] else 1

    def as_dict(self) -> dict[str, Any]:
        """Plain dict for JSON."""
        return {
            "n": self.n,
            "m": self.m,
            "micro_batches": self.micro_batches,
            "budgets": list(self.budgets),
            "by_memory": self.by_memory.as_dict(),
            "by_time": self.by_time.as_dict(),
            "chosen": self.chosen.as_dict(),
            "limiting_device": self.limiting,
            "costs": self.costs.as_dict(),
            "margin": self.margin,
            "schedule": self.schedule,
            "predicted_step": self.predicted_step,
        }


def split_peaks(
    model: MemoryModel, n: int, m: int, cut: int, micro_batches: int, schedule: str
) -> tuple[int, int]:
    """Predicted peak bytes of each device when (N, M) is cut after block ``cut``."""
    held = held_parts(schedule, micro_batches)
    return (
        model.stage(n, m, 0, cut, "train", micro_batches, held[0]).total,
        model.stage(n, m, cut, n + m, "train", micro_batches, held[1]).total,
    )


def plan_split(
    model: MemoryModel,
    n: int,
    m: int,
    budgets: tuple[float, float],
    costs: BlockCosts,
    micro_batches: int = 1,
    margin: float = 0.02,
    schedule: str = "naive",
) -> SplitPlan:
    """Every cut's predicted per-device peak and cost; the balanced ones and the chosen one.

    Peaks are the ``schedule``'s at ``micro_batches`` parts (:func:`held_parts`); costs are
    per step, so measure them at the micro-batch size when they are to balance a pipeline.
    """
    per_block = costs.per_block(model, n, m)
    cuts = [
        Cut(
            k,
            n,
            m,
            split_peaks(model, n, m, k, micro_batches, schedule),
            (sum(per_block[:k]), sum(per_block[k:])),
        )
        for k in range(1, n + m)
    ]
    if not cuts:
        raise SplitError(f"(N={n}, M={m}) has one block: nothing to split")
    by_memory = min(cuts, key=lambda c: c.memory_share(budgets))
    by_time = min(cuts, key=lambda c: (c.time_share(), c.memory_share(budgets)))
    room = tuple(cap * (1 - margin) for cap in budgets)
    feasible = [c for c in cuts if all(b <= r for b, r in zip(c.bytes, room, strict=True))]
    if not feasible:
        raise SplitError(
            f"(N={n}, M={m}) fits no cut within {[f'{b / GiB:.3g} GiB' for b in budgets]}: "
            f"the most memory-balanced cut needs {by_memory.bytes} bytes"
        )
    chosen = min(feasible, key=lambda c: (c.time_share(), c.memory_share(budgets)))
    return SplitPlan(
        n, m, micro_batches, budgets, by_memory, by_time, chosen, costs, margin, schedule
    )


SCHEDULES = ("single", "naive", "gpipe", "1f1b")
PIPELINED = ("gpipe", "1f1b")


@dataclass(frozen=True)
class SplitCase:
    """One timed run of the model over two devices (or, ``single``, the largest on one).

    ``naive``: device 0's blocks, a copy, device 1's blocks, loss, backward, step: one
    device works at a time. ``gpipe``: the batch in ``micro_batches`` parts, all forwards
    first (fill), then all backwards (drain), one optimizer step; the devices overlap.
    ``1f1b``: the same parts, each part's backward issued right after its forward, so a
    stage holds one or two parts' activations instead of all (:func:`held_parts`).
    ``single``: the largest N that fits one device under the same budget (the frontier
    search's answer) with the same head, for comparison.
    """

    family: ClassVar[str] = "layer_fit"
    schedule: str
    conv: int
    fc: int
    micro_batches: int = 1
    budget: str = SEED_BUDGET  # per device
    device: str = "cuda"  # "cuda" (cuda:0 and cuda:1) | "cpu" (a smoke run of the code)
    batch: int = SEED_INPUT[0]
    image: int = SEED_INPUT[2]
    width: int = HEAD_WIDTH
    profile: str = "seed"
    allocator: str = "default"  # gpugauge.measure.allocator.ALLOCATORS; "expandable": "-expseg"
    graphs: bool = (
        False  # steps replayed from CUDA graphs (gpugauge.families.layer_fit.graphed): "-graphs"
    )

    def __post_init__(self) -> None:
        if self.schedule not in SCHEDULES:
            raise ValueError(f"schedule {self.schedule!r}; schedules are {SCHEDULES}")
        if self.graphs and (self.schedule == "single" or self.device != "cuda"):
            raise ValueError("CUDA graphs replay a split over two CUDA devices only")
        check_allocator(self.allocator)
        if (self.schedule in PIPELINED) != (self.micro_batches > 1):
            raise ValueError(f"{PIPELINED} take micro_batches > 1; the others take 1")
        if self.batch % self.micro_batches:
            raise ValueError(f"batch {self.batch} does not split into {self.micro_batches}")
        parse_budget(self.budget)

    @property
    def devices(self) -> tuple[str, ...]:
        """cuda:0 and cuda:1 (single: cuda:0 only); on a CPU, 'cpu' twice."""
        count = 1 if self.schedule == "single" else 2
        if self.device == "cpu":
            return ("cpu",) * count
        return tuple(f"cuda:{i}" for i in range(count))

    @property
    def id(self) -> str:
        """``split-gpipe4-c138-m62-11gib-expseg-cuda``; ``split-single-m62-11gib-cuda``."""
        pipelined = self.schedule in PIPELINED
        sched = f"{self.schedule}{self.micro_batches}" if pipelined else self.schedule
        size = "" if self.schedule == "single" else f"c{self.conv}-"
        small = (
            "" if (self.batch, self.image) == SEED_INPUT[::2] else f"b{self.batch}-{self.image}px-"
        )
        alloc = "-expseg" if self.allocator == "expandable" else ""
        graphs = "-graphs" if self.graphs else ""
        where = f"{budget_label(self.budget)}{alloc}{graphs}-{self.device}"
        return f"split-{sched}-{size}m{self.fc}-{small}{where}"

    @property
    def memory_model(self) -> MemoryModel:
        """The analytic model at this case's shapes."""
        return MemoryModel(batch=self.batch, image=self.image, width=self.width)

    def predicted(self, n: int, cut: int) -> list[int]:
        """Predicted peak bytes per device of this case's schedule with ``n`` conv blocks."""
        model, m = self.memory_model, self.fc
        if self.schedule == "single":
            return [model.predict(n, m, "train").total]
        return list(split_peaks(model, n, m, cut, self.micro_batches, self.schedule))

    @property
    def fit_case(self) -> FitCase:
        """The search whose answer a ``single`` case runs."""
        return FitCase("train", self.fc, self.budget, self.device, 4096, profile=self.profile)

    def as_dict(self) -> dict[str, Any]:
        """Plain dict for JSON."""
        return {**asdict(self), "devices": list(self.devices)}


def split_cases(profile: str) -> list[SplitCase]:
    """The seed's split (138 conv + 62 fc, 11 GiB per GPU), naive and pipelined.

    The naive split with PyTorch's default allocator (the seed's), then naive, GPipe and
    1F1B at 2, 4 and 8 micro-batches with expandable segments: the default allocator's
    fragmentation (on whole H200s 2.8 GiB reserved beyond allocated on cuda:1 for GPipe
    ×2, 0.9 GiB for the naive split) decides the cut more than the schedule's own memory
    does (GPipe ×2 fitted at cut 117 with it under 11 GiB, at 85 without). Then naive and
    the pipelines at 2 and 4 replayed from CUDA graphs: issued op by op, the pipelines
    are as fast as the host (:mod:`gpugauge.families.layer_fit.graphed`).
    Tiny CPU runs in smoke. The full profile adds 16 micro-batches, the pipelines with the
    default allocator, and the split on the whole devices (no budget), where the schedules
    run without memory pressure.
    """
    # ``single`` last: its model fills cuda:0 to the cap, and the slower cuDNN plans it
    # falls back to there would serve the naive split's cuda:0 (same shapes) after it
    grow = dict(profile=profile, allocator="expandable")
    graphed = dict(grow, graphs=True)
    seed = [
        SplitCase("naive", 138, 62, profile=profile),
        SplitCase("naive", 138, 62, **grow),
        *(SplitCase(s, 138, 62, mb, **grow) for s in PIPELINED for mb in (2, 4, 8)),
        SplitCase("naive", 138, 62, **graphed),
        *(SplitCase(s, 138, 62, mb, **graphed) for s in PIPELINED for mb in (2, 4)),
    ]
    single = SplitCase("single", 0, 62, profile=profile)
    if profile == "smoke":
        tiny = dict(budget="64MiB", device="cpu", batch=2, image=8, width=64, profile=profile)
        small = [SplitCase(s, 4, 3, 2, **tiny) for s in PIPELINED]
        return [SplitCase("naive", 4, 3, **tiny), *small, *seed, single]
    if profile == "full":
        seed += [SplitCase(s, 138, 62, 16, **grow) for s in PIPELINED]
        seed += [SplitCase(s, 138, 62, mb, profile=profile) for s in PIPELINED for mb in (2, 4)]
        # the same split with the whole devices: the schedules without memory pressure
        free = dict(budget="device", profile=profile)
        seed += [
            SplitCase("naive", 138, 62, **free),
            *(SplitCase(s, 138, 62, mb, **free) for s in PIPELINED for mb in (2, 4)),
        ]
    return [*seed, single]


def prime_conv_plans(model: MemoryModel, devices: Sequence[str], batch: int) -> None:
    """Run a conv block's training step at ``batch`` on each CUDA device, before a budget.

    The first convolution of given shapes fixes its cuDNN plan for the thread that ran it.
    Run first inside a case's budget, at its peak, a backward's workspace may not fit and
    cuDNN keeps a slower plan on that device's autograd thread, for every later step and
    case. Primed on the whole device, the backward plans (and the forward plans of this
    thread, which issues every forward unless a pipeline runs with ``threads``) are the
    ones cuDNN's heuristic ranks first. A plan that falls back later (its workspace not
    fitting) is kept: OOM counts show it.
    """
    for d in dict.fromkeys(devices):
        if not d.startswith("cuda"):
            continue
        net = conv_block(d)
        x = torch.randn(batch, CHANNELS, model.image, model.image, device=d, requires_grad=True)
        net(x).sum().backward()
        torch.cuda.synchronize(d)
        del net, x


def round_clock(devices: Sequence[str]) -> RoundClock:
    """The suite's clock for a round over ``devices``: CUDA events, or the host clock."""
    return CudaEventClock(tuple(devices)) if devices[0].startswith("cuda") else HostClock()


class SplitRunner:
    """The (N, M) model cut after block ``cut`` over two devices, with its steps.

    ``single`` runs are the same object with both devices equal and the cut at the end.
    """

    def __init__(
        self,
        model: MemoryModel,
        n: int,
        m: int,
        cut: int,
        devices: Sequence[str],
        threads: bool = False,
        graphs: bool = False,
    ) -> None:
        d0, d1 = (devices[0], devices[-1])
        self.devices = (d0, d1)
        # steps replayed from CUDA graphs (gpugauge.families.layer_fit.graphed; threads do not
        # apply: the host issues a few launches a step); ``graphed`` is the last built
        self.graphs = graphs
        self.graphed: GraphedSplit | None = None
        # pipelines: all issued from this thread, whose cuDNN forward plans were primed on
        # the whole device, or each stage from a thread of its own (Workers), whose plans
        # are chosen in its first step, under the case's budget. Timed, neither won on
        # two H200s (docs/gpu-runs.md, run 34).
        self.threads = threads
        torch.manual_seed(0)
        placement = [d0] * cut + [d1] * (n + m - cut)
        bl = blocks(n, m, model.width, model.classes, device=placement)
        self.stages = (nn.Sequential(*bl[:cut]), nn.Sequential(*bl[cut:]))
        self.cut, self.n, self.m = cut, n, m
        x, y = inputs(model, d0)
        self.x, self.y = x, y.to(d1)
        params = [p for s in self.stages for p in s.parameters()]
        self.opt = torch.optim.SGD(params, lr=LR, momentum=MOMENTUM)
        self.loss_fn = nn.CrossEntropyLoss()
        for s in self.stages:
            s.train()

    def naive(self) -> Callable[[], object]:
        """One step, stage after stage."""
        s0, s1 = self.stages
        d1 = self.devices[1]

        def step() -> object:
            self.opt.zero_grad(set_to_none=True)
            loss = self.loss_fn(s1(s0(self.x).to(d1)), self.y)
            loss.backward()
            self.opt.step()
            return loss

        return step

    def gpipe(self, micro_batches: int) -> Callable[[], object]:
        """One step over ``micro_batches`` parts: fill (every forward), drain (backward).

        The fill runs in clock cycles, torchgpipe's: in cycle k, device 0's part k's
        forward, then device 1's part k - 1's (from a thread each with ``threads``:
        :class:`Workers`). Each part crosses to
        device 1 by :func:`~gpugauge.families.layer_fit.pipe.send` (a copy on side streams that
        waits for its producer only). The backward of all parts is one autograd call,
        whose engine issues each device's nodes from a thread of its own, so the drain
        overlaps too. Each part's loss is scaled by 1 / parts: the gradients are the full
        batch's.
        """
        return self._cycles(micro_batches, backward_each=False)

    def one_f_one_b(self, micro_batches: int) -> Callable[[], object]:
        """One step over ``micro_batches`` parts, one forward then one backward (1F1B).

        The schedule of PipeDream-Flush (``Schedule1F1B`` in ``torch.distributed.pipelining``):
        device 0 runs one part ahead, and each part's backward is issued as soon as its
        forward is, so device 0 holds the activations of two parts and device 1 of one,
        where GPipe holds all of them. Same gradients as GPipe and the naive split, same
        bubble as GPipe; the memory it frees lets the cut move toward time balance. In
        cycle k, device 0's part k's forward, then device 1's part k - 1's forward and
        backward (whose device-0 half the autograd engine's thread issues).
        """
        return self._cycles(micro_batches, backward_each=True)

    def _cycles(self, micro_batches: int, backward_each: bool) -> Callable[[], object]:
        """GPipe's step, or with ``backward_each`` 1F1B's, in clock cycles."""
        s0, s1 = self.stages
        d1, streams, workers = self.devices[1], CopyStreams(), Workers(self.devices, self.threads)
        xs, ys = self.x.chunk(micro_batches), self.y.chunk(micro_batches)

        def step() -> object:
            self.opt.zero_grad(set_to_none=True)
            sent: list[torch.Tensor | None] = []
            losses: list[torch.Tensor] = []

            def forward0(i: int) -> None:
                sent.append(send(s0(xs[i]), d1, streams, i))

            def stage1(i: int) -> None:
                loss = self.loss_fn(s1(receive(sent[i], streams, i)), ys[i]) / micro_batches
                if backward_each:
                    loss.backward()
                    sent[i] = None  # part i's input on device 1 is no longer needed
                    loss = loss.detach()
                losses.append(loss)

            for k in range(micro_batches + 1):
                tasks = [(0, partial(forward0, k))] if k < micro_batches else []
                if k:
                    tasks.append((1, partial(stage1, k - 1)))
                workers.run(tasks)
            if not backward_each:
                torch.autograd.backward(losses)
            self.opt.step()
            return losses

        return step

    def schedule(self, name: str, micro_batches: int) -> Callable[[], object]:
        """The step of ``name`` (one of :data:`SCHEDULES`; ``single`` is the naive step).

        With ``graphs`` the step replays CUDA graphs captured here (naive, GPipe, 1F1B).
        """
        if self.graphs:
            self.graphed = GraphedSplit(
                self.stages,
                self.x,
                self.y,
                self.loss_fn,
                self.opt,
                micro_batches,
                held_parts(name, micro_batches),  # a graph slot per part in flight
            )
            return self.graphed.step(name)
        if name == "gpipe":
            return self.gpipe(micro_batches)
        if name == "1f1b":
            return self.one_f_one_b(micro_batches)
        if name in ("naive", "single"):
            return self.naive()
        raise ValueError(f"schedule {name!r}; schedules are {SCHEDULES}")

    def stage_steps(self) -> tuple[Callable[[], object], Callable[[], object]]:
        """Each device's part alone (forward + backward, no step), as the seed timed them."""
        s0, s1 = self.stages
        d1 = self.devices[1]
        with torch.no_grad():
            h = s0(self.x)
        grad_h = torch.randn_like(h)
        h1 = h.to(d1).requires_grad_()
        del h

        def part0() -> object:
            self.opt.zero_grad(set_to_none=True)
            out = s0(self.x)
            out.backward(grad_h)
            return out

        def part1() -> object:
            self.opt.zero_grad(set_to_none=True)
            h1.grad = None
            loss = self.loss_fn(s1(h1), self.y)
            loss.backward()
            return loss

        return part0, part1

    def gradients(self) -> list[torch.Tensor]:
        """Every parameter's gradient, on the CPU (for comparing schedules)."""
        return [
            p.grad.detach().cpu() for s in self.stages for p in s.parameters() if p.grad is not None
        ]


def settle(
    step: Callable[[], object], devices: Sequence[str], least: int = 3, most: int = 12
) -> int:
    """Run ``step`` until no CUDA device's reserved memory grew for two steps; the count.

    One step that fits does not mean the timed rounds will: the first adds the momentum
    buffers, later ones the caching allocator's fragmentation (a GPipe step on two H200s
    ran 3 steps and then ran out of memory in its warm-up). At least ``least`` steps, at
    most ``most``; on a CPU, ``least``.
    """
    cuda = [d for d in dict.fromkeys(devices) if d.startswith("cuda")]
    seen: list[tuple[int, ...]] = []
    for i in range(1, most + 1):
        step()
        if not cuda:
            if i >= least:
                return i
            continue
        seen.append(tuple(torch.cuda.memory_reserved(d) for d in cuda))
        if i >= least and len(seen) >= 3 and seen[-1] == seen[-2] == seen[-3]:
            return i
    return most


def fit_attempts(
    n: int,
    m: int,
    cut: int,
    toward: int,
    attempt: Callable[[int, int], dict[str, Any]],
    tries: int = 6,
    shift: int = 2,
) -> list[dict[str, Any]]:
    """Try ``attempt(n, cut)`` at ``cut``, moving it after each miss; every attempt made.

    The model's prediction may miss a term (a workspace, fragmentation); rather than fail,
    each miss (an attempt whose ``"fits"`` is false) moves the cut so that the device
    ``toward`` (0 or 1) gets more blocks: ``shift`` blocks, then twice as many each time
    (2, 4, 8, 16, ... away, the last try at the end of the range), so that a miss of a few
    hundred MiB is found in a few tries. A model on one device (``cut == n + m``) sheds a
    conv block instead (its search's answer fitted once, near the edge). At most
    ``tries``; the last attempt returned fits, with its ``conv`` count and ``cut``.
    """
    attempts: list[dict[str, Any]] = []
    single = cut == n + m
    origin, move = cut, shift
    for _ in range(tries):
        result = attempt(n, cut)
        attempts.append({"conv": n, "cut": cut, **result})
        if result["fits"]:
            return attempts
        if single:
            n, cut = n - 1, cut - 1
            if n < 1:
                break
            continue
        edge = n + m - 1 if toward == 0 else 1
        if cut == edge:
            break
        wanted = origin + move if toward == 0 else origin - move
        cut = min(wanted, edge) if toward == 0 else max(wanted, edge)
        move *= 2
    raise SplitError(f"no cut fitted after {len(attempts)} attempts: {attempts}")


def fitted_runner(
    case: SplitCase, n: int, cut: int, toward: int, tries: int = 6, shift: int = 2
) -> tuple[SplitRunner, Callable[[], object], list[dict[str, Any]]]:
    """``case``'s runner with ``n`` conv blocks, settled at ``cut`` or, after an OOM, another.

    The step runs until its reserved memory stops growing (:func:`settle`); an OOM frees
    the runner and moves the cut (:func:`fit_attempts`). Every attempt is returned, the
    last with the ``conv`` count, ``cut`` and ``steps`` that fitted.
    """
    built: list[tuple[SplitRunner, Callable[[], object]]] = []

    def attempt(n: int, cut: int) -> dict[str, Any]:
        try:
            runner, step, steps = _settled(case, n, cut)
        except torch.OutOfMemoryError as err:
            error = _first_line(err)
        else:
            built.append((runner, step))
            return {"fits": True, "steps": steps}
        gc.collect()
        if case.devices[0].startswith("cuda"):
            torch.cuda.empty_cache()
        return {"fits": False, "error": error}

    attempts = fit_attempts(n, case.fc, cut, toward, attempt, tries, shift)
    runner, step = built[-1]
    return runner, step, attempts


def _settled(case: SplitCase, n: int, cut: int) -> tuple[SplitRunner, Callable[[], object], int]:
    """``case``'s runner at ``cut``, its schedule's step, and the steps it took to settle."""
    runner = SplitRunner(case.memory_model, n, case.fc, cut, case.devices, graphs=case.graphs)
    step = runner.schedule(case.schedule, case.micro_batches)
    return runner, step, settle(step, case.devices)


def _first_line(err: BaseException) -> str:
    """An error's first line, at most 200 characters: enough to say which device and how much."""
    return str(err).splitlines()[0][:200]


def fit_cut(case: SplitCase, n: int, cut: int, toward: int, tries: int = 8) -> list[dict[str, Any]]:
    """:func:`fit_attempts` with each attempt in a fresh process (``case``'s budget, allocator).

    A cut fits when its steps settle without any out-of-memory error, raised or caught: a
    caught one is a cuDNN plan whose workspace did not fit, replaced by a slower one for
    the rest of that process (:func:`in_fresh_process`). Hence a process per attempt, and
    this one builds only the cut that fitted; ``tries`` is two more than in-process, as
    misses are more (GPipe ×2 on two H200s needed 6 tries by raised errors alone). The
    one-device case (``single``, the largest model that fits, as the search counts it)
    fails on a raised error only. Each attempt records its OOMs per device (``ooms``,
    raised and caught) and ``"where": "child"``.
    """

    def attempt(n: int, cut: int) -> dict[str, Any]:
        what = f"a {case.schedule} split's attempt at cut {cut}"
        return {**in_fresh_process(what, _attempt, case, n, cut), "where": "child"}

    return fit_attempts(n, case.fc, cut, toward, attempt, tries)


def _attempt(case: SplitCase, n: int, cut: int) -> dict[str, Any]:
    """:func:`fit_cut`'s attempt: plans primed, then the step settled under the budget."""
    devices = case.devices
    prime_conv_plans(case.memory_model, devices, case.batch // case.micro_batches)
    cuda = [d for d in dict.fromkeys(devices) if d.startswith("cuda")]
    with budgets(devices, parse_budget(case.budget), case.allocator):
        before = allocator_events(cuda)
        try:
            steps = _settled(case, n, cut)[2]
            result: dict[str, Any] = {"fits": True, "steps": steps}
        except torch.OutOfMemoryError as err:
            result = {"fits": False, "error": _first_line(err)}
        after = allocator_events(cuda)
    ooms = [a["num_ooms"] - b["num_ooms"] for b, a in zip(before, after, strict=True)]
    strict = case.schedule != "single"  # the largest model on one device fits as searched
    if result["fits"] and strict and any(ooms):  # every one of them was caught
        result = {"fits": False, "error": f"cuDNN plans fell back: OOMs caught {ooms}"}
    return {**result, "ooms": ooms}  # per CUDA device, raised and caught


@contextlib.contextmanager
def budgets(
    devices: Sequence[str], budget: int | None, allocator: str = "default"
) -> Iterator[tuple[float, ...]]:
    """Cap each CUDA device's caching allocator at ``budget`` bytes (emulated), then lift it.

    Inside, the allocator is ``allocator`` (:func:`~gpugauge.measure.allocator.use_allocator`)
    with nothing cached from before. Yields each device's budget for the model (the cap,
    or its free memory without one; on a CPU the budget as given, else the machine's
    memory: nothing is enforced there).
    """
    with use_allocator(allocator, devices):
        unique = list(dict.fromkeys(devices))
        if not unique[0].startswith("cuda"):
            ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
            yield tuple(float(budget or ram) for _ in devices)
            return
        previous = {}
        getter = getattr(torch.cuda, "get_per_process_memory_fraction", None)
        try:
            out = []
            for d in unique:
                total = torch.cuda.get_device_properties(d).total_memory
                if budget is not None:
                    if budget > total:
                        raise ValueError(f"budget {budget} B exceeds {d}'s {total} B")
                    previous[d] = getter(torch.device(d)) if getter else 1.0
                    torch.cuda.set_per_process_memory_fraction(budget / total, d)
            for d in devices:
                if budget is not None:
                    out.append(float(budget - torch.cuda.memory_reserved(d)))
                else:
                    out.append(float(torch.cuda.mem_get_info(d)[0]))
            yield tuple(out)
        finally:
            for d, fraction in previous.items():
                torch.cuda.set_per_process_memory_fraction(fraction, d)


def check_pipeline(
    model: MemoryModel,
    n: int,
    m: int,
    cut: int,
    devices: Sequence[str],
    schedule: str,
    micro_batches: int,
    threads: bool = False,
    graphs: bool = False,
) -> dict[str, Any]:
    """A schedule's gradients against the eager naive split's after one step, same weights.

    Runs in full fp32 (TF32 off): the schedules sum the same per-sample terms in another
    order, so only rounding may differ. ``graphs``: the schedule replayed from CUDA graphs
    (``naive`` too), whose static buffers are ordered across devices by events alone. A
    missing event is a race that timing may hide, so the graphed step also runs with each
    CUDA device held back (a spin kernel before every step) while the other and the copies
    go on, then with every copy held back (a spin on its stream first), and for two steps
    against the same schedule issued op by op (the events that carry over a step; after
    two steps the update has grown the schedules' rounding differences tenfold, so the
    naive split is no reference there; graphs replay its kernels, so they should agree
    exactly: ``max_vs_eager``). Returns the largest relative difference and each
    comparison's.
    """
    stalls: list[str | None] = [None]
    if graphs:
        stalls += [d for d in dict.fromkeys(devices) if d.startswith("cuda")] + ["copies"]
    runner = partial(SplitRunner, model, n, m, cut, devices, threads)  # graphs or not
    runs: dict[str, float] = {}
    with torch.backends.cudnn.flags(enabled=True, benchmark=False, allow_tf32=False):
        naive = _gradients_after(runner(False), "naive", 1, 1)
        for stall in stalls:
            got = _gradients_after(runner(graphs), schedule, micro_batches, 1, stall)
            runs[f"naive, 1 step, {stall or 'none'} held"] = _worst_rel_diff(naive, got)
        if graphs:
            eager = _gradients_after(runner(False), schedule, micro_batches, 2)
            for stall in stalls:
                got = _gradients_after(runner(True), schedule, micro_batches, 2, stall)
                runs[f"eager, 2 steps, {stall or 'none'} held"] = _worst_rel_diff(eager, got)
    vs_eager = [v for k, v in runs.items() if k.startswith("eager")]
    return {
        "max_grad_rel_diff": max(runs.values()),
        "max_vs_eager": max(vs_eager) if vs_eager else None,
        "against": runs,
        "parameters": len(naive),
        "schedule": schedule,
        "micro_batches": micro_batches,
        "graphs": graphs,
    }


def _worst_rel_diff(ref: Sequence[torch.Tensor], got: Sequence[torch.Tensor]) -> float:
    return max(
        float((a - b).norm() / a.norm().clamp_min(1e-30)) for a, b in zip(ref, got, strict=True)
    )


STALL_CYCLES = 100_000_000  # a spin kernel of about 50 ms at 2 GHz


def _gradients_after(
    runner: SplitRunner,
    schedule: str,
    micro_batches: int,
    steps: int,
    stall: str | None = None,
) -> list[torch.Tensor]:
    """Every gradient after ``steps`` steps of ``runner``'s ``schedule`` (seeded weights).

    ``stall``: a CUDA device to hold back before every step, or ``"copies"`` (graphs):
    every cross-device copy held back on its stream.
    """
    step = runner.schedule(schedule, micro_batches)
    if stall == "copies" and runner.graphed is not None:
        runner.graphed.forth.hold_cycles = runner.graphed.back.hold_cycles = STALL_CYCLES // 10
    for _ in range(steps):
        if stall not in (None, "copies"):
            with torch.cuda.device(stall):
                torch.cuda._sleep(STALL_CYCLES)
        step()
    return runner.gradients()


TRACE_SCHEDULE = Schedule(wait=0, warmup=1, active=2)


def trace_overlap(step: Callable[[], object], devices: Sequence[str], path: Path) -> dict[str, Any]:
    """Profile a split's steps into ``path``; each device's busy time and both at once.

    What the timed median cannot say: whether a pipelined step is slow because its
    devices do not overlap (``together_ms`` small) or because each works longer at the
    micro-batch size (``busy_ms`` above the naive split's). ms per step; CUDA only.
    """
    profile_steps(
        step,
        path,
        device=devices[0],
        schedule=TRACE_SCHEDULE,
        synchronize=round_clock(tuple(dict.fromkeys(devices))).synchronize,
        cpu=False,  # CPU-side tracing slows the host, and a host-bound step looks worse
    )
    overlap = device_overlap(read_trace(path), TRACE_SCHEDULE.active)
    return {**overlap.as_dict(), "trace": str(path)}


# ------------------------------------------------------------------------------ tables


def probe_table(case: FitCase, result: dict[str, Any]) -> str:
    """The seed's first table for one search: N, M, fits or OOM, time; and the bytes."""
    rows = []
    for p in map(Probe.from_dict, result["probes"]):
        rows.append(
            [
                str(p.n),
                str(p.m),
                "No" if p.fits else "Yes",
                "-" if p.step_ms is None else f"{p.step_ms:.4g}",
                fmt_bytes(p.peak_allocated_bytes),
                fmt_bytes(p.peak_reserved_bytes),
                fmt_bytes(p.predicted_bytes),
                f"{p.wall_s:.2f}",
            ]
        )
    emulated = " (emulated)" if result["emulated"] else ""
    err = result["error_fraction"]
    title = (
        f"{case.id}: {result['backend']}{emulated}; largest N = {result['max_n']}"
        f"{' (cap: at least)' if result['censored'] else ''}, predicted {result['predicted_max_n']}"
        f" ({'-' if err is None else f'{err:+.1%}'}); {result['probe_count']} probes "
        f"(bound {result['probe_bound']})"
    )
    headers = [
        "num_of_conv",
        "num_of_fc",
        "out_of_memory?",
        "step ms",
        "peak alloc",
        "peak reserved",
        "predicted",
        "probe s",
    ]
    return render(headers, rows, title)


def split_table(
    case: SplitCase,
    cut: int,
    n: int,
    predicted: Sequence[int],
    budgets_bytes: Sequence[float],
    memory: Sequence[Any],
    stage_ms: Sequence[float | None],
) -> str:
    """The seed's second table: device, layers on it, memory (predicted, measured), time."""
    c0 = min(cut, n)
    layers = [(c0, cut - c0), (n - c0, case.fc - (cut - c0))]
    rows = []
    for i, dev in enumerate(case.devices):
        mem = memory[i] if i < len(memory) else None
        peak = res = None
        if mem is not None and mem.peak_allocated_bytes is not None:
            peak = mem.start_allocated_bytes + mem.peak_allocated_bytes
            res = mem.start_reserved_bytes + mem.peak_reserved_bytes
        cap = budgets_bytes[i]
        rows.append(
            [
                dev,
                str(layers[i][0]),
                str(layers[i][1]),
                fmt_bytes(predicted[i]),
                fmt_bytes(peak),
                fmt_bytes(res),
                "-" if math.isinf(cap) else fmt_bytes(cap),
                "-" if res is None or math.isinf(cap) else fmt_bytes(cap - res),
                "-" if stage_ms[i] is None else f"{stage_ms[i]:.4g}",
            ]
        )
    headers = [
        "Device",
        "num_of_conv",
        "num_of_fc",
        "predicted",
        "peak alloc",
        "peak reserved",
        "budget",
        "headroom",
        "part ms",
    ]
    return render(headers, rows, f"{case.id}: cut after block {cut}")
