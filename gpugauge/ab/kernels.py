"""What each side's results ran: the main kernels of a case on base and on head, and the GPU.

Both sides record one round's kernels (``--gauge-record-kernels``) in their saved runs; an A/B
then says of each case "same kernels" or which main kernels head runs that base did not,
and the other way round (the gate's rule, :func:`gpugauge.regress.gate.kernel_change`): a
slowdown with the same kernels is the clock, the memory or the launch path; with other
kernels, a library chose another algorithm.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from gpugauge.ab.result import CaseAB
from gpugauge.regress.baseline_file import KernelShare, kernel_shares
from gpugauge.regress.gate import kernel_change
from gpugauge.results.runs import RunError, SavedRun, load_run

SAME = "same kernels"


def saved_run(path: Path) -> SavedRun | None:
    """A side's saved run, or None where it wrote none (or none that reads)."""
    try:
        return load_run(path) if path.exists() else None
    except RunError:
        return None


def _kernels(run: SavedRun | None) -> dict[str, tuple[KernelShare, ...]]:
    if run is None:
        return {}
    return {m.id: kernel_shares(m.extra.get("kernels")) for m in run.measurements}


def kernel_note(head: Sequence[KernelShare], base: Sequence[KernelShare]) -> str:
    """'same kernels', 'main kernels differ from base's: ...', or '' (not recorded)."""
    if not head or not base:
        return ""
    return kernel_change(tuple(head), tuple(base), other="base's") or SAME


def with_kernels(
    cases: Sequence[CaseAB], base_run: SavedRun | None, head_run: SavedRun | None
) -> list[CaseAB]:
    """The cases, each with what its main kernels did from base to head."""
    base, head = _kernels(base_run), _kernels(head_run)
    return [replace(c, kernels=kernel_note(head.get(c.id, ()), base.get(c.id, ()))) for c in cases]


def device_of(*runs: SavedRun | None) -> str:
    """'NVIDIA H100 80GB HBM3; torch 2.11.0; driver 580.159.04', from the first saved run."""
    return next((run.machine for run in runs if run is not None), "unknown")
