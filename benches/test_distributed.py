"""distributed benchmarks: one GPU against DataParallel and DDP (seed 004 Task-4, seeds 002, 000).

Each test records one case; the cases of a series (same model, mode, GPU count and data;
they differ only in batch) run in one torchrun launch the first time one of them is
needed, each alone under ``--gauge-launch-each`` (see
:mod:`gpugauge.families.distributed.results`). A case past the first out-of-memory of its sweep is
skipped with that reason; a launch whose rank crashed or hung fails every test of its series,
naming the rank.
"""

from __future__ import annotations

from typing import Any

import pytest

from gpugauge.families.distributed.cases import DistCase, cases
from gpugauge.families.distributed.results import SeriesRuns, to_measurement
from gpugauge.plugin import parametrize_cases


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    parametrize_cases(metafunc, "case", cases)


@pytest.fixture(scope="session")
def series_runs(gauge_session: Any) -> SeriesRuns:
    """Series launched this session; their folders go into the run's artifact folder."""
    return SeriesRuns(
        gauge_session.artifact_run_dir / "distributed",
        gauge_session.note,
        each=gauge_session.options.launch_each,
        charge=gauge_session.wall.charge,
        extras=not gauge_session.options.skip_extras,
    )


@pytest.fixture(scope="session")
def selected_cases(request: pytest.FixtureRequest) -> list[DistCase]:
    """The cases this session runs (after -k and device skips): a series launches these."""
    out = []
    for item in request.session.items:
        case = getattr(item, "callspec", None) and item.callspec.params.get("case")
        skipped = any(m.name == "skip" for m in item.iter_markers())
        if isinstance(case, DistCase) and not skipped:
            out.append(case)
    return out


@pytest.mark.launched  # its case is timed in the torchrun ranks it launches
def test_distributed(
    case: DistCase, gauge: Any, series_runs: SeriesRuns, selected_cases: list[DistCase]
) -> None:
    result = series_runs.result(case, selected_cases)
    if result.skipped:
        pytest.skip(result.skipped)
    reference = series_runs.find(case.reference()) if case.gpus > 1 else None
    # its rounds are on the run's wall ledger already where its launch charged them
    gauge.record(to_measurement(result, reference), charged=series_runs.charge is not None)
