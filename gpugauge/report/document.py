"""Comparison reports: a run against stored baselines, or any two saved runs.

Reads saved runs (:func:`gpugauge.results.runs.load_run`), judges every result with the
judge's rules (never across device classes), and writes Markdown and a self-contained HTML
page (plots as PNG) into ``reports/``. Besides the verdicts it shows the run itself: every
metric of every result, its artifacts and comparisons: a first report has all its numbers.
"""

from __future__ import annotations

import base64
import html
import io
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

from gpugauge.core.phrasing import plural
from gpugauge.family.registry import comparisons_of, registry
from gpugauge.history.targets import redact
from gpugauge.judging.judge import Judge
from gpugauge.measure.stats import MIN_CI_N
from gpugauge.regress.baselines import BaselineStore, entry_of
from gpugauge.regress.gate import Gate, compare
from gpugauge.regress.tolerances import Tolerances
from gpugauge.report.cells import (
    Cell,
    Links,
    Marked,
    code_span,
    flag_of,
    html_cell,
    markdown_table,
    md_text,
)
from gpugauge.report.data import ReportData, about
from gpugauge.report.tables import (
    checked_metrics,
    decided_by,
    fmt_ci,
    fmt_cv,
    fmt_ms,
    fmt_ratio,
    fmt_value,
    fmt_verdict,
    lacks_interval,
    no_interval,
    noisy_ids,
    notes_of,
    trust_note,
    uncertain_ids,
    unsampled_ids,
    value_metrics,
    worst_first,
)
from gpugauge.report.trends import MIN_RUNS, changes_of, changes_table, load_trends, too_few_runs
from gpugauge.results.files import atomic_write_many
from gpugauge.results.metrics import METRICS
from gpugauge.results.runs import NotOurs, RunError, SavedRun, load_run, say_refused
from gpugauge.results.verdicts import Basis, GateResult


def _against_run(run: SavedRun, other: SavedRun, tolerances: Tolerances) -> list[GateResult]:
    """Judge ``run`` against another saved run, result by result, within a device class."""
    base = {(m.device_class, m.id): entry_of(m) for m in other.measurements}
    classes = {m.id: m.device_class for m in other.measurements}
    same_host = run.host is not None and run.host == other.host  # per-host metrics too
    out = []
    for m in run.measurements:
        e = entry_of(m)
        if (m.device_class, m.id) in base:
            tol = tolerances.for_benchmark(e.family, e.id)
            other_e = base[(m.device_class, m.id)]
            out.append(compare(e, other_e, tol, same_host=same_host, basis=Basis.SAVED_RUN))
            continue
        note = f"not in {other.path.name}"
        if m.id in classes:
            note = (
                f"not compared: {other.path.name} measured it on {classes[m.id]}, this run "
                f"on {m.device_class} (never compared across device classes)"
            )
        out.append(GateResult(e.id, e.family, e.device_class, (), note))
    return out


def _stored_verdicts(run: SavedRun, judge: Judge) -> tuple[list[GateResult], list[str]]:
    """The verdicts a gated run stored with its results: read, never judged again.

    A result stored without one (its gate raised) is judged by ``judge``, and named in the
    ids returned: one missing verdict must not send every other result, A/B verdicts
    included, back to the class baselines.
    """
    out, judged = [], []
    for m in run.measurements:
        if m.id not in run.verdicts:
            out.append(judge.judge(m))
            judged.append(m.id)
            continue
        try:
            out.append(GateResult.from_dict(run.verdicts[m.id], m.spec.family, m.device_class))
        except (KeyError, TypeError, ValueError) as err:
            raise RunError(f"{run.path}: {m.id}: unreadable stored verdict ({err})") from None
    return out, judged


def collect(
    current: Path,
    *,
    baseline_run: Path | None,
    baselines: Path,
    tolerances: Tolerances,
    history: list[Path],
    notes: list[str] | None = None,
    trend_history: str | None = None,
) -> ReportData:
    """Judge the current run against a saved run, or else against the stored baselines.

    ``notes`` are lines the report shows under its header (e.g. built-in tolerances used);
    ``trend_history`` is the results history (a SQLite path or a URL) whose trends and
    change points of the run's cases the report shows (None: none, and no note).
    """
    run = load_run(current)
    refused = say_refused(run, "gpugauge report")
    baseline_noisy: frozenset[str] = frozenset()
    judge = Judge(Gate(BaselineStore(baselines), tolerances))  # for a result with no verdict
    if baseline_run is not None:
        other = load_run(baseline_run)
        refused += say_refused(other, "gpugauge report")
        results = _against_run(run, other, tolerances)
        against = f"saved run {baseline_run}"
        baseline_noisy = uncertain_ids(other.measurements)
    elif run.verdicts:
        results, judged = _stored_verdicts(run, judge)
        against = "the stored baselines, as the run's own gate judged it (--gauge-gate)"
        if n := sum(c.basis is Basis.SAME_GPU_AB for r in results for c in r.checks):
            against += f", {plural(n, 'result')} decided by a same-GPU A/B (gpugauge confirm)"
        if judged:
            against += (
                f"; {plural(len(judged), 'result')} stored without a verdict judged here "
                f"against {baselines}/: {', '.join(judged)}"
            )
    else:
        results = [judge.judge(m) for m in run.measurements]
        against = f"stored baselines in {baselines}/"
    runs, skipped = [], refused
    for p in history:
        try:
            runs.append(load_run(p))
        except NotOurs:
            continue  # not a gpugauge run: history shows only ours
        except RunError as err:  # named and left out: one bad run never stops the report
            skipped.append(f"skipped a stored run that cannot be read: {err}")
            print(f"gpugauge report: {skipped[-1]}", file=sys.stderr)
    runs.sort(key=lambda r: r.label)
    trends, bands, steps, why = {}, {}, [], ""
    if trend_history is not None:
        trends, bands, steps, why = load_trends(trend_history, run, tolerances, baselines)
    return ReportData(
        run,
        against,
        results,
        runs,
        (*about(run), *(notes or ()), *skipped),
        baseline_noisy,
        trends=trends,
        changes=changes_of(trends, steps),
        bands=bands,
        trend_source=redact(trend_history or ""),
        trend_note=why,
    )


@dataclass(frozen=True)
class Section:
    """One table of the report; ``classes`` holds each row's CSS class in the HTML page."""

    title: str
    headers: list[str]
    rows: list[list[Cell]]
    classes: list[str] = field(default_factory=list)
    empty: str = ""  # shown instead of the table when there are no rows


def _verdict_rows(data: ReportData) -> Section:
    """Verdicts, worst first; ``decided by`` names the metrics that gave each verdict.

    A verdict whose time was noisy or host-timed on either side, with a change within a few
    times its noise (:attr:`ReportData.hedged`), says '(noisy)': the change may be noise.
    """
    names = checked_metrics(data.results)
    headers = [
        "case",
        "verdict",
        "decided by",
        "reference ms",
        "current ms",
        "time ratio [95% CI]",
        "allowed",
        *(f"{n} ratio" for n in names),
        "note",
    ]
    rows: list[list[Cell]] = []
    classes = []
    # the result's own number as "Results of this run" shows it (re-measured: the second one)
    medians = {m.id: m.value("time") for m in data.current.measurements}
    noisy = data.hedged
    unsampled = unsampled_ids(data.current.measurements)
    for r in worst_first(data.results):
        t = r.check("time")
        now = medians.get(r.id)
        if t is not None and (now is None or t.basis is Basis.SAME_GPU_AB):
            # an A/B's ratio is of its own blocks: beside its base's, the gated run's median
            # read 2.9 -> 3.1 ms next to "1.000x unchanged" (a review, 2026-12-07)
            now = t.current
        flagged = r.id in noisy and bool(r.checks)
        one = r.id in unsampled
        rows.append(
            [
                r.id,
                Marked(fmt_verdict(r, flagged), flag_of(flagged, False)),
                decided_by(r),
                "-" if t is None else fmt_ms(t.baseline),
                "-" if now is None else fmt_ms(now),
                Marked(fmt_ratio(t, one), flag_of(False, lacks_interval(t, one))),
                "-" if t is None else t.allowed,
                *(fmt_ratio(r.check(n)) for n in names),
                r.note,
            ]
        )
        classes.append(r.verdict.value + (" noisy" if flagged else ""))
    return Section("Verdicts", headers, rows, classes)


def _link(path: str, out: Path) -> str:
    try:
        return os.path.relpath(Path(path).resolve(), out.resolve())
    except ValueError:  # another drive
        return str(path)


def _result_rows(data: ReportData, out: Path) -> Section:
    """Every result of the current run with its CV and notes (noisy, throttled, ...)."""
    ms = data.current.measurements
    names = value_metrics(ms)
    headers = ["case", "device class", "median ms [95% CI]", "n", "CV"]
    headers += [f"{n} ({METRICS[n].unit})" for n in names] + ["notes", "artifacts"]
    rows: list[list[Cell]] = []
    for m in ms:
        timed: list[Cell] = ["-", "-", "-"]
        if m.timing is not None:
            s = m.summary
            flag = flag_of(m.timing.is_noisy, not s.has_interval)
            ci = fmt_ci(s) if s.has_interval else f"({fmt_ci(s)})"
            timed = [Marked(f"{fmt_ms(s.median)} {ci}", flag), str(s.n), fmt_cv(s)]
        links: Links = tuple((name, _link(p, out)) for name, p in sorted(m.artifacts.items()))
        rows.append(
            [
                m.id,
                m.device_class,
                *timed,
                *(fmt_value(n, m.value(n)) for n in names),
                notes_of(m) or "-",
                links or "-",
            ]
        )
    return Section("Results of this run", headers, rows)


def _comparison_rows(data: ReportData) -> Section:
    """The families' comparisons, derived from the run's results, then gauge.compare's."""
    headers = ["comparison", "baseline", "candidate", "speedup [95% CI]", "memory saved", "notes"]
    rows: list[list[Cell]] = []
    ms = data.current.measurements
    saved = [c.as_dict() for c in comparisons_of(ms)] + data.current.adhoc_comparisons
    noisy = noisy_ids(ms)
    rounds = {m.id: m.summary.n for m in ms if m.timing is not None}
    for c in saved:
        try:
            s = c["speedup"]
            frac = c.get("memory_saved_fraction")
            rows.append(
                [
                    str(c["title"]),
                    f"{c['baseline_label']} {fmt_ms(c['baseline_median_ms'])} ms",
                    f"{c['candidate_label']} {fmt_ms(c['candidate_median_ms'])} ms",
                    _speedup_cell(s, rounds, c),
                    "-" if frac is None else f"{frac:+.1%}",
                    _trust(c, noisy),
                ]
            )
        except (KeyError, TypeError, ValueError):
            continue  # a comparison saved by another version: shown where it can be read
    return Section("Comparisons within this run", headers, rows)


def _speedup_cell(speedup: dict, rounds: dict[str, int], saved: dict) -> Cell:
    """The saved speedup with its CI, or 'no interval' where a side was timed once."""
    fewest = min(rounds.get(str(saved[side]), MIN_CI_N) for side in ("baseline", "candidate"))
    if fewest < MIN_CI_N:
        return Marked(f"{speedup['value']:.3f}x ({no_interval(fewest)})", "no-interval")
    return f"{speedup['value']:.3f}x [{speedup['ci_low']:.3f}, {speedup['ci_high']:.3f}]"


def _trust(saved: dict, noisy: frozenset[str]) -> str:
    """The notes cell of a saved comparison: its paired blocks, else its noisy sides."""
    sides = [
        str(saved[f"{side}_label"]) for side in ("baseline", "candidate") if saved[side] in noisy
    ]
    return trust_note(int(saved.get("paired_blocks") or 0), sides) or "-"


def _sections(data: ReportData, out: Path) -> list[Section]:
    sections = [_verdict_rows(data), _result_rows(data, out)]
    compared = _comparison_rows(data)
    sections += [compared] if compared.rows else []
    if data.trends:  # the change points of the history's trends (none: it says so)
        headers, rows, empty = changes_table(data)
        sections.append(Section("Changes", headers, list(rows), empty=empty))
    return sections


def missing_charts(data: ReportData) -> list[str]:
    """Why the report's general charts are not drawn, one line each (empty when they are).

    A first report (one run, no baseline) has neither, and says why rather than leaving a
    reader to wonder whether drawing failed.
    """
    out = []
    if not any(r.check("time") for r in data.results):
        out.append(
            f"no ratio chart: none of this run's "
            f"{plural(len(data.current.measurements), 'result')} had "
            f"a counterpart of its device class to compare with (against {data.against}); "
            f"record baselines (python -m gpugauge baseline RUN.json ...) or pass "
            f"--against RUN.json"
        )
    if len(data.history) < MIN_RUNS:
        out.append(
            f"no history chart: it needs {MIN_RUNS} or more saved runs in --storage; found "
            f"{len(data.history)} (run pytest with --benchmark-autosave again)"
        )
    few = too_few_runs(data.trends, data.trend_source)
    return out + [n for n in (data.trend_note, few) if n]


INTRO = (
    "Each metric is judged on current/baseline in its own direction (lower is better for "
    "time, memory and energy; higher for counts, throughput and bandwidth). Time is judged "
    "on the 95% CI of the ratio of medians: a regression only when the whole interval lies "
    "beyond the allowed bound. A time a same-GPU A/B decided is judged on its pairs' "
    "interval, which names its level where it is not 95%. Other metrics are single values."
)


def render_markdown(data: ReportData, images: dict[str, str], out: Path = Path(".")) -> str:
    """The report as Markdown; ``images`` maps chart titles to PNG file names."""
    m = md_text  # every line below holds text from the run file or the command line
    parts = [
        "# gpugauge report",
        "",
        f"- current: {code_span(str(data.current.path))} "
        f"({m(data.current.label)}; {m(data.current.machine)})",
        f"- against: {m(data.against)}",
        f"- verdicts: {m(data.verdict_line)}",
        *(f"- note: {m(n)}" for n in data.notes),
        "",
        INTRO,
    ]
    for sec in _sections(data, out):
        table = markdown_table(sec.headers, sec.rows) if sec.rows or not sec.empty else m(sec.empty)
        parts += ["", f"## {sec.title}", "", table]
    for title, name in images.items():
        parts += ["", f"## {title}", "", f"![{title}]({name})"]
    missing = missing_charts(data)
    if missing:
        parts += ["", "## Charts not drawn", "", *(f"- {m(line)}" for line in missing)]
    return "\n".join(parts) + "\n"


_CSS = """body{font-family:system-ui,sans-serif;margin:2em;max-width:1200px}
table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ccc;padding:3px 8px}
td:not(:first-child){text-align:right}.regressed{background:#fadbd8}.improved{background:#d6eaf8}
.inconclusive{background:#fdebd0}td.noisy,td.no-interval{font-style:italic}
td.no-interval{color:#7e5109}
img{max-width:100%;border:1px solid #eee}"""


def render_html(data: ReportData, pngs: dict[str, bytes], out: Path = Path(".")) -> str:
    """The report as one self-contained HTML page (plots inlined as base64 PNG)."""
    e = html.escape
    tables = []
    for sec in _sections(data, out):
        head = "".join(f"<th>{e(h)}</th>" for h in sec.headers)
        classes = sec.classes or [""] * len(sec.rows)
        body = "".join(
            (f'<tr class="{e(cls)}">' if cls else "<tr>") + "".join(map(html_cell, row)) + "</tr>"
            for row, cls in zip(sec.rows, classes, strict=True)
        )
        table = f"<table><tr>{head}</tr>{body}</table>"
        if sec.empty and not sec.rows:
            table = f"<p>{e(sec.empty)}</p>"
        tables.append(f"<h2>{e(sec.title)}</h2>{table}")
    figs = "".join(
        f'<h2>{e(title)}</h2><img alt="{e(title)}" '
        f'src="data:image/png;base64,{base64.b64encode(png).decode()}">'
        for title, png in pngs.items()
    )
    missing = missing_charts(data)
    if missing:
        items = "".join(f"<li>{e(line)}</li>" for line in missing)
        figs += f"<h2>Charts not drawn</h2><ul>{items}</ul>"
    return (
        f'<!doctype html><html><head><meta charset="utf-8"><title>gpugauge report</title>'
        f"<style>{_CSS}</style></head><body><h1>gpugauge report</h1>"
        f"<p>current: <code>{e(str(data.current.path))}</code> ({e(data.current.label)}; "
        f"{e(data.current.machine)})<br>against: {e(data.against)}<br>"
        f"verdicts: {e(data.verdict_line)}"
        + "".join(f"<br>note: {e(n)}" for n in data.notes)
        + "</p>"
        f"<p>{e(INTRO)}</p>{''.join(tables)}{figs}</body></html>\n"
    )


def write_report(data: ReportData, out: Path, name: str = "report") -> list[Path]:
    """Draw every chart that applies and write ``<name>.md``, ``<name>.html`` and PNGs.

    Everything is rendered in memory first, so an error while drawing leaves the previous
    report as it was; then the files are written as one set (mode 0666 less the umask):
    each is staged under a temporary name and all are renamed only once every one is on
    disk, so a full disk leaves the previous set whole and the error names the file that
    failed.
    """
    import matplotlib.pyplot as plt

    from gpugauge.report.charts import CHARTS

    pngs: dict[str, bytes] = {}
    images: dict[str, str] = {}
    files: dict[Path, bytes] = {}
    present = {m.spec.family for m in data.current.measurements}
    drawn = [(chart, data) for chart in CHARTS]
    drawn += [
        (chart, data.only(name))
        for name, family in registry().items()
        if name in present
        for chart in family.charts
    ]
    for chart, shown in drawn:
        if not chart.applies(shown):
            continue
        fig = chart.draw(shown)
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=110)
        plt.close(fig)
        pngs[chart.title] = buf.getvalue()
        png = out / f"{name}-{chart.name}.png"
        files[png] = pngs[chart.title]
        images[chart.title] = png.name
    files[out / f"{name}.md"] = render_markdown(data, images, out).encode()
    files[out / f"{name}.html"] = render_html(data, pngs, out).encode()
    return atomic_write_many(files)
