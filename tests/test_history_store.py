"""The history store on SQLite and on a real PostgreSQL server: round trips, one
transaction per run (a killed writer leaves nothing), concurrent writers, bad input, and
identical verdicts from both backends.

PostgreSQL tests need ``GPUGAUGE_TEST_POSTGRES`` (a URL; ``.ci/run`` starts a server and
sets it). Without it they skip, except under CI=true, where they fail.
"""

from __future__ import annotations

import contextlib
import math
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from gpugauge.history.backends import retry_busy
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
            "argv": ("pytest", "benches", "--gauge-gate"),
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


def test_an_ab_that_decided_a_result_is_kept_with_its_pairs(
    target: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from gpugauge.history.cli import main
    from gpugauge.history.records import ABRecord

    pairs = ({"base": {"median_ms": 1.0}, "head": {"median_ms": 1.03}, "base_first": True},)
    ab = ABRecord("run-1", "a", "nvidia-h100-80gb-hbm3", "c" * 40, "regressed", 1.03, 1.02,
                  1.04, 0.01, pairs)  # fmt: skip
    with History.open(target) as h:
        h.append(run(1), [result("a", 1.0, 1, ok=False), result("a", 1.03, 2), result("b", 1.0)])
        h.record_ab(ab, result_verdict="regressed", accepted=False, reference="same-GPU A/B",
                    note="decided by a same-GPU A/B")  # fmt: skip
        assert h.ab_cases() == [ab]
        assert h.ab_cases("run-2") == []
        (last,) = h.points("a")  # the run's last attempt carries the A/B's verdict and note
        assert (last.result.attempt, last.result.verdict, last.accepted) == (2, "regressed", False)
        assert last.result.note == "decided by a same-GPU A/B"  # as the run file says
        assert (last.metric.verdict, last.metric.reference) == ("regressed", "same-GPU A/B")
        assert h.points("b")[0].accepted  # the others are as they were
        h.record_ab(replace(ab, ratio=1.05), result_verdict="regressed", accepted=False,
                    reference="again")  # fmt: skip
        assert [x.ratio for x in h.ab_cases()] == [1.05]  # a second A/B replaces the first
    assert main(["ab", "--history", target, "--run", "run-1"]) == 0  # what a person reads
    shown = capsys.readouterr().out
    assert "regressed" in shown
    assert "1.050x [1.020, 1.040]" in shown
    assert "cccccccccc" in shown
    with History.open(target) as h:
        with pytest.raises(HistoryError, match="holds no result 'zzz'"):
            h.record_ab(replace(ab, bench_id="zzz"), result_verdict="x", accepted=True,
                        reference="")  # fmt: skip
        h.remove(["run-1"])
        assert h.ab_cases() == []


def test_an_ab_its_reader_would_refuse_is_never_made(target: str) -> None:
    """An infinite interval (two rounds of one pair) or a ratio as text: refused when the
    record is made, before the history writes a row that its reader refuses."""
    from gpugauge.history.records import ABRecord

    ab = ABRecord(
        "run-1", "a", "nvidia-h100-80gb-hbm3", "c" * 40, "slower", 1.03, 1.02, 1.04, 0.01, ()
    )
    with pytest.raises(HistoryError, match="ci_high is inf, not a finite number"):
        replace(ab, ci_high=math.inf)
    with pytest.raises(HistoryError, match=r"ratio is '1\.03', not a finite number"):
        replace(ab, ratio="1.03")
    with pytest.raises(HistoryError, match="verdict is None, not text"):
        replace(ab, verdict=None)
    with History.open(target) as h:
        h.append(run(1), [result("a", 1.0)])
        h.record_ab(ab, result_verdict="regressed", accepted=False, reference="A/B")
        assert h.ab_cases() == [ab]  # what a writer keeps, its reader reads


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


def test_many_first_openers_of_a_fresh_file_all_get_it(tmp_path: Path) -> None:
    """Switching a fresh file to WAL answers "database is locked" without waiting when
    another connection opens it at that moment (about 1 open in 200 with 8 at once before
    the switch was retried): every opener must get the history, in WAL mode."""
    errors: list[str] = []
    for trial in range(25):
        path = tmp_path / f"h{trial}.sqlite"
        start = threading.Barrier(8)

        def open_it(path: Path = path, start: threading.Barrier = start) -> None:
            start.wait()
            try:
                with History.open(path) as h:
                    h.runs()
            except HistoryError as err:
                errors.append(str(err))

        threads = [threading.Thread(target=open_it) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        with contextlib.closing(sqlite3.connect(path)) as conn:
            assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert errors == []


def test_busy_steps_are_retried_within_a_bound() -> None:
    calls = []

    def busy() -> None:
        calls.append(1)
        raise sqlite3.OperationalError("database is locked")

    with pytest.raises(sqlite3.OperationalError, match="locked"):
        retry_busy(busy, limit_s=0.2)
    assert 3 <= len(calls) <= 10  # 10, 20, 40, 80 ms sleeps: bounded, not one try
    calls.clear()
    conn = sqlite3.connect(":memory:")
    with pytest.raises(sqlite3.OperationalError, match="no such table"):
        retry_busy(lambda: calls.append(1) or conn.execute("SELECT * FROM x"))
    assert len(calls) == 1  # other errors are not retried


FULL = """
import resource, signal, sys
sys.path.insert(0, {root!r})
from tests.test_history_store import run, result
from gpugauge.history.records import HistoryError
from gpugauge.history.store import History

h = History.open({target!r})  # opened before the limit: the file exists
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG
resource.setrlimit(resource.RLIMIT_FSIZE, ({limit}, {limit}))
try:
    h.append(run(2), [result(f"case-{{k}}-" + "x" * 300, 1.0) for k in range(200)])
except HistoryError as err:
    print("HistoryError:", err)
    sys.exit(3)
"""


def _intact(path: Path) -> list[str]:
    """The runs of a history after its integrity check passed."""
    with contextlib.closing(sqlite3.connect(path)) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    with History.open(path) as h:
        return [r.id for r in h.runs()]


def test_a_write_that_finds_no_room_is_one_error_and_rolls_back(tmp_path: Path) -> None:
    """A disk that fills mid-append (simulated: a file size limit, so no root is needed)
    is a HistoryError naming the history, never a second error from the rollback, and the
    file keeps the runs it had and takes writes again."""
    target = tmp_path / "h.sqlite"
    with History.open(target) as h:
        h.append(run(1), [result("case-0", 1.0)])
    code = FULL.format(root=str(ROOT), target=str(target), limit=6000)
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 3, done.stderr
    assert done.stdout.startswith(f"HistoryError: history {target}: ")
    assert "Traceback" not in done.stderr
    assert len(done.stdout.splitlines()) == 1
    assert _intact(target) == ["run-1"]
    with History.open(target) as h:
        assert h.append(run(3), [result("case-0", 1.0)])


@pytest.mark.skipif(
    sys.platform != "linux" or os.geteuid() != 0, reason="mounting a tmpfs needs root on Linux"
)
def test_a_full_tmpfs_is_one_error_and_rolls_back(tmp_path: Path) -> None:
    """The same on a real full file system: a 256 KiB tmpfs."""
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(disk)])
    if mounted.returncode != 0:
        pytest.skip("this container may not mount a tmpfs")
    try:
        target = disk / "h.sqlite"
        with History.open(target) as h:
            h.append(run(1), [result("case-0", 1.0)])
            big = [result(f"case-{k}-" + "x" * 300, 1.0) for k in range(2000)]
            with pytest.raises(HistoryError, match=r"h\.sqlite: database or disk is full"):
                h.append(run(2), big)
            assert [r.id for r in h.runs()] == ["run-1"]
        assert _intact(target) == ["run-1"]
    finally:
        subprocess.run(["umount", str(disk)], check=True)


SESSION = """
import resource, signal, sys
import pytest
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
# room for SQLite's 32 KiB shared-memory index, not for the run's WAL frames
resource.setrlimit(resource.RLIMIT_FSIZE, (40000, 40000))
sys.exit(pytest.main(["-p", "no:cacheprovider", "--gauge-rounds", "3", "--gauge-warmup", "1",
                      "--gauge-history", "h.sqlite", "test_many.py"]))
"""

MANY = """
from dataclasses import dataclass
from typing import ClassVar

import pytest


@dataclass(frozen=True)
class Tiny:
    family: ClassVar[str] = "tiny"
    n: int
    device: str = "cpu"

    @property
    def id(self):
        return f"tiny-{self.n}-" + "x" * 400

    def as_dict(self):
        return {"n": self.n, "device": self.device}


@pytest.mark.parametrize("n", range(60))
def test_tiny(gauge, n):
    gauge.measure(Tiny(n), lambda: None)
"""


@pytest.mark.slow
def test_a_session_whose_history_is_full_says_so_in_one_line(
    gauge_pytester: pytest.Pytester,
) -> None:
    """The gpugauge section says 'history NOT appended: ...'; no INTERNALERROR, no
    traceback; the tests' own outcome decides the exit status (see docs/history.md)."""
    gauge_pytester.makepyfile(test_many=MANY)
    with History.open(gauge_pytester.path / "h.sqlite") as h:  # made before the limit
        h.append(run(1), [result("case-0", 1.0)])
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("GPUGAUGE_HISTORY", None)
    # pipes, not files, for its output: the size limit would stop pytest's own writes
    done = subprocess.run(
        [sys.executable, "-c", SESSION],
        cwd=gauge_pytester.path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    out = done.stdout + done.stderr
    assert "INTERNALERROR" not in out, out
    assert "Traceback" not in out, out
    said = [line for line in done.stdout.splitlines() if "history NOT appended" in line]
    assert len(said) == 1, done.stdout
    assert said[0].strip().startswith(f"history NOT appended: history {Path('h.sqlite')}: ")
    assert done.returncode == 0, out
    assert _intact(gauge_pytester.path / "h.sqlite") == ["run-1"]


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


def test_one_case_on_two_device_classes_in_one_run_is_stored(target: str) -> None:
    """Report and baseline take it (results are keyed by class); the history took it not."""
    other = "nvidia-a100-sxm4-80gb"
    with History.open(target) as h:
        on_h100 = result("case-0", 1.0)
        on_a100 = replace(result("case-0", 3.0), device_class=other)
        assert h.append(run(1), [on_h100, on_a100])
        assert [p.median for p in h.points("case-0", "time", "nvidia-h100-80gb-hbm3")] == [1.0]
        assert [p.median for p in h.points("case-0", "time", other)] == [3.0]
        assert {c.device_class for c in h.cases()} == {"nvidia-h100-80gb-hbm3", other}
        assert h.accept("run-1", ["case-0"], accepted=False) == 2
        assert h.remove(["run-1"]) == {"run-1": 2}


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


def test_a_read_only_history_creates_and_changes_nothing(tmp_path: Path) -> None:
    """What the reading commands open: no file made, no empty file made a history."""
    missing = tmp_path / "no" / "h.sqlite"
    with pytest.raises(HistoryError, match="no such file"):
        History.open(missing, read_only=True)
    assert not (tmp_path / "no").exists()
    empty = tmp_path / "empty.sqlite"
    empty.touch()
    with pytest.raises(HistoryError, match="not a gpugauge history"):
        History.open(empty, read_only=True)
    assert empty.read_bytes() == b""
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty.sqlite"]
    path = tmp_path / "h.sqlite"
    with History.open(path) as h:
        h.append(run(1), [result("conv", 2.0)])
    with History.open(path, read_only=True) as h:
        assert [p.median for p in h.points("conv")] == [2.0]
        with pytest.raises(HistoryError, match="readonly"):
            h.append(run(2), [result("conv", 2.0)])
        assert not h.has_run("run-2")


def test_several_runs_are_appended_all_or_none(tmp_path: Path) -> None:
    """An import of several files: one that cannot be stored leaves none of the others."""
    bad = replace(result("conv", 2.0), sm_clock_mhz=float("nan"))
    with History.open(tmp_path / "h.sqlite") as h:
        with pytest.raises(HistoryError, match="finite"):
            h.append_runs([(run(1), [result("conv", 2.0)]), (run(2), [bad])])
        assert h.runs() == []
        assert h.append_runs([(run(1), [result("conv", 2.0)]), (run(1), [])]) == [True, False]
