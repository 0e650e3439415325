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
``distributed`` (issue 11, on 2 GPUs): the distributed family at the seed profile (VGG-16
1 vs DDP 2, the ResNet-18 sweep with DP and DDP, AlexNet kernel tables), its report, then a
DDP launch whose rank 1 is killed mid-run (the error and the process list), a table last.
Full logs and JSON go to ``--out``; nothing here changes clocks or power limits.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from dataclasses import replace  # noqa: E402

from gpugauge.measure.timing import CudaEventClock, measure  # noqa: E402
from gpugauge.options import PROFILE_POLICIES  # noqa: E402
from gpugauge.report.tables import render  # noqa: E402


def run_pytest(args: list[str], log: Path) -> int:
    """Run pytest from the checkout, streaming its output to stdout and ``log``."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    cmd = [sys.executable, "-m", "pytest", *args]
    print("$", " ".join(cmd), flush=True)
    with log.open("w") as fh:
        proc = subprocess.Popen(
            cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        assert proc.stdout is not None
        for line in proc.stdout:
            fh.write(line)
            if line.startswith(("[gpugauge]", "FAILED", "ERROR", "=")):
                print(line, end="", flush=True)
        return proc.wait()


def seed_run(family: str, js: Path) -> list[str]:
    """Pytest arguments of one family's seed profile, autosaved and written to ``js``."""
    return [
        "benches",
        "-k",
        family,
        "--profile",
        "seed",
        "--benchmark-autosave",
        f"--benchmark-json={js}",
        "-p",
        "no:cacheprovider",
    ]


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

    from gpugauge.workloads.vgg_swap import cases, make_step

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

    from gpugauge.measure.ceilings import matmul_precision
    from gpugauge.workloads.layers import cases, make_round

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
    saved = {}
    if js.exists():
        saved = {b["param"]: b["extra_info"] for b in json.loads(js.read_text())["benchmarks"]}

    policy = replace(PROFILE_POLICIES["seed"], flush_l2=True)
    from gpugauge.gauge import l2_flusher

    rows = []
    for case in (c for c in cases("seed") if c.device == "cuda"):
        info = saved.get(case.id, {})
        roof = info.get("roofline") or {}
        mem = info.get("memory_check") or {}
        energy = info.get("energy") or {}
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


def gate_record(out: Path) -> None:
    """Record multi-run seed baselines of vgg_swap and layers; copy them to ``out``.

    A timing-only run first, then a full run (energy included); the baseline keeps the
    full run's numbers and both runs' medians (their spread is run-to-run noise).
    """
    import shutil

    quick, full = out / "record_time_only.json", out / "record_full.json"
    rc1 = run_pytest(
        [*GATED, "--energy-window", "0", f"--benchmark-json={quick}"], out / "record_time_only.log"
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


def timer_check(out: Path) -> None:
    """Harness median against do_bench for the layers' forward cases and VGG training."""
    import torch
    import triton.testing

    from gpugauge.gauge import l2_flusher
    from gpugauge.measure.ceilings import matmul_precision
    from gpugauge.workloads.layers import cases as layer_cases
    from gpugauge.workloads.layers import make_round
    from gpugauge.workloads.vgg_swap import cases as vgg_cases
    from gpugauge.workloads.vgg_swap import make_step

    rows = []
    seed = PROFILE_POLICIES["seed"]
    todo = [(c, True) for c in layer_cases("seed") if c.device == "cuda" and c.mode == "fwd"]
    todo += [(c, False) for c in vgg_cases("seed") if c.device == "cuda" and c.mode == "train"]
    for case, cold in todo:
        fn = make_round(case)[0] if cold else make_step(case)
        flush = l2_flusher("cuda") if cold else None
        with matmul_precision(getattr(case, "dtype", "fp32") if cold else "none"):
            t = measure(fn, replace(seed, flush_l2=cold), CudaEventClock("cuda"), between=flush)
            bench = triton.testing.do_bench(fn, warmup=200, rep=1000, return_mode="median")
        h, d = t.host_summary.median, t.summary.median
        rows.append([case.id, f"{d:.4g}", f"{bench:.4g}", f"{d / bench - 1:+.1%}", f"{h / d:.2f}"])
        del fn
        torch.cuda.empty_cache()
    table = render(
        ["case", "harness ms", "do_bench ms", "diff", "host/device"],
        rows,
        "harness (with head start) vs do_bench on " + _device_name(),
    )
    (out / "timer_table.txt").write_text(table + "\n")
    print("\n" + table)


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


def _processes_mentioning(text: str) -> list[str]:
    """``pid: command line`` of live processes whose command line contains ``text``."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if text in cmdline:
            found.append(f"{proc.name}: {cmdline[:150]}")
    return found


def _kill_rank_mid_run(out: Path) -> list[str]:
    """Launch a 2-GPU DDP ResNet-18 series, SIGKILL rank 1 mid-run; report what happened."""
    import signal
    import tempfile
    import threading

    from gpugauge.launch.torchrun import LaunchError
    from gpugauge.workloads.distributed import DistCase, launch_series, series_dir

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
        for line in _processes_mentioning(str(folder)):
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
    lines += [f"  {p}" for p in _processes_mentioning(str(folder))]
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
    left = _processes_mentioning(str(root))
    lines.append(f"processes left after the launch: {left or 'none'}")
    lines.append(f"crash check: {'pass' if ok and not left else 'FAIL'}")
    (out / "distributed_crash.txt").write_text("\n".join(lines) + "\n")
    return lines


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:.1%}"


def _num(x: float | None, fmt: str = ".4g") -> str:
    return "-" if x is None else format(x, fmt)


def distributed(out: Path) -> None:
    """Issue 11's checks (two GPUs)."""
    import shutil
    import tarfile
    import tempfile

    import torch

    print(
        f"torch {torch.__version__}, {torch.cuda.device_count()} x {torch.cuda.get_device_name()}, "
        f"{time.strftime('%Y-%m-%d %H:%M:%S')}",
        flush=True,
    )
    work = Path(tempfile.mkdtemp(prefix="gg-dist-"))
    js = out / "distributed_seed.json"
    log = out / "distributed_seed.log"
    t0 = time.perf_counter()
    rc = run_pytest([*seed_run("distributed", js), f"--artifacts-dir={work / 'artifacts'}"], log)
    wall = time.perf_counter() - t0
    print(f"distributed seed profile: pytest exit {rc} in {wall:.0f} s", flush=True)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "gpugauge",
            "report",
            "--current",
            str(js),
            "--out",
            str(work / "report"),
        ],
        cwd=ROOT,
        check=False,
    )
    if (work / "report").exists():
        with tarfile.open(out / "distributed_report.tar.gz", "w:gz") as tar:
            tar.add(work / "report", arcname="report")
    traces = [p for p in (work / "artifacts").rglob("trace-*.json.gz")]
    with tarfile.open(out / "distributed_artifacts.tar.gz", "w:gz") as tar:
        for p in (work / "artifacts").rglob("*"):
            if p.is_file() and p not in traces:
                tar.add(p, arcname=str(p.relative_to(work)))
    with tarfile.open(out / "distributed_traces.tar.gz", "w:gz") as tar:
        for p in traces:
            if "cycle0" in p.name:
                tar.add(p, arcname=str(p.relative_to(work)))

    infos = {}
    if js.exists():
        infos = {b["param"]: b["extra_info"] for b in json.loads(js.read_text())["benchmarks"]}
    # AlexNet kernel tables (rank 0), top rows
    for info in infos.values():
        md = info.get("artifacts", {}).get("kernels_rank0_md")
        if md and Path(md).exists():
            text = Path(md).read_text().splitlines()
            print("\n".join(ln[:160] for ln in text[:10]), flush=True)
    skipped = (
        [ln.strip() for ln in log.read_text().splitlines() if ln.startswith("SKIPPED")]
        if log.exists()
        else []
    )
    crash = _kill_rank_mid_run(out)
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
        f"distributed seed on {torch.cuda.device_count()} x {_device_name()}; pytest exit {rc}, "
        f"{wall:.0f} s; comm/exposed from traces (slowest-exposed rank), sub = seed subtraction; "
        "ref busbw: all-reduce of the gradient bytes, GB/s",
    )
    text = table + "\n" + "\n".join(s[:200] for s in skipped) + "\n" + crash[-1] + "\n"
    (out / "distributed_table.txt").write_text(text)
    shutil.rmtree(work, ignore_errors=True)
    print("\n" + text)


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
        "distributed": distributed,
    }
    parser.add_argument("check", choices=sorted(checks))
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "gpu_out")))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    checks[args.check](args.out)


if __name__ == "__main__":
    main()
