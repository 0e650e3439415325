"""layer_fit benchmarks: how many layers fit, and the model split over two GPUs (seed 004, Task-1).

The memory model, the search, the backends and the split live in the modules of
:mod:`gpugauge.families.layer_fit`; this module parametrizes and records.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from gpugauge.families.layer_fit.backends import SIM_UNMODELLED_BYTES
from gpugauge.families.layer_fit.budget import budgets, parse_budget
from gpugauge.families.layer_fit.cases import FitCase, SplitCase, cases, split_cases
from gpugauge.families.layer_fit.costs import flop_costs, measure_costs
from gpugauge.families.layer_fit.cut_fit import fit_cut, fitted_runner, prime_conv_plans
from gpugauge.families.layer_fit.memory_model import MemoryModel
from gpugauge.families.layer_fit.plan import PIPELINED, plan_split
from gpugauge.families.layer_fit.search import search_case, seconds_line
from gpugauge.families.layer_fit.steps import SEED_METHOD, round_clock
from gpugauge.families.layer_fit.tables import probe_table, split_table
from gpugauge.families.layer_fit.trace import trace_overlap
from gpugauge.families.layer_fit.verify import check_pipeline
from gpugauge.measure.kernels import TraceError
from gpugauge.measure.memory import allocator_events, events_per_call
from gpugauge.measure.timing import measure
from gpugauge.plugin import parametrize_cases
from gpugauge.results.measurement import Measurement

GRAD_REL_TOL = 1e-4  # fp32, TF32 off: the schedules differ only in summation order
# Graphs replay the eager schedule's kernels, but eager GPipe's backward is one autograd
# call that likely sums the parts' gradients in the engine's order, the graphs in
# micro-batch order: GPipe x4 1.8e-6 apart on two H200s under every hold (run 53; 0.0 for
# GPipe x2 and 1F1B). A stale read (run 41's race) was 0.011.
GRAPHS_REL_TOL = 1e-5


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    parametrize_cases(metafunc, "fit_case", cases)
    parametrize_cases(metafunc, "split_case", split_cases)


def _note_block(gauge: Any, text: str) -> None:
    for line in text.splitlines():
        gauge.session.note(line)


@pytest.mark.untimed  # its result is a count of layers, found by probes
def test_layer_fit_search(fit_case: FitCase, gauge: Any) -> None:
    case = fit_case
    with gauge.phase("search"):
        result = search_case(case)
    table = "\n".join(filter(None, (probe_table(case, result), seconds_line(result))))
    path = gauge.artifact_path(case, "probes.txt")
    path.write_text(table + "\n")
    _note_block(gauge, table)
    gauge.record(
        Measurement(
            case,
            values={"max_layers": result["max_n"]},
            artifacts={"probes": str(path)},
            extra={"search": result},
        )
    )
    assert result["within_bound"], (
        f"{result['probe_count']} probes, more than 2·⌈log2 N⌉ + 4 = {result['probe_bound']}"
    )
    if case.device == "cpu":
        # the simulated device is the model plus a known unmodelled workspace: the search
        # must land exactly on its frontier
        budget = case.budget_bytes
        assert budget is not None
        truth = case.memory_model.frontier(
            case.fc, budget - SIM_UNMODELLED_BYTES, case.mode, case.cap
        )
        assert result["max_n"] == truth, f"search found {result['max_n']}, the frontier is {truth}"


def _largest_single(case: SplitCase, gauge: Any) -> tuple[dict[str, Any], str]:
    """The search's answer for one device, and where it came from.

    This run's search test, an earlier process of this build (the setup memo: an A/B's
    later rounds), or a search now.
    """
    found = gauge.session.find(case.fit_case)
    if found is not None:  # this run's own, kept for this build's later processes
        result, _ = gauge.kept(case, "single-search", lambda: found.extra["search"], fresh=True)
        return result, "this run"

    def search() -> dict[str, Any]:
        with gauge.phase("search"):
            return search_case(case.fit_case)

    result, kept = gauge.kept(case, "single-search", search)
    return result, "an earlier process" if kept else "searched here"


def _note_inherited_plans(
    case: SplitCase, devices: tuple[str, ...], gauge: Any, extra: dict[str, Any]
) -> None:
    """Say so where this process already ran out of memory on a device the case uses.

    cuDNN keeps a convolution's first plan per thread (the backward's threads, one per
    device, live as long as the process), and an OOM on its workspace makes it keep a
    slower one: a case after such an OOM may run the plans an earlier case fell back to
    (on two H200s the naive split read 220 ms after the single-GPU case, 147 ms alone).
    The allocator's OOM count is the process's record of it.
    """
    unique = sorted(set(devices))
    before = {d: e["num_ooms"] for d, e in zip(unique, allocator_events(unique), strict=True)}
    extra["ooms_before_case"] = before
    hit = [f"{d} ({n})" for d, n in sorted(before.items()) if n]
    if hit:
        gauge.session.note(
            f"{case.id}: this process ran out of memory before on {', '.join(hit)}; its "
            f"conv plans may be an earlier case's fallbacks: time it alone (-k {case.id})"
        )


def test_layer_fit_split(split_case: SplitCase, gauge: Any) -> None:
    case = split_case
    model = case.memory_model
    devices = case.devices
    on_gpu = devices[0].startswith("cuda")
    extra: dict[str, Any] = {}
    n = case.conv
    if case.schedule == "single":
        search, extra["single_search_from"] = _largest_single(case, gauge)
        extra["single_search"] = search
        n = int(search["max_n"])
        assert n > 0, "no conv layer fits one device with this head"
    pipelined = case.schedule in PIPELINED
    if pipelined or case.graphs:  # the same gradients as the eager naive split's
        small = MemoryModel(case.batch, case.image, 64)
        with gauge.phase("pipeline check"):
            check = check_pipeline(
                small, 4, 3, 3, devices, case.schedule, case.micro_batches, graphs=case.graphs
            )
        extra["pipeline_check"] = check
        assert check["max_grad_rel_diff"] < GRAD_REL_TOL, f"gradients differ: {check}"
        if case.graphs:  # the eager schedule's own kernels, replayed: equal but for the sum order
            assert check["max_vs_eager"] < GRAPHS_REL_TOL, f"graphs differ from eager: {check}"
    # a split is balanced by what a block costs at its micro-batch size (one device: no plan)
    part = case.batch // case.micro_batches
    with gauge.phase("block costs"):
        if case.schedule != "single":
            costs = measure_costs(model, devices[0], batch=part) if on_gpu else flop_costs(model)
        prime_conv_plans(model, devices, part)  # plans chosen on the whole device, not at a peak
    if on_gpu:
        _note_inherited_plans(case, devices, gauge, extra)
    budget = parse_budget(case.budget)
    with budgets(devices, budget, case.allocator) as caps:
        toward = 0
        if case.schedule == "single":
            cut = n + case.fc
        else:
            plan = plan_split(
                model, n, case.fc, caps[:2], costs, case.micro_batches, schedule=case.schedule
            )
            extra["plan"] = plan.as_dict()
            cut, toward = plan.chosen.k, 1 - plan.limiting
        tried: list[dict[str, Any]] = []
        if on_gpu:  # the misses run out of memory: in processes of their own
            with gauge.phase("cut fit"):
                tried, kept = gauge.kept(
                    case, f"cut-fit-c{n}-k{cut}-d{toward}", lambda: fit_cut(case, n, cut, toward)
                )
            extra["cut_fit_from"] = "an earlier process" if kept else "fitted here"
            n, cut = tried[-1]["conv"], tried[-1]["cut"]
        setup = allocator_events(devices) if on_gpu else None
        # on a GPU the child's cut is built as it is: a miss here would run out of memory
        # in this process, which keeps what that did to its cuDNN plans
        tries = 1 if on_gpu else 6
        with gauge.phase("cut fit"):
            runner, step, attempts = fitted_runner(case, n, cut, toward, tries)
        attempts = tried + attempts
        if setup is not None:  # OOMs caught while it settled: a cuDNN plan fell back
            extra["allocator_setup"] = events_per_call(setup, allocator_events(devices), 1)
            fell = [e["num_ooms"] for e in extra["allocator_setup"]]
            if any(fell):
                gauge.session.note(
                    f"{case.id}: {fell} OOMs caught per device while its cut settled here: "
                    "some conv plans fell back; time it alone (-k id) to compare"
                )
        n, cut = attempts[-1]["conv"], attempts[-1]["cut"]
        predicted = case.predicted(n, cut)
        extra |= {
            "conv": n,
            "cut": cut,
            "cut_attempts": attempts,
            "predicted_bytes": predicted,
            "budgets": list(caps),
        }
        events = allocator_events(devices) if on_gpu else None
        with gauge.phase("seed method"):
            seed = measure(step, SEED_METHOD, round_clock(devices))
        extra["seed_method_ms"] = {"mean": seed.summary.mean, "rounds": list(seed.device_ms)}
        if events is not None:  # a step that frees and retries serializes the devices
            calls = seed.warmup_rounds + len(seed.device_ms)
            extra["allocator_per_step"] = events_per_call(events, allocator_events(devices), calls)
        parts: list[float | None] = [None] * len(devices)
        if case.schedule == "naive":
            try:
                with gauge.phase("seed method"):
                    part_fns = runner.stage_steps()
                    parts = [
                        measure(fn, SEED_METHOD, round_clock((d,))).summary.mean
                        for fn, d in zip(part_fns, devices, strict=True)
                    ]
                del part_fns
            except torch.OutOfMemoryError as err:
                extra["part_times_note"] = f"not timed alone: {str(err).splitlines()[0]}"
            extra["part_ms"] = parts
        artifacts = {}
        if on_gpu and gauge.options.diagnostics:
            try:
                trace = gauge.artifact_path(case, "trace.json.gz")
                with gauge.phase("trace"):
                    extra["trace"] = trace_overlap(step, devices, trace)
                artifacts["trace"] = trace
            except (torch.OutOfMemoryError, TraceError) as err:
                extra["trace_note"] = f"not traced: {str(err).splitlines()[0]}"
        m = gauge.measure(case, step, artifacts=artifacts, extra=extra)
        del step, runner
    table = split_table(case, cut, n, predicted, caps, m.memory, parts)
    _note_block(gauge, table)
    gauge.session.note(f"seed method (warm-up 5, average of 10): {seed.summary.mean:.4g} ms")
    # a pipelined split against the naive one is derived from the results at the end
