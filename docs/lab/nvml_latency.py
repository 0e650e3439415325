# Run on a GPU host: python3 docs/lab/nvml_latency.py (about 10 s); run 140 in gpu-runs.md.
"""NVML's read latencies, idle and with the GPU busy, and the sampler's start and stop.

Each of the reads :class:`~gpugauge.measure.sampler.GpuSampler` makes 200 times, then 25
starts and stops of the sampler around 0.2 s of small kernels and of large matmuls. Prints
and writes ``$OUT/nvlat.json`` (medians, 90th percentiles and maxima, ms).
"""

import json
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

import torch

from gpugauge.measure.nvml import Nvml, NvmlDevice
from gpugauge.measure.sampler import GpuSampler

READS = ("sm_clock_mhz", "clock_event_mask", "power_w", "mem_clock_mhz", "state")


def summary(seconds: list[float]) -> dict[str, float]:
    """Median, 90th percentile and maximum, ms."""
    xs = sorted(seconds)
    n = len(xs)
    ms = {"med_ms": xs[n // 2], "p90_ms": xs[int(n * 0.9)], "max_ms": xs[-1]}
    return {"n": n} | {k: 1e3 * v for k, v in ms.items()}


def timed(fn: Callable[[], object], times: int) -> list[float]:
    """Seconds of each of ``times`` calls."""
    out = []
    for _ in range(times):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return out


def reads(dev: NvmlDevice) -> dict[str, dict[str, float]]:
    """Each read's latency over 200 calls."""
    return {name: summary(timed(getattr(dev, name), 200)) for name in READS}


def main() -> None:
    res: dict[str, object] = {}
    with Nvml() as nv:
        dev = nv.device(0)
        res["idle"] = reads(dev)
        a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
        stop = threading.Event()

        def busy() -> None:
            stream = torch.cuda.Stream()
            with torch.cuda.stream(stream):
                while not stop.is_set():
                    for _ in range(20):
                        a @ a
                    stream.synchronize()

        worker = threading.Thread(target=busy)
        worker.start()
        time.sleep(1.0)
        res["busy"] = reads(dev)
        stop.set()
        worker.join()
        x = torch.randn(1 << 20, device="cuda")
        works = {
            "small": lambda: [x.relu_() for _ in range(2000)],
            "big": lambda: [a @ a for _ in range(60)],
        }
        for label, work in works.items():
            enter, leave = [], []
            for _ in range(25):
                s = GpuSampler(dev)
                enter += timed(s.__enter__, 1)
                work()
                torch.cuda.synchronize()
                leave += timed(lambda s=s: s.__exit__(None, None, None), 1)
            res[f"sampler_{label}"] = {"enter": summary(enter), "exit": summary(leave)}
        res["sampler_init"] = summary(timed(lambda: GpuSampler(dev), 25))
    print(json.dumps(res, indent=1))
    Path(os.environ.get("OUT", "."), "nvlat.json").write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
