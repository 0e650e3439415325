"""Plain-text tables a person reads at the end of a run. Renderers take results, return text."""

from __future__ import annotations

from collections.abc import Collection, Sequence

from gpugauge.core.phrasing import plural
from gpugauge.measure.stats import Summary
from gpugauge.measure.timing import CLOCK_MOVED
from gpugauge.results.measurement import Comparison, Measurement, on_gpu
from gpugauge.results.metrics import METRICS, Kind
from gpugauge.results.verdicts import Basis, GateResult, MetricCheck, Verdict


def fmt_bytes(n: float | None) -> str:
    """Bytes in binary units: '10.9 GiB'."""
    if n is None:
        return "-"
    sign = "-" if n < 0 else ""
    n = abs(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{sign}{n:.0f} {unit}" if unit == "B" else f"{sign}{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def fmt_ms(ms: float) -> str:
    """Milliseconds to 4 significant digits."""
    return f"{ms:.4g}"


def render(headers: Sequence[str], rows: Sequence[Sequence[str]], title: str = "") -> str:
    """Fixed-width table; the first column left-aligned, the others right-aligned."""
    widths = [max(len(str(r[i])) for r in [headers, *rows]) for i in range(len(headers))]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(
            str(c).ljust(w) if i == 0 else str(c).rjust(w)
            for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        ).rstrip()

    out = [title] if title else []
    out += [line(headers), line(["-" * w for w in widths]), *(line(r) for r in rows)]
    return "\n".join(out)


def no_interval(n: int) -> str:
    """'n=1: no interval': too few samples for a CI or a CV, said instead of a zero-wide one."""
    return f"n={n}: no interval"


def fmt_ci(s: Summary) -> str:
    """'[1.98, 2.02]' in ms, or 'n=1: no interval' where the samples are too few for one."""
    return f"[{fmt_ms(s.ci_low)}, {fmt_ms(s.ci_high)}]" if s.has_interval else no_interval(s.n)


def fmt_cv(s: Summary) -> str:
    """'1.2%', or '-' where the samples are too few to show a spread (one sample: 0%)."""
    return f"{s.cv:.1%}" if s.has_interval else "-"


def unsampled_ids(measurements: Sequence[Measurement]) -> frozenset[str]:
    """Ids of the timed results with too few rounds for a CI (one round): no interval."""
    return frozenset(
        m.id for m in measurements if m.timing is not None and not m.summary.has_interval
    )


def notes_of(m: Measurement) -> str:
    """What a reader must know about a result's numbers: noisy, throttled, outliers, ...

    A result measured again says so, with its first measurement: the numbers shown are the
    second's, the one its verdict used.
    """
    notes = []
    if m.timing is not None:
        if not m.summary.has_interval:
            notes.append(no_interval(m.summary.n))
        if m.timing.noise:
            notes.append(m.timing.noise)
        if m.timing.throttled_rounds:
            notes.append(f"{m.timing.throttled_rounds} throttled")
        if m.summary.outliers:
            notes.append(plural(m.summary.outliers, "outlier"))
        if m.timing.settled is False:
            notes.append("warm-up did not settle")
        moved = m.timing.clock_moved
        if moved is not None and moved > CLOCK_MOVED:
            notes.append(f"clock moved {moved:.0%}")
    if m.energy and m.energy[0].short_window:
        notes.append("short energy window")
    if len(m.memory) > 1:
        notes.append(" + ".join(fmt_bytes(x.peak_allocated_bytes) for x in m.memory))
    notes += [a.describe() for a in m.earlier]  # this result is the re-measurement
    return ", ".join(notes)


def fmt_value(name: str, value: float | None) -> str:
    """One metric's value in its unit: bytes in binary units, others to 4 digits."""
    if value is None:
        return "-"
    return fmt_bytes(value) if METRICS[name].unit == "bytes" else f"{value:.4g}"


def value_metrics(measurements: Sequence[Measurement]) -> list[str]:
    """Single-value metrics any of these results hold, in registry order."""
    held = {name for m in measurements for name in m.readings()}
    return [n for n, m in METRICS.items() if m.kind is Kind.VALUE and n in held]


NOT_MEASURED = "not measured (--benchmark-disable)"


def run_label(measurements: Sequence[Measurement], smoke: bool = True) -> str:
    """What a run's numbers are: device-timed rounds, or host-timed rounds on a CPU.

    A run with no CUDA result says that its numbers are not GPU measurements, and, in the
    smoke profile (small shapes, a 5% target), that it is a smoke check of the suite.
    """
    if not on_gpu(measurements):
        what = "CPU smoke check" if smoke else "CPU run"
        return f"{what}: host-timed rounds; not GPU measurements"
    regimes = sorted({m.timing.regime for m in measurements if m.timing and m.timing.batches})
    return "device-timed rounds" + (f", {'/'.join(regimes)} regime" if regimes else "")


def noisy_ids(measurements: Sequence[Measurement]) -> frozenset[str]:
    """Ids of the results whose rounds are noisy (:attr:`Timing.noise`)."""
    return frozenset(m.id for m in measurements if m.timing is not None and m.timing.is_noisy)


def uncertainty(m: Measurement) -> str | None:
    """Why a change of this result against another run may be noise; None if none.

    Noisy rounds (:attr:`Timing.noise`), or host-timed ones: a shared CPU moves a result
    from run to run by more than its CI shows (unchanged code read 0.671x [0.627, 0.710]).
    """
    t = m.timing
    return None if t is None else t.noise or ("host-timed rounds" if t.host_timed else None)


def uncertain_ids(measurements: Sequence[Measurement]) -> frozenset[str]:
    """Ids with an :func:`uncertainty`: their verdicts may be hedged (:mod:`.noise`)."""
    return frozenset(m.id for m in measurements if uncertainty(m))


def drop_empty(
    headers: Sequence[str], rows: Sequence[Sequence[str]], droppable: Collection[str]
) -> tuple[list[str], list[list[str]]]:
    """Without the ``droppable`` columns in which no row has a value (only '-')."""
    keep = [
        i
        for i, h in enumerate(headers)
        if h not in droppable or any(str(r[i]) not in ("-", "") for r in rows)
    ]
    return [headers[i] for i in keep], [[r[i] for i in keep] for r in rows]


def results_table(
    measurements: Sequence[Measurement], unmeasured: Collection[str] = (), smoke: bool = True
) -> str:
    """One row per result: median and CI (ms), rounds, CV, then each value metric held.

    Results in ``unmeasured`` (ids run once under --benchmark-disable) say so instead of
    showing one cold round as a median with a zero-width CI. The title says what the
    numbers are (:func:`run_label`); the SM clock and power columns appear only where a
    result has them (a GPU with NVML).
    """
    names = value_metrics(measurements)
    rows = []
    for m in measurements:
        if m.id in unmeasured:
            timed = [NOT_MEASURED, "", "", ""]
        elif m.timing is None:
            timed = ["-"] * 4
        else:
            s = m.summary
            timed = [fmt_ms(s.median), fmt_ci(s), str(s.n), fmt_cv(s)]
        watts = sum(e.avg_power_w for e in m.energy) if m.energy else None
        rows.append(
            [
                m.id,
                *timed,
                fmt_clocks(m),
                *(fmt_value(n, m.value(n)) for n in names),
                "-" if watts is None else f"{watts:.0f}",
                notes_of(m),
            ]
        )
    headers = [
        "case",
        "median ms",
        "95% CI ms",
        "n",
        "CV",
        "SM MHz",
        *(_header(n) for n in names),
        "W",
        "notes",
    ]
    headers, rows = drop_empty(headers, rows, ("SM MHz", "W"))
    title = f"gpugauge results ({run_label(measurements, smoke)})"
    return render(headers, rows, title)


def one_line(m: Measurement) -> str:
    """A result in one progress line: median, CI, rounds, why timing stopped, flags.

    One round has no CI: the line says 'n=1: no interval' instead of a zero-wide one.
    """
    values = ", ".join(f"{k} {v:.4g} {METRICS[k].unit}" for k, v in m.values.items())
    if m.timing is None:
        return values or "recorded"
    s, t = m.summary, m.timing
    flags = [t.noise] if t.noise else []
    flags += [f"{t.throttled_rounds} throttled"] if t.throttled_rounds else []
    ci = f"[{s.ci_low:.4g}, {s.ci_high:.4g}] n={s.n}" if s.has_interval else no_interval(s.n)
    line = f"median {s.median:.4g} ms {ci} ({t.stop_reason})"
    line += f" [{', '.join(flags)}]" if flags else ""
    return f"{line}; {values}" if values else line


def fmt_clocks(m: Measurement) -> str:
    """SM clock while timed, MHz: '1530 [1440-1620]', the median over rounds and the range."""
    if m.timing is None:
        return "-"
    c = m.timing.clocks()
    if c["sm_median_mhz"] is None:
        return "-"
    if c["sm_min_mhz"] == c["sm_max_mhz"]:
        return f"{c['sm_median_mhz']:.0f}"
    return f"{c['sm_median_mhz']:.0f} [{c['sm_min_mhz']:.0f}-{c['sm_max_mhz']:.0f}]"


def _header(name: str) -> str:
    return {"memory": "peak mem", "energy": "J/iter"}.get(name, f"{name} {METRICS[name].unit}")


CACHE_MARK = " (cache)"
CACHE_NOTE = (
    "(cache): faster than the measured ceiling, so its data stayed in a cache; the "
    "ceilings (a large copy, a large matmul) do not bound it, and the share is no efficiency"
)


def fmt_share(share: float) -> str:
    """A share of a ceiling: '95%', or '131% (cache)' above 100%."""
    return f"{share:.0%}" + (CACHE_MARK if share > 1 else "")


def roofline_table(measurements: Sequence[Measurement]) -> str:
    """One row per op with a roofline: time, rates, bound, % of roofline, memory, energy.

    A share above 100% is marked '(cache)' and explained under the table: a CPU's ceilings
    are measured on data larger than its caches, so a cache-resident op can beat them.
    """
    rows = []
    for m in measurements:
        r = m.roofline
        if r is None:
            continue
        check = m.memory_check or {}
        e = m.joules_per_iter
        rows.append(
            [
                m.spec.id,
                fmt_ms(m.summary.median),
                f"{r.achieved_tflops:.3g}",
                f"{r.achieved_gbps:.4g}",
                r.bound,
                fmt_share(r.share),
                fmt_share(r.achieved_gbps / r.peak_gbps),
                fmt_bytes(m.peak_bytes),
                fmt_bytes(check.get("expected_bytes")),
                "-" if e is None else f"{e:.3g}",
            ]
        )
    headers = [
        "op",
        "median ms",
        "TFLOP/s",
        "GB/s",
        "bound",
        "% roofline",
        "% copy BW",
        "peak mem",
        "expected",
        "J/iter",
    ]
    text = render(headers, rows, "gpugauge roofline (against this run's measured ceilings)")
    return text + ("\n" + CACHE_NOTE if CACHE_MARK in text else "")


def comparison_table(comparisons: Sequence[Comparison], unmeasured: Collection[str] = ()) -> str:
    """One row per comparison: both medians, the speedup with its CI, memory saved.

    A comparison with a side in ``unmeasured`` (--benchmark-disable) shows no speedup; one
    with a noisy side says so in its notes: its speedup may be noise.
    """
    rows = []
    for c in comparisons:
        if {c.baseline.id, c.candidate.id} & set(unmeasured):
            labels = [c.baseline_label, c.candidate_label]
            rows.append([c.title, *labels, NOT_MEASURED, "", "", ""])
            continue
        base_mem, cand_mem = c.baseline.peak_bytes, c.candidate.peak_bytes
        frac = c.memory_saved_fraction
        rows.append(
            [
                c.title,
                f"{c.baseline_label} {fmt_ms(c.baseline.summary.median)}",
                f"{c.candidate_label} {fmt_ms(c.candidate.summary.median)}",
                fmt_speedup(c),
                "-" if base_mem is None else f"{fmt_bytes(base_mem)} -> {fmt_bytes(cand_mem)}",
                "-" if frac is None else f"{frac:+.1%}",
                comparison_note(c),
            ]
        )
    headers = [
        "comparison",
        "baseline ms",
        "candidate ms",
        "speedup [95% CI]",
        "peak memory",
        "mem saved",
        "notes",
    ]
    return render(headers, rows, "gpugauge comparisons (speedup = baseline / candidate time)")


def fmt_speedup(c: Comparison) -> str:
    """'1.503x [1.49, 1.52]', or '1.503x (n=1: no interval)' where a side has one round."""
    r = c.speedup
    fewest = min(c.baseline.summary.n, c.candidate.summary.n)
    if not (c.baseline.summary.has_interval and c.candidate.summary.has_interval):
        return f"{r.value:.3f}x ({no_interval(fewest)})"
    return f"{r.value:.3f}x [{r.ci_low:.3f}, {r.ci_high:.3f}]"


def comparison_note(c: Comparison) -> str:
    """How far to trust the speedup: 'from 8 paired blocks', else its noisy sides."""
    noisy = [
        label
        for m, label in ((c.baseline, c.baseline_label), (c.candidate, c.candidate_label))
        if m.timing is not None and m.timing.is_noisy
    ]
    return trust_note(len(c.paired_log_ratios), noisy)


def trust_note(paired_blocks: int, noisy: Sequence[str]) -> str:
    """'from 8 paired blocks'; else 'noisy: normal, swapped'; else ''.

    A noisy side's rounds missed their target CI. Pairs time both sides alike, so their
    noise is in the speedup's interval, and no side is named.
    """
    if paired_blocks:
        return f"from {paired_blocks} paired blocks"
    return f"noisy: {', '.join(noisy)}" if noisy else ""


def lacks_interval(check: MetricCheck | None, unsampled: bool = False) -> bool:
    """Whether a samples metric's ratio has no interval to show.

    A zero-wide interval has none. Nor has one the run's own samples made from a single
    round (``unsampled``); a check an A/B decided has its pairs' interval, whatever the
    run's rounds.
    """
    if check is None or check.from_none or METRICS[check.metric].kind is not Kind.SAMPLES:
        return False
    own = check.basis is not Basis.SAME_GPU_AB
    return (unsampled and own) or check.ci_low == check.ci_high


def fmt_ratio(check: MetricCheck | None, unsampled: bool = False) -> str:
    """'1.051x [1.049, 1.053]', '1.000x' for a single value, 'new 1e+08 bytes (reference 0)'.

    An interval at another level than 95% names it: '1.030x 99.8% [1.021, 1.040]' (a
    same-GPU A/B's). Time without an interval (:func:`lacks_interval`): 'no interval'.
    """
    if check is None:
        return "-"
    if check.from_none:  # no ratio to a reference of 0: the new amount
        return f"new {check.current:.4g} {METRICS[check.metric].unit} (reference 0)"
    if lacks_interval(check, unsampled):
        return f"{check.ratio:.3f}x (no interval)"
    if check.ci_low == check.ci_high:
        return f"{check.ratio:.3f}x"
    return f"{check.ratio:.3f}x {check.interval_text}"


def worst_first(results: Sequence[GateResult]) -> list[GateResult]:
    """Results ordered by verdict (regressions first), then by id."""
    order = list(Verdict)
    return sorted(results, key=lambda r: (order.index(r.verdict), r.id))


def fmt_verdict(r: GateResult, noisy: bool = False) -> str:
    """The verdict, shouted when it is a regression; '(noisy)' when a side's time was.

    A noisy (or host-timed) result's change within a few times the noise
    (:func:`~gpugauge.report.noise.hedged_ids`) never reads as a plain 'regressed'.
    """
    text = r.verdict.value.upper() if r.verdict is Verdict.REGRESSED else r.verdict.value
    return f"{text} (noisy)" if noisy and r.checks else text


def decided_by(r: GateResult) -> str:
    """The metrics whose own verdict is the result's (the worst), and their references."""
    return ", ".join(f"{c.metric} ({c.basis})" for c in r.checks if c.verdict is r.verdict) or "-"


def verdict_counts(results: Sequence[GateResult]) -> str:
    """'1 regressed, 35 unchanged' (empty when there are no results)."""
    return ", ".join(
        f"{sum(r.verdict is v for r in results)} {v.value}"
        for v in Verdict
        if any(r.verdict is v for r in results)
    )


def checked_metrics(results: Sequence[GateResult]) -> list[str]:
    """Metrics other than time that any of these verdicts checked, in registry order."""
    held = {c.metric for r in results for c in r.checks}
    return [n for n in METRICS if n != "time" and n in held]


def gate_table(
    results: Sequence[GateResult],
    missing: Sequence[str] = (),
    noisy: Collection[str] = (),
    unsampled: Collection[str] = (),
) -> str:
    """One row per gated benchmark (regressions first), counts in the title, then missing.

    ``decided by`` names the metrics that gave the verdict (a throughput can fail while the
    time is unchanged); results in ``noisy`` (:mod:`.noise`) have '(noisy)' beside
    their verdict, those in
    ``unsampled`` (one round: :func:`unsampled_ids`) 'no interval' beside their ratio.
    """
    names = checked_metrics(results)
    rows = []
    for r in worst_first(results):
        t = r.check("time")
        rows.append(
            [
                r.id,
                fmt_verdict(r, r.id in noisy),
                decided_by(r),
                fmt_ratio(t, r.id in unsampled),
                "-" if t is None else t.allowed,
                *(fmt_ratio(r.check(n)) for n in names),
                r.note,
            ]
        )
    counts = verdict_counts(results)
    headers = [
        "case",
        "verdict",
        "decided by",
        "time now/reference [95% CI]",
        "allowed",
        *names,
        "note",
    ]
    text = render(headers, rows, f"gpugauge gate: {counts or 'nothing gated'}")
    if missing:
        text += "\nin the baseline but not run: " + ", ".join(missing)
    return text
