"""amp benchmarks: fp32 against AMP fp16 and bf16 training steps, profiler tables and traces,
and CPU against GPU inference (seeds 003 and 001).

The cases, steps, profiler pass and agreement check live in :mod:`gpugauge.families.amp.workload`.
"""

from __future__ import annotations

from typing import Any

import pytest

from gpugauge.families.amp.workload import (
    AmpCase,
    InferCase,
    cases,
    cpu_reference,
    make_inference,
    make_step,
    profile_pass,
    tf32_flags,
)
from gpugauge.plugin import parametrize_cases

pytestmark = pytest.mark.amp


def _train_cases(profile: str) -> list[AmpCase]:
    return [c for c in cases(profile) if isinstance(c, AmpCase)]


def _infer_cases(profile: str) -> list[InferCase]:
    return [c for c in cases(profile) if isinstance(c, InferCase)]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    parametrize_cases(metafunc, "case", _train_cases)
    parametrize_cases(metafunc, "infer_case", _infer_cases)


def test_amp_train(case: AmpCase, gauge: Any) -> None:
    with tf32_flags(case.tf32) as flags:
        artifacts: dict[str, Any] = {}
        extra: dict[str, Any] = {"tf32": flags}
        if case.profiled:  # its own model and steps, before (never inside) the timed rounds
            artifacts, summary = profile_pass(case, lambda name: gauge.artifact_path(case, name))
            extra.update(summary)
        step = make_step(case)
        extra["grad_scaler"] = step.scaler_info or None
        # speedups over fp32 and NCHW are derived from the results at the end of the run
        gauge.measure(case, step, artifacts=artifacts, extra=extra)


def test_amp_inference(infer_case: InferCase, gauge: Any) -> None:
    case = infer_case
    with tf32_flags("default") as flags:
        gpu = make_inference(case, case.device)
        extra: dict[str, Any] = {"tf32": flags}
        if case.device != "cpu":
            # --device auto skips CPU cases on a GPU host: the GPU case carries the CPU side
            _, side = cpu_reference(case, gpu, gauge.options.policy, flags)
            extra.update(side)
            agree = side["agreement"]
            assert agree["ok"], f"CPU and GPU outputs disagree: {agree}"
        # the GPU against its CPU side (extra["cpu"]) is derived at the end of the run
        gauge.measure(case, gpu, extra=extra)
