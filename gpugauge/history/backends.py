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
(no create) and ``PRAGMA query_only`` (no write), falling back to ``mode=ro`` and then
``immutable=1`` where this process may not write the file or its folder (another user's
history, a read-only mount); a PostgreSQL session's transactions are read-only.

What a target is, is decided once (:func:`open_backend`): a ``postgresql://`` URL or a
libpq ``key=value`` string is a server, ``:memory:`` is refused (it would keep nothing),
anything else a SQLite path, and a path that is not a regular file (a FIFO, a device)
is refused before SQLite opens it. :func:`redact` is the one way a target is shown: no
message holds a password.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import sqlite3
import stat
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

from gpugauge.history.records import HistoryError, HistoryUnavailable
from gpugauge.history.targets import SCHEME, hide, is_conninfo, redact

BUSY_TIMEOUT_S = 120.0  # how long a SQLite writer waits for another one's transaction
_SQLITE_BUSY = 5  # primary result code of "database is locked"
# primary result codes of a disk, not of the file or its name: I/O error, disk full
_SQLITE_OUT_OF_REACH = (10, 13)
# the same as the OS says it, where Python's own calls meet it (making the folder)
_OS_OUT_OF_REACH = (errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EFBIG)
_T = TypeVar("_T")
CONNECT_TIMEOUT_S = 10  # how long to wait for a PostgreSQL server to answer
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


def retry_busy(step: Callable[[], _T], limit_s: float = BUSY_TIMEOUT_S) -> _T:
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


STREAM_ROWS = 2000  # rows fetched at a time by Tx.stream: memory stays bounded


class Tx:
    """Statements inside one transaction; ``?`` placeholders on every backend.

    ``streaming`` makes the cursor :meth:`stream` reads from (PostgreSQL: a server-side
    cursor, since a client-side one holds every row of a result at once).
    """

    def __init__(
        self, cursor: Any, placeholder: str, streaming: Callable[[], Any] | None = None
    ) -> None:
        self._cur = cursor
        self._ph = placeholder
        self._streaming = streaming

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

    def stream(self, sql: str, params: Sequence[Any] = ()) -> Iterator[tuple[Any, ...]]:
        """Run one query; its rows, :data:`STREAM_ROWS` at a time (for a whole history)."""
        cur = self._streaming() if self._streaming is not None else self._cur
        try:
            cur.execute(self._sql(sql), tuple(params))
            while rows := cur.fetchmany(STREAM_ROWS):
                yield from (tuple(r) for r in rows)
        finally:
            if cur is not self._cur:
                cur.close()


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

    def schema_checked(self) -> None:
        """Called by a writer once the tables are a gpugauge history's.

        Found, made or upgraded: what it changes in the database beside them waits until then.
        """

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
        self._refuse_special()
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
            self.conn.execute("PRAGMA foreign_keys=ON")
        except sqlite3.Error as err:
            self.conn.close()
            raise self._error(err) from None

    def _refuse_special(self) -> None:
        """HistoryError for a folder, a FIFO, a socket or a device at the path (or its journals).

        Checked before SQLite opens anything: opening a FIFO blocks until a writer comes,
        in C, where no signal handler runs (a report would then ignore SIGTERM).
        """
        for path in (self.path, *(Path(f"{self.path}{s}") for s in ("-wal", "-shm", "-journal"))):
            try:
                mode = path.stat().st_mode
            except OSError:
                continue  # missing (or unreadable: SQLite says so itself)
            if stat.S_ISDIR(mode) and path == self.path:
                raise HistoryError(f"history {self.where}: is a directory, not a SQLite file")
            if not stat.S_ISREG(mode):
                raise HistoryError(
                    f"history {self.where}: {path.name} is not a regular file (a FIFO, "
                    "socket, device or folder); not opened"
                )

    def _connect_existing(self) -> sqlite3.Connection:
        """The file as it is, never created or changed.

        Read-write without create (``mode=rw``), so that closing removes a WAL file's
        ``-wal`` and ``-shm`` as a writer's close does. Where this process may not write
        the file or its folder (another user's history, a read-only mount), SQLite cannot
        make the ``-shm`` a WAL reader needs: then ``mode=ro``, and where that cannot read
        either and no write-ahead log is pending, ``immutable=1`` (the file alone holds
        every committed run).
        """
        if not self.path.exists():
            raise HistoryError(
                f"history {self.where}: no such file (a measured pytest run creates it "
                "in its --benchmark-storage folder, .benchmarks by default, or at "
                "$GPUGAUGE_HISTORY; so does 'gpugauge history import'): name it with --history"
            )
        uri = self.path.resolve().as_uri()
        wal = Path(f"{self.path}-wal")
        pending = wal.exists() and wal.stat().st_size > 0
        tries = ["mode=rw", "mode=ro"] + ([] if pending else ["mode=ro&immutable=1"])
        last: sqlite3.Error | None = None
        for query in tries:
            try:
                conn = sqlite3.connect(
                    f"{uri}?{query}", uri=True, timeout=BUSY_TIMEOUT_S, isolation_level=None
                )
            except sqlite3.OperationalError as err:
                last = err
                continue
            try:
                conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
            except sqlite3.DatabaseError as err:
                conn.close()
                if "not a database" in str(err) or "malformed" in str(err):
                    raise self._error(err) from None
                last = err
                continue
            return conn
        assert last is not None
        hint = (
            "; it has a pending write-ahead log (-wal) that only a writer can read: "
            "ask its owner to run a reading command once, or read a copy"
            if pending
            else ""
        )
        raise HistoryError(f"history {self.where}: cannot be read ({_one_line(last)}){hint}")

    def schema_checked(self) -> None:
        """WAL only now: another program's database, refused, keeps its journal mode."""
        try:
            self._use_wal()
        except sqlite3.Error as err:
            raise self._error(err) from None

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
            with contextlib.suppress(sqlite3.Error):  # a stream abandoned after close()
                cur.close()

    def _rollback(self) -> None:
        """Roll back what is still open, never raising over the error being reported.

        SQLite has already rolled back by itself after a full disk, an I/O error or a lost
        lock, and a ROLLBACK then fails with "no transaction is active"; that would hide
        the error that matters, so it is skipped (the transaction is gone either way).
        """
        with contextlib.suppress(sqlite3.Error):  # also a connection closed meanwhile
            if self.conn.in_transaction:
                self.conn.execute("ROLLBACK")

    def tables(self, tx: Tx) -> set[str]:
        """Every table of the file."""
        return {r[0] for r in tx.query("SELECT name FROM sqlite_master WHERE type = 'table'")}

    def close(self) -> None:
        """Close the file."""
        self.conn.close()


class PostgresBackend(Backend):
    """A PostgreSQL database through psycopg 3: a libpq URL or ``key=value`` string.

    No message shows its password: the target is shown :func:`redact`-ed, and a driver's
    own error text goes through :func:`hide` (libpq quotes parts of a bad string back).
    """

    name = "postgresql"

    def __init__(self, url: str, read_only: bool = False) -> None:
        self.where = redact(url)
        self._url = url
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
                f"history {self.where}: cannot connect ({hide(_one_line(err), url)})"
            ) from None
        if read_only:
            try:
                self.conn.execute("SET default_transaction_read_only = on")
            except psycopg.Error as err:
                self.conn.close()
                raise HistoryError(f"history {self.where}: {hide(_one_line(err), url)}") from None

    @contextlib.contextmanager
    def transaction(self, write: bool = True) -> Iterator[Tx]:
        """One server transaction (READ COMMITTED)."""
        named = (f"gpugauge_stream_{i}" for i in itertools.count())
        try:
            with self.conn.transaction(), self.conn.cursor() as cur:
                yield Tx(cur, "%s", lambda: self.conn.cursor(name=next(named)))
        except self._psycopg.Error as err:
            lost = isinstance(err, self._psycopg.OperationalError) or self.conn.closed
            kind = HistoryUnavailable if lost else HistoryError
            raise kind(f"history {self.where}: {hide(_one_line(err), self._url)}") from None

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


IN_MEMORY = ("", ":memory:")  # SQLite's names of a database that lives in memory only


def open_backend(target: str | Path, read_only: bool = False) -> Backend:
    """A PostgreSQL URL or ``key=value`` string, or a SQLite path; else a HistoryError.

    Refused: a URL of another scheme, and SQLite's in-memory names (``:memory:``, an
    empty path), which would keep nothing. ``read_only``: a SQLite file that does not
    exist is a HistoryError, not created.
    """
    text = str(target)
    if text.strip() in IN_MEMORY:
        raise HistoryError(
            f"history {text!r}: an in-memory database keeps nothing once the command ends; "
            "give a SQLite file path or a postgresql:// URL"
        )
    if is_conninfo(text):  # libpq's key=value form: a server, never a file named after it
        return PostgresBackend(text, read_only)
    match = SCHEME.match(text)
    if match is None:
        return SqliteBackend(Path(text), read_only)
    if match.group(1).lower() in POSTGRES_SCHEMES:
        return PostgresBackend(text, read_only)
    raise HistoryError(
        f"history {redact(text)}: unsupported scheme {match.group(1)!r}; "
        "give a SQLite file path or a postgresql:// URL"
    )
