"""The history's tables and their versions: every upgrade lives here, in order.

``schema_version`` holds one row, the version of the tables. Opening a history brings an
older one up to :data:`HISTORY_SCHEMA_VERSION` by running :data:`UPGRADES` in order, in one
transaction (PostgreSQL: under an advisory lock, so two first openers do not race);
a newer one is refused, since this gpugauge would misread it. A history opened read-only
(:func:`check_schema`) is never created or upgraded: it must already be at
:data:`HISTORY_SCHEMA_VERSION`. The statements are plain SQL
that SQLite and PostgreSQL both run: TEXT, INTEGER (0/1 for flags) and DOUBLE PRECISION
columns, JSON kept as TEXT, times as ISO 8601 UTC text (text order is time order).
"""

from __future__ import annotations

from gpugauge.history.backends import Backend, Tx
from gpugauge.history.records import HistoryError

HISTORY_SCHEMA_VERSION = 4

_V1 = (
    "CREATE TABLE schema_version (version INTEGER NOT NULL)",
    """CREATE TABLE runs (
        id TEXT PRIMARY KEY,
        time_utc TEXT NOT NULL,
        host TEXT NOT NULL,
        device_class TEXT NOT NULL,
        driver TEXT,
        cuda_runtime TEXT,
        cudnn TEXT,
        torch TEXT,
        git_commit TEXT,
        flags TEXT NOT NULL,
        argv TEXT NOT NULL,
        profile TEXT,
        source TEXT NOT NULL
    )""",
    "CREATE INDEX runs_by_time ON runs (time_utc)",
    """CREATE TABLE results (
        run_id TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
        bench_id TEXT NOT NULL,
        attempt INTEGER NOT NULL,
        family TEXT NOT NULL,
        device_class TEXT NOT NULL,
        sm_clock_mhz DOUBLE PRECISION,
        power_w DOUBLE PRECISION,
        kernels TEXT NOT NULL,
        verdict TEXT,
        accepted INTEGER NOT NULL,
        note TEXT NOT NULL,
        PRIMARY KEY (run_id, bench_id, attempt)
    )""",
    "CREATE INDEX results_by_case ON results (bench_id, device_class)",
    """CREATE TABLE metrics (
        run_id TEXT NOT NULL,
        bench_id TEXT NOT NULL,
        attempt INTEGER NOT NULL,
        metric TEXT NOT NULL,
        median DOUBLE PRECISION NOT NULL,
        ci_low DOUBLE PRECISION NOT NULL,
        ci_high DOUBLE PRECISION NOT NULL,
        n INTEGER NOT NULL,
        run_medians TEXT NOT NULL,
        verdict TEXT,
        reference TEXT NOT NULL,
        PRIMARY KEY (run_id, bench_id, attempt, metric),
        FOREIGN KEY (run_id, bench_id, attempt)
            REFERENCES results (run_id, bench_id, attempt) ON DELETE CASCADE
    )""",
    "INSERT INTO schema_version (version) VALUES (1)",
)

_RESULT_FIELDS = (
    "run_id, bench_id, attempt, family, device_class, sm_clock_mhz, power_w, kernels, "
    "verdict, accepted, note"
)
_METRIC_FIELDS = "metric, median, ci_low, ci_high, n, run_medians, verdict, reference"

# Version 2: a result is keyed by its device class too, so that one run may hold a case
# on two device classes (two GPU models in one host); metrics carry the class for their
# key. A result keeps its run's host and time (a run never changes): with the indexes, a
# long history's reads (a case's keys on a class by host and time, a case's metric, a
# host's runs in time order) need no scan of the whole history. Tables are rebuilt
# (SQLite cannot change a primary key in place).
_V2 = (
    """CREATE TABLE results_v2 (
        run_id TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
        bench_id TEXT NOT NULL,
        attempt INTEGER NOT NULL,
        family TEXT NOT NULL,
        device_class TEXT NOT NULL,
        sm_clock_mhz DOUBLE PRECISION,
        power_w DOUBLE PRECISION,
        kernels TEXT NOT NULL,
        verdict TEXT,
        accepted INTEGER NOT NULL,
        note TEXT NOT NULL,
        host TEXT NOT NULL,
        time_utc TEXT NOT NULL,
        PRIMARY KEY (run_id, bench_id, device_class, attempt)
    )""",
    f"INSERT INTO results_v2 ({_RESULT_FIELDS}, host, time_utc) "
    f"SELECT {', '.join('s.' + c.strip() for c in _RESULT_FIELDS.split(','))}, r.host, r.time_utc "
    "FROM results s JOIN runs r ON r.id = s.run_id",
    """CREATE TABLE metrics_v2 (
        run_id TEXT NOT NULL,
        bench_id TEXT NOT NULL,
        device_class TEXT NOT NULL,
        attempt INTEGER NOT NULL,
        metric TEXT NOT NULL,
        median DOUBLE PRECISION NOT NULL,
        ci_low DOUBLE PRECISION NOT NULL,
        ci_high DOUBLE PRECISION NOT NULL,
        n INTEGER NOT NULL,
        run_medians TEXT NOT NULL,
        verdict TEXT,
        reference TEXT NOT NULL,
        PRIMARY KEY (run_id, bench_id, device_class, attempt, metric),
        FOREIGN KEY (run_id, bench_id, device_class, attempt)
            REFERENCES results_v2 (run_id, bench_id, device_class, attempt) ON DELETE CASCADE
    )""",
    f"INSERT INTO metrics_v2 (run_id, bench_id, device_class, attempt, {_METRIC_FIELDS}) "
    f"SELECT m.run_id, m.bench_id, s.device_class, m.attempt, "
    f"{', '.join('m.' + c.strip() for c in _METRIC_FIELDS.split(','))} FROM metrics m "
    "JOIN results s ON s.run_id = m.run_id AND s.bench_id = m.bench_id "
    "AND s.attempt = m.attempt",
    "DROP TABLE metrics",
    "DROP TABLE results",
    "ALTER TABLE results_v2 RENAME TO results",
    "ALTER TABLE metrics_v2 RENAME TO metrics",
    "CREATE INDEX results_by_case ON results "
    "(bench_id, device_class, host, time_utc, run_id, attempt, accepted)",
    "CREATE INDEX metrics_by_case ON metrics (bench_id, device_class, metric)",
    "CREATE INDEX runs_by_host ON runs (host, time_utc)",
)

# Version 3: the same-GPU A/Bs that decided a run's results (``gpugauge confirm``), each
# with its pairs (JSON: every block's median, clock and power, and the order they ran in).
_V3 = (
    """CREATE TABLE ab_cases (
        run_id TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
        bench_id TEXT NOT NULL,
        device_class TEXT NOT NULL,
        base_commit TEXT NOT NULL,
        verdict TEXT NOT NULL,
        ratio DOUBLE PRECISION NOT NULL,
        ci_low DOUBLE PRECISION NOT NULL,
        ci_high DOUBLE PRECISION NOT NULL,
        min_effect DOUBLE PRECISION NOT NULL,
        pairs TEXT NOT NULL,
        PRIMARY KEY (run_id, bench_id, device_class)
    )""",
)

# Version 4: only judged results are references (issue 49: five ungated trial runs, 42%
# apart, outranked the baseline recorded after them). A result with no verdict was never
# judged: an ungated run's, or a saved run's imported without verdicts. Such rows were
# written accepted; they stay, marked by their missing verdict, and are no longer used
# until ``history accept`` makes them references. The column is unchanged: only the rows.
# Bumping the version keeps an older gpugauge, which writes them accepted, out.
_V4 = ("UPDATE results SET accepted = 0 WHERE verdict IS NULL",)

# UPGRADES[v] takes the tables from version v - 1 to v (0: an empty database).
UPGRADES: dict[int, tuple[str, ...]] = {1: _V1, 2: _V2, 3: _V3, 4: _V4}
OUR_TABLES = {"schema_version", "runs", "results", "metrics", "ab_cases"}


def _version(backend: Backend, tx: Tx) -> int:
    """The stored version; 0 for a database with none of our tables."""
    tables = backend.tables(tx)
    if "schema_version" not in tables:
        # a SQLite file is one database: any table without schema_version is another's
        foreign = tables if backend.name == "sqlite" else tables & OUR_TABLES
        if foreign:
            raise HistoryError(
                f"history {backend.where}: holds other tables ({', '.join(sorted(foreign))}) "
                "and no schema_version: not a gpugauge history"
            )
        return 0
    rows = tx.query("SELECT version FROM schema_version")
    if len(rows) != 1 or not isinstance(rows[0][0], int) or isinstance(rows[0][0], bool):
        raise HistoryError(f"history {backend.where}: schema_version must hold one number")
    if rows[0][0] < 1:  # no upgrade starts below 1: it would be run from UPGRADES[0]
        raise HistoryError(
            f"history {backend.where}: schema version {rows[0][0]} is no version of a "
            f"gpugauge history (1 to {HISTORY_SCHEMA_VERSION}); not a gpugauge history"
        )
    return rows[0][0]


def _refuse_newer(backend: Backend, version: int) -> None:
    if version > HISTORY_SCHEMA_VERSION:
        raise HistoryError(
            f"history {backend.where}: schema version {version} is newer than this "
            f"gpugauge reads ({HISTORY_SCHEMA_VERSION}); upgrade gpugauge"
        )


def ensure_schema(backend: Backend) -> int:
    """Bring the tables to :data:`HISTORY_SCHEMA_VERSION`; HistoryError for a newer history."""
    with backend.transaction(write=False) as tx:
        version = _version(backend, tx)
    _refuse_newer(backend, version)
    if version == HISTORY_SCHEMA_VERSION:
        return version
    with backend.transaction() as tx:
        backend.lock_schema(tx)
        version = _version(backend, tx)  # another opener may have upgraded it meanwhile
        _refuse_newer(backend, version)
        for step in range(version + 1, HISTORY_SCHEMA_VERSION + 1):
            for statement in UPGRADES[step]:
                tx.execute(statement)
            if step > 1:
                tx.execute("UPDATE schema_version SET version = ?", (step,))
    return HISTORY_SCHEMA_VERSION


def check_schema(backend: Backend) -> int:
    """Read-only: HistoryError unless the tables are at :data:`HISTORY_SCHEMA_VERSION` already.

    For the commands that only read: they must not turn a stray file into a history, nor
    upgrade one behind its writers' backs.
    """
    with backend.transaction(write=False) as tx:
        version = _version(backend, tx)
    if version == 0:
        raise HistoryError(
            f"history {backend.where}: not a gpugauge history (it holds none of its tables)"
        )
    _refuse_newer(backend, version)
    if version < HISTORY_SCHEMA_VERSION:
        raise HistoryError(
            f"history {backend.where}: schema version {version} is older than this gpugauge "
            f"reads ({HISTORY_SCHEMA_VERSION}); a writing command (a measured pytest run, "
            "'gpugauge history import') upgrades it"
        )
    return version
