"""amp's end-of-run table: every GPU training step eager and graphed, side by side.

Per model and precision: the eager and graphed medians, the GPU-busy share of each, whether
the eager step is host-bound, and the AMP speedup over fp32 both ways (eager over eager,
graphed over graphed; ratios of medians, whose CIs are in the comparisons table). Where the
eager step is host-bound its time and AMP speedup are the host's answer; the graphed ones
are the GPU's. Reads results only (no torch), so a report of a saved run renders it too.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gpugauge.measure.busy import BUSY_KEY, HOST_BOUND_BELOW, host_bound_of
from gpugauge.report.tables import fmt_ms, render
from gpugauge.results.measurement import Measurement

TITLE = "amp eager vs graphed"
ORDER = ("fp32", "fp16", "bf16")  # a model's rows; AMP speedups are over its fp32 row
HEADERS = [
    "step",
    "precision",
    "eager ms",
    "graphed ms",
    "graphed x",
    "busy eager / graphed",
    "host-bound",
    "AMP eager",
    "AMP graphed",
    "GPU's answer",
]


def _training(m: Measurement) -> Mapping[str, Any] | None:
    """A timed GPU training step's parameters, else None."""
    p = m.spec.as_dict()
    if m.timing is None or p.get("precision") not in ORDER or "model" not in p:
        return None
    return p if str(p.get("device", "cpu")).startswith("cuda") else None


def _step(p: Mapping[str, Any]) -> str:
    layout = "NHWC" if p.get("channels_last") else "NCHW"
    tf32 = "" if p.get("tf32", "default") == "default" else f" tf32 {p['tf32']}"
    return f"{p['model']} b{p['batch']} {p['image']}px {layout}{tf32}"


def _amp(m: Measurement | None, ref: Measurement | None, precision: str) -> str:
    if m is None or ref is None:
        return "-"
    if precision == "fp32":
        return "ref"
    return f"{ref.summary.median / m.summary.median:.2f}x"


def _busy(m: Measurement | None) -> str:
    v = None if m is None else m.value("gpu_busy")
    return "-" if v is None else f"{v:.0%}"


def _host_bound(m: Measurement | None) -> bool | None:
    return None if m is None else host_bound_of(m.extra)


def _answer(host_bound: bool | None, graphed: Measurement | None) -> str:
    """Which step gives the GPU's time: a host-bound step's eager time is the host's."""
    if host_bound is None:
        return "-"
    if not host_bound:
        return "either"
    return "graphed" if graphed is not None else "none"


def amp_table(measurements: Sequence[Measurement]) -> str | None:
    """The table, or None where no GPU training step ran."""
    groups: dict[str, dict[str, dict[bool, Measurement]]] = {}
    threshold = HOST_BOUND_BELOW
    for m in measurements:
        p = _training(m)
        if p is None:
            continue
        by_precision = groups.setdefault(_step(p), {})
        by_precision.setdefault(p["precision"], {})[bool(p.get("graphs"))] = m
        threshold = (m.extra.get(BUSY_KEY) or {}).get("threshold", threshold)
    if not groups:
        return None
    rows = []
    for step, by_precision in groups.items():
        fp32 = by_precision.get("fp32", {})
        for precision in (q for q in ORDER if q in by_precision):
            eager, graphed = by_precision[precision].get(False), by_precision[precision].get(True)
            both = eager is not None and graphed is not None
            bound = _host_bound(eager)
            rows.append(
                [
                    step,
                    precision,
                    "-" if eager is None else fmt_ms(eager.summary.median),
                    "-" if graphed is None else fmt_ms(graphed.summary.median),
                    f"{eager.summary.median / graphed.summary.median:.2f}x" if both else "-",
                    f"{_busy(eager)} / {_busy(graphed)}",
                    {True: "yes", False: "no", None: "-"}[bound],
                    _amp(eager, fp32.get(False), precision),
                    _amp(graphed, fp32.get(True), precision),
                    _answer(bound, graphed),
                ]
            )
    notes = [
        "GPU busy: device activity / wall time of a step in a plain loop. Host-bound: the "
        f"eager step's share is below {threshold:.0%}.",
        "GPU's answer: 'graphed' where the eager step is host-bound (its time and AMP "
        "speedup are the host's); 'either' where the eager step keeps the GPU busy; 'none' "
        "where it is host-bound and no graphed step was timed.",
        "AMP: fp32 median / this median, eager over eager and graphed over graphed.",
    ]
    return render(HEADERS, rows, TITLE) + "\n" + "\n".join(notes)


def tables(measurements: Sequence[Measurement]) -> dict[str, str]:
    """The family's end-of-run tables by name (none without a GPU training step)."""
    text = amp_table(measurements)
    return {} if text is None else {TITLE: text}
