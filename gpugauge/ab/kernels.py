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


def _run(path: Path) -> SavedRun | None:
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


def with_kernels(cases: Sequence[CaseAB], base_json: Path, head_json: Path) -> list[CaseAB]:
    """The cases, each with what its main kernels did from base to head."""
    base, head = _kernels(_run(base_json)), _kernels(_run(head_json))
    return [replace(c, kernels=kernel_note(head.get(c.id, ()), base.get(c.id, ()))) for c in cases]


def device_of(path: Path) -> str | None:
    """'NVIDIA H100 80GB HBM3; torch 2.11.0; driver 580.159.04', from a side's saved run."""
    run = _run(path)
    return run.machine if run is not None else None
