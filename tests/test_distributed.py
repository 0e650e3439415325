"""The distributed family: trace arithmetic, kernel tables, cases, scaling maths, and the
gloo two-process path end to end (a killed rank too)."""

from __future__ import annotations

import csv
import gzip
import io
import json
import os
import signal
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch

import gpugauge.families.distributed.cases as dist_cases
from gpugauge.families.distributed import data, rank, results
from gpugauge.launch.torchrun import LaunchError
from gpugauge.launch.worker import RankContext
from gpugauge.measure import kernels as k
from gpugauge.measure.busy import BUSY_KEY
from gpugauge.measure.timing import Timing

from .bench_run import run_bench_module
from .test_launch import _processes_mentioning


def _ev(name: str, cat: str, ts: float, dur: float, tid: int = 1, **args: Any) -> dict[str, Any]:
    return {"ph": "X", "name": name, "cat": cat, "ts": ts, "dur": dur, "tid": tid, "args": args}


# --- interval arithmetic and the split ----------------------------------------------------


def test_union_subtract_and_length() -> None:
    assert k.union([(5, 7), (0, 2), (1, 3), (9, 9)]) == [(0, 3), (5, 7)]
    assert k.length([(0, 2), (1, 3), (5, 7)]) == 5
    assert k.subtract([(0, 10)], [(2, 3), (5, 12)]) == [(0, 2), (3, 5)]
    assert k.subtract([(0, 4), (6, 8)], []) == [(0, 4), (6, 8)]
    assert k.subtract([(0, 4)], [(-1, 5)]) == []


def test_device_split_counts_only_comm_that_no_compute_overlaps() -> None:
    acts = k.parse_events(
        [
            _ev("volta_sgemm", "kernel", 0, 10, device=0),
            _ev("Memcpy HtoD (Pinned -> Device)", "gpu_memcpy", 12, 8, device=0),
            _ev("ncclDevKernel_AllReduce_Sum_f32_RING_LL", "kernel", 8, 7, device=0),
            _ev("ncclDevKernel_AllReduce_Sum_f32_RING_LL", "kernel", 30, 10, device=0),
            _ev("aten::mm", "cpu_op", 0, 50),
            {"ph": "M", "name": "process_name"},
        ]
    )
    s = k.comm_split(acts, steps=2)
    assert s.timeline == "device"
    assert s.step_ms == pytest.approx(40 / 2 / 1e3)  # first to last device activity
    assert s.comm_ms == pytest.approx(17 / 2 / 1e3)
    assert s.exposed_ms == pytest.approx((2 + 10) / 2 / 1e3)  # 10..12 and 30..40
    assert s.compute_ms == pytest.approx(18 / 2 / 1e3)  # the H2D copy counts as compute
    assert s.overlapped_ms == pytest.approx(5 / 2 / 1e3)
    assert s.exposed_fraction == pytest.approx(12 / 40)


def test_cpu_split_uses_gloo_spans_and_other_threads_ops() -> None:
    acts = k.parse_events(
        [
            _ev("ProfilerStep#3", "user_annotation", 0, 100, tid=1),
            _ev("aten::convolution", "cpu_op", 0, 60, tid=1),
            _ev("c10d::allreduce_", "cpu_op", 60, 1, tid=1),
            _ev("gloo:all_reduce", "user_annotation", 40, 50, tid=9),
            _ev("aten::copy_", "cpu_op", 40, 50, tid=9),  # gloo's thread: not compute
        ]
    )
    s = k.comm_split(acts, steps=1)
    assert s.timeline == "cpu"
    assert (s.step_ms, s.comm_ms, s.exposed_ms) == pytest.approx((0.1, 0.05, 0.03))
    with pytest.raises(ValueError, match="steps"):
        k.comm_split(acts, steps=0)


# --- kernel tables ------------------------------------------------------------------------


def _gpu_window() -> list[k.Activity]:
    events = [_ev("sgemm_128x64_nt", "kernel", i * 10, 4 + i, device=0) for i in range(3)]
    events += [_ev(f"small_kernel_{i}", "kernel", 100 + i, 0.5, device=0) for i in range(4)]
    events += [_ev("Memcpy HtoD (Pinned -> Device)", "gpu_memcpy", 200, 0.25, device=0)]
    events += [_ev("Memset (Device)", "gpu_memset", 210, 0.5, device=0)]
    return k.parse_events(events)


def test_kernel_table_rows_like_nvprof() -> None:
    table = k.kernel_table(_gpu_window(), top=2)
    names = [r.name for r in table.rows]
    # the top two by total time (ties keep trace order), then every copy outside the top
    assert names == ["sgemm_128x64_nt", "small_kernel_0", "[CUDA memcpy HtoD]"]
    gemm = table.rows[0]
    assert (gemm.calls, gemm.total_us, gemm.min_us, gemm.max_us) == (3, 15, 4, 6)
    assert gemm.avg_us == 5
    assert table.total_us == pytest.approx(15 + 2 + 0.25 + 0.5)
    assert table.percent(gemm) == pytest.approx(100 * 15 / 17.75)
    assert "[CUDA memcpy HtoD]" in names
    assert table.listed_of == 7
    rows = list(csv.DictReader(io.StringIO(table.to_csv())))
    assert rows[0]["name"] == "sgemm_128x64_nt"
    assert rows[0]["calls"] == "3"
    assert float(rows[0]["time_pct"]) == pytest.approx(84.507, abs=1e-3)
    md = table.to_markdown("AlexNet b8")
    assert "| Type | Time(%) | Time | Calls | Avg | Min | Max | Name |" in md
    assert "| GPU activities | 84.51% | 15.00us | 3 | 5.00us | 4.00us | 6.00us |" in md
    assert "of 7 names, " in md


def test_cpu_table_uses_self_time() -> None:
    acts = k.parse_events(
        [
            _ev("aten::linear", "cpu_op", 0, 10),
            _ev("aten::addmm", "cpu_op", 1, 6),
            _ev("aten::copy_", "cpu_op", 2, 1),
            _ev("aten::relu", "cpu_op", 12, 2),
        ]
    )
    table = k.kernel_table(acts)
    got = {r.name: r.total_us for r in table.rows}
    assert got == {"aten::linear": 4, "aten::addmm": 5, "aten::copy_": 1, "aten::relu": 2}
    assert table.activity.startswith("CPU operators")


def test_times_print_in_nvprof_units() -> None:
    assert [k.fmt_us(x) for x in (0.992, 180.94, 1784.4, 2.3513e6)] == [
        "992ns",
        "180.94us",
        "1.7844ms",
        "2.3513s",
    ]


def test_read_trace_plain_gz_and_garbage(tmp_path: Path) -> None:
    events = {"traceEvents": [_ev("ncclKernel_AllReduce", "kernel", 0, 3, device=1)]}
    (tmp_path / "t.json.gz").write_bytes(gzip.compress(json.dumps(events).encode()))
    [a] = k.read_trace(tmp_path / "t.json.gz")
    assert (a.is_comm, a.device, a.end_us) == (True, 1, 3)
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(k.TraceError, match=r"bad\.json"):
        k.read_trace(tmp_path / "bad.json")


# --- cases --------------------------------------------------------------------------------


def test_seed_cases_have_the_seeds_shapes() -> None:
    seed = dist_cases.cases("seed")
    ids = [c.id for c in seed]
    assert len(ids) == len(set(ids))
    vgg = [c for c in seed if c.model == "vgg16" and c.device == "cuda"]
    assert {(c.mode, c.gpus) for c in vgg} == {("single", 1), ("ddp", 2), ("ddp", 4)}
    assert {(c.images, c.batch, c.image, c.classes, c.epochs) for c in vgg} == {
        (8192, 64, 224, 1000, 1)
    }
    assert [c.steps_per_epoch for c in vgg] == [128, 64, 32]
    assert all(c.schedule == (1, 2, 5, 2) for c in vgg)
    res = [c for c in seed if c.model == "resnet18" and c.device == "cuda"]
    assert {c.batch for c in res} == {32, 128, 512, 2048, 8192}
    assert {(c.mode, c.gpus) for c in res} == {("single", 1)} | {
        (m, g) for m in ("dp", "ddp") for g in (2, 4)
    }
    assert {(c.images, c.epochs, c.classes) for c in res} == {(50_000, 2, 10)}
    alex = [c for c in seed if c.model == "alexnet" and c.device == "cuda"]
    assert {(c.batch, c.gpus) for c in alex} == {
        (b, g) for b in (8, 16, 32, 128) for g in (1, 2, 4)
    }
    assert {c.gpus for c in dist_cases.cases("full") if c.device == "cuda"} == {1, 2, 4}
    # every multi-GPU case comes after the one-GPU case that scales it
    for p in ("smoke", "seed", "full"):
        order = [c.id for c in dist_cases.cases(p)]
        for c in dist_cases.cases(p):
            if c.gpus > 1:
                assert order.index(c.reference().id) < order.index(c.id), c.id
    cpu = [c for c in dist_cases.cases("smoke") if c.device == "cpu"]
    assert {c.gpus for c in cpu} == {1, 2}
    assert all(c.mode != "dp" for c in cpu)


def test_case_geometry_and_validation() -> None:
    c = dist_cases.DistCase("resnet18", "ddp", 2, 128, 32, 10, 50_000, 2, "cuda", "seed")
    assert c.id == "resnet18-ddp-2gpu-b128-32px-cuda"
    assert (c.ranks, c.devices, c.steps_per_epoch) == (2, ("cuda:0", "cuda:1"), 196)
    dp = dist_cases.DistCase("resnet18", "dp", 2, 128, 32, 10, 50_000, 2, "cuda", "seed")
    assert (dp.ranks, dp.steps_per_epoch, dp.profiled_steps) == (1, 196, 16)
    assert dist_cases.DistCase.from_dict(json.loads(json.dumps(c.as_dict()))) == c
    assert c.reference().id == "resnet18-single-1gpu-b128-32px-cuda"
    with pytest.raises(ValueError, match="single is 1 GPU"):
        dist_cases.DistCase("resnet18", "single", 2, 8, 32, 10, 64, 2, "cuda", "seed")
    with pytest.raises(ValueError, match="DataParallel on the CPU"):
        dist_cases.DistCase("resnet18", "dp", 2, 8, 32, 10, 64, 2, "cpu", "seed")


def _draws(images: torch.Tensor, out: torch.Tensor) -> list[tuple[int, int, bool]]:
    """Each output image's crop offset and flip, found by torchvision's own transforms.

    Asserts that every output is one of its input's 162 crops and flips, normalized.
    """
    from torchvision.transforms import functional as tvf

    seen = []
    for img, got in zip(images, out, strict=True):
        padded = tvf.pad(img.permute(2, 0, 1).float() / 255, [data.PAD])  # ToTensor, padding
        candidates = [
            (i, j, flip, tvf.normalize(view, data.CIFAR_MEAN, data.CIFAR_STD))
            for i in range(9)
            for j in range(9)
            for flip in (False, True)
            for view in [tvf.crop(padded, i, j, 32, 32)]
            for view in [tvf.hflip(view) if flip else view]
        ]
        match = [(i, j, f) for i, j, f, want in candidates if torch.allclose(got, want, atol=1e-5)]
        assert match, "an output image is no crop and flip of its input"
        seen.append(match[0])
    return seen


def test_seed_transforms_crop_flip_and_normalize_each_image_as_torchvision_would() -> None:
    g = torch.Generator().manual_seed(5)
    images = torch.randint(0, 256, (300, 32, 32, 3), dtype=torch.uint8, generator=g)
    out = data.seed_transforms(images, torch.Generator().manual_seed(7))
    assert out.shape == (300, 3, 32, 32)
    assert out.dtype == torch.float32
    assert out.is_contiguous()  # a step's batch is one slice of it, copied as one block
    seen = _draws(images, out)
    # crops at every offset (0 to 8 each way) and both flips, about half the images flipped
    assert len({(i, j) for i, j, _ in seen}) > 60
    assert {i for i, _, _ in seen} == {j for _, j, _ in seen} == set(range(9))
    # 149 of 300 at this generator's seed; a flip of 0.4 or 0.6 reads 121 or 179
    assert 135 < sum(f for *_, f in seen) < 165


def test_each_epoch_and_rank_draws_crops_and_flips_of_its_own() -> None:
    """The seed's transforms are random per image: no two epochs or ranks share their draws."""
    from torch.utils.data import DistributedSampler

    case = dist_cases.DistCase("resnet18", "ddp", 2, 2, 32, 10, 48, 2, "cpu", "smoke")
    images, _ = data.cifar_source(case)
    draws = {}
    for r in (0, 1):
        epochs = data.cifar_epochs(case, RankContext(r, r, 2, "cpu", "gloo"), pin=False)
        sampler = DistributedSampler(range(48), num_replicas=2, rank=r, shuffle=True, seed=0)
        for epoch, (x, _) in enumerate(epochs):
            sampler.set_epoch(epoch)
            draws[r, epoch] = _draws(images[list(sampler)], x)
    # by position in the epoch: the same generator would give every epoch and rank one list
    assert len({tuple(d) for d in draws.values()}) == 4


def test_cifar_data_goes_through_the_seed_transforms() -> None:
    case = dist_cases.DistCase("resnet18", "ddp", 2, 2, 32, 10, 8, 2, "cpu", "smoke")
    halves = [
        data.cifar_epochs(case, RankContext(r, r, 2, "cpu", "gloo"), pin=False) for r in (0, 1)
    ]
    (x0, y0), (x1, _) = halves[0][0], halves[1][0]
    assert x0.shape == (4, 3, 32, 32)
    assert y0.dtype == torch.int64
    assert x0.min() < -1.5
    assert x0.max() > 1.5
    assert not torch.equal(halves[0][0][0], halves[0][1][0])  # a new order each epoch
    # ... the sampler's, shuffled anew each epoch (its crops alone would differ too)
    from torch.utils.data import DistributedSampler

    _, labels = data.cifar_source(case)
    sampler = DistributedSampler(range(8), num_replicas=2, rank=0, shuffle=True, seed=0)
    orders = []
    for epoch, (_, y) in enumerate(halves[0]):
        sampler.set_epoch(epoch)
        orders.append(list(sampler))
        assert torch.equal(y, labels[orders[-1]])
    assert orders[0] != orders[1]
    assert not torch.equal(x0, x1)  # the two ranks hold different halves
    step = data.batches_of(case, halves[0], None)
    assert torch.equal(step(0)[0], x0[:2])
    assert torch.equal(step(2)[0], halves[0][1][0][:2])


# --- series and results -------------------------------------------------------------------


def _timing(ms: list[float]) -> dict[str, Any]:
    return Timing(tuple(ms), tuple(ms), "fake", 0, 0.0, "fixed", False).as_dict()


def _rank(step_ms: list[float], *, comm: float = 0.0, allreduce_ms: float | None = None) -> dict:
    split = k.CommSplit(1, 10.0, 9.0, comm, comm, comm / 2, "device").as_dict()
    out = {"status": "ok", "timing": _timing(step_ms), "splits": [split, split]}
    out |= {"grad_bytes": 4_000_000, "artifacts": {}, "kernel_rows": 0}
    if allreduce_ms is not None:
        out["allreduce"] = _timing([allreduce_ms] * 3)
    return out


def test_a_launch_s_seconds_go_to_its_ranks_phases_and_the_rest_to_its_start() -> None:
    case = dist_cases.DistCase("alexnet", "single", 1, 8, 64, 10, 32, 1, "cpu", "smoke")
    timed = Timing((1.0,) * 4, (1.0,) * 4, "fake", 0, 0.0, "fixed", False, timed_s=2.0)
    ran = {**_rank([1.0] * 4), "timing": replace(timed, warmup_s=0.5).as_dict()}
    ran["phases"] = {"data": 1.0, "model build": 3.0, "around rounds": 4.0}
    oom = {"status": "oom", "error": "boom", "phases": {"model build": 2.0}}
    # a second rank's phases ran beside rank 0's: the launch's seconds count once
    other = {**ran, "phases": {"data": 9.0, "model build": 9.0}}
    done = [
        results.CaseResult(case, (ran, other)),
        results.CaseResult(case, (oom, oom), skipped="oom"),
    ]
    phases = results.launch_phases(done, wall_s=20.0)
    assert phases == {
        "data": 1.0,
        "model build": 5.0,
        "around rounds": 4.0,
        "timed rounds": 2.0,
        "warm-up": 0.5,
        results.START_AND_END: 10.0,  # 20 s less the ranks' 10 s; the timing is inside "around"
    }


def test_the_distributed_bench_is_marked_launched() -> None:
    # an A/B sets its sides' launches up at once only for tests that carry the marker
    from benches.test_distributed import test_distributed

    assert "launched" in {m.name for m in test_distributed.pytestmark}


def test_a_failed_launch_s_seconds_go_to_its_start_and_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    case = dist_cases.DistCase("alexnet", "single", 1, 8, 64, 10, 32, 1, "cpu", "smoke")

    def failing(*_: Any, **__: Any) -> Any:
        time.sleep(0.05)
        raise LaunchError("rank 0 did not report")

    monkeypatch.setattr(results, "launch_series", failing)
    charged: list[tuple[str, float]] = []
    runs = results.SeriesRuns(tmp_path, note=lambda _: None, charge=lambda *a: charged.append(a))
    with pytest.raises(LaunchError):
        runs.result(case, [case])
    ((phase, s),) = charged
    assert phase == results.START_AND_END
    assert s >= 0.05


def test_scaling_subtraction_and_bandwidth_from_rank_results() -> None:
    one = dist_cases.DistCase("alexnet", "single", 1, 8, 64, 10, 32, 1, "cpu", "smoke")
    two = dist_cases.DistCase("alexnet", "ddp", 2, 8, 64, 10, 32, 1, "cpu", "smoke")
    ref = results.CaseResult(one, (_rank([10.0] * 4),))
    run = results.CaseResult(
        two,
        (_rank([11.0, 12.0], comm=2.0, allreduce_ms=1.0), _rank([12.5, 11.0], allreduce_ms=1.5)),
    )
    assert run.timing.device_ms == (12.5, 12.0)  # each step the slowest rank
    m = results.to_measurement(run, ref)
    v = m.values
    assert v["epoch_time"] == pytest.approx(0.0245)
    assert v["throughput"] == pytest.approx(32 / 0.0245)
    assert v["speedup"] == pytest.approx(0.040 / 0.0245)  # T(1)/T(N), epochs
    assert v["weak_speedup"] == pytest.approx(2 * 10 / 12.25)  # N t(1)/t(N), medians
    assert v["efficiency"] == pytest.approx(10 / 12.25)
    assert v["subtraction_comm_fraction"] == pytest.approx((0.0245 - 0.020) / 0.0245)
    assert v["comm_fraction"] == pytest.approx(0.2)
    assert v["exposed_comm_fraction"] == 0.1
    # the reference all-reduce: 4 MB in 1.5 ms (slowest rank) -> busbw 4e6 * 2(1)/2 / 1.5e-3
    assert v["busbw"] == pytest.approx(4e6 / 1.5e-3 / 1e9)
    assert v["busbw_utilization"] == pytest.approx(1.5 / 2.0)
    assert m.extra["subtraction"]["busbw_utilization"] == pytest.approx(1.5 / 2.25)
    assert m.device_class.startswith("2x-cpu")
    alone = results.to_measurement(run, None)
    assert "speedup" not in alone.values
    assert "no one-GPU result" in alone.extra["scaling"]


def test_gpu_busy_is_the_least_busy_ranks_device_activity_over_its_timed_steps(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("gpugauge.results.measurement.device_class", lambda d: "2x-fake-gpu")
    case = dist_cases.DistCase("resnet18", "ddp", 2, 512, 32, 10, 2048, 2, "cuda", "seed")
    # device activity 9.0 ms compute + 0.5 ms exposed comm per step on both ranks
    busy, paced = _rank([10.0, 10.0], comm=1.0), _rank([19.0, 19.0], comm=1.0)
    m = results.to_measurement(results.CaseResult(case, (busy, paced)), None)
    assert m.values["gpu_busy"] == pytest.approx(9.5 / 19.0)
    record = m.extra[BUSY_KEY]
    assert record["host_bound"] is True
    assert record["busy_ms"] == pytest.approx(9.5)
    assert record["clock"] == "cuda_event, the rank's timed steps"
    on_cpu = replace(case, device="cpu")
    m = results.to_measurement(results.CaseResult(on_cpu, (busy, busy)), None)
    assert "gpu_busy" not in m.values
    assert BUSY_KEY not in m.extra


def test_the_nightly_takes_the_gpu_paced_steps_of_the_seed_profile() -> None:
    nightly = [c.id for c in dist_cases.cases("seed") if c.device == "cuda" and c.nightly]
    assert nightly == [
        "vgg16-single-1gpu-b64-224px-cuda",
        "vgg16-ddp-2gpu-b64-224px-cuda",
        "vgg16-ddp-4gpu-b64-224px-cuda",
        "resnet18-single-1gpu-b512-32px-cuda",
        "resnet18-single-1gpu-b2048-32px-cuda",
        "resnet18-dp-2gpu-b2048-32px-cuda",
        "resnet18-ddp-2gpu-b512-32px-cuda",
        "resnet18-ddp-2gpu-b2048-32px-cuda",
        "resnet18-ddp-4gpu-b512-32px-cuda",
        "alexnet-single-1gpu-b128-224px-cuda",
        "alexnet-ddp-2gpu-b128-224px-cuda",
        "alexnet-ddp-4gpu-b128-224px-cuda",
    ]
    # at 2048 on 4 GPUs an epoch has 6 full steps: too few samples to gate
    assert (
        dist_cases.DistCase(
            "resnet18", "ddp", 4, 2048, 32, 10, 50_000, 2, "cuda", "seed"
        ).full_steps
        < dist_cases.NIGHTLY_MIN_STEPS
    )
    # each multi-GPU case of the nightly has its one-GPU reference there too
    multi = [c for c in dist_cases.cases("seed") if c.device == "cuda" and c.gpus > 1]
    refs = {c.reference().id for c in multi if c.nightly}
    assert refs <= set(nightly)


def test_per_step_scaling_leaves_out_a_short_last_step(monkeypatch: pytest.MonkeyPatch) -> None:
    # 40 images: batch 16 on one GPU is 16 + 16 + 8, DDP on two is 16 + 4 per rank
    one = dist_cases.DistCase("resnet18", "single", 1, 16, 32, 10, 40, 2, "cpu", "smoke")
    two = dist_cases.DistCase("resnet18", "ddp", 2, 16, 32, 10, 40, 2, "cpu", "smoke")
    assert one.last_step_short
    assert two.last_step_short
    assert not replace(one, batch=8).last_step_short
    assert not replace(one, model="alexnet").last_step_short  # full synthetic batches
    ref = results.CaseResult(one, (_rank([10.0, 10.0, 5.0]),))
    run = results.CaseResult(two, (_rank([11.0, 3.0]),) * 2)
    v = results.to_measurement(run, ref).values
    assert v["efficiency"] == pytest.approx(10 / 11)  # not the medians 10 / 7
    assert v["weak_speedup"] == pytest.approx(2 * 10 / 11)
    assert v["speedup"] == pytest.approx(0.025 / 0.014)  # epochs: all the work
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *_: "NVIDIA H200")  # device class
    capped = replace(one, model="resnet18", device="cuda", batch=dist_cases.RESNET_BATCHES[-1])
    note = results.to_measurement(results.CaseResult(capped, (_rank([10.0]),)), None).extra[
        "sweep_end"
    ]
    assert "ends at its cap" in note
    lone = results.CaseResult(replace(two, images=20), (_rank([3.0]),) * 2)  # one short step
    m = results.to_measurement(lone, ref)
    assert "efficiency" not in m.values
    assert "no full-batch step" in m.extra["full_steps"]


def test_every_series_writes_to_a_folder_of_its_own(tmp_path: Path) -> None:
    cases = [c for c in dist_cases.cases("seed") if c.device == "cuda"]
    folders = {}
    for c in cases:
        folders.setdefault(results.series_dir(tmp_path, c), set()).add(c.series)
    assert all(len(keys) == 1 for keys in folders.values())  # no two series share one
    assert len(folders) == len({c.series for c in cases})


def test_a_sweep_stops_at_its_first_out_of_memory() -> None:
    members = [
        dist_cases.DistCase("resnet18", "ddp", 2, b, 32, 10, 50_000, 2, "cuda", "seed")
        for b in (512, 2048, 8192)
    ]
    stop = "per-GPU batch 2048 ran out of memory in ... the sweep stopped there"
    per_rank = [
        {
            "cases": {
                members[0].id: _rank([1.0]),
                members[1].id: {"status": "oom", "error": "CUDA out of memory"}
                if r == 1
                else {"status": "oom", "error": "another rank ran out of memory"},
                members[2].id: {"status": "skipped", "reason": stop},
            }
        }
        for r in (0, 1)
    ]
    got = results.read_series(members, per_rank)
    assert got[members[0].id].skipped is None
    assert got[members[1].id].skipped.startswith("out of memory at per-GPU batch 2048 on rank 0")
    assert got[members[2].id].skipped == stop


def test_run_series_skips_every_case_after_an_oom(monkeypatch: pytest.MonkeyPatch) -> None:
    members = [
        dist_cases.DistCase("alexnet", "single", 1, b, 16, 10, 4 * b, 1, "cpu", "smoke")
        for b in (1, 2, 4)
    ]
    ran = []

    def fake(
        case: dist_cases.DistCase, ctx: RankContext, folder: Path, data: Any, *_: Any
    ) -> dict[str, Any]:
        ran.append(case.batch)
        return {"status": "oom", "error": "boom"} if case.batch == 2 else {"status": "ok"}

    monkeypatch.setattr(rank, "run_case", fake)
    monkeypatch.setattr(torch, "set_num_threads", lambda n: None)  # leave this process's threads
    out = rank.run_series(
        {"cases": [c.as_dict() for c in members], "out": "/nonexistent"},
        RankContext(0, 0, 1, "cpu", "gloo"),
    )["extra"]["cases"]
    assert ran == [1, 2]
    assert out[members[2].id]["status"] == "skipped"
    assert "per-GPU batch 2 ran out of memory" in out[members[2].id]["reason"]


# --- the gloo path, end to end --------------------------------------------------------------


def _gloo_resnet(tmp_path: Path, *extra: str) -> dict[str, dict[str, Any]]:
    """ResNet-18's smoke CPU cases (one process, then DDP over two gloo ranks), by id."""
    return run_bench_module(
        "benches/test_distributed.py",
        tmp_path / "run.json",
        "-k",
        "resnet18 and cpu",
        "--gauge-profile",
        "smoke",
        f"--gauge-artifacts-dir={tmp_path / 'art'}",
        *extra,
    )


@pytest.mark.slow
def test_gloo_bench_records_one_result_per_case_with_scaling(tmp_path: Path) -> None:
    art = tmp_path / "art"
    benches = _gloo_resnet(tmp_path)
    assert set(benches) == {"resnet18-single-1proc-b2-32px-cpu", "resnet18-ddp-2proc-b2-32px-cpu"}
    ddp = benches["resnet18-ddp-2proc-b2-32px-cpu"]
    assert ddp["device_class"].startswith("2x-cpu")
    assert "each round the slowest of 2 ranks" in ddp["timing"]["stop_reason"]
    assert len(ddp["timing"]["device_ms"]) == 2  # the second epoch: 4 images per rank, batch 2
    for name in ("speedup", "weak_speedup", "efficiency", "comm_fraction", "busbw"):
        assert name in ddp["values"], name
    assert ddp["extra"]["trace_split"]["timeline"] == "cpu"
    assert ddp["extra"]["trace_split"]["comm_ms"] > 0  # gloo's all-reduce spans were seen
    assert all(Path(p).exists() for p in ddp["artifacts"].values())
    assert not _processes_mentioning(str(art))
    # each launch's seconds, charged to the test that made it, by phase: not "own code"
    wall = json.loads((tmp_path / "run.json").read_text())["gpugauge"]["wall_s"]
    for nodeid, phases in wall["tests"].items():
        named = {results.START_AND_END, "data", "model build", "profiled round"}
        assert named <= set(phases), (nodeid, phases)
        assert phases.get("tests' own code", 0.0) < sum(phases.values()) / 4, phases
    assert "all-reduce reference" in next(p for n, p in wall["tests"].items() if "ddp" in n)
    # the launch charged each result's timed rounds once: gauge.record adds none
    for case_id, m in benches.items():
        (phases,) = [p for n, p in wall["tests"].items() if f"[{case_id}]" in n]
        assert phases["timed rounds"] == pytest.approx(m["timing"]["timed_s"], abs=2e-3)


@pytest.mark.slow
def test_an_ab_side_launches_ranks_that_only_time(tmp_path: Path) -> None:
    # --gauge-skip-extras: no profiled steps, no all-reduce reference; the times as ever
    benches = _gloo_resnet(tmp_path, "--gauge-skip-extras")
    ddp = benches["resnet18-ddp-2proc-b2-32px-cpu"]
    assert ddp["extra"]["not_profiled"] == results.NOT_PROFILED
    assert "trace_split" not in ddp["extra"]
    assert not ddp["artifacts"]
    assert {"comm_fraction", "busbw"}.isdisjoint(ddp["values"])
    assert {"speedup", "efficiency"} <= set(ddp["values"])
    assert len(ddp["timing"]["device_ms"]) == 2


@pytest.mark.slow
def test_an_injected_slowdown_reaches_every_rank(tmp_path: Path) -> None:
    # gpugauge check's slowdown: each rank adds the fraction of its own step's median
    (tmp_path / "none").mkdir()
    benches = _gloo_resnet(
        tmp_path,
        f"--gauge-baselines-dir={tmp_path / 'none'}",
        "--gauge-gate",
        "--gauge-no-history",
        "-p",
        "gpugauge.check.slowdown",
        "--gauge-inject-slowdown",
        "0.5",
    )
    assert len(benches) == 2
    for case, info in benches.items():
        added = info["extra"]["injected_slowdown_ms"]
        steps = info["timing"]["device_ms"]
        assert added > 0, case
        assert min(steps) >= added, case  # every timed step spun for it


def _rank_pid(folder: Path, rank: int, timeout_s: float = 120) -> int:
    """The pid of the worker of ``rank`` launched into ``folder``, once it runs."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for line in _processes_mentioning(str(folder)):
            pid = int(line.split(":")[0])
            try:
                env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            except OSError:
                continue
            if b"gpugauge.launch.worker" in Path(f"/proc/{pid}/cmdline").read_bytes() and (
                f"RANK={rank}".encode() in env
            ):
                return pid
        time.sleep(0.2)
    raise AssertionError(f"rank {rank} of {folder} never started")


@pytest.mark.slow
def test_a_rank_killed_mid_run_fails_the_launch_naming_it(tmp_path: Path) -> None:
    case = dist_cases.DistCase("resnet18", "ddp", 2, 2, 32, 10, 64, 2, "cpu", "smoke")
    caught: list[BaseException] = []

    def run() -> None:
        try:
            results.launch_series([case], tmp_path, note=lambda _: None, timeout_s=240)
        except BaseException as err:
            caught.append(err)

    t = threading.Thread(target=run)
    t.start()
    pid = _rank_pid(results.series_dir(tmp_path, case), rank=1)
    time.sleep(3.0)  # let it get into its steps
    os.kill(pid, signal.SIGKILL)
    t.join(timeout=240)
    assert not t.is_alive()
    [err] = caught
    assert isinstance(err, LaunchError)
    assert "rank 1 wrote no result" in str(err)
    assert "Signal 9 (SIGKILL) received by PID" in str(err) or "exitcode: -9" in str(err)
    left = _processes_mentioning(str(tmp_path))
    print("processes left after the kill:", left or "none")
    assert not left


def test_report_draws_scaling_curves_and_comm_bars(tmp_path: Path) -> None:
    from gpugauge.families.distributed import FAMILY
    from gpugauge.families.distributed.charts import CommBars, ScalingCurves
    from gpugauge.report.data import ReportData
    from gpugauge.results.runs import SavedRun

    one = dist_cases.DistCase("alexnet", "single", 1, 8, 64, 10, 32, 1, "cpu", "smoke")
    two = dist_cases.DistCase("alexnet", "ddp", 2, 8, 64, 10, 32, 1, "cpu", "smoke")
    ref = results.CaseResult(one, (_rank([10.0] * 4),))
    run = results.CaseResult(two, (_rank([12.0] * 2, comm=2.0, allreduce_ms=1.0),) * 2)
    ms = [results.to_measurement(ref, None), results.to_measurement(run, ref)]
    data = ReportData(SavedRun(tmp_path / "r.json", "now", ms), "-", [], [])
    names = [c.name for c in FAMILY.charts if c.applies(data)]
    assert names == ["scaling", "comm"]
    for chart in (ScalingCurves(), CommBars()):
        fig = chart.draw(data)
        assert fig.axes
    empty = ReportData(SavedRun(tmp_path / "r.json", "now", ms[:1]), "-", [], [])
    assert not CommBars().applies(empty)
    # the split CommSplit(steps=1, step 10, compute 9, comm 2, kernel 2, exposed 1):
    # compute alone 8, overlapped 1, exposed 1, idle 10 - 9 - 1 = 0; they sum to the step
    split = ms[1].extra["trace_split"]
    assert CommBars.parts(split) == [8.0, 1.0, 1.0, 0.0]
    assert CommBars.parts(split | {"step_ms": 14.0})[3] == 4.0  # no kernel for 4 ms: idle


def test_device_work_counts_for_the_step_that_launched_it() -> None:
    # the window opens while the step before it still runs: its tail (launched before the
    # first ProfilerStep span) is no part of the window's steps
    def x(name: str, cat: str, ts: float, dur: float, **args: Any) -> dict[str, Any]:
        return {"ph": "X", "name": name, "cat": cat, "ts": ts, "dur": dur, "args": args}

    events = [
        x("ProfilerStep#3", "user_annotation", 100, 100),
        x("cudaLaunchKernel", "cuda_runtime", 90, 2, correlation=1),  # the step before
        x("cudaLaunchKernel", "cuda_runtime", 110, 2, correlation=2),
        x("cuLaunchKernelEx", "cuda_driver", 150, 2, correlation=3),  # NCCL, driver API
        x("tail_of_step_2", "kernel", 101, 40, device=0, correlation=1),
        x("gemm", "kernel", 141, 30, device=0, correlation=2),
        x("ncclDevKernel_AllReduce", "kernel", 171, 20, device=0, correlation=3),
    ]
    acts = k.parse_events(events)
    assert [a.name for a in acts if a.on_device] == ["gemm", "ncclDevKernel_AllReduce"]
    s = k.comm_split(acts, 1)
    assert s.step_ms == pytest.approx(0.050)  # 141 to 191 µs, not from 101
    assert s.comm_ms == pytest.approx(0.020)
    # no launch records (an older trace) or no steps: everything is kept
    bare = [{**e, "args": {"device": 0}} if e["cat"] == "kernel" else e for e in events]
    assert len([a for a in k.parse_events(bare) if a.on_device]) == 3
    assert len([a for a in k.parse_events(events[1:]) if a.on_device]) == 3


@pytest.mark.slow
def test_launch_each_launches_a_series_case_by_case_as_its_tests_ask(tmp_path: Path) -> None:
    # two batches of one series: one launch for both, or (an A/B's sides) one launch each,
    # made when its own test asks for it
    series = [
        dist_cases.DistCase(
            "resnet18", "ddp", 2, b, 32, 10, 8, 2, "cpu", "smoke", schedule=(0, 1, 1, 1)
        )
        for b in (1, 2)
    ]
    for each, launches in ((False, [1, 1]), (True, [1, 2])):
        notes: list[str] = []
        root = tmp_path / str(each)
        runs = results.SeriesRuns(root, notes.append, each=each)
        seen = []
        for case in series:
            assert not runs.result(case, series).skipped
            seen.append(sum(n.startswith("torchrun:") for n in notes))
        assert seen == launches, (each, notes)
    # each launch alone in a folder of its own: a later one clears no earlier one's files
    folders = [results.series_dir(tmp_path / "True", c, alone=True) for c in series]
    assert len(set(folders)) == 2
    assert all((f / "rank0.json").is_file() and (f / "torchrun.log").is_file() for f in folders)


@pytest.mark.parametrize("injected", ["0", "0.5"])
def test_a_rank_times_its_case_in_the_one_call_an_a_b_pairs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, injected: str
) -> None:
    """``gpugauge ab`` pairs the calls of ``time_rank_case`` alone: one per case, injected
    slowdown or not (its probe runs as without an A/B)."""
    from gpugauge.ab import worker
    from gpugauge.measure import timing

    class Asked(worker.Channel):
        def __init__(self) -> None:
            super().__init__(None)  # type: ignore[arg-type]
            self.asked: list[str] = []

        def ask(self, message: dict[str, Any]) -> dict[str, Any]:
            self.asked.append(message["op"])
            return {"op": "solo"}

    monkeypatch.setenv("GPUGAUGE_INJECT_SLOWDOWN", injected)
    case = dist_cases.DistCase(
        "resnet18", "single", 1, 2, 32, 10, 8, 2, "cpu", "smoke", schedule=(0, 1, 1, 1)
    )
    ctx = RankContext(0, 0, 1, "cpu", "gloo")
    channel = Asked()
    original = timing.measure
    paced = worker.paced(original, channel)
    worker.rebind(original, paced)
    try:
        out = rank.run_case(case, ctx, tmp_path, data.cifar_epochs(case, ctx, False))
    finally:
        worker.rebind(paced, original)
    assert out["status"] == "ok"
    assert channel.asked == ["measure"]
    assert (out.get("injected_slowdown_ms", 0) > 0) == (injected != "0")
