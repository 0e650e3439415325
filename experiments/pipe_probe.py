"""Why a pipelined layer_fit split's rounds varied, and what its memory costs (two GPUs).

Question (issue 10): GPipe and 1F1B over two GPUs, the seed's model (138 conv + 62 fc),
were slower and noisier in the benchmark than planned. Is it the allocator's reserve, the
profiler, the budget, the benchmark's setup, or the host issuing ~6,200 launches a step?
Answers (docs/lab/experiments.md, "pipe_probe"; raw numbers in docs/lab/gpu-runs.md runs 34, 36, 38,
39, 41, 43; conclusions in docs/lab/layer-fit-evidence.md): the default allocator reserves 2.8 GiB
beyond GPipe's allocation (expandable segments: 0.1 GiB); a trace left CUPTI subscribed and slowed
every later launch (fixed: ``TEARDOWN_CUPTI=1``); neither the budget nor the benchmark's setup makes
1F1B vary, the host's launch pace does; replayed from CUDA graphs
1F1B x2 went from 91.3 to 86.1 ms and GPipe x2 from 112.4 to 89.3 ms.

Run from the checkout on two GPUs:

    python -m experiments.pipe_probe --out DIR [--memory-only | --trace |
        --profiler-effect | --budget-effect | --bisect | --graphs]

On the whole devices each case is timed three ways with the suite's timer: rounds back to
back (``b2b``), the same with the suite's NVML sampler beside it (``b2b+nvml``), and with
both devices synchronized before every round (``sync``), issued from a thread per stage
(``threads``) or from this thread (``inline``), with each device's peak allocated and
reserved bytes. ``--trace`` profiles four back-to-back 1F1B x2 steps for Perfetto;
``--profiler-effect`` times GPipe and 1F1B x2 before and after the suite's traced step;
``--budget-effect`` times 1F1B x2 on the whole devices and under 11 GiB with each allocator;
``--bisect`` times it after each thing the benchmark does before timing it; ``--graphs``
times each schedule issued op by op and replayed from CUDA graphs. Writes
``pipe_probe*.json`` (every round) and prints a table. Run it twice to compare allocators,
the second time under ``PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True``.
"""

from __future__ import annotations

import argparse
import gc
import gzip
import json
import os
import shutil
import statistics
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import torch

from gpugauge.families.layer_fit.budget import budgets
from gpugauge.families.layer_fit.cases import SplitCase
from gpugauge.families.layer_fit.cut_fit import prime_conv_plans, settle
from gpugauge.families.layer_fit.plan import SplitError
from gpugauge.families.layer_fit.runner import SplitRunner
from gpugauge.families.layer_fit.steps import round_clock
from gpugauge.families.layer_fit.trace import trace_overlap
from gpugauge.measure.memory import allocator_events, events_per_call
from gpugauge.measure.nvml import Nvml
from gpugauge.measure.profile import release_cupti_on_stop
from gpugauge.measure.sampler import GpuSampler
from gpugauge.measure.timing import TimingPolicy, measure
from gpugauge.report.tables import fmt_bytes, render
from gpugauge.runtime.options import PROFILE_POLICIES

DEVICES = ("cuda:0", "cuda:1")
POLICY = TimingPolicy(warmup_rounds=5, rounds=30)
MODEL = SplitCase("naive", 138, 62).memory_model  # the seed's 138 conv + 62 fc
BUDGET = 11 * 2**30  # the seed's 11 GiB per GPU


def _sync() -> None:
    round_clock(DEVICES).synchronize()


def _free() -> None:
    gc.collect()
    torch.cuda.empty_cache()


def _settled(schedule: str, parts: int, cut: int, threads: bool = False) -> Callable[[], object]:
    """The seed model's step, cut after block ``cut``, settled (its runner lives in it)."""
    step = SplitRunner(MODEL, 138, 62, cut, DEVICES, threads=threads).schedule(schedule, parts)
    settle(step, DEVICES)
    _sync()
    return step


def _timed(
    label: str, step: Callable[[], object], mode: str = "b2b", policy: TimingPolicy = POLICY
) -> dict:
    """``step`` timed by the suite's primitive ``mode``'s way; one printed line, its rounds.

    ``b2b``: rounds back to back; ``b2b+nvml``: the same beside the suite's NVML sampler;
    ``sync``: both devices synchronized before every round. The allocator's events per
    round (retries, OOMs, cudaMallocs) are kept.
    """
    clock = round_clock(DEVICES)
    before = allocator_events(DEVICES)
    if mode == "b2b+nvml":
        with Nvml() as nvml, GpuSampler(nvml.device(0)) as watch:
            t = measure(step, policy, clock, watch=watch)
    else:
        t = measure(step, policy, clock, between=_sync if mode == "sync" else None)
    calls = t.warmup_rounds + len(t.device_ms)
    events = events_per_call(before, allocator_events(DEVICES), calls)
    s = t.summary
    print(
        f"{label} {mode}: median {s.median:.1f} [{s.ci_low:.1f}, {s.ci_high:.1f}] min "
        f"{s.min:.1f} cv {s.cv:.1%}; host median {statistics.median(t.host_ms):.1f} ms; "
        f"retries/OOMs/mallocs per round "
        + " | ".join(
            f"{e['num_alloc_retries']:g}/{e['num_ooms']:g}/{e['num_device_alloc']:g}"
            for e in events
        ),
        flush=True,
    )
    return {"device_ms": list(t.device_ms), "host_ms": list(t.host_ms), "events": events}


def probe(schedule: str, parts: int, cut: int, threads: bool, modes: list[str]) -> dict:
    """One case on the whole devices: settle it, read its memory, time it each way."""
    for d in DEVICES:
        torch.cuda.reset_peak_memory_stats(d)
    step = _settled(schedule, parts, cut, threads)
    row: dict = {"schedule": schedule, "parts": parts, "cut": cut, "threads": threads}
    row["memory"] = [
        (torch.cuda.max_memory_allocated(d), torch.cuda.max_memory_reserved(d)) for d in DEVICES
    ]
    label = f"{schedule}{parts} cut {cut} {'threads' if threads else 'inline'}"
    for mode in modes:
        row[mode] = _timed(label, step, mode)
    del step
    _free()
    return row


def profiler_effect(out: Path) -> list[dict]:
    """GPipe and 1F1B ×2 at cut 85, timed back to back before and after a traced step.

    The suite's trace sets ``TEARDOWN_CUPTI=1`` unless it is set: run with
    ``TEARDOWN_CUPTI=0`` to see what a trace leaves behind without it (run 36).
    """
    teardown = os.environ.get("TEARDOWN_CUPTI")  # before the trace sets it
    rows = []
    for schedule in ("gpipe", "1f1b"):
        step = _settled(schedule, 2, 85)
        label = f"{schedule}2 (TEARDOWN_CUPTI={teardown})"
        row = {"schedule": schedule, "teardown": teardown}
        row["before"] = _timed(f"{label} before trace", step)
        row["nvml-sampled, before"] = _timed(f"{label} before trace", step, "b2b+nvml")
        trace_overlap(step, DEVICES, out / f"effect_{schedule}.json.gz")
        (out / f"effect_{schedule}.json.gz").unlink()
        row["after"] = _timed(f"{label} after trace", step)
        rows.append(row)
        del step
        _free()
    return rows


def budget_effect() -> list[dict]:
    """1F1B ×2 at cut 85 timed on the whole devices, then under 11 GiB with each allocator."""
    rows = []
    for budget, alloc in ((None, "default"), (BUDGET, "expandable"), (BUDGET, "default")):
        with budgets(DEVICES, budget, alloc):
            step = _settled("1f1b", 2, 85)
            row = {"budget": budget, "allocator": alloc}
            rows.append(row | _timed(f"1f1b2 budget {budget} {alloc}", step))
            del step
    return rows


def _timed_1f1b(
    label: str, mode: str = "b2b", policy: TimingPolicy = POLICY, idle_s: float = 0.0
) -> dict:
    """1F1B ×2 at cut 85 under 11 GiB (expandable segments): built, settled, timed.

    ``idle_s`` of idling first, as ``gauge.measure`` reads idle power before it times.
    """
    with budgets(DEVICES, BUDGET, "expandable"):
        step = _settled("1f1b", 2, 85)
        time.sleep(idle_s)
        row = {"after": label} | _timed(f"1f1b2 after {label}", step, mode, policy)
        del step
    return row


def bisect(out: Path) -> list[dict]:
    """1F1B ×2 timed after each thing the benchmark's process does before timing it, in order.

    In pytest the case read 94 ms by the seed method and 109 ms (cv 7.7%) by the suite's
    measure; in a plain process, 91.0-91.1 ms (cv 0.5-1.1%) under the same budget (runs
    37, 38).
    """
    from gpugauge.families.layer_fit.costs import measure_costs
    from gpugauge.families.layer_fit.cut_fit import fit_cut
    from gpugauge.families.layer_fit.memory_model import MemoryModel
    from gpugauge.families.layer_fit.verify import check_pipeline
    from gpugauge.measure.ceilings import measure_ceilings

    rows = [_timed_1f1b("priming only")]
    measure_costs(MODEL, DEVICES[0], batch=8)
    rows.append(_timed_1f1b("block costs"))
    check_pipeline(MemoryModel(16, 112, 64), 4, 3, 3, DEVICES, "1f1b", 2)
    rows.append(_timed_1f1b("the gradient check"))
    try:
        fit_cut(SplitCase("1f1b", 138, 62, 2, allocator="expandable"), 138, 85, 1)
    except SplitError as err:  # the attempts ran all the same
        print(f"fitting: {err}", flush=True)
    rows.append(_timed_1f1b("children's fitting attempts"))
    with budgets(DEVICES, BUDGET, "expandable"):
        step = _settled("1f1b", 2, 85)
        trace_overlap(step, DEVICES, out / "bisect_trace.json.gz")
        del step
    (out / "bisect_trace.json.gz").unlink()
    rows.append(_timed_1f1b("a traced step"))
    measure_ceilings(DEVICES[0])
    rows.append(_timed_1f1b("the ceilings"))
    rows.append(_timed_1f1b("all that", "b2b+nvml"))
    seed = PROFILE_POLICIES["seed"]  # as gauge.measure times a seed-profile case
    rows.append(_timed_1f1b("all that, 1 s idle, the seed profile's policy", "b2b+nvml", seed, 1))
    return rows


def graphs_effect() -> list[dict]:
    """Each schedule issued op by op and replayed from CUDA graphs, under 11 GiB (expseg).

    First each graphed schedule's gradients against the eager naive split's (a small
    model, fp32), then the seed's model at the cuts the benchmark fitted (naive 83, the
    pipelines 85): memory per device, OOMs caught while it was built (a cuDNN plan
    falling back), timed back to back and beside the NVML sampler.
    """
    from gpugauge.families.layer_fit.memory_model import MemoryModel
    from gpugauge.families.layer_fit.verify import check_pipeline
    from gpugauge.measure.memory import allocator_events as events

    rows = []
    cases = [("naive", 1, 83), ("1f1b", 2, 85), ("gpipe", 2, 85)]
    for schedule, parts, cut in cases:
        check = check_pipeline(
            MemoryModel(16, 112, 64), 4, 3, 3, DEVICES, schedule, parts, graphs=True
        )
        print(f"{schedule}{parts} graphs: gradient check {check}", flush=True)
        for graphs in (False, True):
            label = f"{schedule}{parts} cut {cut} {'graphs' if graphs else 'eager'}"
            row: dict = {"schedule": schedule, "parts": parts, "cut": cut, "graphs": graphs}
            row["check"] = check
            with budgets(DEVICES, BUDGET, "expandable"):
                for d in DEVICES:
                    torch.cuda.reset_peak_memory_stats(d)
                before = events(DEVICES)
                try:
                    runner = SplitRunner(MODEL, 138, 62, cut, DEVICES, graphs=graphs)
                    step = runner.schedule(schedule, parts)
                    settle(step, DEVICES)
                    _sync()
                except torch.OutOfMemoryError as err:
                    print(f"{label}: out of memory: {str(err).splitlines()[0][:160]}", flush=True)
                    row["error"] = str(err).splitlines()[0]
                    rows.append(row)
                    _free()
                    continue
                row["setup_ooms"] = [
                    a["num_ooms"] - b["num_ooms"]
                    for b, a in zip(before, events(DEVICES), strict=True)
                ]
                row["memory"] = [
                    (torch.cuda.max_memory_allocated(d), torch.cuda.max_memory_reserved(d))
                    for d in DEVICES
                ]
                mem = " / ".join(f"{fmt_bytes(a)} ({fmt_bytes(b)})" for a, b in row["memory"])
                print(f"{label}: peak alloc (reserved) {mem}; OOMs caught {row['setup_ooms']}")
                row["b2b"] = _timed(label, step)
                row["b2b+nvml"] = _timed(label, step, "b2b+nvml")
                del step, runner
            _free()
            rows.append(row)
    return rows


def trace(out: Path) -> None:
    """Four back-to-back 1F1B x2 steps at cut 85 (inline), host and devices, for Perfetto."""
    step = _settled("1f1b", 2, 85)
    release_cupti_on_stop()
    acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=acts) as prof:
        for _ in range(4):
            step()
        _sync()
    raw = out / "trace_1f1b2.json"
    prof.export_chrome_trace(str(raw))
    with raw.open("rb") as src, gzip.open(out / "trace_1f1b2.json.gz", "wb") as dst:
        shutil.copyfileobj(src, dst)
    raw.unlink()
    del step
    _free()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", ".")))
    parser.add_argument("--memory-only", action="store_true", help="settle and read memory")
    parser.add_argument("--trace", action="store_true")
    parser.add_argument("--profiler-effect", action="store_true", help="time, trace, time")
    parser.add_argument("--budget-effect", action="store_true", help="1F1B x2 under budgets")
    parser.add_argument(
        "--bisect", action="store_true", help="1F1B x2 after each step of the bench's setup"
    )
    parser.add_argument(
        "--graphs", action="store_true", help="each schedule eager and from CUDA graphs"
    )
    parser.add_argument("--tag", default="default")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    alloc = os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "")
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}, alloc conf {alloc!r}")
    for batch in (16, 8):
        prime_conv_plans(MODEL, DEVICES, batch)
    experiments = {  # a flag: its rows, and the name of the JSON they go to
        "graphs": (graphs_effect, "graphs"),
        "bisect": (partial(bisect, args.out), "bisect"),
        "budget_effect": (budget_effect, "budget"),
        "profiler_effect": (partial(profiler_effect, args.out), "effect"),
    }
    for flag, (run, name) in experiments.items():
        if getattr(args, flag):
            rows = run()
            (args.out / f"pipe_probe_{name}_{args.tag}.json").write_text(json.dumps(rows))
            return
    timed = [] if args.memory_only else ["b2b", "b2b+nvml", "sync"]
    cases = [
        ("naive", 1, 85, True, timed[:1] + timed[2:]),
        ("naive", 1, 89, True, timed[:1]),
        ("gpipe", 2, 85, True, timed),
        ("gpipe", 2, 85, False, timed),
        ("1f1b", 2, 85, True, timed),
        ("1f1b", 2, 85, False, timed),
        ("gpipe", 2, 117, True, timed[:1]),
    ]
    if args.memory_only:
        cases = [c for c in cases if c[3]]
    rows, t0 = [], time.perf_counter()
    for c in cases:
        rows.append(probe(*c))
    if args.trace:
        trace(args.out)
    (args.out / f"pipe_probe_{args.tag}.json").write_text(json.dumps(rows))
    table = []
    for r in rows:
        mem = " / ".join(f"{fmt_bytes(a)} ({fmt_bytes(b - a)})" for a, b in r["memory"])
        cells = []
        for mode in ("b2b", "b2b+nvml", "sync"):
            if mode in r:
                ms = r[mode]["device_ms"]
                cells.append(f"{statistics.median(ms):.1f} / {min(ms):.1f}")
            else:
                cells.append("-")
        name = f"{r['schedule']}{r['parts'] if r['parts'] > 1 else ''}"
        how = "threads" if r["threads"] else "inline"
        table.append([name, str(r["cut"]), how, mem, *cells])
    heads = ["case", "cut", "issue", "alloc (reserved - alloc) cuda:0 / cuda:1"]
    heads += ["b2b med/min ms", "b2b+nvml", "sync"]
    took = time.perf_counter() - t0
    title = f"pipe probe ({alloc or 'default allocator'}), whole devices, {took:.0f} s"
    print(render(heads, table, title), flush=True)


if __name__ == "__main__":
    main()
