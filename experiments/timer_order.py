"""Why the timer check's power-heavy GEMM reads slower in the suite than under do_bench.

Question: ``gpugauge check timer`` timed matmul-8192-bf16 first with the suite's timer and
then with ``triton.testing.do_bench``, and the suite read 2.9-4.3% slower in four of six
runs on H100s (docs/lab/gpu-runs.md runs 54, 70, 71, 76), the last at the same median SM
clock (1455 MHz), while every training step agreed within 0.2%. Two things differed
besides the timer: the order (the suite always ran first) and the L2 flush between rounds
(the suite zeroes twice the L2, 100 MB on an H100; do_bench zeroes 256 MB). At the power
cap either can move the clock an op runs at.

So each op is timed in one series of blocks, each block a whole timing of one kind:
suite with its own flush (S100), suite with do_bench's flush (S256), do_bench (D), in the
order S100 D S256 D D S256 D S100, twice. A flush effect shows as S100 against S256 at
mirrored places; an order effect as the first block of a kind against its mirror.

Answer (runs 78 and 80, H100s, 2026-11-26): neither; each block is noisy. Run 78: over
8 blocks do_bench's median of matmul-8192-bf16 moved 1.577-1.630 ms (3.4%), the suite's
with do_bench's flush 1.6182-1.6190 ms, with its own 1.617-1.652; the flush moved the
suite's mean by 0.6-0.9%. Run 80 (``--warmup-series``: do_bench also with 2 s of warm-up):
every kind's blocks moved about 3%, and their means agreed within 1.2% (bf16) and 0.2%
(fp16); a longer warm-up changed nothing. So the check times suite, do_bench, do_bench,
suite with do_bench's flush for all, and repeats that pair while a row is outside its
threshold and its blocks spread (docs/check.md, "Interleaved and repeated, and why").

Run on one GPU from the checkout::

    python -m experiments.timer_order [--json FILE] [--ops matmul-8192-bf16 ...]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

from gpugauge.check.three_timers import (
    DO_BENCH_WARMUP_MS,
    _do_bench,
    cold_timing,
    do_bench_flush,
    power_heavy_ops,
)
from gpugauge.measure.nvml import maybe_nvml
from gpugauge.runtime.options import PROFILE_POLICIES
from gpugauge.runtime.pipeline import l2_flusher

SERIES = ("S100", "D", "S256", "D", "D", "S256", "D", "S100")
# the warm-up question (run 79): do_bench with 4x its warm-up, against the suite and itself
WARMUP_SERIES = ("S256", "D", "D2000", "S256", "D2000", "D", "S256")


def series(op: str, fn, dev, repeat: int, kinds: tuple[str, ...] = SERIES) -> list[dict]:
    """Every block of ``kinds``, ``repeat`` times: kind, median ms, SM clock MHz, start s."""
    policy = PROFILE_POLICIES["seed"]
    flushes = {"S100": l2_flusher("cuda"), "S256": do_bench_flush("cuda")}
    out, t0 = [], time.perf_counter()
    for r in range(repeat):
        for i, kind in enumerate(kinds):
            start = time.perf_counter() - t0
            if kind.startswith("D"):
                warmup = int(kind[1:] or DO_BENCH_WARMUP_MS)
                ms, seen = _do_bench(fn, dev, warmup)
                mhz = statistics.median(seen) if seen else None
            else:
                timing = cold_timing(fn, policy, "cuda", flushes[kind], dev)
                ms, mhz = timing.summary.median, timing.clocks()["sm_median_mhz"]
            out.append(
                {
                    "op": op,
                    "repeat": r,
                    "place": i,
                    "kind": kind,
                    "ms": ms,
                    "sm_mhz": mhz,
                    "start_s": round(start, 2),
                }
            )
            print(
                f"{op} r{r} {i} {kind:>4}: {ms:.4f} ms at {mhz} MHz (t={start:.1f} s)", flush=True
            )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", type=Path)
    ap.add_argument("--ops", nargs="*", default=["matmul-8192-bf16", "matmul-8192-fp16"])
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--warmup-series", action="store_true", help="S D D2000 S D2000 D S")
    args = ap.parse_args()
    kinds = WARMUP_SERIES if args.warmup_series else SERIES
    rows = []
    with maybe_nvml() as nvml:
        dev = None if isinstance(nvml, Exception) else nvml.device(0)
        for op, fn in power_heavy_ops():
            if op in args.ops:
                rows += series(op, fn, dev, args.repeat, kinds)
    for op in args.ops:
        mine = [r for r in rows if r["op"] == op]
        for kind in sorted(set(kinds)):
            ms = [r["ms"] for r in mine if r["kind"] == kind]
            if ms:
                print(
                    f"{op} {kind:>4}: mean {statistics.fmean(ms):.4f} ms over {len(ms)} "
                    f"blocks, {min(ms):.4f}-{max(ms):.4f}"
                )
    if args.json:
        args.json.write_text(
            json.dumps({"device": torch.cuda.get_device_name(), "rows": rows}, indent=1)
        )


if __name__ == "__main__":
    main()
