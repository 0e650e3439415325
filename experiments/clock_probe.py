"""How a power-capped matmul's time and the SM clock move over seconds of back-to-back work.

Question (issue 8): the same kernel read 1.40 ms in a short window and 1.62 ms later; how
long does a GPU at its power limit boost, and where does it settle? Answer (docs/lab/gpu-runs.md,
run 8, on an H200 at 700 W; summarized in docs/lab/experiments.md, "clock_probe"): the 1980 MHz
boost lasted about 0.15 s from a cold start and 30-60 ms after 2 s idle; sustained batch
medians after 1 s were 1.567-1.885 ms at 1425-1545 MHz under ``sw_power_cap``. This is why
the suite times in a named, sustained regime with the clocks recorded beside each result.
Worth running on a new GPU: it shows that GPU's boost and settled regime.

Run from the checkout on one GPU:

    python -m experiments.clock_probe --out DIR

A bf16 8192^3 matmul runs back to back for 4 s in batches of 20 rounds, each batch timed
with CUDA events, the SM clock, power and clock-event reasons sampled every 10 ms; then
2 s idle and a 0.3 s burst. Prints one row per ~0.25 s; every batch goes to
``clock_probe.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Any


def probe() -> list[dict[str, Any]]:
    """Every batch: phase, seconds into it, median ms, SM MHz and W samples, reasons."""
    import torch

    from gpugauge.measure.nvml import Nvml, reason_names
    from gpugauge.measure.sampler import GpuSampler

    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    log = []
    with Nvml() as nvml, GpuSampler(nvml.device(0), period_s=0.01) as sampler:
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
                    torch.mm(a, b)
                    y.record()
                torch.cuda.synchronize()
                t1 = time.perf_counter()
                ms = sorted(x.elapsed_time(y) for x, y in ev)
                got = sampler.between(t0, t1)
                mask = 0
                for g in got:
                    mask |= g.reason_mask or 0
                log.append(
                    {
                        "phase": phase,
                        "t_s": t0 - t_phase,
                        "median_ms": ms[10],
                        "sm_mhz": [g.sm_clock_mhz for g in got if g.sm_clock_mhz],
                        "power_w": [g.power_w for g in got if g.power_w],
                        "reasons": reason_names(mask),
                    }
                )
    return log


def table(log: list[dict[str, Any]]) -> list[list[str]]:
    """One row per ~0.25 s of each phase, and the last batch."""
    rows: list[list[str]] = []
    for entry in log:
        if not rows or entry["t_s"] - float(rows[-1][1]) >= 0.25 or entry is log[-1]:
            c, w = entry["sm_mhz"], entry["power_w"]
            rows.append(
                [
                    entry["phase"],
                    f"{entry['t_s']:.2f}",
                    f"{entry['median_ms']:.3f}",
                    f"{min(c) if c else 0}-{max(c) if c else 0}",
                    f"{max(w) if w else 0:.0f}",
                    ",".join(entry["reasons"]),
                ]
            )
    return rows


def main() -> None:
    """Probe, write the batches, print the table."""
    import torch

    from gpugauge.report.tables import render

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", ".")))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    log = probe()
    (args.out / "clock_probe.json").write_text(json.dumps(log))
    name = f"{torch.cuda.get_device_name()} (torch {torch.__version__})"
    headers = ["phase", "t s", "median ms", "SM MHz", "max W", "reasons"]
    print(render(headers, table(log), f"bf16 8192^3 matmul over time on {name}"))


if __name__ == "__main__":
    main()
