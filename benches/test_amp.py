"""amp benchmarks: fp32 against AMP fp16 and bf16 training steps, profiler tables and traces,
and CPU against GPU inference (seeds 003 and 001).

The cases, steps, profiler pass and agreement check live in :mod:`gpugauge.workloads.amp`.
"""

from __future__ import annotations

from typing import Any

import pytest

from gpugauge.plugin import parametrize_cases
from gpugauge.results.measurement import Measurement
from gpugauge.workloads.amp import (
    AmpCase,
    InferCase,
    cases,
    cpu_reference,
    make_inference,
    make_step,
    profile_pass,
    tf32_flags,
)

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
        m = gauge.measure(case, step, artifacts=artifacts, extra=extra)

    title = f"{case.model} b{case.batch} {'NHWC' if case.channels_last else 'NCHW'} {case.device}"
    if case.precision != "fp32":
        fp32 = gauge.session.find(case.reference)
        if fp32 is not None:
            gauge.compare(fp32, m, labels=("fp32", case.precision), title=title)
    if case.channels_last:
        nchw = gauge.session.find(case.nchw)
        if nchw is not None:
            gauge.compare(
                nchw,
                m,
                labels=("NCHW", "NHWC"),
                title=f"{case.model} b{case.batch} {case.precision} {case.device} layout",
            )


def test_amp_inference(infer_case: InferCase, gauge: Any) -> None:
    case = infer_case
    with tf32_flags("default") as flags:
        gpu = make_inference(case, case.device)
        extra: dict[str, Any] = {"tf32": flags}
        cpu_side: Measurement | None = None
        if case.device != "cpu":
            # --device auto skips CPU cases on a GPU host: the GPU case carries the CPU side
            cpu_side, side = cpu_reference(case, gpu, gauge.options.policy, flags)
            extra.update(side)
            agree = side["agreement"]
            assert agree["ok"], f"CPU and GPU outputs disagree: {agree}"
        m = gauge.measure(case, gpu, extra=extra)
    if cpu_side is not None:
        gauge.compare(
            cpu_side,
            m,
            labels=("cpu", case.device),
            title=f"lenet28 infer b{case.batch}: outputs agree, "
            f"err {agree['rel_err']:.1e} <= tol {agree['tolerance']:g}",
        )
