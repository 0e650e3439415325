"""The analytic memory model: the bytes a step of the stacked model (N, M) holds at its peak.

:class:`MemoryModel` predicts the peak as parameter, gradient, optimizer-state,
activation and workspace terms, each tensor rounded as PyTorch's CUDA caching allocator
rounds it (:func:`allocator_bytes`); :meth:`MemoryModel.stage` does so for the blocks one
device holds when the model is split. See ``docs/layer_fit.md``.

Modes are :mod:`~gpugauge.families.layer_fit.steps`'s: ``train`` keeps every activation
for backward; under ``infer`` each activation is freed as soon as the next block has
consumed it.
"""

from __future__ import annotations

import itertools
from dataclasses import asdict, dataclass
from typing import Any

from gpugauge.families.layer_fit.budget import MiB
from gpugauge.models.stacked import CHANNELS, CLASSES, HEAD_WIDTH, head_widths

LARGE_SEGMENT = 20 * MiB  # the caching allocator's segment for tensors of 1-10 MiB
MODES = ("infer", "train")
SEED_INPUT = (16, CHANNELS, 112, 112)


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
        flight; one or two under 1F1B (:func:`~.pipe.held_parts`), whose stage after the first
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
