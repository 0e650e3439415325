"""The report's trends from the results history: a synthetic history with a known step.

A 3% step on night 10 (with torch 2.11 → 2.12 and a new commit) must appear as a change
point in the "changes" section, naming both, and as a vertical line in the trend chart at
that run; a flat history says it has no change points; a report without a history says
why it has no trend chart, and creates no history.
"""

from __future__ import annotations

import io
import json
import sqlite3
from dataclasses import replace
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import pytest
from matplotlib.axes import Axes
from matplotlib.collections import LineCollection
from matplotlib.colors import to_hex

from gpugauge.__main__ import main
from gpugauge.history.records import Point
from gpugauge.history.store import History
from gpugauge.history.synthetic import CASE, CLASS, FAMILY, Scenario, series
from gpugauge.regress.tolerances import load_tolerances
from gpugauge.report.data import ReportData
from gpugauge.report.document import collect
from gpugauge.report.trends import (
    LABELLED_STEPS,
    TREND_CHARTS,
    X_TICKS,
    Y_TICKS,
    TrendChart,
    changes_of,
    moved_most,
)

from .fakes import result, run_json
from .test_browser import browser  # noqa: F401  (the fixture)

STEP = Scenario(nights=20, step=0.03, step_night=10)
FLAT = Scenario(nights=12)


def _history(path: Path, points: list[Point]) -> Path:
    with History.open(path) as h:
        for p in points:
            h.append(p.run, [p.result])
    return path


def _current(root: Path, ids: tuple[str, ...] = (CASE,), run_id: str | None = None) -> Path:
    """A saved run of ``ids``; ``run_id``: the history's record of it."""
    storage = root / "runs"
    storage.mkdir(exist_ok=True)
    runs = [result(i, 2.06, family=FAMILY, device_class=CLASS) for i in ids]
    data = run_json(runs)
    if run_id is not None:
        data["gpugauge"]["history_run_id"] = run_id
    path = storage / "0001_now.json"
    path.write_text(json.dumps(data))
    return path


def _trends_of(root: Path, history: Path) -> ReportData:
    """What the report of ``history``'s newest run shows of its trends (no baselines)."""
    with sqlite3.connect(history) as db:
        (newest,) = db.execute("SELECT id FROM runs ORDER BY time_utc DESC LIMIT 1").fetchone()
    return collect(
        _current(root, run_id=newest),
        baseline_run=None,
        baselines=root,
        tolerances=load_tolerances(root / "none"),
        history=[],
        trend_history=str(history),
    )


def _change_lines(ax: Axes) -> dict[float, str]:
    """The change points a panel marks: x of each vertical line (in runs), its colour."""
    out = {}
    for lines in ax.collections:
        if isinstance(lines, LineCollection):
            for seg, color in zip(lines.get_segments(), lines.get_colors(), strict=False):
                if seg[0][0] == seg[-1][0]:
                    out[float(seg[0][0])] = to_hex(color)
    return out


def _report(root: Path, *extra: str) -> Path:
    out, baselines = root / "reports", root / "baselines"
    baselines.mkdir(exist_ok=True)
    args = ["report", "--current", str(_current(root)), "--storage", str(root / "runs")]
    assert main([*args, "--baselines-dir", str(baselines), "--out", str(out), *extra]) == 0
    return out


def test_a_step_is_a_change_point_in_the_changes_section(tmp_path: Path) -> None:
    history = _history(tmp_path / "h.sqlite", series(STEP, seed=1))
    out = _report(tmp_path, "--history", str(history))
    md = (out / "report.md").read_text()
    section = md.split("## Changes", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith(f"| {CASE}")]
    assert {row.split("|")[2].strip() for row in rows} == {"time"}
    scopes = {row.split("|")[3].strip() for row in rows}
    assert scopes == {"host h0", "host h1", f"class {CLASS}"}  # each host, and the class
    for row in rows:
        assert "torch 2.11.0 → 2.12.0" in row
        assert "commit c00900000000 → c01000000000" in row  # night 10's commit, the step
        assert "2026-01-11" in row  # night 10 of the synthetic nights (from 2026-01-01)
        ratio = float(row.split("|")[5].split("x")[0])
        assert 1.02 < ratio < 1.04
    assert (out / "report-trends-1.png").stat().st_size > 0
    assert "no trend chart" not in md
    html = (out / "report.html").read_text()
    assert "<h2>Changes</h2>" in html
    assert "torch 2.11.0 → 2.12.0" in html


@pytest.mark.parametrize(
    ("peaks", "size"),
    [
        ([0, 0, 0, 154_140_672, 154_140_672], "from 0 to 1.541e+08"),
        ([154_140_672] * 3 + [0, 0], "from 1.541e+08 to 0"),  # and back: no log of 0
    ],
)
def test_a_step_of_memory_from_or_to_zero_is_in_the_changes_section(
    tmp_path: Path, peaks: list[int], size: str
) -> None:
    # a layer made not in place: its extra memory goes from 0 to one output (run 63)
    from gpugauge.history.capture import metric_records, result_record, run_record
    from gpugauge.measure.memory import Memory

    with History.open(tmp_path / "h.sqlite") as h:
        for night, peak in enumerate(peaks):
            m = result(CASE, 2.0, family=FAMILY, device_class=CLASS)
            m = replace(m, memory=(Memory("cuda:0", peak, peak, 0, 0),))
            fp = {"git": {"commit": f"c{night:03d}".ljust(40, "0")}}
            run = run_record(fp, host="h1", device_class=CLASS, run_id=f"r{night}", argv=())
            h.append(replace(run, time=run.time.replace(day=night + 1)), [result_record(m)])
        assert [x.metric for x in metric_records(m)] == ["time", "memory"]
    out = _report(tmp_path, "--history", str(tmp_path / "h.sqlite"))
    section = (out / "report.md").read_text().split("## Changes", 1)[1].split("\n## ", 1)[0]
    (row,) = [line for line in section.splitlines() if "| memory" in line]
    assert size in row
    assert "commit c00200000000 → c00300000000" in row
    assert "commit c00300000000" in row.split("|")[4]  # the step's own, not the time trend's


def test_the_trend_chart_marks_the_change_point_and_the_allowed_band(tmp_path: Path) -> None:
    history = _history(tmp_path / "h.sqlite", series(STEP, seed=1))
    data = _trends_of(tmp_path, history)
    (step,) = [c for c in data.changes if c.scope.startswith("class")]
    pts = data.trends[CASE]
    assert pts[step.index].run.id == step.run_id
    assert step.run_id.startswith("n010-")
    ref = data.bands[CASE]
    assert ref.kind == "host"  # the latest run's host has its own history by then
    fig = TrendChart(0).draw(data)
    try:
        (ax,) = [a for a in fig.axes if a.get_visible()]
        assert step.index - 0.5 in _change_lines(ax)
        horizontal = sorted(
            float(ln.get_ydata()[0])
            for ln in ax.lines
            if len(set(ln.get_ydata())) == 1 and ln.get_linestyle() == "--"
        )
        lo, hi = ref.median * (1 - ref.allowed), ref.median * (1 + ref.allowed)
        assert horizontal == pytest.approx([lo, hi])
        hosts = {t.get_text() for t in fig.legends[0].get_texts()}
        assert hosts == {"h0", "h1"}
    finally:
        plt.close(fig)


def test_the_allowed_band_never_goes_below_zero_ms(tmp_path: Path) -> None:
    """Issue 38: a reference that allows 2.03x (a baseline whose runs lay far apart) drew
    its allowed band down to -1.03 x the median. A time is positive: the band stops at 0,
    and the panel says the allowance has no lower bound."""
    history = _history(tmp_path / "h.sqlite", series(STEP, seed=1))
    data = _trends_of(tmp_path, history)
    wide = replace(data.bands[CASE], allowed=1.03)
    data = replace(data, bands={CASE: wide})
    fig = TrendChart(0).draw(data)
    try:
        (ax,) = [a for a in fig.axes if a.get_visible()]
        dashed = [
            float(ln.get_ydata()[0])
            for ln in ax.lines
            if len(set(ln.get_ydata())) == 1 and ln.get_linestyle() == "--"
        ]
        assert dashed == pytest.approx([0.0, wide.median * 2.03])
        spans = [p.get_extents() for p in ax.patches]
        assert spans
        lowest = min(ax.transData.inverted().transform(b)[0][1] for b in spans)
        assert lowest >= -1e-9
        assert "no lower bound" in ax.get_title()
    finally:
        plt.close(fig)


def test_a_flat_history_says_it_has_no_change_points(tmp_path: Path) -> None:
    history = _history(tmp_path / "h.sqlite", series(FLAT, seed=2))
    md = (_report(tmp_path, "--history", str(history)) / "report.md").read_text()
    runs = 2 * FLAT.nights
    assert f"## Changes\n\nno change points in {runs} runs of 1 case (history {history})" in md


def test_without_the_default_history_the_report_says_why_and_creates_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("GPUGAUGE_HISTORY", raising=False)
    default = tmp_path / "runs" / "gpugauge-history.sqlite"
    out = _report(tmp_path)
    md = (out / "report.md").read_text()
    assert f"- no trend chart: no results history at {default}" in md
    assert "## Changes" not in md
    assert not list(out.glob("*trends*"))
    assert not default.exists()
    assert "no trend chart: no results history" in (out / "report.html").read_text()


def test_a_default_history_that_is_no_history_is_noted_and_left_as_it_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An empty file where the default history would be is not made a database."""
    monkeypatch.delenv("GPUGAUGE_HISTORY", raising=False)
    _current(tmp_path)
    default = tmp_path / "runs" / "gpugauge-history.sqlite"
    default.touch()
    md = (_report(tmp_path) / "report.md").read_text()
    assert "no trend chart: history" in md
    assert "not a gpugauge history" in md
    assert default.read_bytes() == b""
    assert sorted(p.name for p in default.parent.iterdir()) == [
        "0001_now.json",
        "gpugauge-history.sqlite",
    ]


@pytest.mark.parametrize(
    ("history", "said"),
    [
        ("missing/typo.sqlite", "no such file"),
        ("empty.sqlite", "not a gpugauge history"),
        ("notes.txt", "not a SQLite database"),
        ("postgresql://x@127.0.0.1:1/db?connect_timeout=2", "cannot connect"),
        ("mysql://x/y", "unsupported scheme"),
    ],
)
@pytest.mark.parametrize("how", ["--history", "$GPUGAUGE_HISTORY"])
def test_a_named_history_that_cannot_be_read_is_one_line_and_writes_nothing(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    history: str,
    said: str,
    how: str,
) -> None:
    (tmp_path / "empty.sqlite").touch()
    (tmp_path / "notes.txt").write_text("not a database\n" * 50)
    target = history if "://" in history else str(tmp_path / history)
    before = {p: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()}
    out, baselines = tmp_path / "reports", tmp_path / "baselines"
    baselines.mkdir()
    argv = ["report", "--current", str(_current(tmp_path)), "--storage", str(tmp_path / "runs")]
    argv += ["--baselines-dir", str(baselines), "--out", str(out)]
    monkeypatch.delenv("GPUGAUGE_HISTORY", raising=False)
    if how == "--history":
        argv += ["--history", target]
    else:
        monkeypatch.setenv("GPUGAUGE_HISTORY", target)
    assert main(argv) == 2
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert err.startswith(f"gpugauge report: {how} "), err
    assert said in err
    assert "\n" not in err
    assert "wrote" not in captured.out
    assert not out.exists()
    assert {p: p.read_bytes() for p in before} == before
    assert not (tmp_path / "missing").exists()


def test_the_default_history_is_under_storage(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("GPUGAUGE_HISTORY", raising=False)
    _current(tmp_path)
    _history(tmp_path / "runs" / "gpugauge-history.sqlite", series(STEP, seed=1))
    assert "## Changes" in (_report(tmp_path) / "report.md").read_text()


def test_a_history_without_the_runs_cases_says_so(tmp_path: Path) -> None:
    other = [replace(p, result=replace(p.result, bench_id="other")) for p in series(FLAT, 3)]
    history = _history(tmp_path / "h.sqlite", other)
    md = (_report(tmp_path, "--history", str(history)) / "report.md").read_text()
    assert f"no trend chart: history {history} holds none of this run's 1 timed case" in md


def test_an_empty_history_option_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["report", "--history", ""])
    assert exit_.value.code == 2
    assert "--history" in capsys.readouterr().err.strip().splitlines()[-1]


def test_the_cases_that_moved_most_come_first_twelve_a_figure() -> None:
    def case(name: str, scenario: Scenario) -> list[Point]:
        return [replace(p, result=replace(p.result, bench_id=name)) for p in series(scenario, 4)]

    trends = {f"flat-{i:02d}": tuple(case(f"flat-{i:02d}", FLAT)) for i in range(13)}
    trends["stepped"] = tuple(case("stepped", STEP))
    changes = changes_of(trends)
    assert {c.bench_id for c in changes} == {"stepped"}
    assert moved_most(trends, changes)[0] == "stepped"
    data: Any = type("D", (), {"trends": trends, "changes": changes})()
    assert [c.applies(data) for c in TREND_CHARTS] == [True, True, False, False]


def test_the_trend_report_renders_in_a_browser(
    browser: Any,  # noqa: F811
    tmp_path: Path,
) -> None:
    history = _history(tmp_path / "h.sqlite", series(STEP, seed=1))
    page = _report(tmp_path, "--history", str(history)) / "report.html"
    browser.get(page.as_uri())
    images = browser.execute_script(
        "return Array.from(document.images).map(i => ({alt: i.alt, width: i.naturalWidth}))"
    )
    assert any(i["alt"].startswith("Trends across runs") for i in images), images
    assert all(i["width"] > 0 for i in images), images
    headings = browser.execute_script(
        "return Array.from(document.querySelectorAll('h2')).map(h => h.textContent)"
    )
    assert "Changes" in headings
    errors = [e for e in browser.get_log("browser") if e.get("level") == "SEVERE"]
    assert not errors, errors


def test_one_run_draws_no_trend_and_says_why_as_the_history_chart_does(tmp_path: Path) -> None:
    one = [p for p in series(FLAT, seed=2) if p.run.id == series(FLAT, seed=2)[0].run.id]
    history = _history(tmp_path / "h.sqlite", one)
    out = _report(tmp_path, "--history", str(history))
    md = (out / "report.md").read_text()
    missing = md.split("## Charts not drawn", 1)[1]
    assert "no history chart: it needs 2 or more saved runs in --storage; found 1" in missing
    assert "no trend chart: it needs 2 or more runs of a case in the history; found 1 run" in md
    assert not list(out.glob("*trends*"))
    assert "1 runs" not in md


def test_trend_panels_count_runs_in_whole_numbers(tmp_path: Path) -> None:
    two = [p for p in series(FLAT, seed=2) if p.host == series(FLAT, seed=2)[0].host][:2]
    history = _history(tmp_path / "h.sqlite", two)
    data = _trends_of(tmp_path, history)
    fig = TrendChart(0).draw(data)
    try:
        (ax,) = [a for a in fig.axes if a.get_visible()]
        fig.canvas.draw()
        ticks = [t for t in ax.get_xticks() if ax.get_xlim()[0] <= t <= ax.get_xlim()[1]]
        assert ticks
        assert all(float(t).is_integer() for t in ticks)
        assert ax.get_title().endswith("2 runs")
    finally:
        plt.close(fig)


FOUR_HOSTS = (("h0", -0.02, 0), ("h1", 0.0, 0), ("h2", 0.01, 0), ("h3", 0.03, 0))


@pytest.mark.parametrize(
    "scenario",
    [
        Scenario(hosts=FOUR_HOSTS, nights=12),
        # 4 times the runs; each host and the class step, then drift
        Scenario(hosts=FOUR_HOSTS, nights=48, step=0.08, step_night=16, drift=0.01, drift_night=32),
    ],
    ids=["12-nights-flat", "48-nights-stepped"],
)
def test_a_trend_panel_costs_the_same_whatever_its_runs_and_change_points(
    tmp_path: Path, scenario: Scenario
) -> None:
    """Issue 38: a report of years of nights spent most of its time drawing. A panel draws
    one line per host, every host's CI band in one collection and every change point in
    another (one artist each, not one per host or per step), at most LABELLED_STEPS
    labels, and a few ticks: its cost is the panel's, not its points' or steps'."""
    base = _trends_of(tmp_path, _history(tmp_path / "h.sqlite", series(STEP, seed=1)))
    trends = {CASE: tuple(series(scenario, seed=3))}
    data = replace(base, trends=trends, changes=changes_of(trends))
    assert len({c.run_id for c in data.changes}) >= (2 if scenario.step else 0)
    fig = TrendChart(0).draw(data)
    try:
        fig.savefig(io.BytesIO(), format="png", dpi=110)
        (ax,) = [a for a in fig.axes if a.get_visible()]
        hosts = len(FOUR_HOSTS)
        assert len(ax.lines) == hosts + 2  # each host's medians; the allowed band's edges
        assert len(ax.patches) == 1  # the allowed band
        assert len(ax.collections) == 1 + bool(data.changes)  # CI bands; change points
        assert len(ax.texts) <= LABELLED_STEPS
        assert len(_change_lines(ax)) == len({c.run_id for c in data.changes})
        assert len(ax.xaxis.majorTicks) <= X_TICKS + 3  # a tick or two beyond the view
        assert len(ax.yaxis.majorTicks) <= Y_TICKS + 3
    finally:
        plt.close(fig)


def test_the_allowed_band_is_the_reference_that_judged_the_reported_run() -> None:
    """Host A's run among host B's noisier ones, and B ran after it: the band was B's newest
    run's reference, ±13.9% around 2.16 ms, beside a table that allowed 1.087x (a review,
    2026-12-07). A run the history does not hold is placed by its date and host."""
    from datetime import timedelta

    from gpugauge.history.host_checks import check_metric
    from gpugauge.history.synthetic import point, synthetic_run
    from gpugauge.report.trends import run_reference
    from gpugauge.results.runs import SavedRun

    before = []
    for n in range(6):
        before.append(point(n, "hostA", 2.00 * (1 + 0.002 * (-1) ** n)))
        before.append(point(n, "hostB", 2.20 * (1 + 0.02 * (-1) ** n)))
    mine = point(6, "hostA", 2.07)
    later = point(6, "hostB", 2.2)
    later = replace(later, run=synthetic_run(6, "hostB", minute=30))
    later = replace(later, run=replace(later.run, id="n006-hostB-late"))
    history = [*before, mine, later]
    judged = check_metric(mine.metric, "hostA", before, 0.015).reference
    assert judged is not None
    run = SavedRun(Path("run.json"), "run", [], run_id=mine.run.id)
    assert run_reference(history, run, 0.015, None) == judged
    unheld = SavedRun(
        Path("run.json"), "run", [], {"host": "hostA"}, time=mine.run.time + timedelta(minutes=1)
    )
    assert run_reference([*before, later], unheld, 0.015, None) == judged
