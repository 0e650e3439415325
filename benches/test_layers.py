"""layers benchmarks: per-layer time, memory, energy and roofline (seed 004, Task-2).

The cases and the timed round live in :mod:`gpugauge.families.layers.workload`.
"""

from __future__ import annotations

from typing import Any

import pytest

from gpugauge.families.layers.workload import LayerCase, cases, make_round
from gpugauge.measure.ceilings import matmul_precision
from gpugauge.plugin import parametrize_cases


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    parametrize_cases(metafunc, "layer_case", cases)


def test_layers(layer_case: LayerCase, gauge: Any) -> None:
    case = layer_case
    fn, setup = make_round(case)
    notes = {}
    if case.defn.inplace and case.backward:
        notes["energy_window_note"] = "includes the input clone made before each round"
    with matmul_precision(case.dtype):
        m = gauge.measure(
            case,
            fn,
            setup=setup,
            work=case.work(),
            expected_memory=case.expected_memory(),
            flush_l2=True,
            extra=notes,
        )
    check = m.memory_check
    assert check is not None
    # the formulas say what the op must allocate: a peak they cannot explain is a finding
    assert "unexplained" not in check["verdict"], f"{case.id}: peak memory {check}"
