"""What one step writes, the next step reads (issue 49).

The gate, the history and the baseline command write what ``load_run`` (confirm's reader),
the report, ``history import`` and ``baseline`` read. A value one of them can write must
never be refused by another: a peak of 0 B that became 100 MiB wrote ``"ratio": Infinity``
and every later command refused the run, and the autosaved copy stopped every report.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from gpugauge.__main__ import main as gpugauge_main
from gpugauge.history.cli import main as history_main
from gpugauge.history.store import History
from gpugauge.measure.memory import Memory
from gpugauge.regress.baselines import BaselineStore, Entry, entry_of
from gpugauge.regress.gate import Gate, compare
from gpugauge.regress.tolerances import Tolerance, Tolerances
from gpugauge.results.runs import load_run
from gpugauge.results.verdicts import GateResult, MetricCheck, Verdict
from tests.fakes import CLASS, first_report, result, run_json

MiB = 2**20


def _peak(bid: str, peak: int, ms: float = 2.0):
    return result(bid, ms, memory=(Memory(device="cuda:0", peak_allocated_bytes=peak),))


def _gated_run(tmp_path: Path, name: str, peaks: dict[str, tuple[int, int]]) -> Path:
    """A run of results gated against baselines of their own ids: {id: (baseline, current)}."""
    store = BaselineStore(tmp_path / "baselines")
    store.write([entry_of(_peak(i, base)) for i, (base, _) in peaks.items()], {})
    gate = Gate(store, Tolerances())
    now = [_peak(i, cur) for i, (_, cur) in peaks.items()]
    data = run_json(now)
    for bench, m in zip(data["benchmarks"], now, strict=True):
        bench["extra_info"]["gate"] = gate.by_baseline(entry_of(m)).as_dict()
    path = tmp_path / name
    path.write_text(json.dumps(data))  # as pytest-benchmark writes it (NaN allowed)
    return path


def test_new_memory_from_a_zero_baseline_is_a_clear_regression_with_no_ratio() -> None:
    """Issue 49: two graphed steps went from 0 B to a little memory; the gate wrote inf."""
    base = Entry("b", "f", "gpu-x", {"memory": (0.0,)})
    r = compare(Entry("b", "f", "gpu-x", {"memory": (100.0 * MiB,)}), base, Tolerance())
    check = r.check("memory")
    assert check is not None
    assert check.from_none
    assert r.verdict is Verdict.REGRESSED
    assert "new memory: 1.04858e+08 bytes where the reference had none" in r.message()
    assert "<= 2.09715e+06 bytes new allowed" in r.message()
    written = json.dumps(r.as_dict(), allow_nan=False)  # standard JSON: no Infinity
    assert json.loads(written)["checks"][0]["ratio"] is None
    back = GateResult.from_dict(json.loads(written), "f", "gpu-x")
    assert back.check("memory").from_none
    assert back.verdict is Verdict.REGRESSED
    small = compare(Entry("b", "f", "gpu-x", {"memory": (float(MiB),)}), base, Tolerance())
    assert small.verdict is Verdict.UNCHANGED  # within the absolute allowance (slack)
    assert json.dumps(small.as_dict(), allow_nan=False)


def test_a_count_from_zero_is_an_improvement_not_inf() -> None:
    base = Entry("b", "f", "gpu-x", {"max_layers": (0.0,)})
    r = compare(Entry("b", "f", "gpu-x", {"max_layers": (3.0,)}), base, Tolerance())
    assert r.verdict is Verdict.IMPROVED
    assert "new max_layers: 3 layers where the reference had none" in r.message()
    json.dumps(r.as_dict(), allow_nan=False)


def test_a_check_an_older_gpugauge_wrote_as_infinity_is_read() -> None:
    """The nightly's own file: ``"ratio": Infinity`` from a reference of 0."""
    inf = math.inf
    old = {"metric": "memory", "baseline": 0, "current": 1e8, "ratio": inf, "ci_low": inf,
           "ci_high": inf, "tolerance": 0.01, "verdict": "regressed"}  # fmt: skip
    check = MetricCheck.from_dict(json.loads(json.dumps(old)))
    assert check.from_none
    assert check.verdict is Verdict.REGRESSED
    for bad in ({**old, "baseline": 5.0}, {**old, "ratio": math.nan}):
        with pytest.raises(ValueError, match="must be a finite number"):
            MetricCheck.from_dict(json.loads(json.dumps(bad)))


def test_a_check_says_the_level_of_its_interval_and_reads_it_back() -> None:
    """A same-GPU A/B decides slower at 99.8%: the gate table, the report and a failing
    test's message said "[95% CI]" of it (a review, 2026-12-07). A check saved before
    checks named their level is read as 95%, and a level outside (0, 1) is refused."""
    from gpugauge.report.tables import fmt_ratio
    from gpugauge.results.verdicts import Basis

    ab = MetricCheck(
        "time", 3.0, 3.09, 1.03, 1.021, 1.040, 0.01, Verdict.REGRESSED, Basis.SAME_GPU_AB, 0.998
    )
    back = MetricCheck.from_dict(json.loads(json.dumps(ab.as_dict())))
    assert back == ab
    assert fmt_ratio(back) == "1.030x 99.8% [1.021, 1.040]"
    assert "time 1.030x 99.8% [1.021, 1.040] vs <= 1.010 allowed" in back.describe()
    older = {k: v for k, v in ab.as_dict().items() if k != "level"}
    assert fmt_ratio(MetricCheck.from_dict(older)) == "1.030x [1.021, 1.040]"  # 95%: unsaid
    for bad in (1, 0, "0.95", True):
        with pytest.raises(ValueError, match="time's level must be a number in"):
            MetricCheck.from_dict({**older, "level": bad})


def test_a_run_gated_on_new_memory_is_read_by_every_reader(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """confirm (load_run), report --current, plain report, history import, baseline --add."""
    run = _gated_run(tmp_path, "nightly.json", {"graphed": (0, 100 * MiB), "eager": (MiB, MiB)})
    saved = load_run(run)
    assert GateResult.from_dict(saved.verdicts["graphed"], "demo", CLASS).verdict == "regressed"
    storage = tmp_path / ".benchmarks"
    storage.mkdir()
    (storage / "0001_nightly.json").write_bytes(run.read_bytes())
    base = ["--baselines-dir", str(tmp_path / "baselines"), "--out", str(tmp_path / "rep")]
    hist = str(tmp_path / "h.sqlite")
    assert gpugauge_main(["report", "--current", str(run), "--storage", str(storage), *base]) == 0
    md = (tmp_path / "rep" / "report.md").read_text()
    assert "new 1.049e+08 bytes (reference 0)" in md
    assert gpugauge_main(["report", "--storage", str(storage), "--history", hist, *base]) == 2
    capsys.readouterr()  # (that history does not exist yet: named, as before)
    assert history_main(["import", str(run), "--history", hist]) == 0
    assert gpugauge_main(["report", "--storage", str(storage), "--history", hist, *base]) == 0
    with History.open(hist, read_only=True) as h:
        (point,) = h.points("graphed", "memory")
        assert point.metric.verdict == "regressed"
    assert history_main(["show", "graphed", "--metric", "memory", "--history", hist]) == 0
    # read whole, then refused: its gate failed, so it may not become a baseline
    assert gpugauge_main(["baseline", "--add", str(run), "--baselines-dir", base[1]]) == 2
    err = capsys.readouterr().err
    assert "Infinity" not in err
    assert "its gate failed 1 result(s) as regressed, e.g. 'graphed'" in err


def test_the_history_judges_new_memory_from_a_reference_of_zero() -> None:
    from gpugauge.history.host_checks import check_against
    from gpugauge.history.records import MetricRecord

    now = MetricRecord("memory", 100.0 * MiB, 100.0 * MiB, 100.0 * MiB, 1)
    check = check_against(now, 0.0, 0.01)
    assert check.verdict is Verdict.REGRESSED
    assert check.from_none
    assert "new memory" in check.describe()
    assert check_against(MetricRecord("memory", 0.0, 0.0, 0.0, 1), 0.0, 0.01).ratio == 1.0


@pytest.mark.parametrize("when", ["0001-01-01T00:00:00+05:00", "9999-12-31T23:00:00-05:00"])
def test_a_run_dated_at_the_edge_with_an_offset_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture, when: str
) -> None:
    """Issue 49: OverflowError in run_time, a traceback from every reader."""
    data = run_json([result("a")])
    data["datetime"] = when
    run = tmp_path / "run.json"
    run.write_text(json.dumps(data))
    hist = str(tmp_path / "h.sqlite")
    assert history_main(["import", str(run), "--history", hist]) == 2
    err = capsys.readouterr().err
    assert f"datetime {when!r} lies outside" in err
    assert gpugauge_main(["baseline", str(run), "--baselines-dir", str(tmp_path / "b")]) == 2
    assert "lies outside" in capsys.readouterr().err


@pytest.mark.parametrize("when", ["0001-01-01T00:00:00+05:00", "9999-12-31T23:00:00-05:00"])
def test_a_stored_time_at_the_edge_with_an_offset_is_a_history_error(when: str) -> None:
    from gpugauge.history.records import HistoryError, parse_time

    with pytest.raises(HistoryError, match="has no UTC time"):
        parse_time(when)


@pytest.mark.parametrize("version", [-1, 0])
def test_a_history_whose_schema_version_is_below_1_is_refused_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture, version: int
) -> None:
    """Issue 49: schema_version -1 gave 'KeyError: 0' from the upgrade."""
    hist = tmp_path / "h.sqlite"
    History.open(str(hist)).close()
    import sqlite3

    with sqlite3.connect(hist) as db:
        db.execute("UPDATE schema_version SET version = ?", (version,))
    db.close()
    run = tmp_path / "run.json"
    run.write_text(json.dumps(run_json([result("a")])))
    assert history_main(["import", str(run), "--history", str(hist)]) == 2
    assert history_main(["list", "--history", str(hist)]) == 2
    err = capsys.readouterr().err
    assert err.count(f"schema version {version} is no version of a gpugauge history") == 2


def test_malformed_ab_rows_are_named_and_skipped_by_every_reader(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """Issue 49: pairs not JSON, pairs an int, ratio a string: tracebacks in history ab."""
    import sqlite3

    runs = [run_json([result(i, 2.0) for i in ("a", "b", "c", "d")])]
    run = tmp_path / "run.json"
    run.write_text(json.dumps(runs[0]))
    hist = tmp_path / "h.sqlite"
    assert history_main(["import", str(run), "--history", str(hist)]) == 0
    with sqlite3.connect(hist) as db:
        (run_id,) = db.execute("SELECT id FROM runs").fetchone()
        rows = [
            ("a", 1.02, "[]"),  # a good one
            ("b", 1.0, "{not json"),
            ("c", 1.0, 7),
            ("d", "fast", "[]"),
        ]
        for bid, ratio, pairs in rows:
            db.execute(
                "INSERT INTO ab_cases VALUES (?, ?, ?, 'abc', 'unchanged', ?, 1, 1, 0.01, ?)",
                (run_id, bid, CLASS, ratio, pairs),
            )
    db.close()
    capsys.readouterr()
    assert history_main(["ab", "--history", str(hist)]) == 0
    out, err = capsys.readouterr()
    assert "1.020x" in out
    assert "'b'" in err
    assert "pairs '{not json' are not a JSON list" in err
    assert "pairs '7' are not" in err
    assert "ratio is 'fast', not a finite number" in err
    assert "Traceback" not in err
    assert history_main(["show", "b", "--history", str(hist)]) == 0
    (tmp_path / "bl").mkdir()
    base = ["--baselines-dir", str(tmp_path / "bl"), "--out", str(tmp_path / "rep")]
    assert gpugauge_main(["report", "--current", str(run), "--history", str(hist), *base]) == 0


@pytest.mark.slow
def test_the_signal_tests_pass_with_sigint_ignored_as_in_a_background_job() -> None:
    """Issue 49: under ``nohup`` or ``&`` in a script SIGINT starts ignored, and the two
    Ctrl-C tests of Quick start 2 failed: the signal they send never arrived."""
    import signal
    import subprocess
    import sys

    def ignored() -> None:
        signal.signal(signal.SIGINT, signal.SIG_IGN)

    args = ["tests/test_history_cli.py", "-q", "-k", "ctrl_c", "-p", "no:cacheprovider"]
    done = subprocess.run(
        [sys.executable, "-m", "pytest", *args],
        cwd=Path(__file__).resolve().parents[1],
        preexec_fn=ignored,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-2000:]
    assert "2 passed" in done.stdout


def test_accept_counts_a_result_and_its_re_measurement_once(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """Issue 49: a regressed result measured again is one result, not two."""
    from dataclasses import replace

    from gpugauge.history.synthetic import Scenario, series

    hist = str(tmp_path / "h.sqlite")
    (first, *_) = series(Scenario(hosts=(("GPU-1", 0.0, 0),), nights=1), 5)
    again = replace(first.result, attempt=2, verdict="regressed", accepted=False)
    with History.open(hist) as h:
        h.append(first.run, [replace(first.result, verdict="regressed", accepted=False), again])
    assert history_main(["accept", first.run.id, "--history", hist]) == 0
    assert f"1 result of run {first.run.id} accepted" in capsys.readouterr().out


def test_a_listing_into_a_closed_pipe_ends_quietly(tmp_path: Path) -> None:
    """Issue 49: 'history list | head' printed 'Broken pipe' (exit 2)."""
    import subprocess
    import sys

    hist = str(tmp_path / "h.sqlite")
    run = tmp_path / "run.json"
    run.write_text(json.dumps(run_json([result(f"case-{i}") for i in range(5)])))
    assert history_main(["import", str(run), "--history", hist]) == 0
    cmd = [sys.executable, "-m", "gpugauge", "history", "list", "--history", hist]
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=Path(__file__).parents[1]
    )
    assert proc.stdout is not None
    proc.stdout.close()  # as head does once it has its lines
    _, err = proc.communicate(timeout=120)
    assert err.decode() == ""
    assert proc.returncode == 0


def test_the_report_names_a_stored_run_it_cannot_read_and_reads_the_rest(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """A stored run that cannot be read is named and skipped, never the end of the report."""
    storage = tmp_path / ".benchmarks"
    storage.mkdir()
    bad = run_json([result("a")])
    bad["benchmarks"][0]["extra_info"]["timing"]["device_ms"] = [-1.0]
    (storage / "0001_bad.json").write_text(json.dumps(bad))
    (storage / "0002_other.json").write_text(json.dumps({"benchmarks": []}))
    good = storage / "0003_good.json"
    good.write_text(json.dumps(run_json([result("a")])))
    (tmp_path / "bl").mkdir()
    out = tmp_path / "rep"
    argv = ["report", "--current", str(good), "--storage", str(storage), "--out", str(out)]
    assert gpugauge_main([*argv, "--baselines-dir", str(tmp_path / "bl")]) == 0
    err = capsys.readouterr().err
    assert "skipped a stored run that cannot be read" in err
    assert "0001_bad.json" in err
    assert "0002_other.json" not in err  # not a gpugauge run: left out as before
    assert "0001_bad.json" in (out / "report.md").read_text()


def test_one_unreadable_result_is_named_and_the_rest_read(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """Issue 49: a reader that refuses one result still reads the others and says which.

    confirm's reader and the report read the rest; a history import keeps the rest; a
    baseline, recorded from whole runs, is refused naming the result.
    """
    data = run_json([result("a"), result("b"), result("c")])
    data["benchmarks"][1]["extra_info"]["timing"]["device_ms"] = [-1.0]  # b: unreadable
    run = tmp_path / "run.json"
    run.write_text(json.dumps(data))
    saved = load_run(run)
    assert [m.id for m in saved.measurements] == ["a", "c"]
    (why,) = saved.refused
    assert why.startswith(f"{run}: benchmarks[1]")
    report = first_report(tmp_path, run)
    assert "benchmarks[1]" in report
    assert all(f"| {i} " in report for i in "ac")
    assert "gpugauge report: warning: left out a result that cannot be read" in (
        capsys.readouterr().err
    )
    h = tmp_path / "h.sqlite"
    assert history_main(["import", str(run), "--history", str(h)]) == 0
    assert "gpugauge history: warning: left out" in capsys.readouterr().err
    with History.open(h) as store:
        assert {p.result.bench_id for p in store.iter_points()} == {"a", "c"}
    argv = ["baseline", str(run), "--baselines-dir", str(tmp_path / "bl")]
    assert gpugauge_main(argv) != 0
    assert "benchmarks[1]" in capsys.readouterr().err
