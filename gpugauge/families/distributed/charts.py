"""The distributed family's report charts: scaling curves and the step's comm split."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gpugauge.report.charts import subplots

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from gpugauge.report.data import ReportData


def _distributed(data: ReportData) -> list[Any]:
    """The current run's distributed results (with their spec parameters)."""
    return [m for m in data.current.measurements if m.timing is not None]


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
        fig, (left, right) = subplots(1, 2, figsize=(11, 4.5))
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
        fig, ax = subplots(figsize=(9, 0.34 * len(rows) + 1.6))
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
