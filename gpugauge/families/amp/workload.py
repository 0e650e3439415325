"""amp workload: the cases, and training steps in fp32, AMP fp16 and AMP bf16.

Seeds 003 (MLP, LeNet, AlexNet, VGG, ResNet with and without AMP, profiler tables) and 001
(a small CNN's inference at batch 100, 1000 and 10000 on CPU and GPU).

A training step (:class:`Trainer`): gradients set to None, forward under
``torch.autocast`` for fp16/bf16 (none for fp32), cross-entropy, backward, SGD step
(lr 0.01, momentum 0.9). fp16 scales the loss with ``torch.amp.GradScaler``, whose
``step`` reads the overflow flag on the host once per step, as in real fp16 training; the
scale is calibrated before timing (see :func:`make_step`). bf16 needs no scaler.
``channels_last`` puts the conv nets' weights and inputs in NHWC. ``graphs`` replays the
whole step from one CUDA graph (:mod:`gpugauge.families.amp.graphed`): the GPU's answer
where the eager step waits for the host.

CPU against GPU inference is :mod:`~gpugauge.families.amp.inference`; the profiler pass and
its host loader :mod:`~gpugauge.families.amp.profiler`.

TF32: what an "fp32" number means depends on two flags, so every case sets them
(:func:`tf32_flags`) and every result records them. ``default`` is torch's default:
cuDNN convolutions in TF32, matmuls in full fp32; ``off`` and ``on`` set both.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass, replace
from typing import Any, ClassVar

import torch
from torch import nn

from gpugauge.models.alexnet import alexnet
from gpugauge.models.build import build_on
from gpugauge.models.lenet import lenet
from gpugauge.models.mlp import mlp
from gpugauge.models.resnet import resnet18
from gpugauge.models.vgg import vgg

PRECISIONS = ("fp32", "fp16", "bf16")
TF32_MODES = {"default": (True, False), "off": (False, False), "on": (True, True)}  # cudnn, mm


@dataclass(frozen=True)
class ModelDef:
    """A model of the family: builder, input shape (C, H, W) at its seed size, classes."""

    name: str
    build: Callable[[], nn.Module]
    input_shape: tuple[int, int, int]
    num_classes: int
    params: int  # pinned in tests
    conv: bool  # channels_last applies

    @property
    def channels(self) -> int:
        """Input channels."""
        return self.input_shape[0]


MODELS: dict[str, ModelDef] = {
    d.name: d
    for d in [
        ModelDef("mlp", mlp, (1, 28, 28), 10, 669_706, conv=False),
        ModelDef("lenet", lenet, (3, 32, 32), 10, 62_006, conv=True),
        ModelDef("alexnet", alexnet, (3, 224, 224), 1000, 61_100_840, conv=True),
        ModelDef("vgg16", lambda: vgg("vgg16"), (3, 224, 224), 1000, 138_357_544, conv=True),
        ModelDef("resnet18", resnet18, (3, 32, 32), 10, 11_173_962, conv=True),
    ]
}

# The small CNN of the CPU-against-GPU cases: LeNet-5 on single-channel 28×28 images.
INFER_MODEL = ModelDef("lenet28", lambda: lenet(1, 28), (1, 28, 28), 10, 44_426, conv=True)


@dataclass(frozen=True)
class AmpCase:
    """One training-step benchmark: model, precision, batch, image side, layout, TF32, device."""

    family: ClassVar[str] = "amp"
    model: str
    precision: str  # "fp32" | "fp16" | "bf16"
    batch: int
    image: int  # square input side, px; channels from the model
    device: str  # "cpu" | "cuda"
    profile: str
    channels_last: bool = False
    tf32: str = "default"  # see TF32_MODES
    graphs: bool = False  # the whole step replayed from one CUDA graph: "-graphs"

    def __post_init__(self) -> None:
        if self.model not in MODELS:
            raise ValueError(f"unknown amp model {self.model!r}; choose from {sorted(MODELS)}")
        if self.precision not in PRECISIONS:
            raise ValueError(f"unknown precision {self.precision!r}; choose from {PRECISIONS}")
        if self.tf32 not in TF32_MODES:
            raise ValueError(f"unknown tf32 mode {self.tf32!r}; choose from {sorted(TF32_MODES)}")
        if self.channels_last and not self.defn.conv:
            raise ValueError(f"channels_last applies to conv nets only, not {self.model}")
        if self.batch < 1 or self.image < 1:
            raise ValueError(f"batch and image must be >= 1: {self}")
        if self.graphs and torch.device(self.device).type != "cuda":
            raise ValueError(f"graphs: CUDA graphs need a CUDA device, not {self.device!r}")

    @property
    def id(self) -> str:
        """Readable id, also the pytest id: ``resnet18-train-bf16-b128-32px-cl-graphs-cuda``."""
        cl = "-cl" if self.channels_last else ""
        tf32 = "" if self.tf32 == "default" else f"-tf32{self.tf32}"
        graphs = "-graphs" if self.graphs else ""
        return (
            f"{self.model}-train-{self.precision}-b{self.batch}-{self.image}px{cl}{tf32}"
            f"{graphs}-{self.device}"
        )

    @property
    def defn(self) -> ModelDef:
        """The model's registry entry."""
        return MODELS[self.model]

    @property
    def input_shape(self) -> tuple[int, int, int, int]:
        """(batch, channels, image, image)."""
        return (self.batch, self.defn.channels, self.image, self.image)

    @property
    def reference(self) -> AmpCase:
        """The fp32 case this one's speedup is taken against (same layout and TF32 mode)."""
        return replace(self, precision="fp32")

    @property
    def nchw(self) -> AmpCase:
        """The same case in the default (NCHW) layout."""
        return replace(self, channels_last=False)

    @property
    def eager(self) -> AmpCase:
        """The same step issued op by op (what a graphed case is checked and compared against)."""
        return replace(self, graphs=False)

    @property
    def profiled(self) -> bool:
        """Whether the case gets the loader-fed profiler pass: every eager NCHW case."""
        return not self.channels_last and not self.graphs

    @property
    def reads_energy(self) -> bool:
        """Whether the result reads an energy window: always, but in seed only if graphed.

        The seed profile is the nightly's: there an eager step's energy is its graphed
        twin's plus the idle draw while the GPU waits for the host, and a window costs
        6 s a case (1 s idle, 5 s window).
        """
        return self.graphs or self.profile != "seed"

    def as_dict(self) -> dict[str, Any]:
        """Plain dict for JSON."""
        return {**asdict(self), "family": self.family, "input_shape": list(self.input_shape)}


@dataclass(frozen=True)
class InferCase:
    """CPU against GPU inference of the small CNN (seed 001) at one batch size."""

    family: ClassVar[str] = "amp"
    batch: int
    device: str
    profile: str
    model: str = INFER_MODEL.name

    @property
    def id(self) -> str:
        """Readable id, also the pytest id: ``lenet28-infer-fp32-b10000-cuda``."""
        return f"{self.model}-infer-fp32-b{self.batch}-{self.device}"

    @property
    def reads_energy(self) -> bool:
        """Whether the result reads an energy window: not in the seed profile (the nightly's)."""
        return self.profile != "seed"

    def as_dict(self) -> dict[str, Any]:
        """Plain dict for JSON."""
        return {**asdict(self), "family": self.family, "input_shape": [self.batch, 1, 28, 28]}


# Per profile: (model, batch, image) on the GPU and on the CPU. The CPU trains only the small
# models: AlexNet's and VGG-16's fully connected heads (58 M and 120 M parameters) make one
# CPU step 0.3 s to 1.4 s.
GPU_SIZES = {
    "smoke": [
        ("mlp", 64, 28),
        ("lenet", 64, 32),
        ("alexnet", 8, 64),
        ("vgg16", 4, 64),
        ("resnet18", 16, 32),
    ],
    "seed": [
        ("mlp", 128, 28),
        ("lenet", 128, 32),
        ("alexnet", 128, 224),
        ("vgg16", 128, 224),
        ("resnet18", 128, 32),
    ],
    "full": [(m, b, MODELS[m].input_shape[1]) for m in MODELS for b in (64, 128, 256)],
}
CPU_SIZES = {
    "smoke": [("mlp", 32, 28), ("lenet", 32, 32), ("resnet18", 2, 16)],
    "seed": [("mlp", 128, 28), ("lenet", 128, 32), ("resnet18", 16, 32)],
    "full": [("mlp", 128, 28), ("lenet", 128, 32), ("resnet18", 32, 32)],
}
# Precisions of the eager steps and of the steps replayed from one CUDA graph (GPU only,
# TF32 default), per profile and device. The seed profile is the nightly's: fp32 and bf16,
# each eager and graphed, so that every model has its AMP speedup both ways; fp16 (a
# GradScaler that reads its overflow flag on the host every step), channels_last beyond
# VGG-16 bf16, and inference below batch 10000 run in smoke and full (docs/amp.md, "The
# seed profile").
EAGER_PRECISIONS: dict[str, dict[str, tuple[str, ...]]] = {
    "smoke": {"cpu": ("fp32", "bf16"), "cuda": PRECISIONS},
    "seed": {"cpu": ("fp32", "bf16"), "cuda": ("fp32", "bf16")},
    "full": {"cpu": ("fp32", "bf16"), "cuda": PRECISIONS},
}
GRAPHED_PRECISIONS: dict[str, dict[str, tuple[str, ...]]] = {
    "smoke": {"cpu": (), "cuda": PRECISIONS},
    "seed": {"cpu": (), "cuda": ("fp32", "bf16")},
    "full": {"cpu": (), "cuda": PRECISIONS},
}
# Conv nets that also run channels_last, and in which precisions, per profile and device.
CHANNELS_LAST: dict[str, dict[str, tuple[tuple[str, ...], tuple[str, ...]]]] = {
    "smoke": {"cpu": (("resnet18",), PRECISIONS), "cuda": (("resnet18",), PRECISIONS)},
    "seed": {"cpu": ((), ()), "cuda": (("vgg16",), ("bf16",))},
    "full": {
        "cpu": (("resnet18",), PRECISIONS),
        "cuda": (("lenet", "alexnet", "vgg16", "resnet18"), PRECISIONS),
    },
}
INFER_BATCHES = {
    "smoke": {"cpu": (100, 1000), "cuda": (100, 1000, 10000)},
    "seed": {"cpu": (100, 1000, 10000), "cuda": (10000,)},
    "full": {"cpu": (100, 1000, 10000), "cuda": (100, 1000, 10000)},
}


def cases(profile: str) -> list[AmpCase | InferCase]:
    """Every case of a profile: fp32 first, eager before graphed, NCHW before NHWC."""
    out: list[AmpCase | InferCase] = []
    for device, sizes in (("cpu", CPU_SIZES), ("cuda", GPU_SIZES)):
        eager = EAGER_PRECISIONS[profile][device]
        graphed = GRAPHED_PRECISIONS[profile][device]
        cl_models, cl_precisions = CHANNELS_LAST[profile][device]
        tf32s = ("default", "off", "on") if profile == "full" and device == "cuda" else ("default",)
        for model, batch, image in sizes[profile]:
            layouts = (False, True) if model in cl_models else (False,)
            for cl in layouts:
                for tf32 in tf32s:
                    # TF32 variants only change fp32 numbers: AMP and graphed cases keep the
                    # default
                    modes = [(False, eager if tf32 == "default" else ("fp32",))]
                    # graphed NHWC is the full profile's: the seed's one NHWC step is VGG-16's,
                    # which keeps the GPU busy eager
                    graphed_here = tf32 == "default" and not (cl and profile == "seed")
                    modes += [(True, graphed)] if graphed_here else []
                    for graphs, precisions in modes:
                        for precision in precisions:
                            if cl and precision not in cl_precisions:
                                continue
                            out.append(
                                AmpCase(
                                    model,
                                    precision,
                                    batch,
                                    image,
                                    device,
                                    profile,
                                    channels_last=cl,
                                    tf32=tf32,
                                    graphs=graphs,
                                )
                            )
        out += [InferCase(b, device, profile) for b in INFER_BATCHES[profile][device]]
    return out


@contextlib.contextmanager
def tf32_flags(mode: str) -> Iterator[dict[str, Any]]:
    """Set cuDNN's and cuBLAS's TF32 flags for ``mode``; restore them afterwards.

    Yields the flags as they are inside, read back from torch (what the result records).
    """
    cudnn_tf32, matmul_tf32 = TF32_MODES[mode]
    saved = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    torch.backends.cudnn.allow_tf32 = cudnn_tf32
    torch.backends.cuda.matmul.allow_tf32 = matmul_tf32
    try:
        yield current_tf32(mode)
    finally:
        torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = saved


def current_tf32(mode: str | None = None) -> dict[str, Any]:
    """The numerics flags an fp32 number depends on, as torch has them now."""
    return {
        "mode": mode,
        "cudnn_allow_tf32": torch.backends.cudnn.allow_tf32,
        "cuda_matmul_allow_tf32": torch.backends.cuda.matmul.allow_tf32,
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
        "cudnn_benchmark": torch.backends.cudnn.benchmark,
    }


def _autocast(device: str, precision: str) -> contextlib.AbstractContextManager[Any]:
    if precision == "fp32":
        return contextlib.nullcontext()
    dtype = torch.float16 if precision == "fp16" else torch.bfloat16
    return torch.autocast(torch.device(device).type, dtype=dtype)


def sgd(params: Iterable[nn.Parameter], fused: bool = False) -> torch.optim.SGD:
    """The family's optimizer: SGD, lr 0.01, momentum 0.9; torch's default kernels unless fused.

    ``fused``: one kernel that reads GradScaler's scale and overflow flag on the device
    (``_step_supports_amp_scaling``), so an fp16 step needs no host sync and a CUDA graph
    can capture it. Its momentum buffers start at zero: fused SGD makes them with
    ``empty_like`` on its first step and leaves them unwritten when GradScaler skips that
    step (an overflow), so the next step would read uninitialized memory. From zero, the
    first step that runs sets each buffer to 0.9 * 0 + grad = grad exactly, as SGD does.
    """
    params = list(params)
    opt = torch.optim.SGD(params, lr=0.01, momentum=0.9, fused=True if fused else None)
    if fused:
        for p in params:
            opt.state[p]["momentum_buffer"] = torch.zeros_like(p)
    return opt


class Trainer:
    """A model, its SGD optimizer and (fp16) GradScaler; :meth:`step` trains on one batch.

    ``fused``: the optimizer a CUDA graph can capture with GradScaler (:func:`sgd`).
    """

    def __init__(self, case: AmpCase, fused: bool = False) -> None:
        self.case = case
        layout = torch.channels_last if case.channels_last else torch.contiguous_format
        model = build_on(case.device, case.defn.build)
        self.model = model.to(memory_format=layout).train()
        self.opt = sgd(self.model.parameters(), fused)
        self.loss_fn = nn.CrossEntropyLoss()
        self.scaler = (
            torch.amp.GradScaler(torch.device(case.device).type)
            if case.precision == "fp16"
            else None
        )

    def to_device(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """A host batch on the case's device and in its layout."""
        x = x.to(self.case.device, non_blocking=True)
        if self.case.channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        return x, y.to(self.case.device, non_blocking=True)

    def step(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """One training step on a device batch; returns the loss (not read on the host)."""
        self.opt.zero_grad(set_to_none=True)
        with _autocast(self.case.device, self.case.precision):
            loss = self.loss_fn(self.model(x), y)
        if self.scaler is None:
            loss.backward()
            self.opt.step()
        else:
            self.scaler.scale(loss).backward()
            self.scaler.step(self.opt)
            self.scaler.update()
        return loss

    def calibrate_scale(self, x: torch.Tensor, y: torch.Tensor, max_steps: int = 30) -> dict:
        """Step until GradScaler stops lowering its scale (steps it skips are cheaper).

        Untimed, before the warm-up. Returns the scale reached and the steps taken.
        """
        if self.scaler is None:
            return {}
        for n in range(1, max_steps + 1):
            before = self.scaler.get_scale()
            self.step(x, y)
            if self.scaler.get_scale() >= before:
                return {"grad_scale": self.scaler.get_scale(), "calibration_steps": n}
        raise RuntimeError(
            f"{self.case.id}: GradScaler still lowering its scale after {max_steps} steps "
            f"(scale {self.scaler.get_scale()}): fp16 overflows on every step"
        )


def image_batch(shape: tuple[int, ...], classes: int, seed: int = 0) -> tuple[torch.Tensor, ...]:
    """Image-like inputs: uint8 pixels scaled to [0, 1], normalized by mean 0.5, std 0.5."""
    g = torch.Generator().manual_seed(seed)
    pixels = torch.randint(0, 256, shape, generator=g, dtype=torch.uint8)
    x = pixels.float().div_(255).sub_(0.5).div_(0.5)
    return x, torch.randint(0, classes, (shape[0],), generator=g)


@dataclass
class TrainStep:
    """The timed callable of a case (one training step on a fixed device batch)."""

    trainer: Trainer
    x: torch.Tensor
    y: torch.Tensor
    scaler_info: dict[str, Any]

    def __call__(self) -> torch.Tensor:
        """One step."""
        return self.trainer.step(self.x, self.y)


def make_step(case: AmpCase) -> TrainStep:
    """A fresh model, its optimizer and a fixed device batch; fp16's scale calibrated."""
    trainer = Trainer(case)
    x, y = trainer.to_device(*image_batch(case.input_shape, case.defn.num_classes))
    return TrainStep(trainer, x, y, trainer.calibrate_scale(x, y))
