"""The amp family at CPU sizes: models, cases, steps, agreement, profiler tables, loader share."""

from __future__ import annotations

import csv
import gzip
import io
import json
import math
import os
import subprocess
import sys
import weakref
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import pytest
import torch
import torchvision

from gpugauge.families.amp import FAMILY, comparisons
from gpugauge.families.amp.graphed import (
    CHECK_REPLAYS,
    GRAPH_TOLERANCE,
    WARMUP_STEPS,
    GraphedStep,
    check_graphed,
    compare_displacements,
    graphed_step,
    warm_up,
)
from gpugauge.families.amp.inference import (
    AGREE_TOL_FP32,
    AGREE_TOL_TF32,
    compare_outputs,
    cpu_reference,
    make_inference,
)
from gpugauge.families.amp.profiler import (
    HostImages,
    profile_pass,
)
from gpugauge.families.amp.tables import amp_table
from gpugauge.families.amp.workload import (
    INFER_MODEL,
    MODELS,
    AmpCase,
    InferCase,
    Trainer,
    cases,
    current_tf32,
    image_batch,
    make_step,
    sgd,
    tf32_flags,
)
from gpugauge.measure.busy import (
    HOST_BOUND_BELOW,
    BusyShare,
    busy_ms_per_step,
    measure_busy,
)
from gpugauge.measure.kernels import TraceError, kernel_table, parse_events, read_trace
from gpugauge.measure.profile import (
    LoaderShare,
    OpRow,
    ProfileSchedule,
    endless,
    loader_share,
    op_table,
    profile_steps,
    release_cupti_on_stop,
    to_markdown,
)
from gpugauge.measure.timing import HostClock, Timing, TimingPolicy
from gpugauge.models.alexnet import alexnet
from gpugauge.models.resnet import resnet18
from gpugauge.results.measurement import Measurement
from gpugauge.results.metrics import METRICS, Better, Kind
from gpugauge.results.runs import load_run

from .bench_run import run_bench_module


def n_params(m: torch.nn.Module) -> int:
    return sum(p.numel() for p in m.parameters())


# --- models ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(MODELS))
def test_documented_parameter_counts_and_input_shapes(name: str) -> None:
    d = MODELS[name]
    with torch.device("meta"):  # shapes only
        model = d.build()
        out = model(torch.empty(2, *d.input_shape))
    assert n_params(model) == d.params
    assert tuple(out.shape) == (2, d.num_classes)


def test_pinned_counts() -> None:
    assert {k: d.params for k, d in MODELS.items()} == {
        "mlp": 669_706,
        "lenet": 62_006,
        "alexnet": 61_100_840,
        "vgg16": 138_357_544,
        "resnet18": 11_173_962,
    }
    assert n_params(INFER_MODEL.build()) == INFER_MODEL.params == 44_426
    assert INFER_MODEL.input_shape == (1, 28, 28)


def test_alexnet_state_dict_matches_torchvision() -> None:
    with torch.device("meta"):
        ours = alexnet().state_dict()
        ref = torchvision.models.alexnet(weights=None).state_dict()
    assert {k: v.shape for k, v in ours.items()} == {k: v.shape for k, v in ref.items()}


def test_resnet18_is_the_cifar_variant() -> None:
    with torch.device("meta"):
        model = resnet18()
    assert model.conv1.kernel_size == (3, 3)
    assert model.conv1.stride == (1, 1)
    assert not any(isinstance(m, torch.nn.MaxPool2d) for m in model.modules())
    assert n_params(model) != n_params(torchvision.models.resnet18(num_classes=10))


# --- cases ----------------------------------------------------------------------------


def test_seed_profile_is_five_models_in_fp32_and_bf16_eager_and_graphed_on_the_gpu() -> None:
    seed = cases("seed")
    train = [c for c in seed if isinstance(c, AmpCase) and c.device == "cuda"]
    nchw = {(c.model, c.precision, c.graphs) for c in train if not c.channels_last}
    every = {(m, p, g) for m in MODELS for p in ("fp32", "bf16") for g in (False, True)}
    assert nchw == every
    assert {c.tf32 for c in train} == {"default"}
    assert [c.id for c in train if c.channels_last] == ["vgg16-train-bf16-b128-224px-cl-cuda"]
    vgg = [c for c in train if c.model == "vgg16"]
    assert {(c.batch, c.image) for c in vgg} == {(128, 224)}
    infer = [c for c in seed if isinstance(c, InferCase) and c.device == "cuda"]
    assert [c.id for c in infer] == ["lenet28-infer-fp32-b10000-cuda"]
    # the nightly reads energy windows for graphed steps only; every case in full
    assert {c.id for c in seed if c.reads_energy} == {c.id for c in train if c.graphs}
    assert all(c.reads_energy for c in cases("full"))


def test_seed_keeps_the_eager_ids_it_had() -> None:
    ids = {c.id for c in cases("seed")}
    kept = {
        f"{m}-train-{p}-b128-{px}px-cuda"
        for m, px in [
            ("mlp", 28),
            ("lenet", 32),
            ("alexnet", 224),
            ("vgg16", 224),
            ("resnet18", 32),
        ]
        for p in ("fp32", "bf16")
    }
    assert kept <= ids
    assert "vgg16-train-bf16-b128-224px-cl-cuda" in ids


def test_fp16_and_the_rest_move_to_full() -> None:
    full = {c.id for c in cases("full")}
    for moved in [
        "resnet18-train-fp16-b128-32px-cuda",
        "resnet18-train-fp16-b128-32px-graphs-cuda",
        "resnet18-train-bf16-b128-32px-cl-cuda",
        "lenet28-infer-fp32-b100-cuda",
    ]:
        assert moved in full
        assert moved not in {c.id for c in cases("seed")}


@pytest.mark.parametrize("profile", ["smoke", "seed", "full"])
def test_ids_unique_and_fp32_first(profile: str) -> None:
    all_cases = cases(profile)
    assert len({c.id for c in all_cases}) == len(all_cases)
    order = {c: i for i, c in enumerate(all_cases)}
    for c in all_cases:
        if isinstance(c, AmpCase) and c.precision != "fp32" and c.reference in order:
            assert order[c.reference] < order[c], c.id  # the speedup's reference ran before
        if isinstance(c, AmpCase) and not c.channels_last:
            assert c.reference in order, c.id  # every NCHW AMP case has its fp32 reference
        if isinstance(c, AmpCase) and c.channels_last:
            assert order[c.nchw] < order[c], c.id
        if isinstance(c, AmpCase) and c.graphs:
            assert order[c.eager] < order[c], c.id  # every graphed step has its eager one


def test_cpu_smoke_runs_fp32_and_bf16_only() -> None:
    cpu = [c for c in cases("smoke") if isinstance(c, AmpCase) and c.device == "cpu"]
    assert {c.precision for c in cpu} == {"fp32", "bf16"}
    assert any(c.channels_last for c in cpu)
    assert any(c.profiled for c in cpu)


def test_graphed_cases_are_cuda_only_and_read_well() -> None:
    c = AmpCase("resnet18", "bf16", 128, 32, "cuda", "seed", graphs=True)
    assert c.id == "resnet18-train-bf16-b128-32px-graphs-cuda"
    assert replace(c, channels_last=True).id == "resnet18-train-bf16-b128-32px-cl-graphs-cuda"
    assert not c.profiled  # the loader-fed profiler pass is the eager step's
    assert c.eager == replace(c, graphs=False)
    assert c.eager.id == "resnet18-train-bf16-b128-32px-cuda"
    assert c.reference.graphs  # AMP speedups pair graphed with graphed
    assert c.as_dict()["graphs"] is True
    with pytest.raises(ValueError, match="CUDA graphs need a CUDA device"):
        replace(c, device="cpu")
    smoke = cases("smoke")
    assert not [x for x in smoke if isinstance(x, AmpCase) and x.graphs and x.device == "cpu"]
    assert {x.precision for x in smoke if isinstance(x, AmpCase) and x.graphs} == {
        "fp32",
        "fp16",
        "bf16",
    }


def _amp_bench(*args: str) -> subprocess.CompletedProcess:
    """``pytest benches/test_amp.py ARGS`` from the checkout; it must pass."""
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "benches/test_amp.py", "-p", "no:cacheprovider", *args],
        cwd=Path(__file__).resolve().parents[1],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return proc


@pytest.mark.slow
def test_graphed_cases_skip_on_the_cpu_with_the_reason(tmp_path: Path) -> None:
    proc = _amp_bench("-k", "graphs", "--gauge-profile", "smoke", "-rs", "-q",
                      f"--gauge-artifacts-dir={tmp_path}")  # fmt: skip
    assert "18 skipped" in proc.stdout
    assert "needs a CUDA GPU" in proc.stdout
    assert "passed" not in proc.stdout


@pytest.mark.slow
def test_skip_extras_keeps_the_time_and_drops_the_profiler_pass(tmp_path: Path) -> None:
    # what `gpugauge ab` sets on both sides: the timed result only, none of the work beside it
    def run(*flags: str) -> tuple[dict, dict, list[Path]]:
        out, art = tmp_path / f"run{len(flags)}.json", tmp_path / f"art{len(flags)}"
        _amp_bench("-q", "--gauge-profile", "smoke", "-k", "mlp-train-fp32 and cpu",
                   f"--gauge-artifacts-dir={art}", f"--benchmark-json={out}", *flags)  # fmt: skip
        data = json.loads(out.read_text())
        (bench,) = data["benchmarks"]
        files = [p for p in art.rglob("*") if p.is_file()]
        return data["gpugauge"]["options"], bench["extra_info"], files

    full, info, files = run()
    assert not full["skip_extras"]
    assert any(f.name.startswith("ops_by_self_cpu") for f in files)
    skipped, lean, none = run("--gauge-skip-extras")
    assert skipped["skip_extras"]  # said in the run's saved options, and its header
    assert none == []
    assert lean["artifacts"] == {}
    assert lean["timing"]["device_ms"]  # the time is kept
    assert set(info["extra"]) > set(lean["extra"])
    # the nightly's: no profiler tables, the judged results and the checks as before
    judged, kept, no_tables = run("--gauge-skip-diagnostics")
    assert judged["skip_diagnostics"]
    assert not judged["skip_extras"]
    assert not any(f.name.startswith("ops_by") for f in no_tables)
    assert "profile" not in kept["extra"]
    assert "loader" not in kept["extra"]
    assert kept["timing"]["device_ms"]
    assert kept["extra"]["grad_scaler"] == info["extra"]["grad_scaler"]


def test_case_ids_read_well() -> None:
    c = AmpCase("resnet18", "bf16", 128, 32, "cuda", "seed", channels_last=True)
    assert c.id == "resnet18-train-bf16-b128-32px-cl-cuda"
    assert AmpCase("vgg16", "fp32", 8, 64, "cuda", "full", tf32="off").id == (
        "vgg16-train-fp32-b8-64px-tf32off-cuda"
    )
    assert c.reference.precision == "fp32"
    assert c.reference.channels_last
    assert InferCase(100, "cuda", "seed").id == "lenet28-infer-fp32-b100-cuda"


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"model": "gpt2"}, "unknown amp model"),
        ({"precision": "fp8"}, "unknown precision"),
        ({"tf32": "maybe"}, "unknown tf32 mode"),
        ({"model": "mlp", "channels_last": True}, "conv nets only"),
        ({"batch": 0}, "must be >= 1"),
    ],
)
def test_bad_cases_are_refused(kw: dict, message: str) -> None:
    base = dict(model="lenet", precision="fp32", batch=2, image=32, device="cpu", profile="smoke")
    with pytest.raises(ValueError, match=message):
        AmpCase(**{**base, **kw})


# --- TF32 flags -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("mode", "cudnn", "matmul"), [("off", 0, 0), ("on", 1, 1), ("default", 1, 0)]
)
def test_tf32_flags_are_set_recorded_and_restored(mode: str, cudnn: int, matmul: int) -> None:
    before = current_tf32()
    torch.backends.cudnn.allow_tf32 = not cudnn  # start from the opposite
    torch.backends.cuda.matmul.allow_tf32 = not matmul
    try:
        inside: dict = {}

        def fail_inside() -> None:
            with tf32_flags(mode) as flags:
                inside.update(flags, now=torch.backends.cudnn.allow_tf32)
                raise RuntimeError("restored even so")

        with pytest.raises(RuntimeError, match="restored even so"):
            fail_inside()
        assert inside["cudnn_allow_tf32"] is bool(cudnn)
        assert inside["cuda_matmul_allow_tf32"] is bool(matmul)
        assert inside["now"] is bool(cudnn)
        assert torch.backends.cudnn.allow_tf32 is (not cudnn)
        assert torch.backends.cuda.matmul.allow_tf32 is (not matmul)
    finally:
        torch.backends.cudnn.allow_tf32 = before["cudnn_allow_tf32"]
        torch.backends.cuda.matmul.allow_tf32 = before["cuda_matmul_allow_tf32"]


# --- training steps -------------------------------------------------------------------


def small(**kw: object) -> AmpCase:
    base = dict(model="lenet", precision="fp32", batch=4, image=32, device="cpu", profile="smoke")
    return AmpCase(**{**base, **kw})


@pytest.mark.parametrize("precision", ["fp32", "bf16", "fp16"])
def test_a_step_trains_the_model(precision: str) -> None:
    step = make_step(small(precision=precision))
    before = [p.detach().clone() for p in step.trainer.model.parameters()]
    loss = step()
    assert torch.isfinite(loss)
    assert loss.dtype == torch.float32  # cross-entropy autocasts to fp32
    moved = [
        not torch.equal(a, b) for a, b in zip(before, step.trainer.model.parameters(), strict=True)
    ]
    assert all(moved)
    if precision == "fp16":
        assert step.scaler_info["calibration_steps"] >= 1
        assert step.scaler_info["grad_scale"] > 0
    else:
        assert step.scaler_info == {}


def test_bf16_autocast_runs_convs_in_bf16() -> None:
    step = make_step(small(precision="bf16"))
    seen: list[torch.dtype] = []
    conv = step.trainer.model.features[0]
    handle = conv.register_forward_hook(lambda m, i, o: seen.append(o.dtype))
    step()
    handle.remove()
    assert seen == [torch.bfloat16]


def test_channels_last_puts_weights_and_inputs_in_nhwc() -> None:
    step = make_step(small(channels_last=True))
    conv = step.trainer.model.features[0]
    assert conv.weight.is_contiguous(memory_format=torch.channels_last)
    assert step.x.is_contiguous(memory_format=torch.channels_last)
    assert not step.x.is_contiguous()
    x, _ = step.trainer.to_device(torch.randn(4, 3, 32, 32), torch.zeros(4, dtype=torch.long))
    assert x.is_contiguous(memory_format=torch.channels_last)
    step()


def test_fp16_calibration_fails_when_every_step_overflows() -> None:
    trainer = Trainer(small(precision="fp16"))
    real = trainer.loss_fn
    trainer.loss_fn = lambda out, y: real(out, y) * float("inf")  # type: ignore[assignment]
    x, y = torch.randn(4, 3, 32, 32), torch.zeros(4, dtype=torch.long)
    with pytest.raises(RuntimeError, match="overflows on every step"):
        trainer.calibrate_scale(x, y, max_steps=5)


def test_sgd_is_torchs_default_unless_fused() -> None:
    params = [torch.nn.Parameter(torch.ones(3))]
    plain = sgd(params)
    assert plain.defaults["fused"] is None  # fused=False would turn foreach off as well
    assert plain.defaults["foreach"] is None
    assert not plain.state
    fused = sgd(params, fused=True)
    assert fused.defaults["fused"] is True
    assert fused._step_supports_amp_scaling  # GradScaler hands it scale and overflow flag
    assert torch.equal(fused.state[params[0]]["momentum_buffer"], torch.zeros(3))


def test_fused_fp16_step_equals_the_eager_one_through_skipped_steps() -> None:
    """The optimizer a graph captures with GradScaler gives the eager step's result, also
    when GradScaler skips the first steps (fused SGD would read uninitialized momentum)."""
    case = small(precision="fp16")
    eager, fused = Trainer(case), Trainer(case, fused=True)
    for t in (eager, fused):
        t.scaler = torch.amp.GradScaler("cpu", init_scale=2.0**24)  # overflows at first
    x, y = image_batch(case.input_shape, 10)
    names = [n for n, _ in eager.model.named_parameters()]
    init = [p.detach().clone() for p in eager.model.parameters()]
    for _ in range(12):
        eager.step(x, y)
        fused.step(x, y)
    assert eager.scaler.get_scale() < 2.0**24  # some steps were skipped
    check = compare_displacements(
        names,
        init,
        list(eager.model.parameters()),
        list(fused.model.parameters()),
        "fp16",
        12,
        0,
        (eager.scaler.get_scale(), fused.scaler.get_scale()),
    )
    assert check.ok, check.message()
    assert check.rel_diff < 1e-5


# --- the graphed step's check against the eager step -------------------------------------

NAMES = ["w", "b"]


def params_after(init: list[torch.Tensor], *moves: torch.Tensor) -> list[torch.Tensor]:
    return [p + m for p, m in zip(init, moves, strict=True)]


def test_displacements_compare_what_the_steps_changed() -> None:
    init = [torch.full((4, 4), 10.0), torch.zeros(4)]
    eager = params_after(init, torch.full((4, 4), 0.01), torch.full((4,), 0.001))
    same = compare_displacements(NAMES, init, eager, eager, "fp32", 6, 3)
    assert same.rel_diff == 0.0
    assert same.ok
    assert same.tolerance == GRAPH_TOLERANCE["fp32"]
    assert same.eager_norm == pytest.approx(math.sqrt(16 * 1e-4 + 4 * 1e-6), rel=1e-4)
    # one step of six missing: 1/6 of the displacement, far beyond every tolerance, though
    # the parameters themselves differ by 1e-4 of their size
    short = params_after(init, torch.full((4, 4), 0.01 * 5 / 6), torch.full((4,), 0.001 * 5 / 6))
    missing = compare_displacements(NAMES, init, eager, short, "bf16", 6, 3)
    assert missing.rel_diff == pytest.approx(1 / 6, rel=1e-3)  # fp32 rounding of 10.01
    assert not missing.ok
    assert "tolerance 0.01" in missing.message()


def test_displacement_tolerance_is_looser_under_autocast() -> None:
    init = [torch.zeros(100), torch.zeros(10)]
    eager = params_after(init, torch.ones(100), torch.ones(10))
    noise = 1e-3  # relative: what autocast's rounding may leave, not what fp32 may
    near = params_after(eager, torch.full((100,), noise), torch.full((10,), noise))
    assert not compare_displacements(NAMES, init, eager, near, "fp32", 6, 3).ok
    assert compare_displacements(NAMES, init, eager, near, "bf16", 6, 3).ok
    assert compare_displacements(NAMES, init, eager, near, "fp16", 6, 3).ok
    within = params_after(eager, torch.full((100,), 5e-5), torch.zeros(10))
    assert compare_displacements(NAMES, init, eager, within, "fp32", 6, 3).ok


def test_displacement_check_names_the_worst_tensor_and_refuses_nonsense() -> None:
    init = [torch.zeros(3), torch.zeros(2)]
    eager = params_after(init, torch.ones(3), torch.full((2,), 1e-3))
    bias_off = params_after(init, torch.ones(3), torch.full((2,), 2e-3))
    check = compare_displacements(NAMES, init, eager, bias_off, "bf16", 6, 3)
    assert check.worst == "b"
    assert check.worst_rel_diff == pytest.approx(1.0)
    assert check.ok  # the bias moves little: judged on all parameters at once
    still = compare_displacements(NAMES, init, init, init, "fp32", 6, 3)
    assert not still.ok  # the eager steps did not train: nothing was checked
    scaled = compare_displacements(NAMES, init, eager, eager, "fp16", 6, 3, (1024.0, 2048.0))
    assert not scaled.ok
    assert "scale eager 1024 graphed 2048" in scaled.message()
    assert scaled.as_dict()["ok"] is False
    with pytest.raises(ValueError, match="same parameters"):
        compare_displacements(NAMES, init, eager[:1], eager, "fp32", 6, 3)
    with pytest.raises(ValueError, match="shapes differ"):
        compare_displacements(NAMES, init, eager, [torch.zeros(4), torch.zeros(2)], "fp32", 6, 3)


def eager_stand_in(replay: str = "step") -> Callable[..., GraphedStep]:
    """What :func:`capture` does, but the 'replay' runs eagerly (a CPU has no graphs)."""

    def make(trainer: Trainer, x: torch.Tensor, y: torch.Tensor) -> GraphedStep:
        steps, scaler = warm_up(trainer, x, y)
        run = {
            "step": lambda: trainer.step(x, y),
            "nothing": lambda: None,  # a graph never replayed, or replayed on stale buffers
            "twice": lambda: (trainer.step(x, y), trainer.step(x, y)),
        }[replay]
        return GraphedStep(trainer, x, y, run, None, steps, scaler)

    return make


@pytest.mark.parametrize("precision", ["fp32", "bf16", "fp16"])
def test_check_graphed_passes_the_same_step(precision: str) -> None:
    step, check = check_graphed(small(precision=precision), make=eager_stand_in())
    assert check.ok, check.message()
    assert check.steps == step.warmup_steps + CHECK_REPLAYS >= WARMUP_STEPS + CHECK_REPLAYS
    if precision == "fp16":  # fused SGD against the eager default: rounding only
        assert step.info()["optimizer"] == "SGD fused"
        assert check.scales is not None
        assert check.scales[0] == check.scales[1]
        assert check.rel_diff < 1e-5
    else:  # the same kernels on a CPU
        assert step.info()["optimizer"] == "SGD"
        assert check.rel_diff == 0.0


def test_check_runs_deterministic_and_the_timed_step_is_captured_apart() -> None:
    """fp32 cuDNN weight gradients do not repeat themselves (run 67): the check is
    judged with deterministic algorithms, the timed graph captured again with the default."""
    seen: list[tuple[bool, GraphedStep]] = []
    stand_in = eager_stand_in()

    def make(trainer: Trainer, x: torch.Tensor, y: torch.Tensor) -> GraphedStep:
        step = stand_in(trainer, x, y)
        seen.append((torch.backends.cudnn.deterministic, step))
        return step

    before = torch.backends.cudnn.deterministic
    step, check = check_graphed(small(precision="fp32"), make=make)
    assert check.ok
    assert check.rel_diff == 0.0
    assert [deterministic for deterministic, _ in seen] == [True, False]
    assert step is seen[1][1]  # the timed step is the second capture, not the checked one
    checked = weakref.ref(seen[0][1].trainer)
    seen.pop(0)
    assert checked() is None  # check_graphed kept no reference to the checked graph's side
    assert torch.backends.cudnn.deterministic is before


def test_graphed_step_without_the_check_captures_once() -> None:
    """An A/B (--gauge-skip-extras) times the graphed step without the check's two models."""
    seen: list[bool] = []
    stand_in = eager_stand_in()

    def make(trainer: Trainer, x: torch.Tensor, y: torch.Tensor) -> GraphedStep:
        seen.append(torch.backends.cudnn.deterministic)
        return stand_in(trainer, x, y)

    step = graphed_step(small(precision="fp32"), make=make)
    assert seen == [torch.backends.cudnn.deterministic]  # one capture, cuDNN's own choice
    assert step.warmup_steps >= WARMUP_STEPS
    assert step() is None  # the stand-in's replay: one eager step


@pytest.mark.parametrize("replay", ["nothing", "twice"])
def test_check_graphed_fails_a_wrong_replay(replay: str) -> None:
    _, check = check_graphed(small(precision="bf16"), make=eager_stand_in(replay))
    assert not check.ok
    assert check.rel_diff > 10 * check.tolerance


# --- the GPU-busy share -----------------------------------------------------------------


def test_busy_time_is_the_union_of_device_intervals_per_step() -> None:
    # two steps: kernels on two streams overlap (0-30 and 20-50 µs: 50 µs), a gap, a copy
    intervals = [(0.0, 30.0), (20.0, 50.0), (100.0, 150.0), (150.0, 160.0), (200.0, 200.0)]
    assert busy_ms_per_step(intervals, steps=2) == pytest.approx((50 + 60) / 1e3 / 2)
    assert busy_ms_per_step([], steps=1) == 0.0
    assert busy_ms_per_step([(5.0, 10.0), (0.0, 20.0)], steps=1) == pytest.approx(0.02)
    with pytest.raises(ValueError, match="steps must be >= 1"):
        busy_ms_per_step(intervals, steps=0)


def test_busy_share_marks_eager_steps_host_bound_below_the_threshold() -> None:
    host = BusyShare(loop_ms=(1.0, 1.2, 1.1), busy_ms=0.165, profiled_steps=3)
    assert host.step_ms == pytest.approx(1.1)
    assert host.share == pytest.approx(0.15)
    assert host.host_bound is True
    gpu = BusyShare(loop_ms=(7.2,), busy_ms=6.9, profiled_steps=3)
    assert gpu.host_bound is False
    assert gpu.threshold == HOST_BOUND_BELOW == 0.8
    graphed = BusyShare(loop_ms=(0.2,), busy_ms=0.12, profiled_steps=3, graphed=True)
    assert graphed.share == pytest.approx(0.6)
    assert graphed.host_bound is None  # one launch a step: the host does not pace it
    d = host.as_dict()
    assert d["share"] == pytest.approx(0.15)
    assert d["host_bound"] is True
    assert d["loop_ms"] == [1.0, 1.2, 1.1]
    with pytest.raises(ValueError, match="positive step times"):
        BusyShare(loop_ms=(), busy_ms=0.1, profiled_steps=3)
    with pytest.raises(ValueError, match="positive step times"):
        BusyShare(loop_ms=(1.0,), busy_ms=-0.1, profiled_steps=3)


def test_a_busy_share_is_at_most_one_and_says_when_it_was_clamped() -> None:
    """Issue 38: graphed H200 steps read 1.005-1.016 busy: device activity from the
    profiled pass, wall time from the plain loop, two passes over a device-bound step. A
    share is at most 1; the record keeps what was measured and says why it was clamped."""
    graphed = BusyShare(loop_ms=(2.0, 2.0, 2.0), busy_ms=2.032, profiled_steps=3, graphed=True)
    assert graphed.share == 1.0
    assert graphed.ratio == pytest.approx(1.016)
    assert "measured 1.016" in graphed.clamped
    assert "a share is at most 1" in graphed.clamped
    d = graphed.as_dict()
    assert d["share"] == 1.0
    assert d["ratio"] == pytest.approx(1.016)
    assert d["clamped"] == graphed.clamped
    eager = BusyShare(loop_ms=(2.0,), busy_ms=2.01, profiled_steps=3)
    assert eager.share == 1.0
    assert eager.host_bound is False
    inside = BusyShare(loop_ms=(2.0,), busy_ms=1.9, profiled_steps=3)
    assert inside.share == pytest.approx(0.95)
    assert inside.clamped is None


def test_busy_share_needs_a_cuda_device(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="needs a CUDA device"):
        measure_busy(lambda: None, "cpu", tmp_path / "t.json")


def test_gpu_busy_is_a_registered_value_metric() -> None:
    m = METRICS["gpu_busy"]
    assert m.kind is Kind.VALUE
    assert m.better is Better.HIGHER
    assert m.unit == "fraction"


# --- comparisons and the eager-vs-graphed table -----------------------------------------

H100 = "nvidia-h100-80gb-hbm3"


def gpu_result(case: AmpCase, ms: float, busy: float | None = None) -> Measurement:
    """A GPU result of ``case`` with every round at ``ms`` and its busy share."""
    timing = Timing((ms,) * 8, (ms,) * 8, "cuda_event", 1, 0.0, "fixed rounds", False)
    values, extra = {}, {}
    if busy is not None:
        share = BusyShare(loop_ms=(1.0,), busy_ms=busy, profiled_steps=3, graphed=case.graphs)
        values, extra = {"gpu_busy": busy}, {"busy": share.as_dict()}
    return Measurement(case, timing=timing, values=values, extra=extra, device_class=H100)


def gpu_case(model: str, precision: str, graphs: bool = False) -> AmpCase:
    image = MODELS[model].input_shape[1]
    return AmpCase(model, precision, 128, image, "cuda", "seed", graphs=graphs)


def table_results() -> list[Measurement]:
    return [
        gpu_result(gpu_case("mlp", "fp32"), 1.06, 0.15),
        gpu_result(gpu_case("mlp", "bf16"), 2.3, 0.07),
        gpu_result(gpu_case("mlp", "fp32", graphs=True), 0.17, 0.9),
        gpu_result(gpu_case("mlp", "bf16", graphs=True), 0.134, 0.85),
        gpu_result(gpu_case("vgg16", "fp32"), 92.0, 0.99),
        gpu_result(gpu_case("vgg16", "bf16"), 55.0, 0.98),
        gpu_result(gpu_case("vgg16", "fp32", graphs=True), 91.8, 1.0),
        gpu_result(replace(gpu_case("vgg16", "bf16"), channels_last=True), 36.6),
        gpu_result(gpu_case("resnet18", "fp32"), 8.5, 0.79),  # no graphed step in this run
    ]


def test_comparisons_pair_graphed_with_eager_and_precisions_within_each() -> None:
    pairs = {(c.title, c.baseline.id, c.candidate.id) for c in comparisons(table_results())}
    assert pairs == {
        ("mlp b128 NCHW cuda", "mlp-train-fp32-b128-28px-cuda", "mlp-train-bf16-b128-28px-cuda"),
        (
            "mlp b128 NCHW cuda graphed",
            "mlp-train-fp32-b128-28px-graphs-cuda",
            "mlp-train-bf16-b128-28px-graphs-cuda",
        ),
        (
            "mlp b128 fp32 NCHW cuda graphs",
            "mlp-train-fp32-b128-28px-cuda",
            "mlp-train-fp32-b128-28px-graphs-cuda",
        ),
        (
            "mlp b128 bf16 NCHW cuda graphs",
            "mlp-train-bf16-b128-28px-cuda",
            "mlp-train-bf16-b128-28px-graphs-cuda",
        ),
        (
            "vgg16 b128 NCHW cuda",
            "vgg16-train-fp32-b128-224px-cuda",
            "vgg16-train-bf16-b128-224px-cuda",
        ),
        (
            "vgg16 b128 fp32 NCHW cuda graphs",
            "vgg16-train-fp32-b128-224px-cuda",
            "vgg16-train-fp32-b128-224px-graphs-cuda",
        ),
        (
            "vgg16 b128 bf16 cuda layout",
            "vgg16-train-bf16-b128-224px-cuda",
            "vgg16-train-bf16-b128-224px-cl-cuda",
        ),
    }
    labels = {(c.baseline_label, c.candidate_label) for c in comparisons(table_results())}
    assert ("eager", "graphed") in labels
    speedup = next(
        c for c in comparisons(table_results()) if c.title == "mlp b128 NCHW cuda graphed"
    )
    assert speedup.speedup.value == pytest.approx(0.17 / 0.134)


AMP_TABLE = """\
amp eager vs graphed
step                     precision  eager ms  graphed ms  graphed x  busy eager / graphed  host-bound  AMP eager  AMP graphed  GPU's answer
-----------------------  ---------  --------  ----------  ---------  --------------------  ----------  ---------  -----------  ------------
mlp b128 28px NCHW            fp32      1.06        0.17      6.24x             15% / 90%         yes        ref          ref       graphed
mlp b128 28px NCHW            bf16       2.3       0.134     17.16x              7% / 85%         yes      0.46x        1.27x       graphed
vgg16 b128 224px NCHW         fp32        92        91.8      1.00x            99% / 100%          no        ref          ref        either
vgg16 b128 224px NCHW         bf16        55           -          -               98% / -          no      1.67x            -        either
vgg16 b128 224px NHWC         bf16      36.6           -          -                 - / -           -          -            -             -
resnet18 b128 32px NCHW       fp32       8.5           -          -               79% / -         yes        ref            -          none
GPU busy: device activity / wall time of a step in a plain loop. Host-bound: the eager step's share is below 80%.
GPU's answer: 'graphed' where the eager step is host-bound (its time and AMP speedup are the host's); 'either' where the eager step keeps the GPU busy; 'none' where it is host-bound and no graphed step was timed.
AMP: fp32 median / this median, eager over eager and graphed over graphed."""  # noqa: E501


def test_eager_vs_graphed_table_golden() -> None:
    assert amp_table(table_results()) == AMP_TABLE
    assert FAMILY.tables(table_results()) == {"amp eager vs graphed": AMP_TABLE}
    # a report renders it from the saved results, read back without their specs' classes
    saved = [Measurement.from_dict(m.as_dict()) for m in table_results()]
    assert amp_table(saved) == AMP_TABLE
    assert len(comparisons(saved)) == len(comparisons(table_results()))


def test_no_table_without_gpu_training_steps() -> None:
    cpu = small(device="cpu")
    timing = Timing((1.0,) * 4, (1.0,) * 4, "perf_counter", 1, 0.0, "fixed rounds", False)
    assert FAMILY.tables([Measurement(cpu, timing=timing, device_class="cpu-x86_64")]) == {}


# --- CPU against GPU agreement ----------------------------------------------------------

FP32 = {"cudnn_allow_tf32": False, "cuda_matmul_allow_tf32": False}
TF32 = {"cudnn_allow_tf32": True, "cuda_matmul_allow_tf32": False}


def test_agreement_within_and_beyond_tolerance() -> None:
    ref = torch.tensor([[1.0, -2.0], [0.5, 4.0]])
    same = compare_outputs(ref, ref.clone(), FP32)
    assert same.ok
    assert same.max_abs_err == 0
    assert same.argmax_agree == 1.0
    near = compare_outputs(ref, ref + 4 * AGREE_TOL_FP32 / 2, FP32)  # 2e-4 of max |ref| 4
    assert near.rel_err == pytest.approx(AGREE_TOL_FP32 / 2, rel=1e-3)
    assert near.ok
    far = compare_outputs(ref, ref + 4 * AGREE_TOL_FP32 * 2, FP32)
    assert not far.ok
    assert compare_outputs(ref, ref + 4 * AGREE_TOL_FP32 * 2, TF32).ok  # looser under TF32
    assert compare_outputs(ref, ref, TF32).tolerance == AGREE_TOL_TF32
    swapped = compare_outputs(ref, ref[:, [1, 0]], FP32)
    assert swapped.argmax_agree == 0.0
    assert not swapped.ok


def test_agreement_refuses_different_shapes() -> None:
    with pytest.raises(ValueError, match="output shapes differ"):
        compare_outputs(torch.zeros(2, 10), torch.zeros(2, 9), FP32)


def test_inference_is_the_same_model_and_input_on_each_build() -> None:
    a, b = (
        make_inference(InferCase(100, "cpu", "smoke"), "cpu"),
        make_inference(InferCase(100, "cpu", "smoke"), "cpu"),
    )
    assert a.x.shape == (100, 1, 28, 28)
    out = a()
    assert out.shape == (100, 10)
    assert torch.equal(out, b())
    assert compare_outputs(out, b(), FP32).ok


def test_cpu_reference_checks_then_times_the_cpu_side() -> None:
    case = InferCase(100, "cuda", "seed")
    other = make_inference(case, "cpu")  # stands in for the GPU run: same weights and input
    m, side = cpu_reference(case, other, TimingPolicy(warmup_rounds=1, rounds=3), FP32)
    assert m.spec.device == "cpu"
    assert m.id == "lenet28-infer-fp32-b100-cpu"
    assert m.timing is not None
    assert len(m.timing.device_ms) == 3
    assert side["agreement"]["ok"]
    assert side["agreement"]["max_abs_err"] == 0.0
    assert side["cpu"]["throughput_items_per_s"] == pytest.approx(100 / (m.summary.median / 1e3))
    # a different model must fail the check
    with torch.no_grad():
        other.model.classifier[-1].bias.add_(1.0)
    _, bad = cpu_reference(case, other, TimingPolicy(warmup_rounds=0, rounds=1), FP32)
    assert not bad["agreement"]["ok"]


# --- profiler tables ------------------------------------------------------------------


def row(name: str, cpu: float, dev: float) -> OpRow:
    return OpRow(name, 1, cpu, cpu, dev, dev)


def test_op_tables_sort_and_drop_zero_rows() -> None:
    rows = [row("a", 5, 0), row("b", 1, 9), row("c", 3, 2)]
    assert [r.name for r in op_table(rows, "self_device")] == ["b", "c"]
    assert [r.name for r in op_table(rows, "self_cpu")] == ["a", "c", "b"]
    with pytest.raises(ValueError, match="unknown sort key"):
        op_table(rows, "total")


TRACE = {
    "traceEvents": [
        {"ph": "X", "cat": "kernel", "name": "sgemm_128x64", "ts": 0.0, "dur": 30.0},
        {"ph": "X", "cat": "kernel", "name": "sgemm_128x64", "ts": 40.0, "dur": 10.0},
        {
            "ph": "X",
            "cat": "gpu_memcpy",
            "name": "Memcpy HtoD (Pageable -> Device)",
            "ts": 60.0,
            "dur": 60.0,
        },
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 0.0, "dur": 500.0},
        {"ph": "f", "cat": "kernel", "name": "flow", "ts": 1.0},
    ]
}


def test_kernel_table_is_nvprof_like() -> None:
    acts = parse_events(TRACE["traceEvents"])
    assert sum(a.on_device for a in acts) == 3
    table = kernel_table(acts, top=None)
    assert table.on_device
    assert [(r.name, r.calls, r.total_us, r.min_us, r.max_us) for r in table.rows] == [
        ("[CUDA memcpy HtoD]", 1, 60.0, 60.0, 60.0),
        ("sgemm_128x64", 2, 40.0, 10.0, 30.0),
    ]
    assert table.rows[1].avg_us == 20.0
    assert table.percent(table.rows[1]) == pytest.approx(40.0)  # of all device time
    parsed = list(csv.DictReader(io.StringIO(table.to_csv())))
    assert [r["name"] for r in parsed] == ["[CUDA memcpy HtoD]", "sgemm_128x64"]
    assert parsed[1]["total_us"] == "40.000"
    assert parsed[1]["avg_us"] == "20.000"
    assert float(parsed[1]["time_pct"]) == pytest.approx(40.0)
    md = table.head(1).to_markdown("amp")
    assert "| GPU activities | 60.00% | 60.00us | 1 | 60.00us | 60.00us | 60.00us |" in md
    assert "sgemm" not in md.split("\n\n")[1]
    assert "1 of 2 names, 60.0% of 100.00us total gpu activities." in md


def test_traces_load_plain_or_gzipped_and_others_are_refused(tmp_path: Path) -> None:
    plain = tmp_path / "t.json"
    plain.write_text(json.dumps(TRACE))
    zipped = tmp_path / "t.json.gz"
    zipped.write_bytes(gzip.compress(json.dumps(TRACE).encode()))
    assert read_trace(plain) == read_trace(zipped) == parse_events(TRACE["traceEvents"])
    bad = tmp_path / "bad.json"
    bad.write_text('{"traceEvents": 3}')
    with pytest.raises(TraceError, match="not a readable profiler trace"):
        read_trace(bad)


def test_markdown_escapes_pipes() -> None:
    md = to_markdown(["name", "ms"], [["a|b", "1.0"]], "title")
    assert "| a\\|b | 1.0 |" in md
    assert md.startswith("**title**")
    assert "| --- | --- |" in md


def test_schedule_validates() -> None:
    assert ProfileSchedule(1, 1, 3).steps == 5
    with pytest.raises(ValueError, match="invalid profiler schedule"):
        ProfileSchedule(active=0)


def test_profile_steps_on_the_cpu(tmp_path: Path) -> None:
    model = torch.nn.Linear(16, 16)
    x = torch.randn(4, 16)
    prof = profile_steps(
        lambda: model(x).sum().backward(), tmp_path / "p.pt.trace.json", device="cpu"
    )
    names = {r.name for r in prof.rows}
    assert "aten::addmm" in names
    step = next(r for r in prof.rows if r.name.startswith("ProfilerStep"))
    assert step.calls == ProfileSchedule().active
    assert prof.self_cpu_total_us > 0
    assert prof.self_device_total_us == 0
    trace = read_trace(prof.trace)
    assert any(a.cat == "cpu_op" for a in trace)
    assert not any(a.on_device for a in trace)
    assert not prof.kernels().on_device  # a CPU trace: the table is CPU operators


def test_profilers_have_cupti_torn_down_unless_told_otherwise(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TEARDOWN_CUPTI", "x")  # records the real value, restored after
    monkeypatch.delenv("TEARDOWN_CUPTI")
    profile_steps(lambda: torch.ones(2).sum(), tmp_path / "p.json", device="cpu")
    assert os.environ["TEARDOWN_CUPTI"] == "1"  # else later launches pay for CUPTI
    monkeypatch.setenv("TEARDOWN_CUPTI", "0")
    release_cupti_on_stop()
    assert os.environ["TEARDOWN_CUPTI"] == "0"  # the user's choice stands


# --- the data loader's share ------------------------------------------------------------


class FakeTime:
    """A clock that moves only when the fake loader or step says so."""

    def __init__(self) -> None:
        self.ns = 0

    def __call__(self) -> int:
        return self.ns


def test_loader_share_from_fake_times() -> None:
    t = FakeTime()
    # two fetches before the windows (first batch, warm-up), then 3 windows; the 2nd disturbed
    fetch_ms = iter([3.0] * 2 + [3.0] * 5 + [30.0] * 5 + [3.0] * 5)

    class Loader:
        def __iter__(self) -> Iterator[int]:
            for i in range(2):  # two batches an epoch: the loop needs several epochs
                t.ns += int(next(fetch_ms) * 1e6)
                yield i

    def step(batch: int) -> None:
        t.ns += 1_000_000  # 1 ms to train

    share = loader_share(Loader(), step, HostClock(now_ns=t), steps=5, warmup=1, now_ns=t)
    assert share.fetch_ms == (3.0,) * 5 + (30.0,) * 5 + (3.0,) * 5
    assert share.loop_ms == pytest.approx((20.0, 155.0, 20.0))
    assert share.fixed_ms == pytest.approx((5.0, 5.0, 5.0))
    assert share.fetch_share == pytest.approx(0.75)  # the median ignores the disturbed window
    assert share.cost_share == pytest.approx(0.75)
    d = share.as_dict()
    assert d["loop_ms_per_step"] == pytest.approx(4.0)
    assert d["clock"] == "perf_counter"


def test_loader_share_checks_its_windows() -> None:
    with pytest.raises(ValueError, match="equal loop and fixed windows"):
        LoaderShare(2, (1.0, 1.0), (5.0,), (4.0, 4.0), "x")
    with pytest.raises(ValueError, match="steps, repeats >= 1"):
        loader_share([1], lambda b: None, HostClock(), repeats=0)


def test_endless_refuses_an_empty_loader() -> None:
    with pytest.raises(ValueError, match="yields no batches"):
        next(endless([]))


def test_host_images_convert_per_item() -> None:
    data = HostImages((3, 8, 8), 10, length=10, stored=4)
    assert len(data) == 10
    x, y = data[5]
    assert x.dtype == torch.float32
    assert x.shape == (3, 8, 8)
    assert float(x.min()) >= -1.0
    assert float(x.max()) <= 1.0
    assert torch.equal(x, data[1][0])
    assert 0 <= int(y) < 10


def test_profile_pass_writes_the_cpu_tables_and_trace(tmp_path: Path) -> None:
    case = AmpCase("mlp", "bf16", 8, 28, "cpu", "smoke")
    files, summary = profile_pass(case, lambda name: tmp_path / name)
    assert set(files) == {"trace", "ops_by_self_cpu_csv", "ops_by_self_cpu_md"}
    assert all(p.exists() for p in files.values())
    table = list(csv.DictReader(io.StringIO(files["ops_by_self_cpu_csv"].read_text())))
    names = [r["name"] for r in table]
    assert any(n.startswith("enumerate(DataLoader)") for n in names)  # the real loader ran
    assert "aten::addmm" in names or "aten::mm" in names
    assert float(table[0]["self_cpu_ms"]) >= float(table[-1]["self_cpu_ms"])
    assert "| name | calls |" in files["ops_by_self_cpu_md"].read_text()
    read_trace(files["trace"])
    loader = summary["loader"]
    assert len(loader["fetch_ms"]) == 3 * loader["steps"] > 0
    assert len(loader["loop_ms"]) == len(loader["fixed_ms"]) == 3
    assert 0 < loader["fetch_share"] < 1
    assert summary["profile"]["device_tables"].startswith("none")


# --- the bench module end to end, at CPU smoke size ------------------------------------


@pytest.mark.slow
def test_bench_module_end_to_end(tmp_path: Path) -> None:
    bench = run_bench_module(
        "benches/test_amp.py",
        tmp_path / "run.json",
        "-k",
        "mlp and cpu or b100- and cpu",
        "--gauge-rounds",
        "3",
        "--gauge-warmup",
        "1",
        f"--gauge-artifacts-dir={tmp_path / 'artifacts'}",
    )
    assert set(bench) == {
        "mlp-train-fp32-b32-28px-cpu",
        "mlp-train-bf16-b32-28px-cpu",
        "lenet28-infer-fp32-b100-cpu",
    }
    bf16 = bench["mlp-train-bf16-b32-28px-cpu"]
    assert bf16["extra"]["tf32"]["mode"] == "default"
    assert bf16["extra"]["tf32"]["cudnn_allow_tf32"] is True
    # comparisons are derived from the saved results, as the report derives them
    (comparison,) = FAMILY.comparisons(load_run(tmp_path / "run.json").measurements)
    assert comparison.baseline.id == "mlp-train-fp32-b32-28px-cpu"
    assert comparison.candidate.id == "mlp-train-bf16-b32-28px-cpu"
    assert comparison.speedup.value > 0
    assert "busy" not in bf16["extra"]  # the GPU-busy share is a GPU's
    assert "gpu_busy" not in bf16["values"]
    assert {"trace", "ops_by_self_cpu_csv", "ops_by_self_cpu_md"} <= set(bf16["artifacts"])
    assert all(Path(p).exists() for p in bf16["artifacts"].values())
    assert bf16["extra"]["loader"]["steps"] > 0
    assert bench["lenet28-infer-fp32-b100-cpu"]["timing"]["device_ms"]
