"""Issue 49, build 3: only judged runs become references, and a few runs allow no more
than a baseline of them would.

A newcomer's five ungated trial runs (42% apart) became the host's reference and allowed
2.27x on the first gated night, where the baseline recorded after them allowed 1.055x.
``--gauge-first-nights 3`` on runs 20% and 37% apart allowed 6.72x (Student's t with one
degree of freedom), where ``baseline --from-history`` of the same runs would allow 1.74x.
"""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path

import pytest

from gpugauge.history.first_runs import first_runs
from gpugauge.history.host_checks import check_metric
from gpugauge.history.reference import reference_for
from gpugauge.history.schema import UPGRADES
from gpugauge.history.store import History
from gpugauge.history.synthetic import point
from gpugauge.judging.tracking import Tracker
from gpugauge.regress.baselines import BaselineStore, combine_runs, entry_of
from gpugauge.regress.gate import allowed_change
from gpugauge.results.verdicts import Basis, Verdict

from .fakes import CLASS, result
from .test_first_nights import _night

TRIALS = (2.0, 2.8, 2.1, 3.0, 2.0)  # a toy's trial runs on a busy laptop: 50% apart


def _ungated(root: Path, ms: float) -> None:
    """One session without --gauge-gate, as the gauge keeps it: no verdict."""
    tracker = Tracker(str(root / "h.sqlite"), "seed")
    m = result("gemm", ms)
    tracker.keep([(m, None)])
    tracker.append({"torch": "2.x"}, m.device_class)
    tracker.close()


def _gated(root: Path, ms: float) -> tuple[Verdict, str, float]:
    """One gated session: the verdict, what judged its time, and the change it allowed."""
    judged, _ = _night(root, result("gemm", ms), nights=0)
    time = judged.check("time")
    assert time is not None
    return judged.verdict, judged.references.get("time", time.basis.value), time.tolerance


def test_trial_runs_never_outrank_the_baseline_recorded_after_them(tmp_path: Path) -> None:
    for ms in TRIALS:
        _ungated(tmp_path, ms)
    runs = [[entry_of(result("gemm", ms))] for ms in (2.0, 2.02)]
    BaselineStore(tmp_path / "b").write(combine_runs(runs), {})
    baseline = allowed_change(0.015, combine_runs(runs)[0], "time")
    with History.open(tmp_path / "h.sqlite") as h:
        kept = h.points("gemm", "time", CLASS)
        assert len(kept) == 5  # kept, marked, and no reference
        assert not any(p.accepted for p in kept)
        assert all(p.result.verdict is None for p in kept)
    verdict, by, allowed = _gated(tmp_path, 2.0)
    assert verdict is Verdict.UNCHANGED
    assert by.startswith("new host (0 of 5 runs): class baseline")
    assert allowed <= baseline + 0.05  # the baseline's, plus the default host spread
    verdict, _, _ = _gated(tmp_path, 2.0 * 2)  # the first gated night, 2x slower
    assert verdict is Verdict.REGRESSED


def test_an_ungated_run_becomes_a_reference_when_accepted(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    from gpugauge.history.cli import main

    for ms in (2.0,) * 5:
        _ungated(tmp_path, ms)
    hist = str(tmp_path / "h.sqlite")
    assert main(["show", "gemm", "--history", hist]) == 0
    assert capsys.readouterr().out.count("- (ungated: no reference)") == 5
    with History.open(hist) as h:
        ids = [r.id for r in h.runs()]
    for run_id in ids:
        assert main(["accept", run_id, "--history", hist]) == 0
    assert main(["show", "gemm", "--history", hist]) == 0
    assert capsys.readouterr().out.count("- (ungated, accepted)") == 5
    verdict, by, _ = _gated(tmp_path, 2.0)
    assert verdict is Verdict.UNCHANGED
    assert by.startswith("host history: last 5 runs")


def test_a_host_window_never_allows_more_than_the_committed_baseline() -> None:
    wide = [point(i, "h1", ms) for i, ms in enumerate((2.0, 2.6, 2.0, 2.7, 2.1, 2.8, 2.0))]
    alone = reference_for(wide, "h1", 0.015)
    assert alone is not None
    assert alone.kind == "host"
    assert alone.allowed > 0.5
    capped = reference_for(wide, "h1", 0.015, baseline=(2.0, 0.055))
    assert capped is not None
    assert capped.kind == "host"
    assert capped.allowed == 0.055
    assert "capped at the class baseline's 5.5%" in capped.reason
    current = result("gemm", 2.1 * 2)
    from gpugauge.history.capture import metric_records

    (time,) = [x for x in metric_records(current) if x.metric == "time"]
    j = check_metric(time, "h1", wide, 0.015, baseline=(2.0, 0.055))
    assert j.verdict is Verdict.REGRESSED
    assert j.check is not None
    assert j.check.basis is Basis.HOST_HISTORY


@pytest.mark.parametrize(
    ("nights", "medians"),
    [(3, (2.0, 2.4, 2.74)), (2, (2.0, 2.4))],  # 20% and 37% apart; 20%
)
def test_first_nights_allow_what_a_baseline_of_the_same_runs_allows(
    tmp_path: Path, nights: int, medians: tuple[float, ...]
) -> None:
    for ms in medians:
        _night(tmp_path, result("gemm", ms), nights=nights)
    with History.open(tmp_path / "h.sqlite", read_only=True) as h:
        (entry,) = first_runs(h, CLASS, nights, BaselineStore(tmp_path / "none")).entries
    would = allowed_change(0.015, entry, "time")  # what baseline --from-history would allow
    judged, _first = _night(tmp_path, result("gemm", medians[-1]), nights=nights)
    time = judged.check("time")
    assert time is not None
    assert time.basis is Basis.HOST_HISTORY
    assert time.tolerance == pytest.approx(would)
    # one part of the note with its metric's reason: another metric's would not drop it
    (said,) = [p for p in judged.note.split("; ") if "--from-history would refuse" in p]
    assert said.startswith("time: ")
    slower, _ = _night(tmp_path, result("gemm", 2 * max(medians)), nights=nights)
    assert slower.verdict is Verdict.REGRESSED


def test_a_schema_3_history_stops_using_its_ungated_results(tmp_path: Path) -> None:
    """Old rows carry no mark: a result with no verdict was never judged (an ungated run,
    or a saved run imported without verdicts), so the upgrade stops using it."""
    path = tmp_path / "v3.sqlite"
    with contextlib.closing(sqlite3.connect(path)) as conn, conn:
        for step in (1, 2, 3):
            for statement in UPGRADES[step]:
                conn.execute(statement)
        conn.execute("UPDATE schema_version SET version = 3")
        for k, verdict in enumerate(("unchanged", None, "regressed")):
            conn.execute(
                f"INSERT INTO runs VALUES ('r{k}', '2026-11-2{k}T02:00:00.000000Z', 'GPU-a', "
                "'cls', NULL, NULL, NULL, '2.11', NULL, '{}', '[]', NULL, 'pytest')"
            )
            conn.execute(
                "INSERT INTO results VALUES (?, 'case-0', 1, 'layers', 'cls', NULL, NULL, '[]', "
                "?, ?, '', 'GPU-a', ?)",
                (f"r{k}", verdict, int(verdict != "regressed"), f"2026-11-2{k}T02:00:00.000000Z"),
            )
            conn.execute(
                "INSERT INTO metrics VALUES (?, 'case-0', 'cls', 1, 'time', 2.0, 1.9, 2.1, 8, "
                "'[2.0]', ?, 'host')",
                (f"r{k}", verdict),
            )
    with History.open(path) as h:
        assert [p.accepted for p in h.points("case-0", "time", "cls")] == [True, False, False]
