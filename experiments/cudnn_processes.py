"""Whether a fresh process picks another cuDNN plan for the same convolution (one GPU).

Question (issue 8): on one H200 the layers case conv-fwd-tf32 ran at 9.44-9.55 ms in some
pytest processes and 9.78 ms in others, at 1980 MHz, with ``cudnn.benchmark`` off
(docs/lab/gpu-runs.md, runs 11, 22-23). A plan chosen per process, the order of the cases, or
where the output lands in memory? Answer (docs/lab/experiments.md, "cudnn_processes"; run
46): in 12 fresh processes (alone, after conv-fwd-fp32, with ``cudnn.benchmark`` on) and
in 5 output blocks of one process the case took 9.436-9.438 ms with the same kernels; the
9.78 ms did not recur, so its cause is not established. Children hung at exit after
printing on an H100 and an H200 (runs 42, 45): they leave with ``os._exit``.

Run from the checkout:

    python -m experiments.cudnn_processes --out DIR [--repeats 4]

This runs the case in ``--repeats`` fresh processes per setting: alone, after
conv-fwd-fp32 (the seed run's order), and with ``cudnn.benchmark`` on; each child times
it with the suite's seed policy and profiles one round for the kernels that ran. First,
one process times it with its output in several different blocks (``placements``): if
the speed follows the block, the memory's placement differs, not the plan. Prints a
table and writes ``cudnn_processes.json`` under ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]  # the checkout: children run from it

SETTINGS = {  # name: (cases run first, cudnn.benchmark)
    "alone": ((), False),
    "after fp32": (("conv-fwd-fp32-seed-cuda",), False),
    "benchmark on": ((), True),
}
CASE = "conv-fwd-tf32-seed-cuda"
PLACEMENTS = 5  # output blocks of CASE timed in one process (--placements)


def _kernels_ms(fn) -> dict[str, float]:
    """Device ms per kernel name of one round of ``fn`` (the suite's ``round_kernels``)."""
    import torch

    from gpugauge.measure.profile import round_kernels

    return {k["name"]: k["us"] / 1e3 for k in round_kernels(fn, torch.cuda.synchronize, None)}


def _timed(fn) -> dict:
    """``fn`` timed with the suite's seed policy, and its kernels from one more round."""
    from gpugauge.measure.timing import CudaEventClock, measure
    from gpugauge.runtime.options import PROFILE_POLICIES

    t = measure(fn, PROFILE_POLICIES["seed"], CudaEventClock("cuda"))
    return {
        "median_ms": t.summary.median,
        "ci": [t.summary.ci_low, t.summary.ci_high],
        "kernels_ms": _kernels_ms(fn),
    }


def placements() -> dict:
    """CASE timed in one process with its output in ``PLACEMENTS`` different blocks.

    Each block is a fresh ``cudaMalloc``: the previous one is kept alive by a tensor of its
    size, so the next round's output cannot reuse it. If the two speeds follow the block
    (its physical pages) and not the process, the cuDNN plan is not what differs.
    """
    from gpugauge.families.layers.workload import cases, make_round
    from gpugauge.measure.ceilings import matmul_precision

    case = {c.id: c for c in cases("seed")}[CASE]
    fn = make_round(case)[0]
    held, rows = [], []
    with matmul_precision(case.dtype):
        for _ in range(PLACEMENTS):
            row = _timed(fn)
            y = fn()  # the block the rounds wrote, taken from the cache and kept taken,
            held.append(y)  # so that the next placement's rounds get a new one
            rows.append({**row, "output_ptr": y.data_ptr()})
    return {"setting": "placements", "pid": os.getpid(), "placements": rows}


def child(setting: str) -> dict:
    """Time CASE in this process (after SETTINGS' cases); its kernels from one round."""
    import torch

    from gpugauge.families.layers.workload import cases, make_round
    from gpugauge.measure.ceilings import matmul_precision

    before, bench = SETTINGS[setting]
    torch.backends.cudnn.benchmark = bench
    by_id = {c.id: c for c in cases("seed")}
    out = {"setting": setting, "pid": os.getpid()}
    for case_id in (*before, CASE):
        case = by_id[case_id]
        with matmul_precision(case.dtype):
            out[case_id] = _timed(make_round(case)[0])
    return out


def _text(raw: bytes | str | None) -> str:
    return raw.decode(errors="replace") if isinstance(raw, bytes) else (raw or "")


def _top(kernels: dict[str, float]) -> str:
    from gpugauge.regress.gate import short_kernel

    top = sorted(kernels.items(), key=lambda kv: -kv[1])[:3]
    return "; ".join(f"{short_kernel(name, 60)} {ms:.3g}" for name, ms in top)


def _run_child(setting: str, timeout_s: float = 90) -> dict | None:
    """One child's result, or None (said why); a child that printed, then hung, still counts."""
    cmd = [sys.executable, "-m", "experiments.cudnn_processes", "--child", setting]
    try:
        done = subprocess.run(
            cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout_s, check=False
        )
        stdout, stderr, rc = done.stdout, done.stderr, done.returncode
    except subprocess.TimeoutExpired as err:
        stdout, stderr, rc = _text(err.stdout), _text(err.stderr), "timed out"
        print(f"[{setting}] timed out after {timeout_s:g} s; stderr: {stderr[-1500:]}", flush=True)
    lines = [ln for ln in stdout.splitlines() if ln.startswith("{")]
    if not lines:
        print(f"[{setting}] exit {rc}, no result: {stderr[-2000:]}", flush=True)
        return None
    return json.loads(lines[-1]) | {"exit": rc}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", ".")))
    parser.add_argument("--repeats", type=int, default=4)
    parser.add_argument("--child", choices=[*sorted(SETTINGS), "placements"])
    args = parser.parse_args()
    if args.child:
        res = placements() if args.child == "placements" else child(args.child)
        print(json.dumps(res), flush=True)
        # children hung at exit after printing on an H100 and an H200 (runs 42, 45; cause
        # not found): skip the interpreter's teardown, the result is out
        os._exit(0)
    from gpugauge.report.tables import render

    args.out.mkdir(parents=True, exist_ok=True)
    rows, results, t0 = [], [], time.perf_counter()

    def keep(res: dict) -> None:
        results.append(res)
        (args.out / "cudnn_processes.json").write_text(json.dumps(results, indent=1))

    # PLACEMENTS timings (each up to 5 s of warm-up and 10 s of rounds) and their profiles
    if (res := _run_child("placements", timeout_s=PLACEMENTS * 20 + 60)) is not None:
        keep(res)
        for i, got in enumerate(res["placements"]):
            median = f"{got['median_ms']:.4g}"
            rows.append([f"block {i}", "placements", median, _top(got["kernels_ms"])])
            print(" | ".join(rows[-1]), flush=True)
    for r in range(args.repeats):
        for setting in SETTINGS:  # interleaved, so a drift in time hits every setting
            if (res := _run_child(setting)) is None:
                continue
            keep(res)
            got = res[CASE]
            rows.append([str(r), setting, f"{got['median_ms']:.4g}", _top(got["kernels_ms"])])
            print(" | ".join(rows[-1]), flush=True)
    title = f"{CASE} in fresh processes, {time.perf_counter() - t0:.0f} s"
    print(render(["repeat", "setting", "median ms", "top kernels (ms)"], rows, title))


if __name__ == "__main__":
    main()
