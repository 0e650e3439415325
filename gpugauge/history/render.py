"""The history as terminal text: cases per host, one case's trend, change points, A/Bs."""

from __future__ import annotations

from collections.abc import Sequence

from gpugauge.core.phrasing import plural
from gpugauge.history.changepoints import ChangePoint
from gpugauge.history.records import ABRecord, Point
from gpugauge.history.store import Case
from gpugauge.results.metrics import METRICS

BARS = "▁▂▃▄▅▆▇█"


def sparkline(values: Sequence[float]) -> str:
    """One bar per value, scaled from the smallest to the largest."""
    if not values:
        return ""
    low, high = min(values), max(values)
    if high == low:
        return BARS[len(BARS) // 2] * len(values)
    return "".join(BARS[round((v - low) / (high - low) * (len(BARS) - 1))] for v in values)


def short(text: str, width: int) -> str:
    """``text`` cut to ``width`` characters, an ellipsis marking the cut."""
    return text if len(text) <= width else text[: width - 1] + "…"


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Left-aligned columns, two spaces apart, a rule under the header."""
    widths = [max(len(str(c)) for c in col) for col in zip(header, *rows, strict=False)]
    lines = ["  ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=False)) for r in rows]
    head = "  ".join(h.ljust(w) for h, w in zip(header, widths, strict=False))
    return "\n".join(
        [head.rstrip(), "  ".join("-" * w for w in widths)] + [ln.rstrip() for ln in lines]
    )


def cases_text(cases: Sequence[Case]) -> str:
    """`history list`: one row per case, device class and host, with its run count."""
    if not cases:
        return "the history holds no results"
    rows = [
        (
            c.bench_id,
            c.family,
            c.device_class,
            short(c.host, 24),
            str(c.runs),
            "?" if c.first is None else f"{c.first:%Y-%m-%d}",
            "?" if c.last is None else f"{c.last:%Y-%m-%d}",
        )
        for c in cases
    ]
    return table(("case", "family", "device class", "host", "runs", "first", "last"), rows)


def _verdict(p: Point) -> str:
    """A row's verdict, and why it is no reference: not accepted, or never gated."""
    said = p.metric.verdict or p.result.verdict
    if p.result.verdict is None:  # an ungated run: kept, used only once accepted
        return "- (ungated, accepted)" if p.accepted else "- (ungated: no reference)"
    return said + ("" if p.accepted else " (not accepted)") if said else "-"


def trend_text(points: Sequence[Point], changes: Sequence[ChangePoint], metric: str) -> str:
    """`history show`: the case's runs, oldest first, with change points marked ◆."""
    if not points:
        return "no runs of this case"
    unit = METRICS[metric].unit if metric in METRICS else ""
    marks: dict[str, list[str]] = {}
    for c in changes:
        marks.setdefault(c.run_id, []).append(f"◆ {c.mark()} ({c.scope.split()[0]})")
    rows = []
    for p in points:
        m = p.metric
        rows.append(
            (
                f"{p.run.time:%Y-%m-%d %H:%M}",
                short(p.run.id, 14),
                short(p.host, 16),
                f"{m.median:.4g}",
                f"[{m.ci_low:.4g}, {m.ci_high:.4g}]",
                str(m.n),
                _verdict(p),
                short(m.reference or "-", 40),
                " ".join(marks.get(p.run.id, [])),
            )
        )
    header = (
        "time (UTC)",
        "run",
        "host",
        f"median {unit}",
        "CI",
        "n",
        "verdict",
        "reference",
        "change",
    )
    first = points[0]
    title = (
        f"{first.result.bench_id} ({first.result.family}, {first.result.device_class}): "
        f"{metric}, {plural(len(points), 'run')} on {plural(len({p.host for p in points}), 'host')}"
    )
    spark = f"trend: {sparkline([p.median for p in points])}"
    lines = [title, spark, "", table(header, rows)]
    if changes:
        lines += ["", "change points:"] + [f"  {c.describe()}" for c in changes]
    return "\n".join(lines)


def changes_text(changes: Sequence[ChangePoint]) -> str:
    """`history changes`: one line per change point, newest first."""
    if not changes:
        return "no change points"
    ordered = sorted(changes, key=lambda c: c.time, reverse=True)
    lines = []
    for c in ordered:
        lines.append(c.describe())
        command = c.bisect_command()
        if command:
            lines.append(f"  the commit behind it, by A/Bs on this GPU: {command}")
    return "\n".join(lines)


def ab_text(cases: Sequence[ABRecord]) -> str:
    """The same-GPU A/Bs that decided stored results, one row each with its pair count."""
    if not cases:
        return "no A/B kept: `gpugauge confirm` keeps one with the run whose result it decided"
    header = ("run", "case", "device class", "against", "verdict", "head/base [CI]", "pairs")
    rows = [
        (
            c.run_id,
            short(c.bench_id, 48),
            c.device_class,
            c.base_commit[:10],
            c.verdict,
            f"{c.ratio:.3f}x [{c.ci_low:.3f}, {c.ci_high:.3f}]",
            str(len(c.pairs)),
        )
        for c in cases
    ]
    return table(header, rows)
