"""A history that stays whole, readable and private (issue 38, classes 2 and 4).

Dates no reader can read back, runs that cannot be removed, exports over the history,
in-memory and libpq targets taken for files, read-only and FIFO histories, a case on two
device classes in one run, and passwords in messages. PostgreSQL cases use the server of
``GPUGAUGE_TEST_POSTGRES`` (see tests/test_history_store.py).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pytest

from gpugauge.__main__ import main as gpugauge_main
from gpugauge.history.cli import main
from gpugauge.history.records import HistoryError, parse_time, time_text
from gpugauge.history.schema import UPGRADES
from gpugauge.history.store import History
from gpugauge.history.targets import redact
from tests.fakes import result as fake_result
from tests.fakes import save_run

from .test_bad_inputs import unblock_fifos  # noqa: F401 (autouse: a reader that blocks fails)
from .test_history_store import result, run

ROOT = Path(__file__).resolve().parents[1]


def _history(tmp_path: Path, runs: int = 3) -> Path:
    path = tmp_path / "h.sqlite"
    with History.open(path) as h:
        for i in range(runs):
            h.append(run(i), [result("case-0", 1.0 + i), result("case-1", 2.0)])
    return path


def _cli(argv: list[str], capsys: pytest.CaptureFixture) -> tuple[int, str, str]:
    code = main(argv)
    out = capsys.readouterr()
    return code, out.out, out.err


# --- dates


def test_a_year_before_1000_is_stored_with_four_digits_and_read_back(tmp_path: Path) -> None:
    """strftime('%Y') wrote year 999 as '999', which no ISO reader takes back."""
    t = datetime(999, 6, 1, 2, 3, 4, 5, tzinfo=UTC)
    assert time_text(t) == "0999-06-01T02:03:04.000005Z"
    assert parse_time(time_text(t)) == t
    path = tmp_path / "h.sqlite"
    with History.open(path) as h:
        h.append(run(1, time=t), [result("case-0", 1.0)])
        h.append(run(2), [result("case-0", 1.0)])
        assert [r.time for r in h.runs()] == [t, run(2).time]  # text order is time order


def test_a_year_stored_unpadded_by_an_older_gpugauge_is_still_read(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    path = _history(tmp_path)
    with contextlib.closing(sqlite3.connect(path)) as conn, conn:
        conn.execute("UPDATE runs SET time_utc = '999-01-01T00:00:00.000000Z' WHERE id = 'run-0'")
    for command in (["list"], ["show", "case-0"], ["changes"]):
        code, _out, err = _cli([*command, "--history", str(path)], capsys)
        assert (code, err) == (0, ""), command
    assert parse_time("999-01-01T00:00:00.000000Z").year == 999
    with pytest.raises(HistoryError, match="history remove"):
        parse_time("not a time")


def test_a_far_future_run_is_not_imported(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """A run dated 2999 would stay 'the latest' of the history forever."""
    saved = save_run(tmp_path / "run.json", [fake_result("a")])
    data = saved.read_text().replace("2026-11-22T10:00:00", "2999-01-01T00:00:00")
    saved.write_text(data)
    target = tmp_path / "h.sqlite"
    code, _, err = _cli(["import", str(saved), "--history", str(target)], capsys)
    assert code == 2
    assert "datetime '2999-01-01T00:00:00' lies outside" in err
    assert not target.exists()


# --- removing a run


def test_remove_takes_whole_runs_all_or_none(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    path = _history(tmp_path)
    code, _, err = _cli(["remove", "run-1", "no-such-run", "--history", str(path)], capsys)
    assert code == 2
    assert "no run 'no-such-run'" in err
    with History.open(path) as h:
        assert [r.id for r in h.runs()] == ["run-0", "run-1", "run-2"]  # none removed
    code, out, _ = _cli(["remove", "run-1", "--history", str(path)], capsys)
    assert code == 0
    assert "removed run run-1 (2 results)" in out
    assert f"1 run removed from {path}" in out
    with History.open(path) as h:
        assert [r.id for r in h.runs()] == ["run-0", "run-2"]
        assert [p.run.id for p in h.points("case-0")] == ["run-0", "run-2"]
        assert h.metrics() == ["memory", "time"]
    with contextlib.closing(sqlite3.connect(path)) as conn:
        left = conn.execute("SELECT COUNT(*) FROM metrics WHERE run_id = 'run-1'").fetchone()
        assert left == (0,)


def test_a_run_whose_stored_time_is_garbage_can_be_removed(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    path = _history(tmp_path)
    with contextlib.closing(sqlite3.connect(path)) as conn, conn:
        conn.execute("UPDATE runs SET time_utc = 'garbage' WHERE id = 'run-2'")
    code, out, err = _cli(["list", "--history", str(path)], capsys)
    assert code == 0  # issue 49: one bad row is named, never the end of a listing
    assert "case-0" in out
    assert "?" in out  # its last run's date: unknown
    assert "history list: skipped a stored run time 'garbage'" in err
    assert "history remove" in err
    assert "Traceback" not in err
    assert _cli(["remove", "run-2", "--history", str(path)], capsys)[0] == 0
    assert _cli(["list", "--history", str(path)], capsys)[0] == 0


# --- export


def test_export_never_writes_over_the_history(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """`--csv h.sqlite --history h.sqlite` destroyed the history; --force does not either."""
    path = _history(tmp_path)
    before = path.read_bytes()
    for extra in ([], ["--force"]):
        for out in (path, Path(f"{path}-wal"), tmp_path / "." / "h.sqlite"):
            argv = ["export", "--csv", str(out), "--history", str(path), *extra]
            code, _, err = _cli(argv, capsys)
            assert code == 2, (out, extra)
            assert "is the history" in err
    assert path.read_bytes() == before
    link = tmp_path / "link.csv"
    link.symlink_to(path)
    assert _cli(["export", "--csv", str(link), "--history", str(path), "--force"], capsys)[0] == 2
    assert path.read_bytes() == before


def test_export_replaces_only_its_own_exports_unless_forced(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    path = _history(tmp_path)
    notes = tmp_path / "notes.csv"
    notes.write_text("my,own\n1,2\n")
    code, _, err = _cli(["export", "--csv", str(notes), "--history", str(path)], capsys)
    assert code == 2
    assert "not a history export" in err
    assert notes.read_text() == "my,own\n1,2\n"
    out = tmp_path / "h.csv"
    assert _cli(["export", "--csv", str(out), "--history", str(path)], capsys)[0] == 0
    assert _cli(["export", "--csv", str(out), "--history", str(path)], capsys)[0] == 0
    assert len(out.read_text().splitlines()) == 1 + 3 * 2 * 2  # header, runs x cases x metrics
    argv = ["export", "--csv", str(notes), "--history", str(path), "--force"]
    assert _cli(argv, capsys)[0] == 0
    assert notes.read_text() == out.read_text()
    assert not list(tmp_path.glob(".*.tmp"))


EXPORT_UNDER_LIMIT = """
import resource, sys
sys.path.insert(0, {root!r})
resource.setrlimit(resource.RLIMIT_FSIZE, ({limit}, {limit}))
import signal
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG
from gpugauge.history.cli import main
sys.exit(main(["export", "--csv", {out!r}, "--history", {history!r}]))
"""


def test_an_export_that_finds_no_room_keeps_the_previous_file(tmp_path: Path) -> None:
    """Written to a temporary file and renamed: a full disk leaves the earlier export whole."""
    path = tmp_path / "h.sqlite"
    with History.open(path) as h:
        for i in range(40):
            h.append(run(i), [result(f"case-{k}", 1.0 + k) for k in range(10)])
    out = tmp_path / "h.csv"
    assert main(["export", "--csv", str(out), "--history", str(path), "--id", "case-0"]) == 0
    before = out.read_bytes()
    code = EXPORT_UNDER_LIMIT.format(root=str(ROOT), limit=64_000, out=str(out), history=str(path))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert str(out) in done.stderr
    assert out.read_bytes() == before
    assert not list(tmp_path.glob(".*.tmp"))


def test_export_streams_the_history(tmp_path: Path) -> None:
    """Rows are read a chunk at a time: the export of years holds one chunk in memory."""
    path = _history(tmp_path)
    with History.open(path, read_only=True) as h:
        rows = h.iter_points()
        assert iter(rows) is rows  # a generator, not a list
        assert next(rows).run.id == "run-0"
        rows.close()  # a reader may stop early: its transaction ends


# --- targets that are not a history file


@pytest.mark.parametrize("target", [":memory:", " :memory: ", ""])
def test_an_in_memory_history_is_refused(
    target: str, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """`--history :memory:` said results were stored, and kept nothing."""
    saved = save_run(tmp_path / "run.json", [fake_result("a")])
    with pytest.raises(HistoryError, match="in-memory database keeps nothing"):
        History.open(target)
    if target:
        code, out, err = _cli(["import", str(saved), "--history", target], capsys)
        assert code == 2
        assert "keeps nothing" in err
        assert "added" not in out


@pytest.mark.parametrize(
    "conninfo",
    [
        "host=/nonexistent/socket dbname=gpugauge user=me password=s3cr3t connect_timeout=2",
        "dbname=gpugauge password='s3 cr3t' host=/nonexistent/socket connect_timeout=2",
        "  user=me host=/nonexistent/socket password=s3cr3t connect_timeout=2",
    ],
)
def test_a_libpq_key_value_string_is_a_server_never_a_file(
    conninfo: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """It became a local SQLite file named after it, password included."""
    pytest.importorskip("psycopg")
    monkeypatch.chdir(tmp_path)
    for read_only in (False, True):
        with pytest.raises(HistoryError) as err:
            History.open(conninfo, read_only=read_only)
        text = str(err.value)
        assert "cannot connect" in text
        assert "s3cr3t" not in text
        assert "s3 cr3t" not in text
        assert "password=***" in text
    assert list(tmp_path.iterdir()) == []


def test_a_libpq_key_value_string_reaches_the_server(tmp_path: Path) -> None:
    from .test_history_store import postgres_base

    base = postgres_base()
    from urllib.parse import parse_qs, urlsplit

    parts = urlsplit(base)
    query = {k: v[0] for k, v in parse_qs(parts.query).items()}
    conninfo = " ".join(
        f"{k}={v}"
        for k, v in {
            "dbname": parts.path.lstrip("/"),
            "user": parts.username or "",
            "host": query.get("host") or parts.hostname or "",
            "port": query.get("port") or (str(parts.port) if parts.port else ""),
        }.items()
        if v
    )
    with History.open(conninfo, read_only=False) as h:
        assert h.backend == "postgresql"


@pytest.mark.parametrize(
    ("target", "secret"),
    [
        ("postgresql://me:s3cr3t@db.example/h", "s3cr3t"),
        ("postgresql://me@db.example/h?password=s3cr3t&sslmode=require", "s3cr3t"),
        ("postgres://db.example/h?sslmode=require&PASSWORD=s3cr3t", "s3cr3t"),
        ("postgresql://me:p%40ss@db.example/h", "p%40ss"),
        ("host=db.example password=s3cr3t dbname=h", "s3cr3t"),
        ("host=db.example password='it\\'s s3cr3t' dbname=h", "s3cr3t"),  # libpq's quoting
        ("mysql://me:s3cr3t@db/x?password=s3cr3t", "s3cr3t"),
    ],
)
def test_no_line_shows_a_password(target: str, secret: str) -> None:
    """One redaction for every line and error that names a history (docs/history.md)."""
    assert secret not in redact(target)
    assert "***" in redact(target)


def test_a_password_in_the_url_query_is_never_printed(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """`?password=` was printed in every history line and error."""
    pytest.importorskip("psycopg")
    target = "postgresql://me@127.0.0.1:1/nothing?password=s3cr3t&connect_timeout=2"
    saved = save_run(tmp_path / "run.json", [fake_result("a")])
    for argv in (["list", "--history", target], ["import", str(saved), "--history", target]):
        code, out, err = _cli(argv, capsys)
        assert code == 2
        assert "s3cr3t" not in out + err
        assert "password=***" in err
    report = ["report", "--current", str(saved), "--history", target, "--out", str(tmp_path)]
    assert gpugauge_main([*report, "--storage", str(tmp_path / "none")]) == 2
    captured = capsys.readouterr()
    assert "s3cr3t" not in captured.out + captured.err


# --- histories that cannot be written, or are not files


@contextlib.contextmanager
def read_only_mount(folder: Path) -> Iterator[Path]:
    """``folder`` seen through a read-only bind mount (root only): nothing there is writable."""
    view = folder.parent / f"{folder.name}-ro"
    view.mkdir()
    if subprocess.run(["mount", "--bind", str(folder), str(view)]).returncode != 0:
        pytest.skip("cannot bind-mount here")
    try:
        remount = ["mount", "-o", "remount,ro,bind", str(view)]
        if subprocess.run(remount).returncode != 0:
            pytest.skip("cannot remount read-only here")
        yield view
    finally:
        subprocess.run(["umount", str(view)], check=True)


@pytest.mark.skipif(
    sys.platform != "linux" or os.geteuid() != 0, reason="a read-only bind mount needs root"
)
def test_a_history_this_process_may_not_write_can_be_read(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """A developer reading the runner's history: SQLite could not make its -shm."""
    folder = tmp_path / "runner"
    folder.mkdir()
    path = _history(folder)
    assert not Path(f"{path}-wal").exists()  # closed cleanly: the log was checkpointed
    with read_only_mount(folder) as view:
        seen = view / path.name
        for argv in (["list"], ["show", "case-0"], ["changes"]):
            code, out, err = _cli([*argv, "--history", str(seen)], capsys)
            assert (code, err) == (0, ""), argv
            assert "case-0" in out or argv == ["changes"]
        out = tmp_path / "copy.csv"
        assert _cli(["export", "--csv", str(out), "--history", str(seen)], capsys)[0] == 0
        with History.open(seen, read_only=True) as h:
            assert len(h.runs()) == 3
        code, _, err = _cli(["accept", "run-1", "--history", str(seen)], capsys)
        assert code == 2
        assert str(seen) in err


@pytest.mark.parametrize("tables", [("runs",), ("foo",)], ids=["a-runs-table", "other-tables"])
def test_another_program_s_sqlite_is_refused_by_the_writing_commands_unchanged(
    tables: tuple[str, ...], tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """A writing command given another program's database refuses it, naming it not a
    history, and leaves it byte for byte: not switched to WAL, no -wal or -shm beside it."""
    path = tmp_path / "app.sqlite"
    with contextlib.closing(sqlite3.connect(path)) as conn, conn:
        for table in tables:
            conn.execute(f"CREATE TABLE {table} (id TEXT, x INTEGER)")
            conn.execute(f"INSERT INTO {table} VALUES ('a', 1)")
    before = path.read_bytes()
    saved = save_run(tmp_path / "run.json", [fake_result("a")])
    for argv in (["import", str(saved)], ["accept", "abcdef"], ["remove", "abcdef"]):
        code, _, err = _cli([*argv, "--history", str(path)], capsys)
        assert code == 2, argv
        (line,) = err.strip().splitlines()
        assert str(path) in line, line
        assert "not a gpugauge history" in line, line
        assert path.read_bytes() == before, argv
        assert sorted(p.name for p in tmp_path.iterdir()) == ["app.sqlite", "run.json"]


@pytest.mark.parametrize("which", ["", "-wal", "-journal"])
def test_a_fifo_at_the_history_path_is_refused_unopened(
    which: str, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """A FIFO hung `history list`, and `report` then ignored SIGTERM."""
    path = tmp_path / "h.sqlite"
    if which:
        _history(tmp_path)
    os.mkfifo(f"{path}{which}")
    started = time.monotonic()
    for read_only in (True, False):
        with pytest.raises(HistoryError, match="not a regular file"):
            History.open(path, read_only=read_only)
    code, _, err = _cli(["list", "--history", str(path)], capsys)
    assert code == 2
    assert "not a regular file" in err
    saved = save_run(tmp_path / "run.json", [fake_result("a")])
    argv = ["report", "--current", str(saved), "--history", str(path), "--out", str(tmp_path)]
    assert gpugauge_main([*argv, "--storage", str(tmp_path / "none")]) == 2
    assert "not a regular file" in capsys.readouterr().err
    assert time.monotonic() - started < 10


def test_a_report_on_a_fifo_history_ends_at_once_and_sigterm_is_honoured(tmp_path: Path) -> None:
    path = tmp_path / "h.sqlite"
    os.mkfifo(path)
    saved = save_run(tmp_path / "run.json", [fake_result("a")])
    argv = ["report", "--current", str(saved), "--history", str(path), "--out", str(tmp_path)]
    argv += ["--storage", str(tmp_path / "none")]
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpugauge", *argv],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=10)
        pytest.fail(f"report hung on a FIFO history: {err}")
    assert proc.returncode == 2
    assert "not a regular file" in err


# --- one case on two device classes in one run


def test_a_version_1_history_is_upgraded_keeping_every_run(tmp_path: Path) -> None:
    path = tmp_path / "v1.sqlite"
    with contextlib.closing(sqlite3.connect(path)) as conn, conn:
        for statement in UPGRADES[1]:
            conn.execute(statement)
        conn.execute(
            "INSERT INTO runs VALUES ('r1', '2026-11-20T02:00:00.000000Z', 'GPU-a', 'cls', "
            "NULL, NULL, NULL, '2.11', NULL, '{}', '[]', NULL, 'pytest')"
        )
        conn.execute(
            "INSERT INTO results VALUES ('r1', 'case-0', 1, 'layers', 'cls', 1755.0, NULL, "
            "'[]', 'unchanged', 1, '')"
        )
        conn.execute(
            "INSERT INTO metrics VALUES ('r1', 'case-0', 1, 'time', 2.0, 1.9, 2.1, 8, '[2.0]', "
            "'unchanged', 'host')"
        )
    with pytest.raises(HistoryError, match="schema version 1 is older"):
        History.open(path, read_only=True)  # a reader never upgrades
    with History.open(path) as h:
        [p] = h.points("case-0", "time", "cls")
        assert (p.run.id, p.host, p.median, p.result.sm_clock_mhz) == ("r1", "GPU-a", 2.0, 1755.0)
        assert h.append(
            run(2, device_class="cls"), [replace(result("case-0", 2.1), device_class="cls")]
        )
        assert len(h.case_points("case-0", "cls", ["time"])["time"]) == 2
