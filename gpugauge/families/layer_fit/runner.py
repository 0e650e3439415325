"""The model cut over two devices and its steps: naive, GPipe, 1F1B, or replayed from graphs.

:class:`SplitRunner` builds the (N, M) model cut after one block and gives each
schedule's training step; :func:`~.cut_fit.fit_cut` finds a cut whose steps fit.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial

import torch
from torch import nn

from gpugauge.families.layer_fit.graphed import GraphedSplit
from gpugauge.families.layer_fit.memory_model import MemoryModel
from gpugauge.families.layer_fit.pipe import CopyStreams, Workers, held_parts, receive, send
from gpugauge.families.layer_fit.plan import SCHEDULES
from gpugauge.families.layer_fit.steps import LR, MOMENTUM, inputs
from gpugauge.models.stacked import blocks


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
        # two H200s (docs/lab/layer-fit-evidence.md).
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
