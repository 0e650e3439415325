"""A two-stage split's training step replayed from CUDA graphs: a few launches per part.

Issued op by op, a 1F1B ×2 step of the seed's split (138 conv + 62 fc over two H200s) launches about
6,200 kernels, and once the launch queues fill, the host's pace is the step's: its rounds read 90 to
145 ms where the devices need 91 (docs/lab/layer-fit-evidence.md). Here each stage's forward and its
backward, for each micro-batch in flight (a *slot*), are captured once as CUDA graphs, and a step
replays them; the two devices are ordered by events only, as :mod:`gpugauge.families.layer_fit.pipe`
orders the eager pipelines.

Why not ``torch.cuda.make_graphed_callables``: its backward hands the parameters'
gradients back in the graph's static buffers, and autograd's accumulator adopts the
first as ``.grad``, so a stage replayed twice in one step (1F1B's last stage has one
slot) overwrites the gradient of the micro-batch before; and a module graphed once per
slot has its forward replaced by the first graph. Here the backward graphs add into
``.grad`` in place: the gradients persist between steps, and a step zeroes them first.

Memory: every slot keeps its activations (saved for the backward) between steps, in a
private pool of its own, so slots never share a buffer that another slot in flight
still holds; GPipe has a slot per micro-batch on each stage, 1F1B two on the first
stage and one on the last, the naive split one each: the activations each schedule
holds anyway. A slot's pool also keeps its backward's temporaries (a schedule issued op
by op shares them between micro-batches), and private pools are plain segments even
under ``expandable_segments``.

Each ordering event is load-bearing except two that other chains already imply (noted
where they are waited for); ``check_pipeline`` in ``layer_fit.verify`` holds each device,
then the copy streams, back to expose a missing one.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial

import torch
from torch import nn

from gpugauge.families.layer_fit.pipe import CopyStreams, held_parts

WARMUP_STEPS = 3  # eager steps on the capture stream first: cuDNN plans, cuBLAS handles


def _capture(
    graph: torch.cuda.CUDAGraph, pool: object, stream: torch.cuda.Stream, fn: Callable[[], object]
) -> object:
    """``fn()`` captured into ``graph``; an out-of-memory error inside stays one.

    Ending a capture that failed can raise a RuntimeError of its own, which would hide
    the out-of-memory error that fitting a cut counts as "does not fit".
    """
    try:
        with torch.cuda.graph(graph, pool=pool, stream=stream):
            return fn()
    except RuntimeError as err:
        if not isinstance(err, torch.OutOfMemoryError) and isinstance(
            err.__context__, torch.OutOfMemoryError
        ):
            raise err.__context__ from err
        raise


@dataclass(frozen=True)
class StageGraphs:
    """One stage's graphs and the static tensors they read and write, per slot.

    ``inputs[j]`` is what slot ``j``'s forward reads (activations from the stage
    before, a leaf whose ``.grad`` its backward writes); ``outputs[j]`` what it writes
    (activations, or on the last stage the loss); ``grad_outputs[j]`` the gradient its
    backward reads. ``grads`` are the parameters' ``.grad``, which every backward adds to.
    """

    device: torch.device
    inputs: list[torch.Tensor]
    targets: list[torch.Tensor]
    outputs: list[torch.Tensor]
    grad_outputs: list[torch.Tensor]
    forward: list[torch.cuda.CUDAGraph]
    backward: list[torch.cuda.CUDAGraph]
    grads: list[torch.Tensor]


def capture_stage(
    stage: nn.Module,
    inputs: Sequence[torch.Tensor],
    targets: Sequence[torch.Tensor] = (),
    loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None,
) -> StageGraphs:
    """Capture ``stage``'s forward and backward for each slot's static input.

    With ``loss`` the stage is the last: its forward ends in ``loss(stage(x), target)``
    with slot ``j``'s ``targets[j]``, and its backward starts from 1. Inputs that require
    grad are leaves whose ``.grad`` the backward overwrites (the gradient to send back).
    """
    device = inputs[0].device
    if device.type != "cuda":
        raise ValueError(f"CUDA graphs need CUDA tensors, not {device}")
    params = [p for p in stage.parameters() if p.requires_grad]
    if not params:
        raise ValueError("a graphed stage needs parameters to train")
    if any(p.device != device for p in params):
        raise ValueError(f"a graphed stage's parameters must be on its inputs' {device}")
    with torch.cuda.device(device):
        for t in [*params, *(x for x in inputs if x.requires_grad)]:
            if t.grad is None:
                t.grad = torch.zeros_like(t)

        def forward(j: int) -> torch.Tensor:
            out = stage(inputs[j])
            return out if loss is None else loss(out, targets[j])

        def backward(j: int, out: torch.Tensor, grad: torch.Tensor, keep: bool) -> None:
            if inputs[j].requires_grad:
                inputs[j].grad.zero_()  # overwritten, not summed over the steps
            torch.autograd.backward(out, grad, retain_graph=keep)

        stream = torch.cuda.Stream(device)
        stream.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(stream):
            for _ in range(WARMUP_STEPS):
                out = forward(0)
                backward(0, out, torch.ones_like(out), keep=False)
            del out
        torch.cuda.current_stream(device).wait_stream(stream)
        torch.cuda.synchronize(device)
        for p in params:
            p.grad.zero_()
        pools = [torch.cuda.graph_pool_handle() for _ in inputs]
        fwd = [torch.cuda.CUDAGraph() for _ in inputs]
        outputs = []
        for j, graph in enumerate(fwd):
            outputs.append(_capture(graph, pools[j], stream, partial(forward, j)))
        grad_outputs = [
            torch.ones_like(o) if loss is not None else torch.zeros_like(o) for o in outputs
        ]
        bwd = [torch.cuda.CUDAGraph() for _ in inputs]
        for j, graph in enumerate(bwd):
            # the autograd graph stays: its saved activations are the slot's, kept apart
            # from the backward's temporaries (a smaller pool would reuse them: not tried)
            _capture(
                graph, pools[j], stream, partial(backward, j, outputs[j], grad_outputs[j], True)
            )
        torch.cuda.current_stream(device).wait_stream(stream)
        return StageGraphs(
            device=device,
            inputs=list(inputs),
            targets=list(targets),
            outputs=outputs,
            grad_outputs=grad_outputs,
            forward=fwd,
            backward=bwd,
            grads=[p.grad for p in params],
        )


class _Link:
    """Copies of micro-batches from one device's static tensors into another's, by events.

    Copy ``i`` waits for the event that says its source is made and for the one that says
    the last reader of its destination is done; its consumer, and the next writer of its
    source, wait for it (:meth:`wait`). A copy must be issued after that reader was: the
    event it waits for is the one recorded when it is issued.
    """

    def __init__(self, streams: CopyStreams, micro_batches: int) -> None:
        self.streams = streams
        self.done = [torch.cuda.Event() for _ in range(micro_batches)]
        self.hold_cycles = 0  # a check's spin before each copy: a slow link exposes races

    def copy(
        self,
        src: torch.Tensor,
        dst: torch.Tensor,
        i: int,
        made: torch.cuda.Event,
        free: torch.cuda.Event,
    ) -> None:
        """Copy micro-batch ``i`` once ``made`` (the source) and ``free`` (the destination)."""
        src_copy, dst_copy = self.streams(src.device, i), self.streams(dst.device, i)
        src_copy.wait_event(made)
        dst_copy.wait_event(free)
        if self.hold_cycles:
            with torch.cuda.stream(src_copy):
                torch.cuda._sleep(self.hold_cycles)
        with torch.cuda.stream(src_copy), torch.cuda.stream(dst_copy):
            dst.detach().copy_(src, non_blocking=True)  # dst may be a leaf that needs grad
        self.done[i].record(dst_copy)

    def wait(self, i: int, device: torch.device) -> None:
        """``device``'s current stream waits for this step's copy ``i``.

        A negative ``i`` is a micro-batch of the step before: no wait, as each of its
        copies fed a backward that the next step's work on both devices follows.
        """
        if i >= 0:
            torch.cuda.current_stream(device).wait_event(self.done[i])


class GraphedSplit:
    """GPipe, 1F1B or the naive split over two devices, from graphs captured per slot.

    ``slots`` is each stage's micro-batches in flight
    (:func:`~gpugauge.families.layer_fit.pipe.held_parts`); a schedule refuses fewer. The
    schedules are
    :class:`~gpugauge.families.layer_fit.runner.SplitRunner`'s, with the same gradients: the
    last stage's loss is divided by ``micro_batches``, as there.
    """

    def __init__(
        self,
        stages: tuple[nn.Module, nn.Module],
        x: torch.Tensor,
        y: torch.Tensor,
        loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
        optimizer: torch.optim.Optimizer,
        micro_batches: int,
        slots: tuple[int, int],
    ) -> None:
        if x.device == y.device:
            raise ValueError(f"a graphed split needs two devices, not {x.device} twice")
        if x.shape[0] % micro_batches or not 1 <= min(slots) <= max(slots) <= micro_batches:
            raise ValueError(
                f"batch {x.shape[0]} in {micro_batches} equal parts, slots {slots} within them"
            )
        s0, s1 = stages
        self.params = [p for s in stages for p in s.parameters() if p.requires_grad]
        self.optimizer = optimizer
        self.m = micro_batches
        self.xs, self.ys = x.chunk(micro_batches), y.chunk(micro_batches)
        self.slots = slots

        def scaled(out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
            return loss_fn(out, target) / micro_batches

        def static(parts: Sequence[torch.Tensor], count: int) -> list[torch.Tensor]:
            # a slot per micro-batch reads it where it is; fewer slots get copies in
            return [p if count == micro_batches else p.clone() for p in parts[:count]]

        self.first = capture_stage(s0, static(self.xs, slots[0]))
        shape = self.first.outputs[0].shape
        ins = [torch.zeros(shape, device=y.device, requires_grad=True) for _ in range(slots[1])]
        self.last = capture_stage(s1, ins, static(self.ys, slots[1]), scaled)
        self.grads = [*self.first.grads, *self.last.grads]
        streams = CopyStreams()
        self.forth = _Link(streams, micro_batches)  # stage 0's outputs to stage 1's inputs
        self.back = _Link(streams, micro_batches)  # stage 1's input gradients to stage 0's
        self.made = [torch.cuda.Event() for _ in range(micro_batches)]  # stage 0's forwards
        self.backed = [  # each slot's last backward: its inputs, outputs, grads are free
            [torch.cuda.Event() for _ in range(slots[0])],
            [torch.cuda.Event() for _ in range(slots[1])],
        ]

    def _forward0(self, i: int) -> None:
        j, stage = i % self.slots[0], self.first
        if stage.inputs[j].data_ptr() != self.xs[i].data_ptr():
            stage.inputs[j].copy_(self.xs[i])  # after the slot's last backward: one stream
        # slot j's output was copied out: implied too (F0(i) follows B0(i - s0), which
        # follows copy i - s0 through stage 1), waited for all the same
        self.forth.wait(i - self.slots[0], stage.device)
        stage.forward[j].replay()
        self.made[i].record(torch.cuda.current_stream(stage.device))

    def _forward1(self, i: int) -> None:
        # the copy in is issued here, after the backward of the part before in this slot
        s0, s1 = self.slots
        k, stage = i % s1, self.last
        src = self.first.outputs[i % s0]
        self.forth.copy(src, stage.inputs[k], i, self.made[i], self.backed[1][k])
        self.forth.wait(i, stage.device)
        if stage.targets[k].data_ptr() != self.ys[i].data_ptr():
            stage.targets[k].copy_(self.ys[i])
        stage.forward[k].replay()

    def _backward1(self, i: int) -> None:
        s0, s1 = self.slots
        k, j, stage = i % s1, i % s0, self.last
        self.back.wait(i - s1, stage.device)  # slot k's input gradient was copied out
        stage.backward[k].replay()
        self.backed[1][k].record(torch.cuda.current_stream(stage.device))
        # backed[0][j], B0(i - s0) done, is implied too: B1(i) follows F0(i), which
        # follows B0(i - s0) on device 0
        dst = self.first.grad_outputs[j]
        self.back.copy(stage.inputs[k].grad, dst, i, self.backed[1][k], self.backed[0][j])

    def _backward0(self, i: int) -> None:
        j, stage = i % self.slots[0], self.first
        self.back.wait(i, stage.device)
        stage.backward[j].replay()
        self.backed[0][j].record(torch.cuda.current_stream(stage.device))

    def step(self, schedule: str) -> Callable[[], object]:
        """The step of ``schedule``: ``naive`` (one micro-batch), ``gpipe`` or ``1f1b``."""
        m = self.m
        if schedule not in ("naive", "gpipe", "1f1b"):
            raise ValueError(f"no graphed schedule {schedule!r}")
        if (schedule == "naive") != (m == 1):
            raise ValueError(f"{schedule} with {m} micro-batches")
        held = held_parts(schedule, m)
        if any(have < need for have, need in zip(self.slots, held, strict=True)):
            raise ValueError(f"{schedule} x{m} holds {held} parts at once; slots {self.slots}")

        def run() -> object:
            for p, g in zip(self.params, self.grads, strict=True):
                if p.grad is not g:  # set to None (or replaced) by an eager step between
                    p.grad = g
            for stage in (self.first, self.last):
                torch._foreach_zero_(stage.grads)
            if schedule == "gpipe":
                for i in range(m):
                    self._forward0(i)
                    self._forward1(i)
                for i in range(m):
                    self._backward1(i)
                    self._backward0(i)
            else:  # 1F1B's clock cycles; the naive split is its m = 1
                for c in range(m + 1):
                    if c < m:
                        self._forward0(c)
                    if c:
                        self._forward1(c - 1)
                        self._backward1(c - 1)
                        self._backward0(c - 1)
            self.optimizer.step()
            return self.last.outputs  # the last stage's slots' losses, until the next step

        return run
