"""The seed's two tables: the search's probes, and the split per device."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from gpugauge.families.layer_fit.probe import Probe
from gpugauge.report.tables import fmt_bytes, render

if TYPE_CHECKING:
    from gpugauge.families.layer_fit.cases import FitCase, SplitCase


def probe_table(case: FitCase, result: dict[str, Any]) -> str:
    """The seed's first table for one search: N, M, fits or OOM, time; and the bytes."""
    rows = []
    for p in map(Probe.from_dict, result["probes"]):
        rows.append(
            [
                str(p.n),
                str(p.m),
                "No" if p.fits else "Yes",
                "-" if p.step_ms is None else f"{p.step_ms:.4g}",
                fmt_bytes(p.peak_allocated_bytes),
                fmt_bytes(p.peak_reserved_bytes),
                fmt_bytes(p.predicted_bytes),
                f"{p.wall_s:.2f}",
            ]
        )
    emulated = " (emulated)" if result["emulated"] else ""
    err = result["error_fraction"]
    title = (
        f"{case.id}: {result['backend']}{emulated}; largest N = {result['max_n']}"
        f"{' (cap: at least)' if result['censored'] else ''}, predicted {result['predicted_max_n']}"
        f" ({'-' if err is None else f'{err:+.1%}'}); {result['probe_count']} probes "
        f"(bound {result['probe_bound']})"
    )
    headers = [
        "num_of_conv",
        "num_of_fc",
        "out_of_memory?",
        "step ms",
        "peak alloc",
        "peak reserved",
        "predicted",
        "probe s",
    ]
    return render(headers, rows, title)


def split_table(
    case: SplitCase,
    cut: int,
    n: int,
    predicted: Sequence[int],
    budgets_bytes: Sequence[float],
    memory: Sequence[Any],
    stage_ms: Sequence[float | None],
) -> str:
    """The seed's second table: device, layers on it, memory (predicted, measured), time."""
    c0 = min(cut, n)
    layers = [(c0, cut - c0), (n - c0, case.fc - (cut - c0))]
    rows = []
    for i, dev in enumerate(case.devices):
        mem = memory[i] if i < len(memory) else None
        peak = res = None
        if mem is not None and mem.peak_allocated_bytes is not None:
            peak = mem.start_allocated_bytes + mem.peak_allocated_bytes
            res = mem.start_reserved_bytes + mem.peak_reserved_bytes
        cap = budgets_bytes[i]
        rows.append(
            [
                dev,
                str(layers[i][0]),
                str(layers[i][1]),
                fmt_bytes(predicted[i]),
                fmt_bytes(peak),
                fmt_bytes(res),
                "-" if math.isinf(cap) else fmt_bytes(cap),
                "-" if res is None or math.isinf(cap) else fmt_bytes(cap - res),
                "-" if stage_ms[i] is None else f"{stage_ms[i]:.4g}",
            ]
        )
    headers = [
        "Device",
        "num_of_conv",
        "num_of_fc",
        "predicted",
        "peak alloc",
        "peak reserved",
        "budget",
        "headroom",
        "part ms",
    ]
    return render(headers, rows, f"{case.id}: cut after block {cut}")
