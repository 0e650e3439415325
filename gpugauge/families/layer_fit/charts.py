"""layer_fit's report chart: the frontier of (N, M) that fits, measured and predicted."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpugauge.report.charts import subplots

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from gpugauge.report.data import ReportData


class Frontier:
    """layer_fit: the largest N per head size M, measured by the search and predicted."""

    name = "frontier"
    title = "layer_fit frontier: largest N per M, measured (search) and predicted (model)"

    @staticmethod
    def _searches(data: ReportData) -> list[dict]:
        return [
            {**m.extra["search"], "device_class": m.device_class}
            for m in data.current.measurements
            if "search" in m.extra
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
        fig, ax = subplots(figsize=(8, 5))
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
