"""Run an issue's GPU acceptance checks in one call and print a short table last.

    python3 tools/gpu_checks.py foundation --out "$OUT"

``foundation`` (issue 2): the main command twice at the seed profile (back-to-back
agreement), then, in this process, each seed vgg_swap callable timed by the harness,
by ``triton.testing.do_bench`` (median) and by a bare CUDA-event loop.
``layers`` (issue 3): the layers family at the seed profile (its wall time), then each
forward case timed by the harness (cold L2) and by ``do_bench`` (which flushes L2 too).
``gate-record`` then ``gate-check`` (issue 4), on the same kind of GPU: record baselines of
vgg_swap and layers at the seed profile; gate an identical run against them (must pass),
then a run slowed by 5 ms a round through the test-only plugin (must fail, naming it).
``cudnn-processes`` (issue 8, one GPU): conv-fwd-tf32 in one process with its output in 5
different blocks, then in fresh processes, alone, after conv-fwd-fp32 and with
``cudnn.benchmark`` on, with the kernels each ran (``tools/cudnn_processes.py``).
``layer_fit`` (issue 10, one H100 or H200): frontier searches in this process, each
result written to ``--out`` as it finishes (11 GiB emulated budget: train M = 62, 61, 32,
1, M = 62 from N = 1, infer M = 250 and 62; the whole device: train and infer M = 62),
with probe counts, memory back at its start and predicted against measured; then the
family's search and single-GPU cases through pytest at the seed profile.
``layer_fit-split`` (issue 10, two H200s): the split cases through pytest at the seed
profile (single; naive with the default allocator and with expandable segments; GPipe and
1F1B with 2/4/8 micro-batches with expandable segments), per-device memory,
speedups, overlap and the allocator's retries per step. ``layer_fit-split-free`` (two H200s):
the same split on the whole devices (naive, GPipe and 1F1B with 2 and 4), no budget.
``layer_fit-split-alone`` (two H200s): the naive split (both allocators), GPipe ×2, 1F1B
×2, 1F1B ×4 and GPipe ×4 at 11 GiB, each schedule in a pytest process of its own (a
process keeps its cuDNN plans); speedups against the naive split of the same allocator.
``layer_fit-bisect`` (issue 10, two H200s): 1F1B ×2 timed after each step of the
benchmark's setup in a plain process (``tools/pipe_probe.py --bisect``), then in pytest.
``layer_fit-graphs`` (issue 10, two H200s): the schedules from CUDA graphs against op by
op (``tools/pipe_probe.py --graphs``), then the graphed cases in pytest, a process each.
``layer_fit-microbatch`` (issue 10, one GPU): a conv block's and a head linear's step at
batch 16, 8, 4, 2 (GPipe's micro-batches), against a proportional share of batch 16's.
``amp`` (issue 12): the amp family at the seed profile (its wall time), then a speedup table
(five models × fp32/fp16/bf16), the profiler artifacts checked (each Chrome trace loads as
JSON and holds device kernel events; the operator table by self device time lists kernels
that the trace holds) and the CPU-against-GPU inference table with its agreement check.
``distributed`` (issue 11, on 2 GPUs): the distributed family at the seed profile (VGG-16
1 vs DDP 2, the ResNet-18 sweep with DP and DDP, AlexNet kernel tables), its report, then a
DDP launch whose rank 1 is killed mid-run (the error and the process list), a table last.
Full logs and JSON go to ``--out``; nothing here changes clocks or power limits.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import json
import os
import subprocess
import sys
import tarfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from dataclasses import replace  # noqa: E402
from functools import partial  # noqa: E402

from gpugauge.launch.torchrun import processes_mentioning  # noqa: E402
from gpugauge.measure.timing import CudaEventClock, measure  # noqa: E402
from gpugauge.options import PROFILE_POLICIES  # noqa: E402
from gpugauge.regress.gate import short_kernel  # noqa: E402
from gpugauge.report.tables import render  # noqa: E402
from gpugauge.results.runs import load_run  # noqa: E402


def run_pytest(args: list[str], log: Path, timeout_s: float | None = None) -> int:
    """Run pytest from the checkout, streaming its output to stdout and ``log``.

    With ``timeout_s``, pytest starts no new test after ``timeout_s`` − 90 s
    (``--stop-after``) and ends as usual, its JSON written. Should a test still run at
    ``timeout_s``, pytest gets SIGINT, as from a keyboard: it stops the test in hand (a
    torchrun launch stops its workers), and may lose its JSON; SIGKILL 60 s later.
    """
    import signal
    import threading

    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    cmd = [sys.executable, "-m", "pytest", *args]
    if timeout_s:
        cmd.append(f"--stop-after={max(timeout_s - 90.0, 1.0):g}")
    print("$", " ".join(cmd), flush=True)
    with log.open("w") as fh:
        proc = subprocess.Popen(
            cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )

        def stop() -> None:
            if proc.poll() is not None:
                return
            print(f"[gpu_checks] {timeout_s:.0f} s passed: interrupting pytest", flush=True)
            proc.send_signal(signal.SIGINT)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(60)
                return
            proc.kill()
            # a torchrun launch runs in a session of its own: stop what pytest left behind
            for line in processes_mentioning("gpugauge.launch.worker"):
                with contextlib.suppress(OSError, ValueError):
                    os.kill(int(line.split(":")[0]), signal.SIGKILL)

        timer = threading.Timer(timeout_s, stop) if timeout_s else None
        if timer:
            timer.daemon = True
            timer.start()
        assert proc.stdout is not None
        for line in proc.stdout:
            fh.write(line)
            if line.startswith(("[gpugauge]", "FAILED", "ERROR", "=")):
                print(line, end="", flush=True)
        rc = proc.wait()
        if timer:
            timer.cancel()
        return rc


def seed_run(family: str, js: Path, profile: str = "seed") -> list[str]:
    """Pytest arguments of one family's seed (or other) profile, autosaved, JSON to ``js``."""
    return [
        "benches",
        "-k",
        family,
        "--profile",
        profile,
        "--benchmark-autosave",
        f"--benchmark-json={js}",
        "-p",
        "no:cacheprovider",
    ]


def extra_infos(js: Path) -> dict[str, dict]:
    """Benchmark id -> its gpugauge record from a pytest-benchmark JSON; {} if none was written.

    pytest-benchmark opens the file empty at the start, so a run stopped early leaves it so.
    """
    if not js.exists() or not js.stat().st_size:
        return {}
    return {b["param"]: b["extra_info"] for b in json.loads(js.read_text())["benchmarks"]}


def medians(path: Path) -> dict[str, float]:
    """Benchmark id -> median ms from a pytest-benchmark JSON."""
    data = json.loads(path.read_text())
    return {b["param"]: b["stats"]["median"] * 1e3 for b in data["benchmarks"]}


def bare_event_loop(fn: Callable[[], object], rounds: int = 50, warmup: int = 5) -> float:
    """Median ms of a plain loop: events around each call, one synchronize at the end."""
    import torch

    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    pairs = [
        (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
        for _ in range(rounds)
    ]
    for a, b in pairs:
        a.record()
        fn()
        b.record()
    torch.cuda.synchronize()
    times = sorted(a.elapsed_time(b) for a, b in pairs)
    return times[len(times) // 2]


def foundation(out: Path) -> None:
    """Issue 2's checks."""
    import torch
    import triton.testing

    print(
        f"torch {torch.__version__}, {torch.cuda.get_device_name()}, "
        f"{time.strftime('%Y-%m-%d %H:%M:%S')}",
        flush=True,
    )
    runs = []
    for i in (1, 2):
        js = out / f"vgg_swap_seed_run{i}.json"
        rc = run_pytest(
            seed_run("vgg_swap", js),
            out / f"vgg_swap_seed_run{i}.log",
        )
        print(f"run {i}: pytest exit {rc}", flush=True)
        runs.append(medians(js) if js.exists() else {})

    from gpugauge.families.vgg_swap.workload import cases, make_step

    rows = []
    policy = PROFILE_POLICIES["seed"]
    for case in (c for c in cases("seed") if c.device == "cuda"):
        fn = make_step(case)
        harness = measure(fn, policy, CudaEventClock("cuda")).summary.median
        bench = triton.testing.do_bench(fn, warmup=500, rep=3000, return_mode="median")
        bare = bare_event_loop(fn)
        r1, r2 = runs[0].get(case.id), runs[1].get(case.id)
        rows.append(
            [
                case.id,
                f"{harness:.2f}",
                f"{bench:.2f}",
                f"{harness / bench - 1:+.2%}",
                f"{bare:.2f}",
                f"{harness / bare - 1:+.2%}",
                "-" if r1 is None else f"{r1:.2f}",
                "-" if r2 is None else f"{r2:.2f}",
                "-" if r1 is None or r2 is None else f"{r2 / r1 - 1:+.2%}",
            ]
        )
        del fn
        torch.cuda.empty_cache()
    table = render(
        [
            "case",
            "harness",
            "do_bench",
            "vs do_bench",
            "bare loop",
            "vs bare",
            "run1",
            "run2",
            "run2/run1",
        ],
        rows,
        f"median ms on {torch.cuda.get_device_name()} (torch {torch.__version__})",
    )
    (out / "foundation_table.txt").write_text(table + "\n")
    print("\n" + table)


def layers(out: Path) -> None:
    """Issue 3's checks."""
    import torch
    import triton.testing

    from gpugauge.families.layers.workload import cases, make_round
    from gpugauge.measure.ceilings import matmul_precision

    print(
        f"torch {torch.__version__}, {torch.cuda.get_device_name()}, "
        f"{time.strftime('%Y-%m-%d %H:%M:%S')}",
        flush=True,
    )
    js = out / "layers_seed.json"
    t0 = time.perf_counter()
    rc = run_pytest(
        seed_run("layers", js),
        out / "layers_seed.log",
    )
    wall = time.perf_counter() - t0
    print(f"layers seed profile: pytest exit {rc} in {wall:.0f} s", flush=True)
    saved = {m.id: m for m in load_run(js).measurements} if js.exists() else {}

    policy = replace(PROFILE_POLICIES["seed"], flush_l2=True)
    from gpugauge.gauge import l2_flusher

    rows = []
    for case in (c for c in cases("seed") if c.device == "cuda"):
        m = saved.get(case.id)
        roof = m.roofline.as_dict() if m and m.roofline else {}
        mem = (m.memory_check if m else None) or {}
        energy = m.energy[0].as_dict() if m and m.energy else {}
        cells = [case.id]
        if case.mode == "fwd":
            fn, _ = make_round(case)
            with matmul_precision(case.dtype):
                harness = measure(
                    fn, policy, CudaEventClock("cuda"), between=l2_flusher("cuda")
                ).summary.median
                bench = triton.testing.do_bench(fn, warmup=200, rep=1000, return_mode="median")
            cells += [f"{harness:.4g}", f"{bench:.4g}", f"{harness / bench - 1:+.1%}"]
            del fn
            torch.cuda.empty_cache()
        else:
            cells += ["-", "-", "-"]
        cells += [
            f"{roof['roofline_share']:.0%}" if roof else "-",
            f"{roof['share_of_bandwidth']:.0%}" if roof else "-",
            roof.get("bound", "-"),
            (f"{mem['ratio']:.3f}" if mem.get("ratio") else "-"),
            mem.get("verdict", "-")[:40],
            f"{energy['joules_per_iter']:.3g}" if energy else "-",
            f"{energy['window_s']:.1f}" if energy else "-",
        ]
        rows.append(cells)
    table = render(
        [
            "case",
            "harness",
            "do_bench",
            "diff",
            "roofline",
            "copy BW",
            "bound",
            "mem/exp",
            "memory verdict",
            "J/iter",
            "window s",
        ],
        rows,
        f"layers seed on {torch.cuda.get_device_name()} (torch {torch.__version__}); "
        f"pytest wall {wall:.0f} s, exit {rc}",
    )
    (out / "layers_table.txt").write_text(table + "\n")
    print("\n" + table)


GATED = ["benches", "-k", "vgg_swap or layers", "--profile", "seed", "-p", "no:cacheprovider"]
NO_ENERGY = ["--energy-window", "0"]


def gate_record(out: Path) -> None:
    """Record multi-run seed baselines of vgg_swap and layers; copy them to ``out``.

    A timing-only run first, then a full run (energy included); the baseline keeps the
    full run's numbers and both runs' medians (their spread is run-to-run noise).
    """
    import shutil

    quick, full = out / "record_time_only.json", out / "record_full.json"
    rc1 = run_pytest(
        [*GATED, *NO_ENERGY, f"--benchmark-json={quick}"], out / "record_time_only.log"
    )
    rc2 = run_pytest([*GATED, f"--benchmark-json={full}"], out / "record_full.log")
    rc3 = subprocess.run(
        [sys.executable, "-m", "gpugauge", "baseline", str(quick), str(full)], cwd=ROOT, check=False
    ).returncode
    for p in sorted((ROOT / "baselines").glob("*/*.json")):
        dest = out / "baselines" / p.parent.name / p.name
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(p, dest)
    print(f"record: pytest exits {rc1}, {rc2}; baseline command exit {rc3}")


def _power_heavy_ops() -> list[tuple[str, Callable[[], object]]]:
    """The matmul of issue 8's table and two more ops that run at the power cap."""
    import torch

    a16 = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b16 = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    h16 = torch.randn(8192, 8192, device="cuda", dtype=torch.float16)
    conv = torch.nn.Conv2d(256, 256, 3, padding=1).cuda().to(torch.bfloat16)
    x = torch.randn(128, 256, 56, 56, device="cuda", dtype=torch.bfloat16)
    conv.requires_grad_(False)

    def conv_fwd() -> object:
        with torch.inference_mode():
            return conv(x)

    return [
        ("matmul-8192-bf16", lambda: torch.mm(a16, b16)),
        ("matmul-8192-fp16", lambda: torch.mm(h16, h16)),
        ("conv3x3-256ch-56px-b128-bf16", conv_fwd),
    ]


def timer_check(out: Path) -> None:
    """Issue 8: harness (seed policy, sustained) against do_bench with 1 s of repetitions.

    Every forward layers case, every vgg_swap GPU case and three power-heavy ops; the SM
    clock beside each (the harness's timed batches; samples taken while do_bench ran).
    """
    import statistics

    import torch
    import triton.testing

    from gpugauge.families.layers.workload import cases as layer_cases
    from gpugauge.families.layers.workload import make_round
    from gpugauge.families.vgg_swap.workload import cases as vgg_cases
    from gpugauge.families.vgg_swap.workload import make_step
    from gpugauge.gauge import l2_flusher
    from gpugauge.measure.ceilings import matmul_precision
    from gpugauge.measure.nvml import Nvml
    from gpugauge.measure.sampler import GpuSampler

    seed = PROFILE_POLICIES["seed"]
    todo: list[tuple[str, Callable[[], object], bool, str]] = []
    for c in layer_cases("seed"):
        if c.device == "cuda" and c.mode == "fwd":
            todo.append((c.id, make_round(c)[0], True, c.dtype))
    for c in vgg_cases("seed"):
        if c.device == "cuda":
            todo.append((c.id, make_step(c), False, "none"))
    # cold L2 like do_bench, which clears a 256 MB buffer before each repetition: warm, the
    # H100 read matmul-8192-bf16 2.9% under do_bench (run 45)
    todo += [(name, fn, True, "none") for name, fn in _power_heavy_ops()]
    rows, worst = [], 0.0
    with Nvml() as nvml:
        dev = nvml.device(0)
        for name, fn, cold, dtype in todo:
            flush = l2_flusher("cuda") if cold else None
            with matmul_precision(dtype), GpuSampler(dev) as watch:
                t = measure(
                    fn,
                    replace(seed, flush_l2=cold),
                    CudaEventClock("cuda"),
                    between=flush,
                    watch=watch,
                )
                b0 = time.perf_counter()
                bench = triton.testing.do_bench(fn, warmup=500, rep=1000, return_mode="median")
                seen = [s.sm_clock_mhz for s in watch.between(b0, time.perf_counter())]
            d = t.summary.median
            worst = max(worst, abs(d / bench - 1))
            c = t.clocks()
            bench_mhz = statistics.median([m for m in seen if m]) if any(seen) else 0
            rows.append(
                [
                    name,
                    f"{d:.4g}",
                    f"{bench:.4g}",
                    f"{d / bench - 1:+.2%}",
                    f"{c['sm_median_mhz'] or 0:.0f} [{c['sm_min_mhz'] or 0:.0f}-"
                    f"{c['sm_max_mhz'] or 0:.0f}]",
                    f"{bench_mhz:.0f}",
                    f"{t.warmup_s:.1f}",
                    str(t.settled),
                    str(t.summary.n),
                ]
            )
            print(" ".join(rows[-1]), flush=True)
            del fn
            torch.cuda.empty_cache()
    table = render(
        [
            "case",
            "harness ms",
            "do_bench ms",
            "diff",
            "harness SM MHz",
            "do_bench MHz",
            "warm-up s",
            "settled",
            "n",
        ],
        rows,
        f"sustained harness vs do_bench (rep 1 s) on {_device_name()}; worst {worst:.2%}",
    )
    (out / "timer_table.txt").write_text(table + "\n")
    print("\n" + table)


def _verdicts(js: Path) -> dict[str, str]:
    return {
        info["id"]: (info.get("gate") or {}).get("verdict", "-")
        for info in extra_infos(js).values()
    }


def _seed_runs(out: Path, runs: list[tuple[str, list[str]]]) -> list[list[str]]:
    """Run the seed vgg_swap+layers profile once per (name, extra args); a summary row each."""
    rows = []
    for name, extra in runs:
        js = out / f"{name}.json"
        t0 = time.perf_counter()
        rc = run_pytest([*GATED, *extra, f"--benchmark-json={js}"], out / f"{name}.log")
        wall = time.perf_counter() - t0
        v = _verdicts(js)
        counts = ", ".join(f"{list(v.values()).count(k)} {k}" for k in sorted(set(v.values())))
        rows.append([name, str(rc), f"{wall:.0f}", counts or "-"])
        print(f"{name}: pytest exit {rc} in {wall:.0f} s; {counts}", flush=True)
    return rows


def regime_record(out: Path, energy: bool = True) -> None:
    """Issue 8: two seed runs (full, then time only) and baselines from both into --out.

    ``energy=False`` (``regime-record-time``): both runs time only, no energy baselines.
    """
    kernels = ["--record-kernels"]  # the baseline names each case's main kernels
    first = ("record_full", kernels) if energy else ("record_time1", [*kernels, *NO_ENERGY])
    rows = _seed_runs(out, [first, ("record_time", [*kernels, *NO_ENERGY])])
    runs = [str(out / f"{first[0]}.json"), str(out / "record_time.json")]
    rc = subprocess.run(
        [
            sys.executable,
            "-m",
            "gpugauge",
            "baseline",
            "--baselines-dir",
            str(out / "baselines"),
            *runs,
        ],
        cwd=ROOT,
        check=False,
    ).returncode
    for lock in (out / "baselines").rglob(".*.lock"):
        lock.unlink()  # what comes back is counted in files
    _gzip(out)
    print("\n" + render(["run", "exit", "wall s", "verdicts"], rows, f"baseline exit {rc}"))


def _gzip(out: Path) -> None:
    """Compress the run JSONs: thousands of rounds a case outgrow what comes back (16 MiB)."""
    import gzip
    import shutil

    for js in out.glob("*.json"):
        with js.open("rb") as src, gzip.open(f"{js}.gz", "wb") as dst:
            shutil.copyfileobj(src, dst)
        js.unlink()


def regime_gate(out: Path) -> None:
    """Issue 8: two fresh seed runs (time only) gated against the committed baselines.

    False alarms: any regression here is one. Energy is left out to keep the call short.
    """
    gated = ["--gate", *NO_ENERGY, "--record-kernels"]  # notes name changed kernels
    rows = _seed_runs(out, [("gate_1", gated), ("gate_2", gated)])
    _gzip(out)
    print("\n" + render(["run", "exit", "wall s", "verdicts"], rows, "fresh runs, gated"))


def regime_detect(out: Path) -> None:
    """Issue 8: 3% and 7% of each case's baseline median injected as device time."""
    slow = ["--gate", *NO_ENERGY, "-p", "tests.slowdown", "--slowdown-frac"]
    rows = _seed_runs(out, [("slow3", [*slow, "0.03"]), ("slow7", [*slow, "0.07"])])
    print("\n" + render(["run", "exit", "wall s", "verdicts"], rows, "slowed runs, gated"))
    for name in ("slow3", "slow7"):
        missed = [k for k, v in _verdicts(out / f"{name}.json").items() if v != "regressed"]
        print(f"{name}: not caught: {', '.join(missed) or 'none'}")
    _gzip(out)


def kernels_check(out: Path) -> None:
    """Issue 8: a gated seed run with --record-kernels; each case's top kernel beside its verdict.

    Two things at once: whether recording a round's kernels disturbs the cases timed
    after it (the verdicts against baselines recorded without it), and which algorithm
    each conv and VGG case ran (conv-fwd-tf32 ran at 9.52 or 9.78 ms on one H200).
    """
    rows = _seed_runs(out, [("kernels", ["--gate", *NO_ENERGY, "--record-kernels"])])
    lines = []
    for info in extra_infos(out / "kernels.json").values():
        top = (info.get("extra") or {}).get("kernels") or [{}]
        verdict = (info.get("gate") or {}).get("verdict", "-")
        median = info["timing"]["summary_ms"]["median"]
        lines.append(
            [info["id"], f"{median:.4g}", verdict, short_kernel(str(top[0].get("name", "-")), 90)]
        )
    _gzip(out)
    print("\n" + render(["run", "exit", "wall s", "verdicts"], rows, "gated, kernels recorded"))
    print(render(["case", "median ms", "verdict", "top kernel"], lines, "top kernel per case"))


def cudnn_probe(out: Path) -> None:
    """Issue 8: which cuDNN kernels the seed conv forward runs, with benchmark off and on."""
    import torch

    from gpugauge.measure.ceilings import matmul_precision
    from gpugauge.measure.profile import round_kernels

    x = torch.randn(256, 3, 224, 224, device="cuda")
    rows = []
    for dtype in ("fp32", "tf32", "bf16"):
        for bench in (False, True):
            torch.backends.cudnn.benchmark = bench
            torch.manual_seed(0)
            conv = torch.nn.Conv2d(3, 128, 3, padding=1).cuda()
            inp = x
            if dtype == "bf16":
                conv, inp = conv.to(torch.bfloat16), x.to(torch.bfloat16)
            conv.requires_grad_(False)
            with matmul_precision(dtype), torch.inference_mode():
                for _ in range(5):
                    conv(inp)
                torch.cuda.synchronize()
                t = measure(
                    lambda c=conv, i=inp: c(i), PROFILE_POLICIES["seed"], CudaEventClock("cuda")
                )
                ran = round_kernels(lambda c=conv, i=inp: c(i), torch.cuda.synchronize, None)
            kernels = sorted(k["name"] for k in ran)
            rows.append([dtype, str(bench), f"{t.summary.median:.3f}", " | ".join(kernels)[:150]])
            print(rows[-1], flush=True)
    torch.backends.cudnn.benchmark = False
    table = render(
        ["dtype", "cudnn.benchmark", "median ms", "kernels"],
        rows,
        f"Conv2d(3,128,3) fwd on (256,3,224,224), {_device_name()}",
    )
    (out / "cudnn_table.txt").write_text(table + "\n")
    print("\n" + table)


def cudnn_processes(out: Path) -> None:
    """Issue 8: conv-fwd-tf32 in one process in 5 output blocks, then in fresh processes.

    ``tools/cudnn_processes.py``: whether a process picks another cuDNN plan (the H200
    read this case at 9.44 or 9.78 ms in different processes).
    """
    tool = [sys.executable, str(ROOT / "tools" / "cudnn_processes.py"), "--out", str(out)]
    subprocess.run(tool, cwd=ROOT, timeout=400, check=False)


def gate_check(out: Path) -> None:
    """Gate an identical run (must pass) and a slowed one (must fail)."""
    same = run_pytest(
        [*GATED, "--gate", f"--benchmark-json={out / 'gate_same.json'}"], out / "gate_same.log"
    )
    slow_log = out / "gate_slowed.log"
    slowed = run_pytest(
        [
            "benches",
            "-k",
            "vgg_swap and train and fp32",
            "--profile",
            "seed",
            "--gate",
            "-p",
            "tests.slowdown",
            "--slowdown-ms",
            "5",
            "-p",
            "no:cacheprovider",
            f"--benchmark-json={out / 'gate_slow.json'}",
        ],
        slow_log,
    )
    named = [
        ln.strip()
        for ln in slow_log.read_text().splitlines()
        if "gpugauge gate:" in ln and "regressed" in ln
    ]
    rows = [
        ["identical run", str(same), "pass" if same == 0 else "FAIL", ""],
        [
            "slowed 5 ms/round",
            str(slowed),
            "pass" if slowed == 1 and named else "FAIL",
            "; ".join(named)[:160],
        ],
    ]
    print(
        "\n"
        + render(
            ["run", "pytest exit", "check", "regressions named"], rows, "gate on " + _device_name()
        )
    )


def core_gate(out: Path) -> None:
    """Issue 7: the seed vgg_swap and layers families gated against the committed baselines."""
    js = out / "core_gate.json"
    t0 = time.perf_counter()
    rc = run_pytest([*GATED, "--gate", f"--benchmark-json={js}"], out / "core_gate.log")
    wall = time.perf_counter() - t0
    run = load_run(js) if js.exists() else None
    verdicts = _verdicts(js)
    counts = {v: list(verdicts.values()).count(v) for v in sorted(set(verdicts.values()))}
    print(f"core gate: pytest exit {rc} in {wall:.0f} s; verdicts {counts}")
    if run is not None:
        print(f"device classes: {sorted(run.device_classes)}")


def clock_probe(out: Path) -> None:
    """Issue 8 exploration: how a bf16 8192^3 matmul's time and the SM clock move with time.

    Back to back for 4 s in batches of 20 rounds, each batch timed with events, the SM
    clock, power and clock-event reasons sampled every 10 ms; then 2 s idle and a short
    burst again. Prints one row per ~0.25 s.
    """
    import torch

    from gpugauge.measure.nvml import Nvml, reason_names
    from gpugauge.measure.sampler import GpuSampler

    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    mm = lambda: torch.mm(a, b)  # noqa: E731
    rows, log = [], []
    with Nvml() as nvml:
        dev = nvml.device(0)
        with GpuSampler(dev, period_s=0.01) as sampler:
            for phase, seconds in (("busy", 4.0), ("idle", 2.0), ("burst", 0.3)):
                if phase == "idle":
                    torch.cuda.synchronize()
                    time.sleep(seconds)
                    continue
                t_phase = time.perf_counter()
                while time.perf_counter() - t_phase < seconds:
                    ev = [
                        (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                        for _ in range(20)
                    ]
                    t0 = time.perf_counter()
                    for x, y in ev:
                        x.record()
                        mm()
                        y.record()
                    torch.cuda.synchronize()
                    t1 = time.perf_counter()
                    ms = sorted(x.elapsed_time(y) for x, y in ev)
                    got = sampler.between(t0, t1)
                    clocks = [g.sm_clock_mhz for g in got if g.sm_clock_mhz]
                    power = [g.power_w for g in got if g.power_w]
                    mask = 0
                    for g in got:
                        mask |= g.reason_mask or 0
                    log.append(
                        {
                            "phase": phase,
                            "t_s": t0 - t_phase,
                            "median_ms": ms[10],
                            "sm_mhz": clocks,
                            "power_w": power,
                            "reasons": reason_names(mask),
                        }
                    )
        for entry in log:
            if not rows or entry["t_s"] - float(rows[-1][1]) >= 0.25 or entry is log[-1]:
                c = entry["sm_mhz"]
                rows.append(
                    [
                        entry["phase"],
                        f"{entry['t_s']:.2f}",
                        f"{entry['median_ms']:.3f}",
                        f"{min(c) if c else 0}-{max(c) if c else 0}",
                        f"{max(entry['power_w']) if entry['power_w'] else 0:.0f}",
                        ",".join(entry["reasons"]),
                    ]
                )
    (out / "clock_probe.json").write_text(json.dumps(log))
    print(
        "\n"
        + render(
            ["phase", "t s", "median ms", "SM MHz", "max W", "reasons"],
            rows,
            "bf16 8192^3 matmul over time on " + _device_name(),
        )
    )


def layer_fit(out: Path) -> None:
    """Issue 10, one GPU: frontier searches, then the family's one-GPU cases via pytest."""
    import torch

    from gpugauge.families.layer_fit.budget import SEED_BUDGET
    from gpugauge.families.layer_fit.cases import FitCase
    from gpugauge.families.layer_fit.search import backend_for, run_search
    from gpugauge.families.layer_fit.tables import probe_table
    from gpugauge.report.tables import fmt_bytes

    t_start = time.perf_counter()
    print(f"{_device_name()}, {time.strftime('%Y-%m-%d %H:%M:%S')}", flush=True)
    todo = [
        FitCase("train", 62, SEED_BUDGET, "cuda", 4096),
        FitCase("train", 61, SEED_BUDGET, "cuda", 4096),
        FitCase("train", 62, SEED_BUDGET, "cuda", 4096, start="one"),
        FitCase("train", 1, SEED_BUDGET, "cuda", 4096),
        FitCase("train", 32, SEED_BUDGET, "cuda", 4096),
        FitCase("infer", 250, SEED_BUDGET, "cuda", 4096),
        FitCase("infer", 62, SEED_BUDGET, "cuda", 4096),
        FitCase("train", 62, "device", "cuda", 4096),
        FitCase("infer", 62, "device", "cuda", 4096),
    ]
    with backend_for(FitCase("train", 1, "device", "cuda", 1)):
        pass  # its warm-up step: cuBLAS's workspace stays allocated from here on
    rows = []
    log = out / "layer_fit_searches.jsonl"
    for case in todo:
        if time.perf_counter() - t_start > 300:
            print(f"skipping {case.id}: 300 s spent", flush=True)
            continue
        torch.cuda.empty_cache()
        before = torch.cuda.memory_allocated()
        t0 = time.perf_counter()
        try:
            with backend_for(case) as backend:
                result = run_search(
                    case, backend, on_probe=lambda p: print(f"  probe {p.as_dict()}", flush=True)
                )
        except Exception as err:  # one failed search must not lose the others
            print(f"{case.id}: FAILED {type(err).__name__}: {err}", flush=True)
            rows.append([case.id, "FAILED", "-", "-", "-", "-", "-", "-", str(err)[:60]])
            continue
        torch.cuda.empty_cache()
        after = torch.cuda.memory_allocated()
        result |= {"wall_s": time.perf_counter() - t0, "allocated_before": before}
        result["allocated_after"] = after
        with log.open("a") as fh:
            fh.write(json.dumps({"id": case.id, **result}) + "\n")
        table = probe_table(case, result)
        (out / f"{case.id}.txt").write_text(table + "\n")
        print(table, flush=True)
        err = result["error_fraction"]
        rows.append(
            [
                case.id,
                str(result["max_n"]) + ("+" if result["censored"] else ""),
                str(result["predicted_max_n"]),
                "-" if err is None else f"{err:+.1%}",
                f"{result['probe_count']}/{result['probe_bound']}",
                "yes" if after == before else f"NO ({after - before:+d} B)",
                fmt_bytes(result["headroom_bytes"]),
                f"{result['wall_s']:.0f}",
                result["backend"][:60],
            ]
        )
    js = out / "layer_fit_seed.json"
    rc = -1
    if time.perf_counter() - t_start < 330:
        rc = run_pytest(
            [*seed_run("layer_fit and (search or single)", js), "--energy-window", "0"],
            out / "layer_fit_seed.log",
        )
    table = render(
        [
            "search",
            "largest N",
            "predicted",
            "error",
            "probes/bound",
            "memory back",
            "headroom",
            "s",
            "backend",
        ],
        rows,
        f"layer_fit searches on {_device_name()}; pytest (search, single) exit {rc}; "
        f"{time.perf_counter() - t_start:.0f} s",
    )
    (out / "layer_fit_table.txt").write_text(table + "\n")
    print("\n" + table)


def layer_fit_split(
    out: Path,
    free: bool = False,
    alone: tuple[str, ...] = (),
    name: str = "",
    budget_s: float = 570.0,
) -> None:
    """Issue 10, two GPUs: the split cases via pytest; a table from their saved results.

    ``free``: the full profile's split on the whole devices (no budget), energy off and
    about 1 s of timed rounds a case, to fit one call beside the seed run. ``alone``: only
    the seed cases whose ids hold these parts, each in a pytest process of its own (cuDNN
    keeps a convolution's first plan per thread, and the backward's threads live as long
    as the process, so a case that fell back to a slow plan under memory pressure passes
    it to later cases on that device). ``name``: the files' stem; ``budget_s``: every run
    is over by then.
    """
    from gpugauge.report.tables import fmt_bytes

    print(f"{_device_name()}, {time.strftime('%Y-%m-%d %H:%M:%S')}", flush=True)
    name = name or (
        "layer_fit_split_free" if free else "layer_fit_split_alone" if alone else "layer_fit_split"
    )
    t0 = time.perf_counter()
    runs: list[tuple[list[str], Path]] = []
    if free:
        js = out / f"{name}.json"
        runs.append(
            (
                [
                    *seed_run("layer_fit and split and device", js, profile="full"),
                    *("--energy-window", "0", "--time-budget", "10", "--min-time", "1"),
                ],
                js,
            )
        )
    elif alone:
        for part in alone:
            js = out / f"{name}-{_slug(part)}.json"
            runs.append((seed_run(f"layer_fit and split and {part} and 11gib", js), js))
    else:
        js = out / f"{name}.json"
        runs.append((seed_run("layer_fit and split", js), js))
    rcs, infos = [], {}
    for args, js in runs:  # all of them within one device call's 600 s
        left = min(480.0, budget_s - (time.perf_counter() - t0))
        if left < 60:
            print(f"[gpu_checks] {js.stem}: not run, {left:.0f} s left", flush=True)
            rcs.append(1)  # a check that skipped a run did not pass
            continue
        rcs.append(run_pytest(args, out / f"{js.stem}.log", left))
        infos |= extra_infos(js)
    rc = max(rcs, default=1)
    wall = time.perf_counter() - t0
    if len(runs) > 1:  # a few files come back from the device: one archive of them all
        with tarfile.open(out / f"{name}.tar.gz", "w:gz") as tar:
            for _, js in runs:
                for f in (js, out / f"{js.stem}.log"):
                    if f.exists():
                        tar.add(f, arcname=f.name)
                        f.unlink()
    rows, kernel_lines = [], []
    naive_ms = {  # each case against the naive split with the same budget and allocator
        _split_where(k): i["timing"]["summary_ms"]["median"]
        for k, i in infos.items()
        if k.startswith("split-naive")
    }
    for key, info in infos.items():
        extra, spec = info["extra"], info["spec"]
        where = _split_where(key)
        med = info["timing"]["summary_ms"]["median"]
        trace = extra.get("trace") or {}
        busy = trace.get("busy_ms") or [None] * len(info["memory"])
        queued = trace.get("queued_ms") or [None] * len(info["memory"])
        events = extra.get("allocator_per_step") or [None] * len(info["memory"])
        setup = extra.get("allocator_setup") or [None] * len(info["memory"])
        for i, kernels in enumerate(trace.get("top_kernels") or []):
            top = "; ".join(f"{short_kernel(name, 60)} {ms:.3g} ms" for name, ms in kernels[:2])
            kernel_lines.append(f"{key} cuda:{i}: {top}")
        for i, mem in enumerate(info["memory"]):
            peak = mem["start_allocated_bytes"] + mem["peak_allocated_bytes"]
            reserved = mem["start_reserved_bytes"] + mem["peak_reserved_bytes"]
            cut, n, fc = extra["cut"], extra["conv"], spec["fc"]
            c0 = min(cut, n)
            layers = [(c0, cut - c0), (n - c0, fc - (cut - c0))][i]
            ev = events[i]
            rows.append(
                [
                    key if i == 0 else "",
                    mem["device"],
                    f"{layers[0]}+{layers[1]}",
                    fmt_bytes(extra["predicted_bytes"][i]),
                    fmt_bytes(peak),
                    fmt_bytes(reserved),
                    f"{extra['budgets'][i] / 2**30:.2f}",
                    f"{med:.4g}" if i == 0 else "",
                    f"{extra['seed_method_ms']['mean']:.4g}" if i == 0 else "",
                    _num(extra.get("plan", {}).get("predicted_step")) if i == 0 else "",
                    f"{naive_ms[where] / med:.2f}x" if i == 0 and where in naive_ms else "",
                    _num(busy[i]),
                    _num(trace.get("together_ms")) if i == 0 and trace else "",
                    _num(queued[i], ".3g"),
                    "-" if ev is None else f"{ev['num_alloc_retries']:.3g}/{ev['num_ooms']:.3g}",
                    "-" if ev is None else f"{ev['num_device_alloc']:.3g}",
                    "-" if setup[i] is None else f"{setup[i]['num_ooms']:.0f}",
                ]
            )
        if extra.get("trace_note"):
            rows.append(["", "", extra["trace_note"][:80], *[""] * 14])
    table = render(
        [
            "case",
            "device",
            "conv+fc",
            "predicted",
            "peak alloc",
            "peak reserved",
            "budget GiB",
            "median ms",
            "seed ms",
            "bubble ms",
            "naive/this",
            "busy ms",
            "both ms",
            "queued ms",
            "retry/oom",
            "mallocs",
            "setup ooms",
        ],
        rows,
        f"layer_fit split on {_device_name()}; pytest exit {rc} in {wall:.0f} s "
        "(bubble: the plan's step by the bubble model from its block costs; "
        "busy: each device's kernels, both: the two at once, per traced step; queued: "
        "median launch-to-start of a kernel, near 0 when the host sets the pace; "
        "retry/oom, mallocs: the allocator's free-and-retries, OOMs raised and cudaMallocs "
        "per step over the seed method's 15; setup ooms: OOMs while the cut was built in "
        "the benchmark's process, a cuDNN plan falling back where no attempt failed)",
    )
    table += "\n\ntop kernels per traced step:\n" + "\n".join(kernel_lines)
    (out / f"{name}_table.txt").write_text(table + "\n")
    print("\n" + table)


def _split_where(case_id: str) -> str:
    """A split case's head, budget, allocator and device: ``m62-11gib-expseg-cuda``."""
    return case_id[case_id.index("-m") + 1 :]


def _pipe_probe(mode: str, out: Path, timeout_s: float, tail: int) -> int | str:
    """``tools/pipe_probe.py --<mode>``, logged to ``pipe_probe_<mode>.log``; its exit.

    The log's last ``tail`` characters are printed.
    """
    probe = [sys.executable, str(ROOT / "tools" / "pipe_probe.py"), f"--{mode}", "--out", str(out)]
    log_path = out / f"pipe_probe_{mode}.log"
    with log_path.open("w") as log:
        try:
            done = subprocess.run(
                probe, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, timeout=timeout_s
            )
            rc: int | str = done.returncode
        except subprocess.TimeoutExpired:
            rc = f"timed out after {timeout_s:g} s"
    print(log_path.read_text()[-tail:], flush=True)
    return rc


def layer_fit_graphs(out: Path) -> None:
    """Issue 10, two GPUs: the split's schedules replayed from CUDA graphs.

    ``tools/pipe_probe.py --graphs`` first (each graphed schedule's gradients against the
    eager naive split's; each schedule eager and graphed under 11 GiB: memory, OOMs
    caught, timed), then the graphed benchmark cases, each schedule in a pytest process
    of its own, as ``layer_fit-split-alone`` runs the eager ones.
    """
    t0 = time.perf_counter()
    rc = _pipe_probe("graphs", out, timeout_s=240, tail=6000)
    print(f"probe exit {rc}", flush=True)
    parts = ("naive", "1f1b2", "gpipe2", "1f1b4", "gpipe4")
    layer_fit_split(
        out,
        alone=tuple(f"{p} and graphs" for p in parts),
        name="layer_fit_graphs",
        budget_s=570.0 - (time.perf_counter() - t0),
    )


def layer_fit_bisect(out: Path) -> None:
    """Issue 10, two GPUs: why 1F1B ×2 varies in the benchmark's process and not in a plain one.

    ``tools/pipe_probe.py --bisect`` times it after each step of the benchmark's setup in
    one plain process; then the benchmark's case alone, in pytest, for comparison.
    """
    t0 = time.perf_counter()
    rc = _pipe_probe("bisect", out, timeout_s=300, tail=3000)
    js = out / "layer_fit_1f1b2.json"
    left = 560.0 - (time.perf_counter() - t0)
    args = seed_run("layer_fit and split and 1f1b2 and expseg", js)
    pytest_rc = run_pytest(args, out / "layer_fit_1f1b2.log", left) if left > 90 else None
    for key, info in extra_infos(js).items():
        s, x = info["timing"]["summary_ms"], info["extra"]
        print(
            f"{key}: median {s['median']:.1f} [{s['ci_low']:.1f}, {s['ci_high']:.1f}] cv "
            f"{s['cv']:.1%}; seed method {x['seed_method_ms']['mean']:.1f} ms",
            flush=True,
        )
    print(f"probe exit {rc}, pytest exit {pytest_rc}", flush=True)


def layer_fit_microbatch(out: Path) -> None:
    """Issue 10, one GPU: block steps at GPipe's micro-batch sizes, against batch 16's.

    A conv block's and a head linear's training step at the seed's batch 16 split in 1, 2,
    4 and 8 parts; "x parts / full" is what a step split in that many parts costs.
    """
    from gpugauge.families.layer_fit.costs import measure_costs
    from gpugauge.families.layer_fit.memory_model import MemoryModel

    model = MemoryModel()
    rows, full = [], None
    for parts in (1, 2, 4, 8):
        costs = measure_costs(model, "cuda:0", batch=model.batch // parts)
        full = full or costs
        rows.append(
            [
                str(model.batch // parts),
                f"{costs.conv:.4g}",
                f"{parts * costs.conv / full.conv:.2f}x",
                f"{costs.linear:.4g}",
                f"{parts * costs.linear / full.linear:.2f}x",
            ]
        )
    table = render(
        ["batch", "conv block ms", "x parts / full", "linear ms", "x parts / full"],
        rows,
        f"layer_fit block costs per micro-batch on {_device_name()} (seed method; "
        "'x parts / full' > 1: a step split in parts costs that much more)",
    )
    (out / "layer_fit_microbatch.txt").write_text(table + "\n")
    print(table)


def _fmt_ci(ratio: dict | None) -> str:
    if not ratio:
        return "-"
    return f"{ratio['value']:.2f}x [{ratio['ci_low']:.2f}, {ratio['ci_high']:.2f}]"


def _gib(n: float | None) -> str:
    return "-" if n is None else f"{n / 2**30:.2f}"


def amp_speedup_rows(infos: dict[str, dict]) -> list[list[str]]:
    """One row per training case on the GPU: time, speedup over fp32, memory, energy, clock."""
    rows = []
    for key, info in infos.items():
        spec = info.get("spec") or {}
        if "precision" not in spec or spec.get("device") != "cuda":
            continue
        metrics = info.get("metrics") or {}
        summary = (info.get("timing") or {}).get("summary_ms") or {}
        # over fp32; a channels_last case is compared with its NCHW twin instead
        speedup, label = next(
            (
                (c["speedup"], "" if c["baseline_label"] == "fp32" else " vs NCHW")
                for c in info.get("comparisons", [])
                if c["candidate"] == key and c["baseline_label"] in ("fp32", "NCHW")
            ),
            (None, ""),
        )
        after = (info.get("gpu_after") or [{}])[0]
        energy = (info.get("energy") or [{}])[0]
        tf32 = (info.get("extra") or {}).get("tf32") or {}
        rows.append(
            [
                key,
                _num(summary.get("median"), ".4g"),
                f"[{_num(summary.get('ci_low'), '.4g')}, {_num(summary.get('ci_high'), '.4g')}]",
                "ref"
                if speedup is None and spec["precision"] == "fp32"
                else _fmt_ci(speedup) + label,
                _gib((metrics.get("memory") or {}).get("value")),
                _num((metrics.get("energy") or {}).get("value"), ".3g"),
                _num(energy.get("avg_power_w"), ".0f"),
                str(after.get("sm_clock_mhz", "-")),
                str((info.get("timing") or {}).get("throttled_rounds", "-")),
                f"conv {'on' if tf32.get('cudnn_allow_tf32') else 'off'}, "
                f"mm {'on' if tf32.get('cuda_matmul_allow_tf32') else 'off'}",
            ]
        )
    return rows


def amp_artifact_rows(infos: dict[str, dict]) -> tuple[list[list[str]], list[Path], bool]:
    """Per profiled case: trace kernel events, kernels named in the op table, loader share."""
    from gpugauge.measure.kernels import read_trace

    rows, files, ok = [], [], True
    for key, info in infos.items():
        art = info.get("artifacts") or {}
        if "trace" not in art:
            continue
        files += [Path(p) for p in art.values()]
        try:
            trace = read_trace(Path(art["trace"]))
            kernels = {a.name for a in trace if a.cat == "kernel"}
            error = ""
        except (OSError, ValueError) as err:
            trace, kernels, error = None, set(), str(err)[:60]
        listed = []
        if "ops_by_self_device_csv" in art:
            with open(art["ops_by_self_device_csv"]) as fh:
                listed = [r["name"] for r in csv.DictReader(fh)]
        real = [n for n in listed[:30] if n in kernels]
        loader = (info.get("extra") or {}).get("loader") or {}
        good = trace is not None and bool(kernels) and bool(real)
        ok &= good
        rows.append(
            [
                key,
                "yes" if trace is not None else f"NO {error}",
                str(len(kernels)),
                f"{len(real)}/{min(len(listed), 30)}",
                real[0][:50] if real else f"none (top row: {(listed or ['-'])[0][:40]})",
                _num(loader.get("fetch_share"), ".0%"),
                _num(loader.get("cost_share"), ".0%"),
                "ok" if good else "FAIL",
            ]
        )
    return rows, files, ok


def amp_inference_rows(infos: dict[str, dict]) -> tuple[list[list[str]], bool]:
    """CPU against GPU inference: latency and throughput on both, and the agreement."""
    rows, ok = [], True
    for key, info in infos.items():
        extra = info.get("extra") or {}
        if "agreement" not in extra:
            continue
        batch = (info.get("spec") or {})["batch"]
        gpu_ms = info["timing"]["summary_ms"]["median"]
        cpu_ms = extra["cpu"]["median_ms"]
        a = extra["agreement"]
        ok &= bool(a["ok"])
        rows.append(
            [
                key,
                f"{cpu_ms:.4g}",
                f"{gpu_ms:.4g}",
                f"{batch / cpu_ms * 1e3:.4g}",
                f"{batch / gpu_ms * 1e3:.4g}",
                f"{cpu_ms / gpu_ms:.1f}x",
                f"{a['rel_err']:.2e}",
                f"{a['tolerance']:g}",
                f"{a['argmax_agree']:.4f}",
                "ok" if a["ok"] else "FAIL",
            ]
        )
    return rows, ok


def amp_unprofiled_rows(infos: dict[str, dict]) -> list[list[str]]:
    """VGG-16 steps timed again here, in a process the profiler never touched."""
    import torch

    from gpugauge.families.amp.workload import cases, make_step, tf32_flags

    rows = []
    policy = PROFILE_POLICIES["seed"]
    for case in cases("seed"):
        if getattr(case, "model", None) != "vgg16" or case.device != "cuda":
            continue
        if getattr(case, "channels_last", True) or case.precision == "fp16":
            continue
        with tf32_flags(case.tf32):
            here = measure(make_step(case), policy, CudaEventClock("cuda")).summary.median
        torch.cuda.empty_cache()
        run = ((infos.get(case.id) or {}).get("timing") or {}).get("summary_ms", {}).get("median")
        rows.append(
            [case.id, _num(run, ".4g"), f"{here:.4g}", "-" if run is None else f"{here / run:.3f}"]
        )
    return rows


def amp(out: Path, pytest_args: tuple[str, ...] = (), deadline_s: float = 560.0) -> None:
    """Issue 12's checks; ``pytest_args`` go to the family's run, which stops by ``deadline_s``."""
    import torch

    print(
        f"torch {torch.__version__}, {torch.cuda.get_device_name()}, "
        f"{time.strftime('%Y-%m-%d %H:%M:%S')}",
        flush=True,
    )
    js = out / "amp_seed.json"
    t0 = time.perf_counter()
    rc = run_pytest([*seed_run("amp", js), *pytest_args], out / "amp_seed.log", deadline_s)
    wall = time.perf_counter() - t0
    print(f"amp seed profile: pytest exit {rc} in {wall:.0f} s", flush=True)
    infos = extra_infos(js)
    name = _device_name()
    speed = render(
        [
            "case",
            "median ms",
            "95% CI ms",
            "speedup vs fp32 [CI]",
            "peak GiB",
            "J/step",
            "W",
            "SM MHz after",
            "throttled",
            "TF32",
        ],
        amp_speedup_rows(infos),
        f"amp training steps on {name}; pytest wall {wall:.0f} s, exit {rc}",
    )
    art_rows, files, art_ok = amp_artifact_rows(infos)
    arts = render(
        [
            "case",
            "trace loads",
            "kernels",
            "op table kernels",
            "top listed kernel",
            "loader fetch",
            "loader cost",
            "check",
        ],
        art_rows,
        "profiler artifacts (traces, operator tables) and loader share: "
        + ("ok" if art_ok and art_rows else "FAIL"),
    )
    inf_rows, inf_ok = amp_inference_rows(infos)
    inf = render(
        [
            "case",
            "CPU ms",
            "GPU ms",
            "CPU img/s",
            "GPU img/s",
            "GPU speedup",
            "max rel err",
            "tolerance",
            "argmax agree",
            "agree",
        ],
        inf_rows,
        f"CPU against GPU inference, LeNet-5 on 1x28x28 ({torch.get_num_threads()} CPU threads): "
        f"{'ok' if inf_ok and len(inf_rows) == 3 else 'FAIL'}",
    )
    clean = render(
        ["case", "in pytest run ms", "here ms", "here/run"],
        amp_unprofiled_rows(infos),
        "the same steps timed in this process, where no profiler ever ran (contamination check)",
    )
    tables = "\n\n".join([speed, arts, inf, clean])
    (out / "amp_tables.txt").write_text(tables + "\n")
    # every table and the kernels of each case; the traces of two cases (the rest are large)
    keep = ("resnet18-train-bf16-b128-32px-cuda", "vgg16-train-bf16-b128-224px-cuda")
    with tarfile.open(out / "amp_profiles.tar.gz", "w:gz") as tar:
        for f in files:
            if f.exists() and (not f.name.endswith(".json") or f.parent.name in keep):
                tar.add(f, arcname=f"{f.parent.name}/{f.name}")
    print("\n" + tables)


def _kill_rank_mid_run(out: Path) -> list[str]:
    """Launch a 2-GPU DDP ResNet-18 series, SIGKILL rank 1 mid-run; report what happened."""
    import signal
    import tempfile
    import threading

    from gpugauge.families.distributed.workload import DistCase, launch_series, series_dir
    from gpugauge.launch.torchrun import LaunchError

    case = DistCase("resnet18", "ddp", 2, 32, 32, 10, 50_000, 2, "cuda", "seed")
    root = Path(tempfile.mkdtemp(prefix="gg-crash-"))
    folder = series_dir(root, case)
    lines: list[str] = []
    caught: list[BaseException] = []
    timeout_s = 180.0

    def run() -> None:
        try:
            launch_series([case], root, note=lambda _: None, timeout_s=timeout_s)
        except BaseException as err:  # handed to the main thread
            caught.append(err)

    t0 = time.monotonic()
    worker = threading.Thread(target=run)
    worker.start()
    pid = None
    while pid is None and time.monotonic() - t0 < 120:
        for line in processes_mentioning(str(folder)):
            p = int(line.split(":")[0])
            try:
                env = Path(f"/proc/{p}/environ").read_bytes().split(b"\0")
                cmd = Path(f"/proc/{p}/cmdline").read_bytes()
            except OSError:
                continue
            if b"gpugauge.launch.worker" in cmd and b"RANK=1" in env:
                pid = p
        time.sleep(0.2)
    if pid is None:
        worker.join()
        return [f"rank 1 never started: {caught}"]
    time.sleep(25.0)  # well into its epochs (data loaded, steps running)
    lines.append(f"processes before the kill ({time.monotonic() - t0:.0f} s in):")
    lines += [f"  {p}" for p in processes_mentioning(str(folder))]
    os.kill(pid, signal.SIGKILL)
    lines.append(f"SIGKILL sent to rank 1 (pid {pid})")
    worker.join()
    took = time.monotonic() - t0
    err = caught[0] if caught else None
    ok = isinstance(err, LaunchError) and "rank 1" in str(err)
    lines.append(
        f"launch ended after {took:.0f} s (timeout {timeout_s:.0f} s): "
        f"{type(err).__name__ if err else 'no error'}"
    )
    lines += [f"  {ln}" for ln in str(err).splitlines()[:40]]
    left = processes_mentioning(str(root))
    lines.append(f"processes left after the launch: {left or 'none'}")
    lines.append(f"crash check: {'pass' if ok and not left else 'FAIL'}")
    (out / "distributed_crash.txt").write_text("\n".join(lines) + "\n")
    return lines


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:.1%}"


def _num(x: float | None, fmt: str = ".4g") -> str:
    return "-" if x is None else format(x, fmt)


def distributed(
    out: Path, profile: str = "seed", select: str = "", deadline_s: float = 560.0
) -> None:
    """Issue 11's checks (two GPUs; issue 13's with ``--profile full`` on four).

    ``select`` narrows the family (a pytest ``-k`` expression, e.g. ``resnet18`` or
    ``not resnet18``); ``crash`` in it runs the killed-rank check too. Everything pytest
    runs stops by ``deadline_s`` after the start, with its JSON written.
    """
    import shutil
    import tempfile

    import torch

    t_start = time.perf_counter()
    print(
        f"torch {torch.__version__}, {torch.cuda.device_count()} x {torch.cuda.get_device_name()}, "
        f"{time.strftime('%Y-%m-%d %H:%M:%S')}",
        flush=True,
    )
    parts = [x.strip() for x in select.split(",") if x.strip() and x.strip() != "crash"]
    if not select:
        parts = [""]  # the whole family; "crash" alone runs only the killed-rank check
    work = Path(tempfile.mkdtemp(prefix="gg-dist-"))
    infos: dict[str, dict] = {}
    skipped: list[str] = []
    summary = []
    for i, part in enumerate(parts):
        js, log = work / f"part{i}.json", work / f"part{i}.log"
        family = f"distributed and ({part})" if part else "distributed"
        t0 = time.perf_counter()
        left = deadline_s - (t0 - t_start)
        if left < 30:
            summary.append(f"{family!r}: not run, {deadline_s:.0f} s deadline")
            continue
        args = [*seed_run(family, js, profile), f"--artifacts-dir={work / 'artifacts'}"]
        rc = run_pytest(args, log, timeout_s=left)
        wall = time.perf_counter() - t0
        summary.append(f"{family!r} ({profile}): pytest exit {rc} in {wall:.0f} s")
        print(summary[-1], flush=True)
        found = extra_infos(js)
        infos |= found
        if found:
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "gpugauge",
                    "report",
                    "--current",
                    str(js),
                    "--out",
                    str(work / f"report{i}"),
                ],
                cwd=ROOT,
                check=False,
            )
        skipped += [ln.strip() for ln in log.read_text().splitlines() if ln.startswith("SKIPPED")]
    # AlexNet kernel tables (rank 0), top rows
    for info in infos.values():
        md = info.get("artifacts", {}).get("kernels_rank0_md")
        if md and Path(md).exists():
            text = Path(md).read_text().splitlines()
            print("\n".join(ln[:160] for ln in text[:10]), flush=True)
    crash = (
        _kill_rank_mid_run(work) if "crash" in select or not select else ["crash check: not run"]
    )
    print("\n".join(crash), flush=True)

    rows = []
    for bid, info in infos.items():
        v, x = info.get("values", {}), info.get("extra", {})
        t = info.get("timing") or {}
        med = (t.get("summary_ms") or {}).get("median")
        sub = x.get("subtraction") or {}
        rows.append(
            [
                bid.replace("-cuda", ""),
                _num(med),
                _num(v.get("epoch_time"), ".3f"),
                _num(v.get("throughput"), ".0f"),
                _num(v.get("speedup"), ".3f"),
                _num(v.get("weak_speedup"), ".3f"),
                _pct(v.get("efficiency")),
                _pct(v.get("comm_fraction")),
                _pct(v.get("exposed_comm_fraction")),
                _pct(v.get("subtraction_comm_fraction")),
                _num(v.get("busbw"), ".0f"),
                _pct(v.get("busbw_utilization")),
                _pct(sub.get("busbw_utilization")),
            ]
        )
    table = render(
        [
            "case",
            "step ms",
            "epoch s",
            "img/s",
            "T1/TN",
            "N t1/tN",
            "eff",
            "comm",
            "exposed",
            "sub comm",
            "ref busbw",
            "util tr",
            "util sub",
        ],
        rows,
        f"distributed {profile} on {torch.cuda.device_count()} x {_device_name()}; "
        + "; ".join(summary)
        + "; comm/exposed from traces (slowest-exposed rank), sub = seed subtraction; "
        "ref busbw: all-reduce of the gradient bytes, GB/s",
    )
    text = table + "\n" + "\n".join(s[:200] for s in skipped) + "\n" + crash[-1] + "\n"
    tag = f"distributed_{_slug(select or 'all')}"
    (out / f"{tag}_table.txt").write_text(text)
    traces = list((work / "artifacts").rglob("trace-*.json.gz"))
    with tarfile.open(out / f"{tag}_results.tar.gz", "w:gz") as tar:
        for p in work.iterdir():
            if p.name != "artifacts":
                tar.add(p, arcname=p.name)
        for p in (work / "artifacts").rglob("*"):
            if p.is_file() and p not in traces:
                tar.add(p, arcname=str(p.relative_to(work)))
    with tarfile.open(out / f"{tag}_traces.tar.gz", "w:gz") as tar:
        for p in traces:
            if "cycle0" in p.name and "rank0" in p.name:
                tar.add(p, arcname=str(p.relative_to(work)))
    shutil.rmtree(work, ignore_errors=True)
    print("\n" + text)


def _slug(text: str) -> str:
    """A file-name-safe form of a selection: letters, digits, '-' and '_'."""
    return "".join(c if c.isalnum() or c in "-_" else "-" for c in text).strip("-")[:40]


def _device_name() -> str:
    import torch

    return f"{torch.cuda.get_device_name()} (torch {torch.__version__})"


def main() -> None:
    """Parse the check name and run it."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    checks = {
        "foundation": foundation,
        "layers": layers,
        "gate-record": gate_record,
        "gate-check": gate_check,
        "timer-check": timer_check,
        "core-gate": core_gate,
        "regime-record": regime_record,
        "regime-record-time": partial(regime_record, energy=False),
        "regime-gate": regime_gate,
        "regime-detect": regime_detect,
        "cudnn-probe": cudnn_probe,
        "cudnn-processes": cudnn_processes,
        "kernels-check": kernels_check,
        "clock-probe": clock_probe,
        "layer_fit": layer_fit,
        "layer_fit-split": layer_fit_split,
        "layer_fit-split-free": partial(layer_fit_split, free=True),
        "layer_fit-split-alone": partial(
            layer_fit_split,
            alone=tuple(
                f"{s} and not graphs" for s in ("naive", "gpipe2", "1f1b2", "1f1b4", "gpipe4")
            ),
        ),
        "layer_fit-graphs": layer_fit_graphs,
        "layer_fit-microbatch": layer_fit_microbatch,
        "layer_fit-bisect": layer_fit_bisect,
        "amp": amp,
        "distributed": distributed,
    }
    parser.add_argument("check", choices=sorted(checks), nargs="+")
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "gpu_out")))
    parser.add_argument(
        "--profile", choices=["seed", "full"], default="seed", help="distributed: the profile"
    )
    parser.add_argument(
        "--select",
        default="",
        help="distributed: comma-separated -k parts run one after another ('crash' adds the "
        "killed-rank check; empty: the whole family and the check)",
    )
    parser.add_argument(
        "--deadline-s", type=float, default=560.0, help="distributed, amp: pytest stops by then"
    )
    parser.add_argument(
        "--pytest-arg", action="append", default=[], help="amp: one more pytest argument (repeat)"
    )
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    checks["distributed"] = partial(
        distributed, profile=args.profile, select=args.select, deadline_s=args.deadline_s
    )
    checks["amp"] = partial(amp, pytest_args=tuple(args.pytest_arg), deadline_s=args.deadline_s)
    for name in args.check:
        checks[name](args.out)


if __name__ == "__main__":
    main()
