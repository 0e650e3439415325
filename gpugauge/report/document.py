"""Comparison reports: a run against stored baselines, or any two saved runs.

Reads pytest-benchmark's saved JSON (``--benchmark-json`` or the autosave storage),
judges every benchmark with the gate's rules and tolerances, and writes Markdown and a
self-contained HTML file (plots embedded as PNG) into ``reports/``.
"""

from __future__ import annotations

import base64
import html
import io
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpugauge.regress.baselines import (
    BaselineError,
    BaselineStore,
    Entry,
    entries_of_benchmark_json,
)
from gpugauge.regress.gate import Gate, GateResult, compare
from gpugauge.regress.tolerances import Tolerances
from gpugauge.report.tables import fmt_ms, fmt_ratio, fmt_verdict, verdict_counts, worst_first


@dataclass(frozen=True)
class Run:
    """One saved pytest-benchmark run of gpugauge."""

    path: Path
    label: str
    entries: list[Entry]
    rooflines: dict[str, dict[str, Any]] = field(default_factory=dict)
    machine: str = ""

    @classmethod
    def load(cls, path: Path) -> Run:
        """Read a saved run (BaselineError if it is not one)."""
        entries = entries_of_benchmark_json(path)
        data = json.loads(path.read_text())
        roofs = {
            b["extra_info"].get("id") or b["param"]: b["extra_info"]["roofline"]
            for b in data["benchmarks"]
            if (b.get("extra_info") or {}).get("roofline")
        }
        fp = (data.get("machine_info") or {}).get("gpugauge") or {}
        gpus = ", ".join(g["name"] for g in fp.get("gpus", [])) or fp.get("cpu", "")
        machine = f"{gpus}; torch {fp.get('torch', '?')}; driver {fp.get('driver') or '-'}"
        label = (data.get("datetime") or path.stem)[:19]
        return cls(path, label, entries, roofs, machine)


@dataclass(frozen=True)
class ReportData:
    """Everything a report shows: the current run, its verdicts and the run history."""

    current: Run
    against: str
    results: list[GateResult]
    history: list[Run]


def newest_run(storage: Path) -> Path:
    """The most recently written run under a pytest-benchmark storage folder."""
    runs = sorted(storage.rglob("*.json"), key=lambda p: p.stat().st_mtime)
    if not runs:
        raise FileNotFoundError(
            f"no saved runs under {storage}: run pytest with "
            f"--benchmark-autosave, or pass --current"
        )
    return runs[-1]


def collect(
    current: Path,
    *,
    baseline_run: Path | None,
    baselines: Path,
    tolerances: Tolerances,
    history: list[Path],
) -> ReportData:
    """Judge the current run against a saved run, or else against the stored baselines."""
    run = Run.load(current)
    if baseline_run is not None:
        base = {e.id: e for e in Run.load(baseline_run).entries}
        results = [
            compare(e, base[e.id], tolerances.for_benchmark(e.family, e.id))
            if e.id in base
            else GateResult(e.id, e.family, e.device_class, (), f"not in {baseline_run.name}")
            for e in run.entries
        ]
        against = f"saved run {baseline_run}"
    else:
        gate = Gate(BaselineStore(baselines), tolerances)
        results = [gate.judge(e) for e in run.entries]
        against = f"stored baselines in {baselines}/"
    runs = []
    for p in history:
        try:
            runs.append(Run.load(p))
        except BaselineError:
            continue  # not a gpugauge run: history shows only ours
    runs.sort(key=lambda r: r.label)
    return ReportData(run, against, results, runs)


def _rows(data: ReportData) -> list[list[str]]:
    rows = []
    for r in worst_first(data.results):
        t = r.check("time")
        rows.append(
            [
                r.id,
                "-" if t is None else fmt_ms(t.baseline),
                "-" if t is None else fmt_ms(t.current),
                fmt_ratio(t),
                "-" if t is None else f"{1 + t.tolerance:.3f}",
                fmt_verdict(r),
                fmt_ratio(r.check("memory")),
                fmt_ratio(r.check("energy")),
                r.note,
            ]
        )
    return rows


HEADERS = [
    "benchmark",
    "baseline ms",
    "current ms",
    "time ratio [95% CI]",
    "allowed",
    "verdict",
    "memory ratio",
    "energy ratio",
    "note",
]


def markdown_table(headers: list[str], rows: list[list[str]]) -> str:
    """A Markdown table padded so that it also reads as aligned plain text."""
    widths = [max(len(c) for c in col) for col in zip(headers, *rows, strict=True)]

    def line(cells: list[str]) -> str:
        return "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)) + " |"

    return "\n".join(
        [
            line(headers),
            "|" + "|".join("-" * (w + 2) for w in widths) + "|",
            *(line(r) for r in rows),
        ]
    )


def render_markdown(data: ReportData, images: dict[str, str]) -> str:
    """The report as Markdown; ``images`` maps chart titles to PNG file names."""
    parts = [
        "# gpugauge report",
        "",
        f"- current: `{data.current.path}` ({data.current.label}; {data.current.machine})",
        f"- against: {data.against}",
        f"- verdicts: {verdict_counts(data.results) or 'nothing compared'}",
        "",
        "Time is judged on the 95% CI of current/baseline median: a regression only when the",
        "whole interval lies beyond the allowed ratio. Memory and energy are single values.",
        "",
        markdown_table(HEADERS, _rows(data)),
    ]
    for title, name in images.items():
        parts += ["", f"## {title}", "", f"![{title}]({name})"]
    return "\n".join(parts) + "\n"


_CSS = """body{font-family:system-ui,sans-serif;margin:2em;max-width:1200px}
table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ccc;padding:3px 8px}
td:not(:first-child){text-align:right}.regressed{background:#fadbd8}.improved{background:#d6eaf8}
.inconclusive{background:#fdebd0}img{max-width:100%;border:1px solid #eee}"""


def render_html(data: ReportData, pngs: dict[str, bytes]) -> str:
    """The report as one self-contained HTML page (plots inlined as base64 PNG)."""
    e = html.escape
    head = "".join(f"<th>{e(h)}</th>" for h in HEADERS)
    body = "".join(
        f'<tr class="{e(row[5].lower())}">' + "".join(f"<td>{e(c)}</td>" for c in row) + "</tr>"
        for row in _rows(data)
    )
    figs = "".join(
        f'<h2>{e(title)}</h2><img alt="{e(title)}" '
        f'src="data:image/png;base64,{base64.b64encode(png).decode()}">'
        for title, png in pngs.items()
    )
    return (
        f'<!doctype html><html><head><meta charset="utf-8"><title>gpugauge report</title>'
        f"<style>{_CSS}</style></head><body><h1>gpugauge report</h1>"
        f"<p>current: <code>{e(str(data.current.path))}</code> ({e(data.current.label)}; "
        f"{e(data.current.machine)})<br>against: {e(data.against)}<br>"
        f"verdicts: {e(verdict_counts(data.results) or 'nothing compared')}</p>"
        f"<table><tr>{head}</tr>{body}</table>{figs}</body></html>\n"
    )


def write_report(data: ReportData, out: Path, name: str = "report") -> list[Path]:
    """Draw every chart that applies and write ``<name>.md``, ``<name>.html`` and PNGs."""
    import matplotlib.pyplot as plt

    from gpugauge.regress.baselines import atomic_write_text
    from gpugauge.report.charts import CHARTS

    out.mkdir(parents=True, exist_ok=True)
    pngs: dict[str, bytes] = {}
    images: dict[str, str] = {}
    written = []
    for chart in CHARTS:
        if not chart.applies(data):
            continue
        fig = chart.draw(data)
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=110)
        plt.close(fig)
        pngs[chart.title] = buf.getvalue()
        png = out / f"{name}-{chart.name}.png"
        png.write_bytes(pngs[chart.title])
        images[chart.title] = png.name
        written.append(png)
    for suffix, text in (
        (".md", render_markdown(data, images)),
        (".html", render_html(data, pngs)),
    ):
        path = out / f"{name}{suffix}"
        atomic_write_text(path, text)
        written.append(path)
    return written
