"""The history store on SQLite and on a real PostgreSQL server: round trips, one
transaction per run (a killed writer leaves nothing), concurrent writers, bad input, and
identical verdicts from both backends.

PostgreSQL tests need ``GPUGAUGE_TEST_POSTGRES`` (a URL; ``.ci/run`` starts a server and
sets it). Without it they skip, except under CI=true, where they fail.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from gpugauge.history.records import HistoryError, MetricRecord, ResultRecord, RunRecord
from gpugauge.history.store import History
from gpugauge.history.synthetic import Scenario, baseline_entry, simulate
from gpugauge.regress.baselines import KernelShare

ROOT = Path(__file__).resolve().parents[1]
PG_ENV = "GPUGAUGE_TEST_POSTGRES"


def postgres_base() -> str:
    url = os.environ.get(PG_ENV)
    if url:
        return url
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"CI=true but ${PG_ENV} is not set: .ci/run must start PostgreSQL")
    pytest.skip(f"${PG_ENV} is not set: no PostgreSQL server to test against")


@pytest.fixture
def pg_url() -> Iterator[str]:
    """A URL whose tables live in a fresh schema, dropped afterwards."""
    import psycopg

    base = postgres_base()
    schema = f"gpugauge_test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    try:
        yield f"{base}{'&' if '?' in base else '?'}options=-csearch_path%3D{schema}"
    finally:
        with psycopg.connect(base, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")


@pytest.fixture(params=["sqlite", "postgresql"])
def target(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return str(tmp_path / "history.sqlite")
    return request.getfixturevalue("pg_url")


T0 = datetime(2026, 11, 20, 2, 0, tzinfo=UTC)


def run(i: int, host: str = "GPU-aaaa", **kw: object) -> RunRecord:
    return RunRecord(
        **{
            "id": f"run-{i}",
            "time": T0 + timedelta(days=i),
            "host": host,
            "device_class": "nvidia-h100-80gb-hbm3",
            "driver": "580.1",
            "cuda_runtime": "12.8",
            "cudnn": "91000",
            "torch": "2.11.0",
            "commit": f"{i:040d}",
            "flags": {"cudnn_benchmark": True},
            "argv": ("pytest", "benches", "--gate"),
            "profile": "seed",
            **kw,
        }
    )


def result(bench: str, ms: float, attempt: int = 1, ok: bool = True) -> ResultRecord:
    time_m = MetricRecord("time", ms, ms * 0.998, ms * 1.002, 30, (ms,), "unchanged", "host")
    mem = MetricRecord("memory", 1e9, 1e9, 1e9, 1, (), None, "")
    return ResultRecord(
        bench_id=bench,
        family="layers",
        device_class="nvidia-h100-80gb-hbm3",
        metrics=(time_m, mem),
        sm_clock_mhz=1755.0,
        power_w=650.5,
        kernels=(KernelShare("sm90_xmma_gemm", 0.9), KernelShare("memset", 0.01)),
        verdict="unchanged",
        accepted=ok,
        attempt=attempt,
        note="a note",
    )


def test_a_run_and_its_results_round_trip(target: str) -> None:
    with History.open(target) as h:
        assert h.append(run(1), [result("relu-fwd", 0.08), result("conv-fwd", 9.5)])
        assert h.append(run(2), [result("relu-fwd", 0.081)])
        assert h.has_run("run-1")
        (first, second) = h.points("relu-fwd")
        assert first.run == run(1)
        assert first.result.kernels == result("relu-fwd", 0.08).kernels
        assert first.metric == result("relu-fwd", 0.08).metric("time")
        assert (first.result.sm_clock_mhz, first.result.power_w) == (1755.0, 650.5)
        assert second.median == 0.081
        assert h.points("relu-fwd", "memory")[0].median == 1e9
        assert [(c.bench_id, c.runs) for c in h.cases()] == [("conv-fwd", 1), ("relu-fwd", 2)]
        assert [r.id for r in h.runs()] == ["run-1", "run-2"]
        assert len(h.to_frame()) == 6  # 3 results x 2 metrics


def test_a_run_already_stored_adds_nothing(target: str) -> None:
    with History.open(target) as h:
        assert h.append(run(1), [result("relu-fwd", 0.08)])
        assert not h.append(run(1), [result("relu-fwd", 0.09), result("other", 1.0)])
        assert [p.median for p in h.points("relu-fwd")] == [0.08]
        assert h.points("other") == []


def test_attempts_are_kept_and_the_last_one_is_the_runs(target: str) -> None:
    with History.open(target) as h:
        h.append(run(1), [result("relu-fwd", 0.09, 1, ok=False), result("relu-fwd", 0.08, 2)])
        assert [p.median for p in h.points("relu-fwd")] == [0.08]
        assert [p.result.attempt for p in h.points("relu-fwd", every_attempt=True)] == [1, 2]


def test_accept_marks_results_as_references(target: str) -> None:
    with History.open(target) as h:
        h.append(run(1), [result("a", 1.0, ok=False), result("b", 1.0, ok=False)])
        assert h.accept("run-1", ["a"]) == 1
        assert [p.accepted for p in h.points("a") + h.points("b")] == [True, False]
        with pytest.raises(HistoryError, match="no run 'nope'"):
            h.accept("nope")


def test_a_failed_append_writes_nothing(target: str) -> None:
    with History.open(target) as h:
        bad = ResultRecord("x", "f", "c", (MetricRecord("time", float("nan"), 1, 1),))
        with pytest.raises(HistoryError, match="finite"):
            h.append(run(1), [result("a", 1.0), bad])
        assert not h.has_run("run-1")
        assert h.points("a") == []


WRITER = """
import sys, time
from pathlib import Path
sys.path.insert(0, {root!r})
from tests.test_history_store import run, result
from gpugauge.history.store import History

def results():
    for i in range(5):
        yield result(f"case-{{i}}", 1.0)
    Path({marker!r}).write_text("inside the transaction")
    time.sleep(120)

with History.open({target!r}) as h:
    h.append(run(7), results())
"""


def test_a_writer_killed_mid_run_leaves_no_partial_run(target: str, tmp_path: Path) -> None:
    with History.open(target) as h:  # the schema exists before the writer starts
        h.append(run(1), [result("case-0", 1.0)])
    marker = tmp_path / "marker"
    code = WRITER.format(root=str(ROOT), marker=str(marker), target=target)
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT)
    try:
        deadline = time.monotonic() + 60
        while not marker.exists():
            assert proc.poll() is None, "the writer ended before it was killed"
            assert time.monotonic() < deadline, "the writer never got inside its transaction"
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    with History.open(target) as h:
        assert not h.has_run("run-7")
        assert [r.id for r in h.runs()] == ["run-1"]
        assert [p.run.id for p in h.points("case-0")] == ["run-1"]
        assert h.append(run(8), [result("case-0", 1.0)])  # and it still takes writes


CONCURRENT = """
import sys, time
from pathlib import Path
sys.path.insert(0, {root!r})
from tests.test_history_store import run, result
from gpugauge.history.store import History

go = Path({go!r})
while not go.exists():
    time.sleep(0.01)
with History.open({target!r}) as h:
    for i in range({runs}):
        r = run({writer} * 1000 + i, host="GPU-{writer}")
        assert h.append(r, [result(f"case-{{k}}", 1.0 + k) for k in range({results})])
"""


def test_concurrent_writers_lose_nothing(target: str, tmp_path: Path) -> None:
    writers, runs, results = 3, 12, 6
    go = tmp_path / "go"
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-c",
                CONCURRENT.format(
                    root=str(ROOT), go=str(go), target=target, writer=w, runs=runs, results=results
                ),
            ],
            cwd=ROOT,
        )
        for w in range(1, writers + 1)
    ]
    time.sleep(1.0)  # every writer has started and opened nothing yet
    go.write_text("go")
    assert [p.wait(timeout=240) for p in procs] == [0] * writers
    with History.open(target) as h:
        assert len(h.runs()) == writers * runs
        for k in range(results):
            assert len(h.points(f"case-{k}")) == writers * runs
        assert {c.host for c in h.cases()} == {f"GPU-{w}" for w in range(1, writers + 1)}


def test_an_unsupported_url_is_one_clear_error() -> None:
    with pytest.raises(HistoryError, match=r"mysql://u:\*\*\*@db/x: unsupported scheme 'mysql'"):
        History.open("mysql://u:secret@db/x")


def test_a_folder_is_not_a_history(tmp_path: Path) -> None:
    with pytest.raises(HistoryError, match="is a directory, not a SQLite file"):
        History.open(tmp_path)


def test_a_corrupt_file_is_named(tmp_path: Path) -> None:
    bad = tmp_path / "bad.sqlite"
    bad.write_bytes(b"this is no database" * 100)
    with pytest.raises(HistoryError, match=f"history {bad}: not a SQLite database"):
        History.open(bad)


def test_a_foreign_sqlite_database_is_refused(tmp_path: Path) -> None:
    other = tmp_path / "other.sqlite"
    with sqlite3.connect(other) as conn:
        conn.execute("CREATE TABLE notes (x TEXT)")
    with pytest.raises(HistoryError, match=r"holds other tables \(notes\)"):
        History.open(other)


def test_a_newer_schema_is_refused(target: str) -> None:
    History.open(target).close()
    if target.startswith("postgresql"):
        import psycopg

        with psycopg.connect(target, autocommit=True) as conn:
            conn.execute("UPDATE schema_version SET version = 99")
    else:
        with sqlite3.connect(target) as conn:
            conn.execute("UPDATE schema_version SET version = 99")
    with pytest.raises(HistoryError, match="schema version 99 is newer than this gpugauge"):
        History.open(target)


def test_an_unreachable_server_is_one_line_without_the_password() -> None:
    pytest.importorskip("psycopg")
    with pytest.raises(HistoryError) as err:
        History.open("postgresql://me:secret@127.0.0.1:1/nothing?connect_timeout=2")
    text = str(err.value)
    assert text.startswith("history postgresql://me:***@127.0.0.1:1/nothing")
    assert "cannot connect" in text
    assert "secret" not in text
    assert "\n" not in text


def test_sqlite_and_postgresql_give_identical_verdicts(tmp_path: Path, pg_url: str) -> None:
    # a host with history, a 3% step on it, and a new host joining mid-way
    scenario = Scenario(
        hosts=(("h0", -0.02, 0), ("h1", 0.0, 0), ("h2", 0.02, 6)),
        nights=14,
        step=0.03,
        step_night=10,
        affected=("h1",),
    )
    baseline = baseline_entry(1.96)
    with History.open(tmp_path / "h.sqlite") as lite, History.open(pg_url) as pg:
        on_sqlite = simulate(scenario, 3, baseline=baseline, history=lite)
        on_postgres = simulate(scenario, 3, baseline=baseline, history=pg)
        assert [p.metric for p in lite.all_points()] == [p.metric for p in pg.all_points()]
    in_memory = simulate(scenario, 3, baseline=baseline)
    assert on_sqlite == on_postgres == in_memory
    kinds = {j.kind for j in on_sqlite}
    verdicts = {j.verdict.value for j in on_sqlite}
    assert kinds == {"host", "class"}
    assert "regressed" in verdicts
    assert "unchanged" in verdicts
