"""vgg_swap benchmarks: VGG as built against VGG with ReLU and MaxPool swapped (seed 004, Task-3).

The cases, the step and the equivalence check live in :mod:`gpugauge.families.vgg_swap.workload`.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from gpugauge.families.vgg_swap.workload import (
    GRAD_REL_TOL,
    SwapCase,
    cases,
    check_swap_equivalence,
    make_step,
)
from gpugauge.measure.paired import PairedReference
from gpugauge.plugin import parametrize_cases


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    parametrize_cases(metafunc, "case", cases)


@pytest.fixture(scope="session")
def swap_checks() -> dict[SwapCase, dict[str, Any]]:
    """Equivalence checks already run this session, by workload."""
    return {}


def test_vgg_swap(case: SwapCase, gauge: Any, swap_checks: dict[SwapCase, dict[str, Any]]) -> None:
    extra: dict[str, Any] = {}
    if case.variant == "swapped":
        key = replace(case.workload, mode="-", dtype="-")
        if key not in swap_checks:
            with gauge.phase("swap check"):
                swap_checks[key] = check_swap_equivalence(case)
        check = extra["swap_check"] = swap_checks[key]
        assert check["outputs_identical"], f"swapped VGG outputs differ: {check}"
        assert check["max_grad_rel_diff"] < GRAD_REL_TOL, f"swapped VGG gradients differ: {check}"

    # swapped against normal is derived from the results at the end of the run; where
    # rounds are host-timed (a CPU), from blocks of both timed in turn in this test
    normal = replace(case, variant="normal")
    reference = (
        PairedReference(normal.id, lambda: make_step(normal), lambda: make_step(case))
        if normal != case
        else None
    )
    gauge.measure(case, make_step(case), extra=extra, reference=reference)
