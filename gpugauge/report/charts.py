"""Report charts (matplotlib, Agg). Each chart is one class in :data:`CHARTS`.

A chart says whether it has something to show for a report (``applies``) and draws one
figure. A later family adds its chart (scaling curves for multi-GPU runs, say) by
appending a class here; nothing else in the report changes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.figure import Figure

from gpugauge.regress.gate import Verdict

if TYPE_CHECKING:
    from gpugauge.report.document import ReportData

COLORS = {
    Verdict.REGRESSED: "#c0392b",
    Verdict.IMPROVED: "#2471a3",
    Verdict.UNCHANGED: "#7f8c8d",
    Verdict.INCONCLUSIVE: "#d68910",
    Verdict.NEW: "#bbbbbb",
}


class Chart(Protocol):
    """One figure of a report."""

    name: str
    title: str

    def applies(self, data: ReportData) -> bool:
        """Whether the report has data for this chart."""

    def draw(self, data: ReportData) -> Figure:
        """The figure."""


class RatioBars:
    """Current/baseline time per benchmark, with the 95% CI as whiskers and the tolerance."""

    name = "ratio"
    title = "Time, current / baseline (95% CI whiskers; dashed: allowed)"

    def applies(self, data: ReportData) -> bool:
        """Needs at least one compared benchmark."""
        return any(r.check("time") for r in data.results)

    def draw(self, data: ReportData) -> Figure:
        """Horizontal bars, worst first."""
        rows = [r for r in data.results if r.check("time")]
        rows.sort(key=lambda r: r.check("time").ratio)  # type: ignore[union-attr]
        fig, ax = plt.subplots(figsize=(9, 0.32 * len(rows) + 1.4))
        for i, r in enumerate(rows):
            c = r.check("time")
            assert c is not None
            ax.barh(i, c.ratio - 1, left=1, color=COLORS[r.verdict], height=0.7)
            ax.errorbar(
                c.ratio,
                i,
                xerr=[[c.ratio - c.ci_low], [c.ci_high - c.ratio]],
                color="black",
                capsize=2,
                lw=0.8,
            )
            ax.plot([1 + c.tolerance] * 2, [i - 0.45, i + 0.45], "k--", lw=0.7)
        ax.axvline(1, color="black", lw=0.8)
        ax.set_yticks(range(len(rows)), [r.id for r in rows], fontsize=7)
        ax.set_xlabel("current / baseline median time (above 1: slower)")
        ax.set_title(self.title, fontsize=10)
        fig.tight_layout()
        return fig


class History:
    """Median time of each benchmark across saved runs, relative to its first run."""

    name = "history"
    title = "History over saved runs (median / first run's median)"

    def applies(self, data: ReportData) -> bool:
        """Needs two or more saved runs."""
        return len(data.history) >= 2

    def draw(self, data: ReportData) -> Figure:
        """One line per benchmark (the 12 that moved most)."""
        series: dict[str, list[tuple[int, float]]] = {}
        for i, run in enumerate(data.history):
            for m in run.measurements:
                if m.timing is not None:
                    series.setdefault(m.id, []).append((i, m.summary.median))
        moved = sorted(series, key=lambda k: -_span(v for _, v in series[k]))[:12]
        fig, ax = plt.subplots(figsize=(9, 4.5))
        for key in moved:
            pts = series[key]
            first = pts[0][1]
            ax.plot([i for i, _ in pts], [v / first for _, v in pts], marker="o", ms=3, label=key)
        ax.axhline(1, color="black", lw=0.8)
        ax.set_xticks(
            range(len(data.history)),
            [r.label for r in data.history],
            rotation=30,
            ha="right",
            fontsize=7,
        )
        ax.set_ylabel("median / first run")
        ax.set_title(self.title, fontsize=10)
        ax.legend(fontsize=6, ncol=2)
        fig.tight_layout()
        return fig


def _span(values: Sequence[float] | object) -> float:
    vals = list(values)  # type: ignore[call-overload]
    return max(vals) / min(vals) if vals and min(vals) > 0 else 0.0


class Roofline:
    """Achieved TFLOP/s against arithmetic intensity, under the measured ceilings."""

    name = "roofline"
    title = "Roofline of the current run (measured ceilings)"

    def applies(self, data: ReportData) -> bool:
        """Needs results with a roofline (the layers family)."""
        return any(m.roofline for m in data.current.measurements)

    def draw(self, data: ReportData) -> Figure:
        """Log-log points per op, one roof per dtype."""
        roofs = {m.id: m.roofline.as_dict() for m in data.current.measurements if m.roofline}
        fig, ax = plt.subplots(figsize=(8, 5))
        peaks = {r["dtype"]: r["peak_tflops"] for r in roofs.values()}
        bw = next(iter(roofs.values()))["peak_gbps"]
        xs = [r["intensity_flop_per_byte"] for r in roofs.values()]
        lo, hi = min(xs) / 2, max(max(xs) * 2, max(peaks.values()) * 1e3 / bw * 4)
        grid = [lo * (hi / lo) ** (i / 200) for i in range(201)]
        for dtype, peak in sorted(peaks.items()):
            ax.plot(grid, [min(peak, x * bw / 1e3) for x in grid], lw=1, label=f"{dtype} roof")
        for bid, r in roofs.items():
            ax.scatter(r["intensity_flop_per_byte"], r["achieved_tflops"], s=14)
            ax.annotate(
                bid.rsplit("-", 2)[0],
                (r["intensity_flop_per_byte"], r["achieved_tflops"]),
                fontsize=6,
            )
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("arithmetic intensity (FLOP / byte)")
        ax.set_ylabel("achieved TFLOP/s")
        ax.set_title(self.title, fontsize=10)
        ax.legend(fontsize=7)
        fig.tight_layout()
        return fig


class Frontier:
    """layer_fit: the largest N per head size M, measured by the search and predicted."""

    name = "frontier"
    title = "layer_fit frontier: largest N per M, measured (search) and predicted (model)"

    @staticmethod
    def _searches(data: ReportData) -> list[dict]:
        return [
            {**m.extra["search"], "device_class": m.device_class}
            for m in data.current.measurements
            if m.spec.family == "layer_fit" and "search" in m.extra
        ]

    def applies(self, data: ReportData) -> bool:
        """Needs layer_fit search results."""
        return bool(self._searches(data))

    def draw(self, data: ReportData) -> Figure:
        """One series per (mode, budget, device): measured markers, predicted dashed."""
        series: dict[str, list[dict]] = {}
        for s in self._searches(data):
            sim = " simulated" if "simulated" in s["backend"] else ""
            key = f"{s['mode']} {s['budget']}{' emulated' if s['emulated'] else ''}{sim}"
            series.setdefault(f"{key} ({s['device_class']})", []).append(s)
        fig, ax = plt.subplots(figsize=(8, 5))
        for i, (label, rows) in enumerate(sorted(series.items())):
            rows.sort(key=lambda r: r["fc"])
            color = f"C{i % 10}"
            ms = [r["fc"] for r in rows]
            ax.plot(ms, [r["max_n"] for r in rows], "o-", color=color, label=f"{label} measured")
            ax.plot(
                ms,
                [r["predicted_max_n"] for r in rows],
                "x--",
                color=color,
                label=f"{label} predicted",
            )
            for r in rows:
                if r["censored"]:
                    ax.annotate("cap", (r["fc"], r["max_n"]), fontsize=6, color=color)
        ax.set_xlabel("M (fully connected layers in the head)")
        ax.set_ylabel("largest N (conv blocks) that fits")
        ax.set_yscale("log")
        ax.set_title(self.title, fontsize=10)
        ax.legend(fontsize=6)
        fig.tight_layout()
        return fig


def _distributed(data: ReportData) -> list[Any]:
    """The current run's distributed results (with their spec parameters)."""
    return [
        m
        for m in data.current.measurements
        if m.spec.family == "distributed" and m.timing is not None
    ]


def _param(m: Any, key: str) -> Any:
    return m.spec.as_dict().get(key)


class ScalingCurves:
    """Throughput against GPUs (one line per model, mode and batch), efficiency against batch."""

    name = "scaling"
    title = "Distributed scaling: throughput vs GPUs, weak-scaling efficiency vs per-GPU batch"

    def applies(self, data: ReportData) -> bool:
        """Needs distributed results."""
        return bool(_distributed(data))

    def draw(self, data: ReportData) -> Figure:
        """Left: images/s against GPUs; right: efficiency t(1)/t(N) against batch (log x)."""
        ms = _distributed(data)
        fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.5))
        lines: dict[tuple[str, str, int], list[tuple[int, float]]] = {}
        for m in ms:
            tput = m.value("throughput")
            if tput is None:
                continue
            model, mode, batch = _param(m, "model"), _param(m, "mode"), _param(m, "batch")
            modes = ["dp", "ddp"] if mode == "single" else [mode]
            for md in modes:  # the one-GPU point starts every mode's line
                lines.setdefault((model, md, batch), []).append((_param(m, "gpus"), tput))
        for (model, mode, batch), pts in sorted(lines.items()):
            if len(pts) < 2:
                continue
            pts.sort()
            left.plot(*zip(*pts, strict=True), marker="o", ms=3, label=f"{model} {mode} b{batch}")
        left.set_xlabel("GPUs (CPU: processes)")
        left.set_ylabel("images / s")
        left.set_title("throughput", fontsize=9)
        eff: dict[tuple[str, str, int], list[tuple[int, float]]] = {}
        for m in ms:
            e = m.value("efficiency")
            if e is not None:
                key = (_param(m, "model"), _param(m, "mode"), _param(m, "gpus"))
                eff.setdefault(key, []).append((_param(m, "batch"), e))
        for (model, mode, gpus), pts in sorted(eff.items()):
            pts.sort()
            right.plot(*zip(*pts, strict=True), marker="o", ms=3, label=f"{model} {mode} x{gpus}")
        right.axhline(1, color="black", lw=0.8)
        right.axhline(0.8, color="grey", lw=0.6, ls="--")
        right.set_xscale("log", base=2)
        right.set_xlabel("batch per GPU")
        right.set_ylabel("efficiency t(1)/t(N)")
        right.set_title("weak-scaling efficiency (dashed: 80%)", fontsize=9)
        for ax in (left, right):
            if ax.get_legend_handles_labels()[0]:
                ax.legend(fontsize=6)
        fig.suptitle(self.title, fontsize=10)
        fig.tight_layout()
        return fig


class CommBars:
    """Per multi-GPU result: a step split into compute, overlapped and exposed comm, and idle.

    Idle is device time with no kernel, copy or memset: a host that cannot issue work
    fast enough (DataParallel's replication, launch-bound small batches). The seed's
    subtraction charges it to communication; the bars keep it apart. Each bar is 100% of
    its traced step (labelled with the step's ms), so short steps read as well as long ones.
    """

    name = "comm"
    title = (
        "Distributed step: compute, communication, idle (profiler traces; x: seed's subtraction)"
    )

    def applies(self, data: ReportData) -> bool:
        """Needs multi-GPU distributed results with a trace split."""
        return any(self._split(m) for m in _distributed(data))

    @staticmethod
    def _split(m: Any) -> dict[str, float] | None:
        s = m.extra.get("trace_split")
        return s if s and (_param(m, "gpus") or 1) > 1 else None

    @staticmethod
    def parts(s: dict[str, float]) -> list[float]:
        """Compute alone, overlapped comm, exposed comm, idle: ms that sum to the step."""
        idle = max(s["step_ms"] - s["compute_ms"] - s["exposed_ms"], 0.0)
        return [s["compute_ms"] - s["overlapped_ms"], s["overlapped_ms"], s["exposed_ms"], idle]

    def draw(self, data: ReportData) -> Figure:
        """Stacked horizontal bars, % of each traced step; the subtraction as a marker."""
        rows = [(m, self._split(m)) for m in _distributed(data) if self._split(m)]
        fig, ax = plt.subplots(figsize=(9, 0.34 * len(rows) + 1.6))
        parts = [
            ("compute", "#7f8c8d"),
            ("overlapped comm", "#5dade2"),
            ("exposed comm", "#c0392b"),
            ("idle (no kernel or copy)", "#f5cba7"),
        ]
        for i, (m, s) in enumerate(rows):
            left = 0.0
            widths = [100 * w / s["step_ms"] for w in self.parts(s)] if s["step_ms"] else []
            for (label, color), w in zip(parts, widths, strict=False):
                ax.barh(i, w, left=left, color=color, height=0.7, label=label if i == 0 else None)
                left += w
            sub = m.values.get("subtraction_comm_fraction")
            if sub is not None:
                ax.plot(100 * sub, i, "kx", label="subtraction" if i == 0 else None)
        labels = [f"{m.id} ({s['step_ms']:.3g} ms)" for m, s in rows]
        ax.set_yticks(range(len(rows)), labels, fontsize=7)
        ax.set_xlim(0, 100)
        ax.set_xlabel("% of the traced step (profiler on; its ms in brackets)")
        ax.set_title(self.title, fontsize=10)
        fig.legend(fontsize=7, loc="lower center", ncol=5, frameon=False)
        fig.tight_layout(rect=(0, 0.04, 1, 1))
        return fig


CHARTS: list[Chart] = [
    RatioBars(),
    History(),
    Roofline(),
    Frontier(),
    ScalingCurves(),
    CommBars(),
]
