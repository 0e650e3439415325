"""Report charts (matplotlib, Agg). Each chart is one class in :data:`CHARTS`.

A chart says whether it has something to show for a report (``applies``) and draws one
figure. The charts here read any result; a family's own charts live in its package
(:attr:`gpugauge.family.Family.charts`) and are handed only that family's
results (:meth:`ReportData.only`), so no chart here names a family.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from gpugauge.family import Chart
from gpugauge.report.trends import MIN_RUNS, TREND_CHARTS
from gpugauge.results.verdicts import MetricCheck, Verdict

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from gpugauge.report.data import ReportData


def subplots(*args: Any, **kwargs: Any) -> tuple[Figure, Any]:
    """``plt.subplots`` on the Agg backend, matplotlib imported on the first chart drawn.

    A pytest run loads every family's charts module and draws none: importing pyplot at
    module level cost every run, and every A/B side, about 0.6 s before its first test.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt.subplots(*args, **kwargs)


COLORS = {
    Verdict.REGRESSED: "#c0392b",
    Verdict.IMPROVED: "#2471a3",
    Verdict.UNCHANGED: "#7f8c8d",
    Verdict.INCONCLUSIVE: "#d68910",
    Verdict.NEW: "#bbbbbb",
}


LOG_SPAN = 10.0  # ratios spanning more than this factor are drawn on a log axis


class RatioBars:
    """Current/baseline time per benchmark, with its CI as whiskers and the tolerance.

    Each whisker is the interval that decided the verdict: 95%, or 99.8% where a same-GPU
    A/B read it slower, faster or in need of more samples.

    A result whose change may be noise (noisy or host-timed rounds on either side, and a
    change within a few times the noise: :attr:`ReportData.hedged`) is hatched and labelled
    so. Where the ratios span more than :data:`LOG_SPAN` (a 434x bar
    beside 1.01x ones) the axis is logarithmic, so that one outlier does not flatten every
    other bar.
    """

    name = "ratio"
    title = "Time, current / baseline (whiskers: the deciding CI, 95% or 99.8%; dashed: allowed)"

    def applies(self, data: ReportData) -> bool:
        """Needs at least one compared benchmark."""
        return any(r.check("time") for r in data.results)

    def draw(self, data: ReportData) -> Figure:
        """Horizontal bars, worst first."""
        rows = [r for r in data.results if r.check("time")]
        rows.sort(key=lambda r: r.check("time").ratio)  # type: ignore[union-attr]
        checks = [r.check("time") for r in rows]
        noisy = data.hedged
        fig, ax = subplots(figsize=(9, 0.32 * len(rows) + 1.4))
        for i, (r, c) in enumerate(zip(rows, checks, strict=True)):
            assert c is not None
            ax.barh(
                i,
                c.ratio - 1,
                left=1,
                color=COLORS[r.verdict],
                height=0.7,
                hatch="///" if r.id in noisy else None,
            )
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
        labels = [r.id + (" (noisy)" if r.id in noisy else "") for r in rows]
        ax.set_yticks(range(len(rows)), labels, fontsize=7)
        if ratio_span(checks) > LOG_SPAN:
            ax.set_xscale("log")
        ax.set_xlabel("current / baseline median time (above 1: slower)")
        ax.set_title(self.title, fontsize=10)
        fig.tight_layout()
        return fig


def ratio_span(checks: Sequence[MetricCheck | None]) -> float:
    """Largest over smallest of every ratio, CI bound and 1 drawn (positive values only)."""
    values = [1.0]
    for c in checks:
        values += [] if c is None else [c.ratio, c.ci_low, c.ci_high]
    positive = [v for v in values if v > 0]
    return max(positive) / min(positive)


LINE_COLORS = tuple(f"C{i}" for i in range(10))  # matplotlib's default cycle
LINE_STYLES = (("o", "-"), ("s", "--"), ("^", ":"), ("D", "-."))  # one per turn of it


def line_style(i: int) -> tuple[str, str, str]:
    """The i-th line's (colour, marker, linestyle): each turn of the colours its own marks.

    Ten colours alone repeat at the eleventh line; with a marker and dash pattern that
    change at every turn, 40 lines are told apart.
    """
    marker, dashes = LINE_STYLES[(i // len(LINE_COLORS)) % len(LINE_STYLES)]
    return LINE_COLORS[i % len(LINE_COLORS)], marker, dashes


class HistoryChart:
    """Median time of each benchmark across saved runs, relative to its first run."""

    name = "history"
    title = "History over saved runs (median / first run's median)"

    def applies(self, data: ReportData) -> bool:
        """Needs :data:`~gpugauge.report.trends.MIN_RUNS` or more saved runs, as a trend does."""
        return len(data.history) >= MIN_RUNS

    def draw(self, data: ReportData) -> Figure:
        """One line per benchmark (the 12 that moved most)."""
        series: dict[str, list[tuple[int, float]]] = {}
        for i, run in enumerate(data.history):
            for m in run.measurements:
                if m.timing is not None:
                    series.setdefault(m.id, []).append((i, m.summary.median))
        moved = sorted(series, key=lambda k: -_span(v for _, v in series[k]))[:12]
        fig, ax = subplots(figsize=(9, 4.5))
        for n, key in enumerate(moved):
            pts = series[key]
            first = pts[0][1]
            color, marker, dashes = line_style(n)
            ys = [v / first for _, v in pts]
            xs = [i for i, _ in pts]
            ax.plot(xs, ys, color=color, marker=marker, ls=dashes, ms=3, label=key)
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


class RooflineChart:
    """Achieved TFLOP/s against arithmetic intensity, under the measured ceilings."""

    name = "roofline"
    title = "Roofline of the current run (measured ceilings)"

    def applies(self, data: ReportData) -> bool:
        """Needs results with a roofline (the layers family)."""
        return any(m.roofline for m in data.current.measurements)

    def draw(self, data: ReportData) -> Figure:
        """Log-log points per op, one roof per dtype."""
        roofs = {m.id: m.roofline.as_dict() for m in data.current.measurements if m.roofline}
        fig, ax = subplots(figsize=(8, 5))
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


CHARTS: tuple[Chart, ...] = (RatioBars(), HistoryChart(), *TREND_CHARTS, RooflineChart())
"""The core's charts; each family adds its own (:attr:`Family.charts`)."""
