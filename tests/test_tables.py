from __future__ import annotations

from typing import TYPE_CHECKING

from gpugauge.report.tables import fmt_bytes, render

if TYPE_CHECKING:
    from gpugauge.results.measurement import Measurement


def test_render_golden() -> None:
    text = render(["name", "ms"], [["relu", "0.08"], ["conv-fwd", "9.5"]], "title")
    assert text == ("title\nname        ms\n--------  ----\nrelu      0.08\nconv-fwd   9.5")


def test_fmt_bytes() -> None:
    assert fmt_bytes(None) == "-"
    assert fmt_bytes(512) == "512 B"
    assert fmt_bytes(1536) == "1.5 KiB"
    assert fmt_bytes(10.9 * 2**30) == "10.9 GiB"
    assert fmt_bytes(-2 * 2**20) == "-2.0 MiB"


def _one_round(bid: str, ms: float) -> Measurement:
    """A result timed once (a distributed case of one step): no CI, no CV."""
    from dataclasses import replace

    from gpugauge.measure.timing import Timing

    from .fakes import result

    m = result(bid, ms)
    timing = Timing((ms,), (ms,), "perf_counter", 1, 0.0, "fixed rounds", False)
    return replace(m, timing=timing)


def test_one_round_shows_no_interval_anywhere_a_ci_or_cv_is_shown() -> None:
    from gpugauge.regress.baselines import entry_of
    from gpugauge.regress.gate import compare
    from gpugauge.regress.tolerances import Tolerance
    from gpugauge.report.tables import (
        comparison_table,
        gate_table,
        notes_of,
        one_line,
        results_table,
        unsampled_ids,
    )
    from gpugauge.results.measurement import Comparison

    from .fakes import result

    one = _one_round("ddp", 584.5)
    assert one_line(one).startswith("median 584.5 ms n=1: no interval (fixed rounds)")
    assert "[584.5, 584.5]" not in one_line(one)
    assert notes_of(one) == "n=1: no interval"
    row = results_table([one]).splitlines()[-1].split()
    assert row[:8] == ["ddp", "584.5", "n=1:", "no", "interval", "1", "-", "n=1:"]
    assert "0.0%" not in results_table([one])
    speedup = comparison_table([Comparison("c", result("a"), one, "a", "b")]).splitlines()[-1]
    assert "(n=1: no interval)" in speedup
    judged = compare(entry_of(one), entry_of(_one_round("ddp", 584.5)), Tolerance())
    gated = gate_table([judged], unsampled=unsampled_ids([one])).splitlines()[-1]
    assert "1.000x (no interval)" in gated
    # even without the ids, a zero-wide interval of time never reads as exact
    assert "1.000x (no interval)" in gate_table([judged]).splitlines()[-1]
    many = result("many")
    assert "no interval" not in one_line(many) + notes_of(many)


def test_one_outlier_is_singular() -> None:
    from dataclasses import replace

    from gpugauge.core.phrasing import plural
    from gpugauge.measure.timing import Timing, TimingPolicy, stop_reason
    from gpugauge.report.tables import notes_of

    from .fakes import result

    rounds = (2.0, 2.0, 2.01, 2.0, 2.01, 2.0, 2.0, 9.0)
    m = replace(result("x"), timing=Timing(rounds, rounds, "perf_counter", 1, 0.0, "r", False))
    assert notes_of(m) == "1 outlier"
    assert plural(2, "run") == "2 runs"
    assert plural(1, "run") == "1 run"
    assert stop_reason([5.0], 1.0, TimingPolicy(rounds=1)) == ("fixed 1 round", False)
