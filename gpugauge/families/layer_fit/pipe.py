"""Cross-device sends for a model split over devices, ordered by events instead of barriers.

``x.to("cuda:1")`` from a tensor on cuda:0 is a two-way barrier: the source device's
current stream waits for *all* work queued so far on the destination's current stream, and
the destination's for the source's. Issued from one thread, a pipeline then runs in
lockstep: in a one-forward-one-backward schedule, device 1's backward of micro-batch i
cannot start before device 0 has finished the forward of micro-batch i + 1, and device 0
stalls behind device 1's queue at every copy.

:func:`send` copies on side streams of each device instead, one per micro-batch
(torchgpipe does the same: its ``Copy`` and ``Wait`` functions and per-chunk copy
streams), and :func:`receive` makes the consumer's stream wait for that copy only, at the
point where the consumer is issued. Both are autograd functions
whose backward orders the gradient's copy the same way in reverse. On a CPU, or between
two tensors on one device, they are plain ``.to`` and identity.

:class:`Workers` issues each device's share of a pipeline from a thread of its own (as
torchgpipe's workers do), or with ``threads=False`` from the caller's. Threads let the
host issue two devices' work at once (PyTorch drops the GIL inside each op). On two H200s
neither way won (docs/lab/layer-fit-evidence.md; 30 rounds each, ms): GPipe ×2 111.6 from
threads against 112.3 inline back to back, 118.5 against 125.7 with the devices
synchronized between steps; 1F1B ×2 95.6 against 94.4, and 109.7 against 99.2.

:func:`held_parts` says how many micro-batches each stage of a schedule holds at once
(the memory model's count, and the graphed split's slots).
"""

from __future__ import annotations

import contextlib
import threading
import weakref
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import torch


class CopyStreams:
    """A side stream per CUDA device and micro-batch, for a pipeline's copies.

    Per micro-batch, as torchgpipe's: a cross-device copy makes the two copy streams wait
    for each other, so copies of different parts sharing a stream would wait for each
    other's producers (and, issued from several threads, in no fixed order). Created on
    first use, by whichever thread comes first.
    """

    def __init__(self) -> None:
        self._streams: dict[tuple[torch.device, int], torch.cuda.Stream] = {}
        self._lock = threading.Lock()

    def __call__(self, device: torch.device, part: int = 0) -> torch.cuda.Stream:
        """The copy stream of ``device`` for micro-batch ``part``."""
        with self._lock:
            key = (device, part)
            if key not in self._streams:
                self._streams[key] = torch.cuda.Stream(device)
            return self._streams[key]


def _wait(waiter: torch.cuda.Stream, on: torch.cuda.Stream) -> None:
    """``waiter`` waits for the work queued on ``on`` so far (not what comes later)."""
    waiter.wait_stream(on)


class _Copy(torch.autograd.Function):
    """The copy itself, between two copy streams (so the barrier is between them only).

    Forward: the source's copy stream waits for the producer's stream, then copies. The
    compute streams are the ones current in the forward; the backward's copy feeds the
    source's (the autograd engine runs a node's backward on its forward's stream, but a
    device worker thread's current stream for *another* device is that thread's own).
    """

    @staticmethod
    def forward(
        ctx: Any, x: torch.Tensor, dst: torch.device, streams: CopyStreams, part: int
    ) -> Any:
        src_copy, dst_copy = streams(x.device, part), streams(dst, part)
        producer, consumer = torch.cuda.current_stream(x.device), torch.cuda.current_stream(dst)
        ctx.src, ctx.streams, ctx.part = x.device, streams, part
        ctx.compute = (producer, consumer)
        _wait(src_copy, producer)  # x is complete before it is read
        with torch.cuda.stream(src_copy), torch.cuda.stream(dst_copy):
            y = x.to(dst)
        x.record_stream(src_copy)  # read on the copy stream, not where it was made
        y.record_stream(consumer)  # made on the copy stream, read on the compute stream
        return y

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> Any:
        src_copy, dst_copy = ctx.streams(ctx.src, ctx.part), ctx.streams(grad.device, ctx.part)
        src_compute, dst_compute = ctx.compute
        _wait(dst_copy, dst_compute)  # the gradient is complete before it is read
        with torch.cuda.stream(src_copy), torch.cuda.stream(dst_copy):
            g = grad.to(ctx.src)
        grad.record_stream(dst_copy)
        g.record_stream(src_compute)
        _wait(src_compute, src_copy)  # the source's backward reads the copied gradient
        return g, None, None, None


class _Receive(torch.autograd.Function):
    """The consumer's compute stream waits for the copy, where the consumer is issued."""

    @staticmethod
    def forward(ctx: Any, y: torch.Tensor, streams: CopyStreams, part: int) -> torch.Tensor:
        _wait(torch.cuda.current_stream(y.device), streams(y.device, part))
        return y.detach()

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> Any:
        return grad, None, None


def send(
    x: torch.Tensor, device: str | torch.device, streams: CopyStreams, part: int = 0
) -> torch.Tensor:
    """``x`` (micro-batch ``part``) copied to ``device`` on its copy streams; see :func:`receive`.

    Only the copy waits for ``x``'s producer; nothing on either compute stream waits for
    the copy until :func:`receive` says so.
    """
    dst = torch.device(device)
    if x.device == dst or x.device.type != "cuda" or dst.type != "cuda":
        return x.to(dst)
    return _Copy.apply(x, dst, streams, part)


def receive(y: torch.Tensor, streams: CopyStreams, part: int = 0) -> torch.Tensor:
    """``y`` from :func:`send` of ``part``, safe to read on its device's current stream."""
    if y.device.type != "cuda":
        return y
    return _Receive.apply(y, streams, part)


class Workers:
    """One issuing thread per pipeline stage (or, ``threads=False``, the caller's).

    :meth:`run` runs one clock cycle's tasks.

    A task runs under the caller's current CUDA streams (a new thread starts on each
    device's default stream) and the caller's grad mode. :meth:`run` returns once every task
    has been issued (not finished on the device: the work stays asynchronous) and raises
    the first task's error only after all of them have stopped, so that nothing is still
    issuing when the caller frees memory after an out-of-memory error.
    """

    def __init__(self, devices: Sequence[str | torch.device], threads: bool = True) -> None:
        self.devices = [torch.device(d) for d in devices]
        self.threads = threads
        self._pools = [
            ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"stage{i}")
            for i in range(len(self.devices) if threads else 0)
        ]
        for pool in self._pools:
            weakref.finalize(self, pool.shutdown, wait=False)

    def run(self, tasks: Sequence[tuple[int, Callable[[], object]]]) -> list[object]:
        """Run each ``(stage, fn)`` on that stage's thread, all at once; their results.

        Without ``threads``, the tasks run here, one after another, in the given order.
        """
        if not self.threads:
            return [fn() for _, fn in tasks]
        grad = torch.is_grad_enabled()
        streams = [torch.cuda.current_stream(d) for d in self.devices if d.type == "cuda"]
        futures = [self._pools[stage].submit(_issue, fn, streams, grad) for stage, fn in tasks]
        errors = [e for e in (f.exception() for f in futures) if e is not None]  # waits for all
        if not errors:
            return [f.result() for f in futures]
        first = errors[0]
        for other in errors[1:]:
            first.add_note(f"another stage failed too: {other!r}")
        del futures, errors  # nothing here may keep the failed frames (and their memory) alive
        try:
            raise first
        finally:
            first = None  # type: ignore[assignment]

    def close(self) -> None:
        """Stop the threads (idle ones exit at once)."""
        for pool in self._pools:
            pool.shutdown(wait=True)


def _issue(fn: Callable[[], object], streams: Sequence[torch.cuda.Stream], grad: bool) -> object:
    """``fn()`` on the caller's ``streams`` and grad mode (both are per thread in PyTorch)."""
    with torch.set_grad_enabled(grad), contextlib.ExitStack() as stack:
        for stream in streams:
            stack.enter_context(torch.cuda.stream(stream))
        return fn()


def held_parts(schedule: str, micro_batches: int) -> tuple[int, int]:
    """Micro-batches whose activations each of the two stages holds at its peak.

    GPipe (and the naive split, one part) holds every part until the drain; 1F1B holds
    two on device 0 (the part whose backward runs and the one it forwarded ahead) and one
    on device 1.
    """
    if schedule == "1f1b":
        return min(2, micro_batches), 1
    return micro_batches, micro_batches
