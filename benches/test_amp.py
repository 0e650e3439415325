"""amp benchmarks: fp32 against AMP fp16 and bf16 training steps, profiler tables and traces,
and CPU against GPU inference (seeds 003 and 001).

The cases and steps live in :mod:`gpugauge.families.amp.workload`, the profiler pass in
:mod:`gpugauge.families.amp.profiler`, the agreement check in
:mod:`gpugauge.families.amp.inference`;
the graphed step and its check against the eager step in :mod:`gpugauge.families.amp.graphed`;
the GPU-busy share in :mod:`gpugauge.measure.busy`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gpugauge.families.amp.graphed import check_graphed, graphed_step
from gpugauge.families.amp.inference import cpu_reference, make_inference
from gpugauge.families.amp.profiler import profile_pass
from gpugauge.families.amp.workload import (
    AmpCase,
    InferCase,
    cases,
    make_step,
    tf32_flags,
)
from gpugauge.measure.busy import BUSY_KEY, measure_busy
from gpugauge.plugin import parametrize_cases


def _train_cases(profile: str) -> list[AmpCase]:
    return [c for c in cases(profile) if isinstance(c, AmpCase)]


def _infer_cases(profile: str) -> list[InferCase]:
    return [c for c in cases(profile) if isinstance(c, InferCase)]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    parametrize_cases(metafunc, "case", _train_cases)
    parametrize_cases(metafunc, "infer_case", _infer_cases)


def _busy(
    case: AmpCase | InferCase, step: Any, gauge: Any, graphed: bool = False
) -> tuple[dict[str, float], dict[str, Any], dict[str, Path]]:
    """The GPU-busy share of ``step`` as (values, extra, artifacts); nothing on a CPU.

    Its own steps, after the checks and before the timed rounds, never inside them.
    """
    if case.device == "cpu" or gauge.options.skip_extras:
        return {}, {}, {}
    trace = gauge.artifact_path(case, "busy.pt.trace.json")
    with gauge.phase("GPU-busy share"):
        busy = measure_busy(step, case.device, trace, graphed=graphed)
    return {"gpu_busy": busy.share}, {BUSY_KEY: busy.as_dict()}, {"busy_trace": trace}


def test_amp_train(case: AmpCase, gauge: Any) -> None:
    with tf32_flags(case.tf32) as flags:
        artifacts: dict[str, Any] = {}
        extra: dict[str, Any] = {"tf32": flags}
        if case.profiled and gauge.options.diagnostics:  # its own model and steps, first
            with gauge.phase("profiler tables"):
                artifacts, summary = profile_pass(
                    case, lambda name: gauge.artifact_path(case, name)
                )
            extra.update(summary)
        if case.graphs and gauge.options.skip_extras:  # the time only: no check against eager
            step = graphed_step(case)
            extra["graphs"] = {**step.info(), "check": None}
        elif case.graphs:  # the same result as the eager step's, or the test fails here
            with gauge.phase("graphed check"):
                step, check = check_graphed(case)
            extra["graphs"] = {**step.info(), "check": check.as_dict()}
            assert check.ok, f"the graphed step's result differs from eager: {check.message()}"
        else:
            step = make_step(case)
        extra["grad_scaler"] = step.scaler_info or None
        values, busy, trace = _busy(case, step, gauge, graphed=case.graphs)
        extra.update(busy)
        artifacts = {**artifacts, **trace}
        # speedups over fp32, NCHW and eager are derived from the results at the end of the run
        gauge.measure(
            case,
            step,
            values=values,
            energy=case.reads_energy,
            artifacts=artifacts,
            extra=extra,
        )


def test_amp_inference(infer_case: InferCase, gauge: Any) -> None:
    case = infer_case
    with tf32_flags("default") as flags:
        gpu = make_inference(case, case.device)
        extra: dict[str, Any] = {"tf32": flags}
        if case.device != "cpu" and gauge.options.diagnostics:
            # --gauge-device auto skips CPU cases on a GPU host: the GPU case carries the CPU side
            with gauge.phase("CPU reference"):
                _, side = cpu_reference(case, gpu, gauge.options.policy, flags)
            extra.update(side)
            agree = side["agreement"]
            assert agree["ok"], f"CPU and GPU outputs disagree: {agree}"
        values, busy, trace = _busy(case, gpu, gauge)
        extra.update(busy)
        # the GPU against its CPU side (extra["cpu"]) is derived at the end of the run
        gauge.measure(
            case, gpu, values=values, energy=case.reads_energy, artifacts=trace, extra=extra
        )
