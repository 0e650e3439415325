"""A whole training step replayed from one CUDA graph: the GPU's answer for a host-bound step.

Issued op by op, a step of MLP, LeNet-5 or ResNet-18 at batch 128 takes longer to launch
than to run, so its time is the host's. Here the step the eager case runs
(:meth:`~gpugauge.families.amp.workload.Trainer.step`: gradients to None, forward under
autocast, loss, backward, optimizer step, and fp16's GradScaler) is captured once with
``torch.cuda.graph`` on its fixed device batch (static input and target), after eager
warm-up steps on a side stream as PyTorch's whole-network capture recipe requires (cuDNN
plans, cuBLAS workspaces, momentum buffers and GradScaler's scale all made before
capture); a timed round is one ``replay``. The gradients set to None inside the
capture are allocated again by its backward, in the graph's private pool, and every replay
writes them anew. Dropout (AlexNet, VGG-16) draws from the CUDA generator's Philox offsets,
which each replay advances as an eager step would.

SGD needs no ``capturable`` flag (it keeps no step count on the host). fp16: GradScaler's
``step`` with torch's default (foreach) SGD reads the overflow flag on the host (``.item()``
in ``_maybe_opt_step``), which a capture refuses. Fused SGD declares
``_step_supports_amp_scaling``: GradScaler then hands it the scale and the overflow flag as
device tensors, its kernel unscales the gradients and skips the update on an overflow, and
``update`` adjusts the scale on the device (``_amp_update_scale_``). So the graphed fp16
step uses fused SGD (:func:`~gpugauge.families.amp.workload.sgd`) where the eager fp16 step
keeps the default; its result is the same step's (checked below), and its time differs
from eager fp16's by the graph, the host sync and the fused optimizer together.

Before timing, :func:`check_graphed` runs the graphed step and the eager step from the same
initial weights and data for the same number of steps, with cuDNN's deterministic
algorithms, and compares how far each moved the parameters (:func:`compare_displacements`);
the step that is timed is then captured again with cuDNN's default algorithms.
"""

from __future__ import annotations

import contextlib
import gc
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import torch

from gpugauge.families.amp.workload import AmpCase, Trainer, image_batch

WARMUP_STEPS = 3  # eager steps before capture (fp16: at least until the scale settles)
CHECK_REPLAYS = 3  # graphed steps in the check, after the warm-up
# How far the graphed step's displacement of the parameters may be from the eager step's,
# relative (see compare_displacements). A replay that is missing, doubled or reads a stale
# buffer changes it by about 1/steps of the check or more: 1/6 here. fp32, with cuDNN's
# deterministic algorithms, replays the eager kernels in the same order: bitwise equal on
# an H100 for all five models (docs/amp.md); 1e-4 leaves room for a kernel that still sums in
# another order. Under autocast a weight one fp32 ulp apart can round to a different
# bf16/fp16 value (8 and 11 significant bits), and fp16's graphed step runs fused SGD where
# eager runs foreach (the same sums, rounded once instead of twice): 1e-2, still ten times
# under a missing step.
GRAPH_TOLERANCE = {"fp32": 1e-4, "bf16": 1e-2, "fp16": 1e-2}


def graphed_trainer(case: AmpCase) -> Trainer:
    """The case's model and optimizer as one graph can capture them (fp16: fused SGD)."""
    return Trainer(case, fused=case.precision == "fp16")


def warm_up(trainer: Trainer, x: torch.Tensor, y: torch.Tensor) -> tuple[int, dict[str, Any]]:
    """Eager steps before capture: fp16's scale calibrated, then up to :data:`WARMUP_STEPS`.

    Returns the steps taken and GradScaler's calibration (empty without one).
    """
    scaler = trainer.calibrate_scale(x, y)
    taken = int(scaler.get("calibration_steps", 0))
    for _ in range(WARMUP_STEPS - taken):
        trainer.step(x, y)
    return max(taken, WARMUP_STEPS), scaler


@dataclass(frozen=True)
class GraphedStep:
    """The timed callable of a graphed case: one replay of the captured step.

    ``replay`` is the graph's (a test on a CPU passes the eager step instead); ``loss`` the
    static loss tensor each replay overwrites; ``warmup_steps`` the eager steps before
    capture; ``pool_bytes`` what the capture added to the allocator's reserved memory (the
    graph's private pool: gradients, activations and temporaries of one step), which a
    replay does not allocate again.
    """

    trainer: Trainer
    x: torch.Tensor
    y: torch.Tensor
    replay: Callable[[], object]
    loss: torch.Tensor | None
    warmup_steps: int
    scaler_info: dict[str, Any] = field(default_factory=dict)
    pool_bytes: int | None = None

    def __call__(self) -> torch.Tensor | None:
        """One step."""
        self.replay()
        return self.loss

    def info(self) -> dict[str, Any]:
        """What a result's ``extra.graphs`` holds."""
        return {
            "warmup_steps": self.warmup_steps,
            "pool_bytes": self.pool_bytes,
            "optimizer": "SGD fused" if self.trainer.opt.defaults.get("fused") else "SGD",
        }


def capture(trainer: Trainer, x: torch.Tensor, y: torch.Tensor) -> GraphedStep:
    """``trainer``'s step on the static ``x``, ``y`` captured into one CUDA graph."""
    device = x.device
    if device.type != "cuda":
        raise ValueError(f"CUDA graphs need CUDA tensors, not {device}")
    side = torch.cuda.Stream(device)
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):
        steps, scaler = warm_up(trainer, x, y)
    torch.cuda.current_stream(device).wait_stream(side)
    torch.cuda.synchronize(device)
    torch.cuda.empty_cache()  # as the capture does first: the pool is then what it adds
    before = torch.cuda.memory_reserved(device)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        loss = trainer.step(x, y)
    pool = torch.cuda.memory_reserved(device) - before
    return GraphedStep(trainer, x, y, graph.replay, loss, steps, scaler, pool)


@dataclass(frozen=True)
class GraphCheck:
    """The graphed step's result against the eager step's, after the same steps.

    ``rel_diff`` = ||d_graphed - d_eager|| / ||d_eager||, d being each side's parameters
    after ``steps`` steps minus the shared initial ones, over all parameters at once (the
    parameters themselves barely move in a few steps, so their own difference would hide
    a wrong update under the weights). ``worst`` names the tensor whose own relative
    difference is largest (reported, not judged: a bias moves little). fp16: ``scales``
    are GradScaler's scale at the end, eager then graphed; they must be equal.
    """

    precision: str
    steps: int
    replays: int
    rel_diff: float
    eager_norm: float
    worst: str
    worst_rel_diff: float
    tolerance: float
    scales: tuple[float, float] | None = None

    @property
    def ok(self) -> bool:
        """Within the tolerance, the eager steps moved the weights, and the scales agree."""
        same_scale = self.scales is None or self.scales[0] == self.scales[1]
        return self.eager_norm > 0 and self.rel_diff <= self.tolerance and same_scale

    def message(self) -> str:
        """One line with the numbers, for a failing test."""
        scales = "" if self.scales is None else f", scale eager {self.scales[0]:g} graphed "
        scales += "" if self.scales is None else f"{self.scales[1]:g}"
        return (
            f"{self.precision}, {self.steps} steps ({self.replays} replayed): displacement "
            f"differs by {self.rel_diff:.3g} of the eager one (tolerance {self.tolerance:g}, "
            f"eager norm {self.eager_norm:.3g}); worst tensor {self.worst} "
            f"{self.worst_rel_diff:.3g}{scales}"
        )

    def as_dict(self) -> dict[str, Any]:
        """Plain dict for JSON."""
        return {**asdict(self), "ok": self.ok}


def compare_displacements(
    names: Sequence[str],
    init: Sequence[torch.Tensor],
    eager: Sequence[torch.Tensor],
    graphed: Sequence[torch.Tensor],
    precision: str,
    steps: int,
    replays: int,
    scales: tuple[float, float] | None = None,
) -> GraphCheck:
    """:class:`GraphCheck` of parameters after ``steps`` steps each from ``init`` (any device)."""
    if not len(names) == len(init) == len(eager) == len(graphed) > 0:
        raise ValueError("names, init, eager and graphed must list the same parameters")
    diff2 = base2 = 0.0
    worst, worst_rel = names[0], -1.0
    for name, p0, pe, pg in zip(names, init, eager, graphed, strict=True):
        if not p0.shape == pe.shape == pg.shape:
            raise ValueError(f"{name}: shapes differ: {p0.shape}, {pe.shape}, {pg.shape}")
        de = pe.detach().double() - p0.detach().double()
        dg = pg.detach().double() - p0.detach().double()
        d2, b2 = float((dg - de).square().sum()), float(de.square().sum())
        diff2, base2 = diff2 + d2, base2 + b2
        rel = math.sqrt(d2) / math.sqrt(b2) if b2 > 0 else (0.0 if d2 == 0 else math.inf)
        if rel > worst_rel:
            worst, worst_rel = name, rel
    eager_norm = math.sqrt(base2)
    rel_diff = math.sqrt(diff2) / eager_norm if eager_norm > 0 else math.inf
    return GraphCheck(
        precision,
        steps,
        replays,
        rel_diff,
        eager_norm,
        worst,
        worst_rel,
        GRAPH_TOLERANCE[precision],
        scales,
    )


Replayable = Callable[[Trainer, torch.Tensor, torch.Tensor], GraphedStep]


@contextlib.contextmanager
def deterministic_cudnn(on: bool = True) -> Iterator[None]:
    """Restrict cuDNN to deterministic algorithms inside (or not); restore its flag after."""
    saved = torch.backends.cudnn.deterministic
    torch.backends.cudnn.deterministic = on
    try:
        yield
    finally:
        torch.backends.cudnn.deterministic = saved


def check_graphed(
    case: AmpCase, make: Replayable = capture, replays: int = CHECK_REPLAYS
) -> tuple[GraphedStep, GraphCheck]:
    """The case's graphed step, ready to time, and its check against the eager step.

    The check (:func:`check_capture`) runs with cuDNN restricted to deterministic
    algorithms on both sides: with cuDNN's own choice the fp32 eager steps of VGG-16 and
    ResNet-18 do not repeat themselves (on an H100, two eager runs from one seed 5.6% and
    5.8% apart after 6 steps, as far as the graphed step was from eager; deterministic,
    eager and graphed agreed bitwise). Weight gradients summed with atomics round
    differently on each run, and a few steps of training grow a last-bit difference into
    percents (a ReLU input near zero, a max-pool window of near-equal values). The checked
    graph is then released and the step is captured again, the same way, with cuDNN's
    default choice: the algorithms the eager case runs, so the two times compare.
    """
    with deterministic_cudnn():
        check = check_capture(case, make, replays)
    gc.collect()  # the checked graph is gone; capture()'s empty_cache returns its pool
    return graphed_step(case, make), check


def graphed_step(case: AmpCase, make: Replayable = capture) -> GraphedStep:
    """The case's graphed step, ready to time, without the check against eager.

    An A/B compares two builds' times only (``--gauge-skip-extras``); each build's own
    runs check its result. The check builds two more models and steps them with cuDNN's
    deterministic algorithms: on an H200 most of a graphed VGG-16 case's setup.
    """
    trainer = graphed_trainer(case)
    x, y = trainer.to_device(*image_batch(case.input_shape, case.defn.num_classes))
    return make(trainer, x, y)


def check_capture(case: AmpCase, make: Replayable, replays: int) -> GraphCheck:
    """Graphed steps against eager steps from the same start, as :class:`GraphCheck`.

    The graphed side warms up and is captured (``make``), then replayed ``replays`` times;
    the eager side then starts from the same seeded weights, data and CUDA generator state
    and takes as many steps.
    """
    trainer = graphed_trainer(case)
    x, y = trainer.to_device(*image_batch(case.input_shape, case.defn.num_classes))
    graphed = make(trainer, x, y)
    for _ in range(replays):
        graphed()
    steps = graphed.warmup_steps + replays
    eager = Trainer(case.eager)  # seeds torch again: the same weights and generator state
    names = [n for n, _ in eager.model.named_parameters()]
    init = [p.detach().clone() for p in eager.model.parameters()]
    for _ in range(steps):
        eager.step(x, y)
    scales = None
    if eager.scaler is not None and trainer.scaler is not None:
        scales = (eager.scaler.get_scale(), trainer.scaler.get_scale())
    return compare_displacements(
        names,
        init,
        list(eager.model.parameters()),
        list(trainer.model.parameters()),
        case.precision,
        steps,
        replays,
        scales,
    )
