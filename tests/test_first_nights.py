"""A new device class's first nights: from no baselines to gated, never by a silent pass.

Issue 39: on a fresh H200 host the nightly failed 29 of 65 tests, each "new: no baseline
for device class nvidia-h200". ``--gauge-first-nights N`` records such results and lets
them pass, said so, while the history holds fewer than N runs of them; then judges them
against those runs; ``gpugauge baseline --from-history CLASS`` commits them as baselines.
"""

from __future__ import annotations

import argparse
import json
import re
from dataclasses import replace
from pathlib import Path

import pytest

from gpugauge.__main__ import main
from gpugauge.core import arguments
from gpugauge.history.first_runs import first_runs
from gpugauge.history.records import HistoryError
from gpugauge.history.reference import DEFAULT_POLICY
from gpugauge.history.store import History
from gpugauge.judging.first_nights import FirstNights, Stage
from gpugauge.judging.judge import Judge
from gpugauge.judging.tracking import Tracker
from gpugauge.regress.baselines import BaselineError, BaselineStore, entry_of
from gpugauge.regress.gate import Gate
from gpugauge.regress.tolerances import load_tolerances
from gpugauge.results.measurement import INJECTED_KEY, Measurement
from gpugauge.results.verdicts import GateResult, MetricCheck, Verdict

from .fakes import CLASS, result, save_baselines
from .test_history_store import pg_url  # noqa: F401  (the fixture)
from .test_options import resolve_with


def _gate(root: Path) -> Gate:
    (root / "t").mkdir(exist_ok=True)
    (root / "t" / "t.toml").write_text("[default]\ntime = 0.015\n")
    return Gate(BaselineStore(root / "b"), load_tolerances(root / "t"))


@pytest.fixture(params=["sqlite", "postgresql"])
def target(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A history on either backend: a SQLite file, or a fresh PostgreSQL schema."""
    if request.param == "sqlite":
        return str(tmp_path / "history.sqlite")
    return request.getfixturevalue("pg_url")


def _night(
    root: Path,
    m: Measurement,
    nights: int = 3,
    history: str | None = None,
    baselines: str | None = None,
) -> tuple[GateResult, FirstNights]:
    """One session: judge ``m`` as the gauge does, keep it, append the run.

    ``history``: a SQLite path or PostgreSQL URL (default ``root/h.sqlite``); ``baselines``:
    the folder the session's gate reads, as its printed command names it.
    """
    gate = _gate(root)
    tracker = Tracker(history or str(root / "h.sqlite"), "seed")
    first = FirstNights(nights, tracker, baselines=baselines)
    judged = Judge(gate, tracker, first).judge(m)  # as the gauge judges it
    tracker.keep([(m, judged)])
    tracker.append({"torch": "2.x"}, m.device_class)
    tracker.close()
    return judged, first


def test_the_option_needs_the_gate_and_the_history() -> None:
    with pytest.raises(ValueError, match="--gauge-first-nights 3 applies to --gauge-gate"):
        resolve_with(first_nights=3)
    with pytest.raises(ValueError, match="--gauge-no-history turns the history off"):
        resolve_with(gate=True, first_nights=3, no_history=True)
    assert resolve_with(gate=True, first_nights=3).first_nights == 3
    assert resolve_with(gate=True).first_nights == 0  # off unless given


def test_the_count_is_bounded_by_the_historys_own_reference() -> None:
    """From ReferencePolicy.runs accepted runs on, the history judges a case by itself."""
    assert DEFAULT_POLICY.runs == arguments.MAX_FIRST_NIGHTS
    assert arguments.first_nights("2") == 2
    for bad in ("1", "6", "x"):
        with pytest.raises(argparse.ArgumentTypeError, match="from 2 to 5"):
            arguments.first_nights(bad)


def test_a_new_case_passes_its_first_nights_then_is_judged(tmp_path: Path) -> None:
    for k in range(3):
        judged, first = _night(tmp_path, result("gemm", 2.0))
        assert judged.verdict is Verdict.NEW
        assert first.said["gemm"].stage is Stage.FIRST
        assert first.passing(judged)
        assert f"first nights of {CLASS}: night {k + 1} of 3" in judged.note
    same, first = _night(tmp_path, result("gemm", 2.0))
    assert same.verdict is Verdict.UNCHANGED
    assert first.said["gemm"].stage is Stage.JUDGED
    assert same.references["time"].startswith("host history: last 3 runs")
    assert f"baseline --from-history {CLASS} --runs 3" in same.note
    slower, first = _night(tmp_path, result("gemm", 2.0 * 1.5))
    assert slower.verdict is Verdict.REGRESSED
    assert not first.passing(slower)
    assert "judged against their host's history" in first.summary()[0]
    _night(tmp_path, result("gemm", 2.0))  # the fifth accepted run: the history's own rule
    own, first = _night(tmp_path, result("gemm", 2.0))
    assert own.references["time"].startswith("host history: last 5 runs")
    assert first.said["gemm"].stage is Stage.HISTORY
    assert f"--from-history {CLASS} --runs 3" in first.summary()[0]  # still no baseline


def test_a_verdict_other_than_new_is_never_touched(tmp_path: Path) -> None:
    gate = _gate(tmp_path)
    tracker = Tracker(str(tmp_path / "h.sqlite"), "seed")
    check = MetricCheck("time", 1.0, 2.0, 2.0, 1.9, 2.1, 0.015, Verdict.REGRESSED)
    regressed = GateResult("gemm", "demo", CLASS, (check,))
    first = FirstNights(3, tracker)
    assert first.by_first_nights(result("gemm", 2.0), regressed, gate) is regressed
    assert not first.passing(regressed)
    assert first.said["gemm"].stage is Stage.HISTORY  # no baseline: said in the summary
    save_baselines(tmp_path / "b", [result("gemm", 1.0)])
    gate = _gate(tmp_path)
    again = FirstNights(3, tracker)
    assert again.by_first_nights(result("gemm", 2.0), regressed, gate) is regressed
    assert again.said == {}
    assert "none needed a first night" in again.summary()[0]
    tracker.close()


def test_without_a_history_nothing_passes_as_a_first_night(tmp_path: Path) -> None:
    gate = _gate(tmp_path)
    m = result("gemm", 2.0)
    first = FirstNights(3, None, "history NOT used: disk full")
    judged = first.by_first_nights(m, gate.by_baseline(entry_of(m)), gate)
    assert judged.verdict is Verdict.NEW
    assert not first.passing(judged)
    assert "no history to count it in (history NOT used: disk full)" in judged.note
    assert "OFF" in first.header()
    assert "NOT counted as first nights" in first.summary()[0]


def test_injected_work_is_no_first_night_but_is_judged_after_them(tmp_path: Path) -> None:
    slowed = replace(result("gemm", 2.0), extra={INJECTED_KEY: 1.0})
    judged, first = _night(tmp_path, slowed)
    assert first.said["gemm"].stage is Stage.REFUSED
    assert not first.passing(judged)
    with History.open(tmp_path / "h.sqlite") as h:
        assert h.runs() == []  # never kept
    for _ in range(3):
        _night(tmp_path, result("gemm", 2.0))
    judged, first = _night(tmp_path, replace(result("gemm", 3.0), extra={INJECTED_KEY: 1.0}))
    assert judged.verdict is Verdict.REGRESSED


def test_a_metric_only_a_baseline_judges_stays_new_when_its_first_nights_are_over(
    tmp_path: Path,
) -> None:
    m = replace(result("search", 2.0), timing=None, values={"throughput": 100.0})
    for _ in range(2):
        judged, first = _night(tmp_path, m, nights=2)
        assert first.passing(judged)
    judged, first = _night(tmp_path, m, nights=2)
    assert first.said["search"].stage is Stage.OVER
    assert not first.passing(judged)
    assert f"commit them as baselines: python -m gpugauge baseline --from-history {CLASS}" in (
        judged.note
    )
    assert judged.verdict is Verdict.NEW  # which fails only under --gauge-require-baselines
    assert "1 with nothing there to judge them (new);" in first.summary()[0]
    failed = first.summary(new_fails=True)[0]  # under --gauge-require-baselines
    assert "1 with nothing there to judge them (new, so failed);" in failed


def test_baselines_from_the_historys_first_runs(
    tmp_path: Path, target: str, capsys: pytest.CaptureFixture
) -> None:
    for ms in (2.0, 2.02, 1.99, 2.5):  # the fourth is no first run
        _night(tmp_path, result("gemm", ms), history=target)
        _night(tmp_path, result("conv", ms * 3, family="other"), history=target)
    history, baselines = target, tmp_path / "b"
    save_baselines(baselines, [result("conv", 6.0, family="other")])  # committed: kept
    args = ["baseline", "--from-history", CLASS, "--runs", "3", "--history", history]
    assert main([*args, "--baselines-dir", str(baselines)]) == 0
    out, err = capsys.readouterr()
    assert f"baseline written: {baselines / CLASS / 'demo.json'}" in out
    assert "kept as committed: other/conv" in err
    doc = json.loads((baselines / CLASS / "demo.json").read_text())
    time = doc["benchmarks"]["gemm"]["time"]
    medians = [ms * 1.0035 for ms in (2.0, 2.02, 1.99)]  # the fakes' rounds' medians
    assert time["run_medians"] == pytest.approx(medians)
    assert time["samples"] == pytest.approx(medians[:1])  # the central run's median
    assert len(doc["recorded_from"]) == 3
    assert all(x.startswith("history ") and ": run " in x for x in doc["recorded_from"])
    gate = Gate(BaselineStore(baselines), load_tolerances(tmp_path / "t"))
    assert gate.by_baseline(entry_of(result("gemm", 2.0))).verdict is Verdict.UNCHANGED
    assert gate.by_baseline(entry_of(result("gemm", 2.5))).verdict is Verdict.REGRESSED


def test_baselines_from_the_history_are_refused_with_the_reason(
    tmp_path: Path, target: str
) -> None:
    for _ in range(2):
        _night(tmp_path, result("gemm", 2.0), history=target)
    store = BaselineStore(tmp_path / "b")
    with History.open(target, read_only=True) as h:
        with pytest.raises(
            HistoryError, match=f"no results of device class 'nvidia-h200'; it holds {CLASS}"
        ):
            first_runs(h, "nvidia-h200", 2, store)
        with pytest.raises(BaselineError, match=r"demo/gemm \(2 of 3\).*smaller --runs"):
            first_runs(h, CLASS, 3, store)
        assert [e.id for e in first_runs(h, CLASS, 2, store).entries] == ["gemm"]
        save_baselines(store.root, [result("gemm", 2.0)])
        with pytest.raises(BaselineError, match="has a committed baseline"):
            first_runs(h, CLASS, 2, BaselineStore(store.root))
    assert not (tmp_path / "b" / CLASS / "other.json").exists()


@pytest.fixture
def nap_bench(gauge_pytester: pytest.Pytester) -> pytest.Pytester:
    """The 3 ms nap of test_tracking, a time tolerance wide for a shared CPU."""
    from .test_tracking import BENCH

    gauge_pytester.makepyfile(test_nap=BENCH)
    (gauge_pytester.path / "tolerances").mkdir()
    (gauge_pytester.path / "tolerances" / "t.toml").write_text("[default]\ntime = 0.5\n")
    return gauge_pytester


def _nightly(p: pytest.Pytester, *args: str) -> pytest.RunResult:
    """The nightly's gated run on the nap, with its own baselines, tolerances and history."""
    return p.runpytest_subprocess(
        *("--gauge-rounds", "5", "--gauge-warmup", "1", "--gauge-baselines-dir", "baselines"),
        *("--gauge-tolerances-dir", "tolerances", "--gauge-history", "h.sqlite"),
        *("--gauge-gate", "--gauge-require-baselines"),
        *args,
    )


SLOWED = ("-p", "gpugauge.check.slowdown", "--gauge-inject-slowdown-ms", "30")


@pytest.mark.slow
def test_a_new_class_walks_from_no_baselines_to_gated(nap_bench: pytest.Pytester) -> None:
    """Night 0 without the mode: red. Nights 1-3: passed, said so, recorded. Night 4: judged
    against them; a planted slowdown fails. Then committed as baselines, gated by them."""
    (nap_bench.path / "baselines").mkdir()
    red = _nightly(nap_bench, "--gauge-no-history")
    red.assert_outcomes(failed=1)
    red.stdout.fnmatch_lines([f"*nap-cpu: new: no baseline for device class {CLASS}*"])
    for k in (1, 2, 3):
        night = _nightly(nap_bench, "--gauge-first-nights", "3")
        night.assert_outcomes(passed=1)
        night.stdout.fnmatch_lines(
            [
                "gpugauge: profile=*first-nights=3 (a result with no baseline is recorded*",
                f"*nap-cpu: new, passes: first nights of {CLASS}: night {k} of 3*",
                f"first nights of {CLASS}: 1 result with no baseline passed as night {k} of 3*",
                "history: 1 result of run * appended*",
                "gpugauge gate: 1 new",
            ]
        )
    with History.open(nap_bench.path / "h.sqlite") as h:
        assert len(h.runs()) == 3  # night 0 had no history
    judged = _nightly(nap_bench, "--gauge-first-nights", "3")
    judged.assert_outcomes(passed=1)
    judged.stdout.fnmatch_lines(
        [
            f"first nights of {CLASS} over for 1 result with no committed baseline: 1 judged "
            f"against their host's history; commit the class's first runs as its baselines: "
            f"python -m gpugauge baseline --from-history {CLASS} --runs 3 --history h.sqlite",
        ]
    )
    slowed = _nightly(nap_bench, "--gauge-first-nights", "3", *SLOWED)
    slowed.assert_outcomes(failed=1)
    slowed.stdout.fnmatch_lines(
        ["*gpugauge gate: nap-cpu: regressed*host history: last 3 runs*first nights*over*"]
    )
    with History.open(nap_bench.path / "h.sqlite") as h:
        assert len(h.runs()) == 4  # the slowed night measured the injection: not kept
    argv = ["baseline", "--from-history", CLASS, "--runs", "3", "--history", "h.sqlite"]
    assert main([*argv, "--baselines-dir", "baselines"]) == 0
    stored = json.loads((nap_bench.path / "baselines" / CLASS / "naps.json").read_text())
    assert len(stored["benchmarks"]["nap-cpu"]["time"]["run_medians"]) == 3
    committed = _nightly(nap_bench)
    committed.assert_outcomes(passed=1)
    # judged against the committed runs: unchanged, or inconclusive where a loaded machine
    # stretched one of its 3 ms naps (a CI run read one at 10 ms); never new
    assert re.search(r"gpugauge gate: 1 (unchanged|inconclusive)\n", committed.stdout.str())
    _nightly(nap_bench, *SLOWED).assert_outcomes(failed=1)


@pytest.mark.slow
def test_a_run_that_measures_nothing_has_no_first_nights(nap_bench: pytest.Pytester) -> None:
    """--benchmark-disable judges nothing: no first night is counted or claimed."""
    (nap_bench.path / "baselines").mkdir()
    r = _nightly(nap_bench, "--gauge-first-nights", "3", "--benchmark-disable")
    r.assert_outcomes(passed=1)
    r.stdout.fnmatch_lines(["gate: NOTHING GATED*"])
    assert "first nights" not in r.stdout.str()
    assert "first-nights" not in r.stdout.str()


def test_the_printed_commit_command_names_the_history_the_run_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 49: the hint left out the --history the run used, and failed as printed."""
    import shlex

    hist = str(tmp_path / "elsewhere" / "nightly history.sqlite")
    for _ in range(3):
        _night(tmp_path, result("gemm", 2.0), history=hist)
    judged, first = _night(tmp_path, result("gemm", 2.0), history=hist)
    hint = first.summary()[-1].split("commit the class's first runs as its baselines: ")[1]
    assert f"--history {shlex.quote(hist)}" in hint
    assert hint in judged.note
    argv = shlex.split(hint)[3:]  # after 'python -m gpugauge'
    monkeypatch.chdir(tmp_path)  # its baselines go to ./baselines, as printed
    assert main(argv) == 0
    assert (tmp_path / "baselines" / CLASS / "demo.json").exists()


def test_the_printed_commit_command_names_the_baselines_folder_the_gate_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run with --gauge-baselines-dir printed a command that wrote to ./baselines (a
    review as a new user, 2026-12-06): pasted, it committed where the gate never reads."""
    from gpugauge.judging.first_nights import commit_hint

    monkeypatch.chdir(tmp_path)
    assert "--baselines-dir" not in commit_hint(CLASS, 3, None, "baselines")
    assert "--baselines-dir" not in commit_hint(CLASS, 3, None, str(tmp_path / "baselines"))
    hint = commit_hint(CLASS, 3, None, str(tmp_path / "team baselines"))
    assert hint.endswith(f"--baselines-dir '{tmp_path / 'team baselines'}'")
    for _ in range(3):
        _night(tmp_path, result("gemm", 2.0), baselines="team")
    judged, first = _night(tmp_path, result("gemm", 2.0), baselines="team")
    assert first.summary()[-1].endswith("--baselines-dir team")
    assert "--baselines-dir team" in judged.note
