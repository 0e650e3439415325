"""The report's view of the results history: trends per case, change points, allowed bands.

:func:`load_trends` reads, for every timed case of the current run, the case's time on its
device class over every run and host of the history (:meth:`History.points`), its change
points (:func:`~gpugauge.history.changepoints.changes_of_cases`, per host and over the
class) and the reference that judged it in this run (:func:`run_reference`: the runs
before it, with the committed class baseline and the case's tolerance, as a gated run
judges), and, in the same read, the steps of the run's exact metrics (memory, counts).
:class:`TrendChart` draws them as small multiples, the cases that moved most first;
:func:`changes_table` lists the change points. Nothing here names a family.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from gpugauge.core.phrasing import plural
from gpugauge.history.changepoints import RECENT_RUNS, ChangePoint, changes_of_cases
from gpugauge.history.host_checks import baseline_reference
from gpugauge.history.records import HistoryError, Point
from gpugauge.history.reference import BaselineRef, Reference, reference_for
from gpugauge.history.store import History
from gpugauge.history.targets import is_local
from gpugauge.regress.baselines import BaselineStore
from gpugauge.regress.tolerances import Tolerances
from gpugauge.results.metrics import METRICS
from gpugauge.results.runs import SavedRun

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from gpugauge.report.data import ReportData

METRIC = "time"  # what the trends show: the median time of a round, ms
PER_FIGURE = 12  # cases per trend figure (small multiples, 3 a row)
FIGURES = 4  # trend figures at most: the 48 cases that moved most
# A trend, like the history chart of saved runs, needs two runs: one run is one dot on an
# axis of no length, which shows nothing of how a case moved.
MIN_RUNS = 2
MARKED_RUNS = 60  # a host's runs in one panel drawn with a marker each; more: a line only
LABELLED_STEPS = 4  # change points of a panel labelled with their size, the largest first


def load_trends(
    target: str, run: SavedRun, tolerances: Tolerances, baselines: Path
) -> tuple[dict[str, tuple[Point, ...]], dict[str, Reference], list[ChangePoint], str]:
    """Per case of ``run``: time points, the reference that judged it, exact metrics' steps; a note.

    Exact metrics (peak memory, counts) get no trend chart (their value is exact and the
    gate's check of them is too), but a step in them is news: a layer made not in place
    moved its memory from 0 to one output. The note says why
    there is no trend (no history at ``target``, one that cannot be read, or one holding
    none of the run's timed cases); it is empty when trends were found.
    """
    if is_local(target) and not Path(target).exists():
        return (
            {},
            {},
            [],
            f"no trend chart: no results history at {target} (each measured pytest run "
            f"appends to it; --history PATH|URL names another)",
        )
    store = BaselineStore(baselines)
    points: dict[str, tuple[Point, ...]] = {}
    bands: dict[str, Reference] = {}
    steps: list[ChangePoint] = []
    timed = [m for m in run.measurements if m.timing is not None]
    try:
        with History.open(target, read_only=True) as h:  # never created or upgraded
            where = h.where
            exact = [name for name in h.metrics() if name in METRICS and METRICS[name].exact]
            # each host's recent runs of every case, in one read: a chart and a search of
            # years would be slow and unreadable
            recent = h.recent_points(
                [METRIC, *exact], RECENT_RUNS, [m.id for m in run.measurements]
            )
            for m in timed:
                found = tuple(recent.get((m.id, m.device_class, METRIC), ()))
                if not found:
                    continue
                points[m.id] = found
                floor = tolerances.for_benchmark(m.spec.family, m.id)[METRIC]
                entry = (store.load(m.device_class, m.spec.family) or {}).get(m.id)
                base = baseline_reference(entry, METRIC, floor) if entry else None
                ref = run_reference(found, run, floor, base)
                if ref is not None:
                    bands[m.id] = ref
            # the history's exact metrics, also those this run did not read
            held = [
                recent.get((m.id, m.device_class, n), []) for m in run.measurements for n in exact
            ]
            steps = [c for found in changes_of_cases(held) for c in found]
    except (HistoryError, OSError) as err:
        return {}, {}, [], f"no trend chart: {err}"
    if not points:
        return (
            {},
            {},
            steps,
            f"no trend chart: history {where} holds none of this run's "
            f"{plural(len(timed), 'timed case')}",
        )
    return points, bands, steps, ""


def run_reference(
    points: Sequence[Point], run: SavedRun, floor: float, baseline: BaselineRef | None
) -> Reference | None:
    """The reference that judged ``run``: made from the runs before it, on its host.

    The history's record of the run (its id) places it; a run the history does not hold
    is placed by its date, and one without a date comes after every point. The newest
    point's, as this was, drew one host's band around another's run, or a later run's
    around an older one (a review, 2026-12-07). ``points`` are the report's window, each
    host's :data:`RECENT_RUNS` newest: a run near the window's start has fewer runs before
    it there than judged it, and its band may be the class's.
    """
    at = next((k for k, p in enumerate(points) if p.run.id == run.run_id), None)
    if at is not None:
        return reference_for(points[:at], points[at].host, floor, baseline=baseline)
    host = run.host
    if host is None:
        return None
    before = [p for p in points if run.time is None or p.run.time < run.time]
    return reference_for(before, host, floor, baseline=baseline)


def allowed_band(ref: Reference) -> tuple[float, float]:
    """The times a reference lets pass, ms: its median ∓ its allowed change, never below 0.

    A time is positive: an allowance of 100% or more (a baseline whose runs lie far
    apart: 49% apart allowed 2.03x) has no lower bound but 0.
    """
    return ref.median * max(0.0, 1 - ref.allowed), ref.median * (1 + ref.allowed)


def fmt_allowed(ref: Reference) -> str:
    """'±1.5%', or '+103%' where the allowance leaves no lower bound."""
    return f"±{ref.allowed:.1%}" if ref.allowed < 1 else f"+{ref.allowed:.0%}, no lower bound"


def changes_of(
    trends: Mapping[str, Sequence[Point]], more: Sequence[ChangePoint] = ()
) -> tuple[ChangePoint, ...]:
    """Every change point of every case (``more``: found elsewhere), largest step first."""
    found = [c for steps in changes_of_cases(list(trends.values())) for c in steps] + list(more)
    return tuple(sorted(found, key=lambda c: -c.magnitude))


def runs_in(trends: Mapping[str, Sequence[Point]]) -> int:
    """How many distinct runs the trends hold."""
    return len({p.run.id for pts in trends.values() for p in pts})


def charted(trends: Mapping[str, Sequence[Point]]) -> dict[str, Sequence[Point]]:
    """The cases whose trend is drawn: those with :data:`MIN_RUNS` or more runs."""
    return {k: pts for k, pts in trends.items() if _runs_reach(pts, MIN_RUNS)}


def _runs_reach(points: Sequence[Point], runs: int) -> bool:
    """Whether ``points`` hold ``runs`` distinct runs: read until they do, not every run."""
    seen: set[str] = set()
    for p in points:
        seen.add(p.run.id)
        if len(seen) >= runs:
            return True
    return False


def too_few_runs(trends: Mapping[str, Sequence[Point]], source: str) -> str:
    """Why no trend chart is drawn although the history holds the run's cases; or ''."""
    if not trends or charted(trends):
        return ""
    return (
        f"no trend chart: it needs {MIN_RUNS} or more runs of a case in the history; found "
        f"{plural(runs_in(trends), 'run')} (history {source}; each measured pytest run "
        "appends to it)"
    )


def moved_most(trends: Mapping[str, Sequence[Point]], changes: Sequence[ChangePoint]) -> list[str]:
    """Case ids, those that moved most first.

    By their largest change point, then by the span of their medians (max/min); then id.
    """
    largest: dict[str, float] = {}
    for c in changes:
        if c.metric == METRIC:
            largest[c.bench_id] = max(largest.get(c.bench_id, 0.0), c.magnitude)

    def score(case: str) -> tuple[float, float, str]:
        medians = [p.median for p in trends[case] if p.median > 0]
        span = math.log(max(medians) / min(medians)) if medians else 0.0
        return (-largest.get(case, 0.0), -span, case)

    return sorted(trends, key=score)


def changes_table(data: ReportData) -> tuple[list[str], list[list[str]], str]:
    """Headers, rows and the line shown when there are none, of the "changes" section."""
    headers = [
        "case",
        "metric",
        "host or class",
        "when (UTC, run, commit)",
        "after / before [95% CI]",
        "before → after",
        "runs before/after, p",
        "what changed",
    ]
    rows = []
    for c in data.changes:
        rows.append(
            [
                c.bench_id,
                c.metric,
                c.scope,
                f"{c.time:%Y-%m-%d %H:%M}, run {c.run_id[:8]}, commit {(c.commit or '-')[:12]}",
                c.size(),
                f"{c.before:.4g} → {c.after:.4g} {METRICS[c.metric].unit}",
                f"{c.n_before}/{c.n_after}, p={c.p_value:.1g}",
                "; ".join(c.changes) or "no recorded difference",
            ]
        )
    empty = (
        f"no change points in {plural(runs_in(data.trends), 'run')} of "
        f"{plural(len(data.trends), 'case')} "
        f"(history {data.trend_source})"
    )
    return headers, rows, empty


MARKERS = "osD^v<>PX*"
SERIES_COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf")


def _short(host: str) -> str:
    return host if len(host) <= 16 else host[:15] + "…"


class TrendChart:
    """One figure of small multiples: up to :data:`PER_FIGURE` cases, page ``page``.

    Per case, each host's run medians (its own colour and marker) with their 95% CI as a
    band, in run order (oldest left); the allowed band of the reference that judged the
    reported run (its median ± allowed, shaded); change points as vertical lines (red:
    slower, blue: faster; solid: found on one host, dashed: over the class), the
    :data:`LABELLED_STEPS` largest labelled with their size.
    """

    def __init__(self, page: int) -> None:
        self.page = page
        self.name = f"trends-{page + 1}"
        self.title = (
            f"Trends across runs, part {page + 1}: median time per run with its 95% CI band "
            "per host; shaded: allowed band of the reference that judged this run; vertical "
            "lines: change points (red slower, blue faster; dashed: over the class)"
        )

    def applies(self, data: ReportData) -> bool:
        """Needs more than ``page`` x 12 of the run's cases with :data:`MIN_RUNS` runs each."""
        return len(charted(data.trends)) > self.page * PER_FIGURE

    def draw(self, data: ReportData) -> Figure:
        """Small multiples, three a row; one legend of hosts, one label of each axis.

        Drawing cost is per panel, whatever the points: a panel's marks are a few artists
        (:func:`_draw_case`) and its layout is fixed, never measured from its texts.
        """
        from matplotlib.figure import Figure
        from matplotlib.lines import Line2D

        order = moved_most(charted(data.trends), data.changes)
        cases = order[self.page * PER_FIGURE : (self.page + 1) * PER_FIGURE]
        hosts = sorted({p.host for c in cases for p in data.trends[c]})
        style = {
            h: (SERIES_COLORS[i % len(SERIES_COLORS)], MARKERS[i % len(MARKERS)])
            for i, h in enumerate(hosts)
        }
        cols = min(3, len(cases))
        rows = math.ceil(len(cases) / cols)
        width, height = max(4.2 * cols, 6.0), 2.6 * rows + 0.9
        # not pyplot's: a figure no window registry holds; fixed margins (inches), since
        # tight_layout measured every tick label of 12 panels (half the drawing time)
        fig = Figure(figsize=(width, height))
        fig.subplots_adjust(
            left=0.7 / width,
            right=1 - 0.15 / width,
            bottom=(0.45 + 0.45) / height,
            top=1 - (0.35 + 0.4) / height,
            wspace=0.28,
            hspace=0.9 / 2.6,
        )
        axes = fig.subplots(rows, cols, squeeze=False)
        for ax, case in zip(axes.flat, cases, strict=False):
            _draw_case(ax, case, data, style)
        for ax in list(axes.flat)[len(cases) :]:
            ax.set_visible(False)
        handles = [
            Line2D([], [], color=c, marker=m, ls="-", ms=4, label=_short(h))
            for h, (c, m) in style.items()
        ]
        fig.legend(handles=handles, loc="lower center", ncol=min(5, len(handles)), fontsize=7)
        first = self.page * PER_FIGURE + 1
        fig.suptitle(
            f"cases {first}-{first + len(cases) - 1} of {len(order)}, moved most first", fontsize=8
        )
        # one label per axis for every panel: each panel's own cost a text and a layout
        fig.supxlabel("run, oldest first", fontsize=7, y=0.45 / height)
        fig.supylabel("median time of a run, ms", fontsize=7, x=0.08 / width)
        return fig


X_TICKS = 5  # at most this many intervals between ticks on a panel's axis of runs
Y_TICKS = 4  # and on its axis of times
NICE = (1, 2, 2.5, 5, 10)  # tick steps, as matplotlib's default locator takes them


def _draw_case(ax: Axes, case: str, data: ReportData, style: Mapping[str, tuple[str, str]]) -> None:
    """One case's panel: hosts' medians and CI bands, the allowed band, change points.

    A few artists whatever the points and steps: one line per host, every host's CI band
    in one collection, every change point in one collection (and at most
    :data:`LABELLED_STEPS` labels); few ticks; the title placed, not measured.
    """
    from matplotlib.collections import PolyCollection
    from matplotlib.ticker import MaxNLocator

    pts = data.trends[case]
    x_of = {p.run.id: i for i, p in enumerate(pts)}
    bands, faces = [], []
    for host, (color, marker) in style.items():
        mine = [(x_of[p.run.id], p) for p in pts if p.host == host]
        if not mine:
            continue
        xs = [x for x, _ in mine]
        low = [(x, p.metric.ci_low) for x, p in mine]
        bands.append(low + [(x, p.metric.ci_high) for x, p in reversed(mine)])
        faces.append(color)
        # a marker per run where they can be told apart; beyond that a line (and far less
        # to draw)
        dots = {"marker": marker, "ms": 3.5} if len(mine) <= MARKED_RUNS else {}
        ax.plot(xs, [p.median for _, p in mine], color=color, lw=1, **dots)
    ax.add_collection(PolyCollection(bands, facecolors=faces, alpha=0.2, lw=0, zorder=1))
    ref = data.bands.get(case)
    if ref is not None:
        lo, hi = allowed_band(ref)
        ax.axhspan(lo, hi, color="#2ca02c", alpha=0.08, lw=0)
        for y in (lo, hi):
            ax.axhline(y, color="#2ca02c", ls="--", lw=0.7)
    on_top = ax.get_xaxis_transform()  # x in runs, y from the panel's bottom (0) to top (1)
    steps: list[tuple[float, str, str]] = []  # x, colour, line style
    labelled: set[int] = set()
    for c in data.changes:  # largest first: where several share a run, its label is shown
        if c.bench_id != case or c.run_id not in x_of:
            continue
        x = x_of[c.run_id]
        timed = c.metric == METRIC  # another metric's step (memory) is marked, grey, by name
        color = ("#c0392b" if c.ratio > 1 else "#2471a3") if timed else "#7f7f7f"
        dashes = ("-" if c.scope.startswith("host") else "--") if timed else ":"
        steps.append((x - 0.5, color, dashes))
        if x not in labelled and len(labelled) < LABELLED_STEPS:
            labelled.add(x)
            label = f" {c.mark()}" if timed else f" {c.metric} {c.mark()}"
            ax.text(x - 0.5, 1, label, transform=on_top, fontsize=6, color=color, va="top")
    if steps:
        xs, colors, dashes = (list(v) for v in zip(*steps, strict=True))
        ax.vlines(xs, 0, 1, colors=colors, linestyles=dashes, lw=1.2, transform=on_top)
    title = case if len(case) <= 46 else case[:45] + "…"
    kind = f"; allowed {fmt_allowed(ref)} ({ref.kind})" if ref is not None else ""
    # y given: the title sits above the panel, where nothing is drawn, and is not moved
    # clear of tick labels measured one by one
    ax.set_title(f"{title}\n{plural(len(x_of), 'run')}{kind}", fontsize=7, y=1.0)
    ax.tick_params(labelsize=6)
    ax.set_xlim(-0.5, max(len(pts) - 0.5, 0.5))
    ax.xaxis.set_major_locator(  # runs are whole
        MaxNLocator(nbins=X_TICKS, steps=NICE, integer=True, min_n_ticks=1)
    )
    ax.yaxis.set_major_locator(MaxNLocator(nbins=Y_TICKS, steps=NICE))
    ax.ticklabel_format(axis="y", useOffset=False)  # ms as they are: no offset text to place
    for axis, at in ((ax.xaxis, (0.5, 0.0)), (ax.yaxis, (0.0, 0.5))):
        axis.set_label_coords(*at)  # unlabelled (the figure's labels): never placed by measure


TREND_CHARTS = tuple(TrendChart(page) for page in range(FIGURES))
"""The trend figures, each drawn only when the history holds enough of the run's cases."""
