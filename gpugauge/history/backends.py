"""Where a history lives: a SQLite file (the default) or a PostgreSQL database.

One small adapter per backend gives the store the same three things: a transaction
(:meth:`Backend.transaction`, committed when its block ends, rolled back on any error or
never committed if the process dies), statements written once with ``?`` placeholders
(turned into psycopg's ``%s`` for PostgreSQL), and the backend's errors as one-line
:class:`~gpugauge.history.records.HistoryError` messages that name the history.

SQLite runs in WAL mode with a busy timeout, and a write transaction takes the write lock
when it begins (``BEGIN IMMEDIATE``): two writers at once queue instead of failing. Where
SQLite answers "database is locked" without waiting (switching a fresh file to WAL while
another connection opens it does not run the busy handler), the step is retried with
backoff for up to :data:`BUSY_TIMEOUT_S`. A failed transaction is rolled back only if
SQLite has not already rolled it back itself (it does on a full disk or an I/O error), so
the error reported is the first one and the file keeps its last committed state.
PostgreSQL (``postgresql://`` or ``postgres://`` URLs) needs the ``postgres`` extra
(``psycopg`` 3); its writers never conflict, since each run is its own rows.

A backend opened ``read_only`` (what the reading commands use) never creates, switches or
changes anything: a SQLite file must exist and is opened with SQLite's ``mode=rw`` URI
(no create) and ``PRAGMA query_only`` (no write), falling back to ``mode=ro`` where the
file is not writable; a PostgreSQL session's transactions are read-only.
"""

from __future__ import annotations

import contextlib
import errno
import re
import sqlite3
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

from gpugauge.history.records import HistoryError, HistoryUnavailable

BUSY_TIMEOUT_S = 120.0  # how long a SQLite writer waits for another one's transaction
_SQLITE_BUSY = 5  # primary result code of "database is locked"
# primary result codes of a disk, not of the file or its name: I/O error, disk full
_SQLITE_OUT_OF_REACH = (10, 13)
# the same as the OS says it, where Python's own calls meet it (making the folder)
_OS_OUT_OF_REACH = (errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EFBIG)
T = TypeVar("T")
CONNECT_TIMEOUT_S = 10  # how long to wait for a PostgreSQL server to answer
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
POSTGRES_SCHEMES = ("postgresql", "postgres")
_SCHEMA_LOCK = 72_023  # PostgreSQL advisory lock key held while the schema is checked


def _busy(err: sqlite3.Error) -> bool:
    """Whether SQLite refused for a lock held by another connection (SQLITE_BUSY)."""
    code = getattr(err, "sqlite_errorcode", None)
    if code is not None:
        return code & 0xFF == _SQLITE_BUSY
    return "database is locked" in str(err)


def out_of_reach(err: BaseException) -> bool:
    """Whether an error is the disk's (full, failing), not the history's path or content."""
    if isinstance(err, sqlite3.Error):
        code = getattr(err, "sqlite_errorcode", None)
        return code is not None and code & 0xFF in _SQLITE_OUT_OF_REACH
    return isinstance(err, OSError) and err.errno in _OS_OUT_OF_REACH


def retry_busy(step: Callable[[], T], limit_s: float = BUSY_TIMEOUT_S) -> T:
    """``step()``, again after a short sleep (10 ms doubling to 0.5 s) while SQLite is busy.

    Bounded: after ``limit_s`` seconds the last "database is locked" is raised.
    """
    deadline = time.monotonic() + limit_s
    delay = 0.01
    while True:
        try:
            return step()
        except sqlite3.OperationalError as err:
            if not _busy(err) or time.monotonic() + delay > deadline:
                raise
        time.sleep(delay)
        delay = min(delay * 2, 0.5)


def _one_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return text[0] if text else type(err).__name__


class Tx:
    """Statements inside one transaction; ``?`` placeholders on every backend."""

    def __init__(self, cursor: Any, placeholder: str) -> None:
        self._cur = cursor
        self._ph = placeholder

    def _sql(self, sql: str) -> str:
        if "%" in sql:  # psycopg reads '%' as a placeholder: keep statements free of it
            raise ValueError("history statements must not contain '%'")
        return sql if self._ph == "?" else sql.replace("?", self._ph)

    def execute(self, sql: str, params: Sequence[Any] = ()) -> int:
        """Run one statement; the number of rows it changed."""
        self._cur.execute(self._sql(sql), tuple(params))
        return self._cur.rowcount

    def many(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        """Run one statement for each row of parameters."""
        if rows:
            self._cur.executemany(self._sql(sql), [tuple(r) for r in rows])

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Run one query; its rows."""
        self._cur.execute(self._sql(sql), tuple(params))
        return [tuple(r) for r in self._cur.fetchall()]


class Backend:
    """One open connection to a history; subclasses say how to begin and end."""

    name = ""
    where = ""  # the history as a person named it (a URL without its password)
    read_only = False  # opened by a reading command: nothing may be created or changed

    def transaction(self, write: bool = True) -> contextlib.AbstractContextManager[Tx]:
        """A transaction: committed when the block ends, rolled back on an error."""
        raise NotImplementedError

    def tables(self, tx: Tx) -> set[str]:
        """Names of the tables in the history's database (its current schema)."""
        raise NotImplementedError

    def lock_schema(self, tx: Tx) -> None:
        """Serialize schema checks and upgrades of concurrent openers (until ``tx`` ends)."""

    def close(self) -> None:
        """Close the connection."""
        raise NotImplementedError


class SqliteBackend(Backend):
    """A SQLite file: WAL journal, a busy timeout, write transactions take the lock first."""

    name = "sqlite"

    def __init__(self, path: Path, read_only: bool = False) -> None:
        self.path = Path(path)
        self.where = str(path)
        self.read_only = read_only
        if self.path.is_dir():
            raise HistoryError(f"history {path}: is a directory, not a SQLite file")
        try:
            if read_only:
                self.conn = self._connect_existing()
            else:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self.conn = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
        except (OSError, sqlite3.Error) as err:
            kind = HistoryUnavailable if out_of_reach(err) else HistoryError
            raise kind(f"history {path}: cannot be opened ({_one_line(err)})") from None
        try:
            if read_only:
                self.conn.execute("PRAGMA query_only=ON")
            else:
                self._use_wal()
            self.conn.execute("PRAGMA foreign_keys=ON")
        except sqlite3.Error as err:
            self.conn.close()
            raise self._error(err) from None

    def _connect_existing(self) -> sqlite3.Connection:
        """The file as it is, never created.

        Read-write without create (``mode=rw``), so that closing removes a WAL file's
        ``-wal`` and ``-shm`` as a writer's close does; read-only where it is not writable.
        """
        if not self.path.exists():
            raise HistoryError(
                f"history {self.where}: no such file (a measured pytest run or "
                "'gpugauge history import' creates it)"
            )
        uri = self.path.resolve().as_uri()
        try:
            return sqlite3.connect(
                f"{uri}?mode=rw", uri=True, timeout=BUSY_TIMEOUT_S, isolation_level=None
            )
        except sqlite3.OperationalError:
            return sqlite3.connect(
                f"{uri}?mode=ro", uri=True, timeout=BUSY_TIMEOUT_S, isolation_level=None
            )

    def _use_wal(self) -> None:
        """Switch the file to WAL once; a file already in WAL takes no lock at all.

        The switch needs the file to itself and SQLite answers "database is locked" at once
        if another connection holds it (no busy handler), so it is retried. Where WAL is
        refused for good (a file system without shared memory) the file keeps its journal
        mode: writers then queue on the busy timeout alone.
        """
        mode = self.conn.execute("PRAGMA journal_mode").fetchone()[0]
        if str(mode).lower() != "wal":
            retry_busy(lambda: self.conn.execute("PRAGMA journal_mode=WAL").fetchone())

    def _error(self, err: sqlite3.Error) -> HistoryError:
        if isinstance(err, sqlite3.DatabaseError) and "not a database" in str(err):
            return HistoryError(f"history {self.where}: not a SQLite database ({err})")
        kind = HistoryUnavailable if out_of_reach(err) else HistoryError
        return kind(f"history {self.where}: {_one_line(err)}")

    @contextlib.contextmanager
    def transaction(self, write: bool = True) -> Iterator[Tx]:
        """``BEGIN IMMEDIATE`` for a write (the lock first, so writers queue), else ``BEGIN``.

        Any error inside rolls the transaction back and is raised as a HistoryError (a
        SQLite error) or as it was (anything else): never a second error from the rollback.
        """
        begin = "BEGIN IMMEDIATE" if write else "BEGIN"
        try:
            retry_busy(lambda: self.conn.execute(begin))
        except sqlite3.Error as err:
            raise self._error(err) from None
        cur = self.conn.cursor()
        try:
            yield Tx(cur, "?")
            retry_busy(lambda: self.conn.execute("COMMIT"))
        except sqlite3.Error as err:
            self._rollback()
            raise self._error(err) from None
        except BaseException:
            self._rollback()
            raise
        finally:
            cur.close()

    def _rollback(self) -> None:
        """Roll back what is still open, never raising over the error being reported.

        SQLite has already rolled back by itself after a full disk, an I/O error or a lost
        lock, and a ROLLBACK then fails with "no transaction is active"; that would hide
        the error that matters, so it is skipped (the transaction is gone either way).
        """
        if self.conn.in_transaction:
            with contextlib.suppress(sqlite3.Error):
                self.conn.execute("ROLLBACK")

    def tables(self, tx: Tx) -> set[str]:
        """Every table of the file."""
        return {r[0] for r in tx.query("SELECT name FROM sqlite_master WHERE type = 'table'")}

    def close(self) -> None:
        """Close the file."""
        self.conn.close()


def redact(url: str) -> str:
    """``url`` without its password: 'postgresql://user:***@host/db'."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.rpartition("@")
    user = netloc[0].split(":", 1)[0]
    return urlunsplit(parts._replace(netloc=f"{user}:***@{netloc[2]}"))


class PostgresBackend(Backend):
    """A PostgreSQL database through psycopg 3; the URL is libpq's."""

    name = "postgresql"

    def __init__(self, url: str, read_only: bool = False) -> None:
        self.where = redact(url)
        self.read_only = read_only
        try:
            import psycopg
        except ImportError:
            raise HistoryError(
                f"history {self.where}: PostgreSQL needs psycopg; pip install 'gpugauge[postgres]'"
            ) from None
        self._psycopg = psycopg
        try:
            self.conn = psycopg.connect(url, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S)
        except psycopg.Error as err:
            raise HistoryUnavailable(
                f"history {self.where}: cannot connect ({_one_line(err)})"
            ) from None
        if read_only:
            try:
                self.conn.execute("SET default_transaction_read_only = on")
            except psycopg.Error as err:
                self.conn.close()
                raise HistoryError(f"history {self.where}: {_one_line(err)}") from None

    @contextlib.contextmanager
    def transaction(self, write: bool = True) -> Iterator[Tx]:
        """One server transaction (READ COMMITTED)."""
        try:
            with self.conn.transaction(), self.conn.cursor() as cur:
                yield Tx(cur, "%s")
        except self._psycopg.Error as err:
            lost = isinstance(err, self._psycopg.OperationalError) or self.conn.closed
            kind = HistoryUnavailable if lost else HistoryError
            raise kind(f"history {self.where}: {_one_line(err)}") from None

    def tables(self, tx: Tx) -> set[str]:
        """Tables of the connection's current schema."""
        rows = tx.query(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()"
        )
        return {r[0] for r in rows}

    def lock_schema(self, tx: Tx) -> None:
        """A transaction-scoped advisory lock: two first openers do not both create tables."""
        tx.query("SELECT pg_advisory_xact_lock(?)", (_SCHEMA_LOCK,))

    def close(self) -> None:
        """Close the connection."""
        self.conn.close()


def open_backend(target: str | Path, read_only: bool = False) -> Backend:
    """A PostgreSQL URL or a SQLite path; HistoryError for a URL of any other scheme.

    ``read_only``: a SQLite file that does not exist is a HistoryError, not created.
    """
    text = str(target)
    match = _SCHEME.match(text)
    if match is None:
        return SqliteBackend(Path(text), read_only)
    if match.group(1).lower() in POSTGRES_SCHEMES:
        return PostgresBackend(text, read_only)
    raise HistoryError(
        f"history {redact(text)}: unsupported scheme {match.group(1)!r}; "
        "give a SQLite file path or a postgresql:// URL"
    )
