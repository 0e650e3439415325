"""Seeded fuzz of gpugauge's inputs through its real command line: one bad value at a time.

Each case feeds one damaged input (a cell of the results history, a field of a saved run,
a command-line value) to ``python -m gpugauge``'s ``main`` in this process and asserts
the rule: exit status 0 or 2, never an exception; a refusal is one line naming what was
wrong; and no file that was there before is changed by a refused command. The cases are
drawn with a fixed seed, so a failure names a case that fails again.
"""

from __future__ import annotations

import json
import random
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from gpugauge.__main__ import main

from .fakes import result, save_run
from .test_saved_data import snapshot

SEED = 20261205

# Values a hand edit, another tool or a damaged copy can leave in a SQLite cell: SQLite
# keeps whatever type it is given, whatever the column's declared type.
CELL_VALUES: list[Any] = ["x", "", "{", "[]", "null", '{"a": 1}', -1, 3.5, 1e308, b"\xff\xfe"]

READERS = [
    ["history", "list"],
    ["history", "show", "a"],
    ["history", "changes", "--metric", "all"],
    ["history", "export", "--csv", "{ws}/out.csv"],
    ["history", "ab"],
]


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A history of three runs of cases a and b, made by ``gpugauge history import``."""
    ws = tmp_path_factory.mktemp("history")
    runs = [save_run(ws / f"r{i}.json", [result("a", 2.0 + i), result("b", 3.0)]) for i in range(3)]
    for i, path in enumerate(runs):  # three distinct runs: each its own date
        data = json.loads(path.read_text())
        data["datetime"] = f"2026-01-0{i + 1}T00:00:00"
        path.write_text(json.dumps(data))
    db = ws / "h.sqlite"
    assert main(["history", "import", *map(str, runs), "--history", str(db)]) == 0
    return db


def _columns(db: Path) -> list[tuple[str, str]]:
    with sqlite3.connect(db) as c:
        return [
            (t, row[1])
            for t in ("runs", "results", "metrics")
            for row in c.execute(f'PRAGMA table_info("{t}")')
        ]


def _cell_cases(db: Path) -> list[tuple[str, str, Any]]:
    rng = random.Random(SEED)
    return [(t, c, v) for t, c in _columns(db) for v in rng.sample(CELL_VALUES, 3)]


def _run(argv: list[str], capsys: pytest.CaptureFixture) -> tuple[int, str]:
    try:
        code = main(argv)
    except SystemExit as exit_:
        code = exit_.code
    return code, capsys.readouterr().err


def test_every_damaged_history_cell_is_read_or_named(
    history: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """One cell of one row set to a value of another type: each reader reads it or names it."""
    cases = _cell_cases(history)
    assert len(cases) >= 90
    failures = []
    for table, column, value in cases:
        db = tmp_path / "h.sqlite"
        shutil.copy(history, db)
        with sqlite3.connect(db) as c:
            try:
                c.execute(
                    f'UPDATE "{table}" SET "{column}" = ? '
                    f'WHERE rowid = (SELECT MIN(rowid) FROM "{table}")',
                    (value,),
                )
            except sqlite3.IntegrityError:
                continue  # a NOT NULL or key the database itself keeps
        c.close()
        before = snapshot(tmp_path)
        for argv in READERS:
            argv = [a.format(ws=tmp_path) for a in argv] + ["--history", str(db)]
            (tmp_path / "out.csv").unlink(missing_ok=True)
            before = snapshot(tmp_path)
            try:
                code, err = _run(argv, capsys)
            except Exception as exc:
                failures.append(f"{table}.{column}={value!r} {argv[:3]}: {exc!r}")
                continue
            if code not in (0, 2) or (code == 2 and len(err.strip().splitlines()) != 1):
                failures.append(f"{table}.{column}={value!r} {argv[:3]}: exit {code}: {err!r}")
            elif code == 2 and snapshot(tmp_path) != before:
                failures.append(f"{table}.{column}={value!r} {argv[:3]}: wrote a file")
    assert not failures, "\n".join(failures[:20]) + f"\n({len(failures)} in all)"


# Values a truncated, hand-edited or foreign saved run can hold where gpugauge wrote another.
FIELD_VALUES: list[Any] = [None, "x", "", -1, 0, float("nan"), float("inf"), [], {}, 1e308, True]
DELETE = object()


def _paths(data: Any, at: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every key path of ``data``, lists entered at their first two items."""
    out = [at]
    if isinstance(data, dict):
        for k, v in data.items():
            out += _paths(v, (*at, k))
    elif isinstance(data, list):
        for i, v in enumerate(data[:2]):
            out += _paths(v, (*at, i))
    return out


def _changed(data: Any, at: tuple[Any, ...], value: Any) -> Any:
    data = json.loads(json.dumps(data))
    if not at:
        return value
    where = data
    for k in at[:-1]:
        where = where[k]
    if value is DELETE:
        del where[at[-1]]
    else:
        where[at[-1]] = value
    return data


def test_every_damaged_saved_run_field_is_read_or_named(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """One field of a saved run (as the plugin writes it) changed: baseline and history import
    read it, leave its result out with a warning, or refuse it in one line, writing nothing."""
    other = save_run(tmp_path / "other.json", [result("a", 2.1), result("b", 3.1)])
    good = json.loads(save_run(tmp_path / "good.json", [result("a"), result("b")]).read_text())
    good["datetime"] = "2026-01-05T00:00:00"
    history = tmp_path / "h.sqlite"
    assert main(["history", "import", str(other), "--history", str(history)]) == 0
    rng = random.Random(SEED)
    paths = _paths(good)
    cases = [(p, rng.choice([DELETE, *FIELD_VALUES])) for p in rng.sample(paths, 120)]
    failures = []
    capsys.readouterr()
    for at, value in cases:
        bad = tmp_path / "bad.json"
        bad.write_text(json.dumps(_changed(good, at, value)))
        for argv in (
            [
                "baseline",
                str(bad),
                str(other),
                "--baselines-dir",
                str(tmp_path / "b"),
                "--allow-wide-spread",
            ],
            ["history", "import", str(bad), "--history", str(history)],
        ):
            shutil.rmtree(tmp_path / "b", ignore_errors=True)
            held = history.read_bytes()
            try:
                code, err = _run(argv, capsys)
            except Exception as exc:  # the fuzz reports every one
                failures.append(f"{at}={value!r} {argv[:2]}: {exc!r}")
                continue
            shown = "DELETE" if value is DELETE else repr(value)
            if code not in (0, 1, 2) or (code == 2 and len(err.strip().splitlines()) != 1):
                failures.append(f"{at}={shown} {argv[:2]}: exit {code}: {err!r}")
            elif code != 0 and ((tmp_path / "b").exists() or history.read_bytes() != held):
                failures.append(f"{at}={shown} {argv[:2]}: exit {code} but wrote")
            history.write_bytes(held)  # the next case starts from the same history
    assert not failures, "\n".join(failures[:20]) + f"\n({len(failures)} in all)"


NUMBERS = ["-1", "0", "nan", "inf", "-inf", "1e400", "abc", "", "0x10"]
NUMBER_OPTIONS = [
    ["history", "show", "a", "--last"],
    ["history", "changes", "--last"],
    ["baseline", "--from-history", "cpu", "--runs"],
    ["ab", "HEAD", "--min-effect"],
    ["ab", "HEAD", "--max-pairs"],
    ["ab", "HEAD", "--block-time"],
    ["ab", "HEAD", "--rounds"],
    ["ab", "HEAD", "--time-budget"],
    ["bisect", "A", "B", "--rounds"],
    ["check", "gate", "--slowdown"],
    ["check", "gate", "--runs"],
    ["check", "timer", "--threshold"],
]


def test_bad_numbers_on_the_command_line_are_named(
    history: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """A number option given no number, a negative, zero where none fits, or no finite one:
    exit 2 and one line naming the option, before anything runs or is written."""
    monkeypatch.chdir(tmp_path)  # no git checkout here: an option let through runs nothing
    rng = random.Random(SEED)
    failures = []
    for option in NUMBER_OPTIONS:
        for value in rng.sample(NUMBERS, 5):
            argv = (
                [*option, value, "--history", str(history)]
                if option[0]
                in (
                    "history",
                    "baseline",
                )
                else [*option, value]
            )
            if value == "0" and option[-1] in ("--last", "--runs", "--threshold"):
                continue  # zero may be allowed; negatives and non-numbers never are
            code, err = _run(argv, capsys)
            said = [
                line for line in err.splitlines() if line and not line.startswith(("usage", " "))
            ]
            if code != 2 or len(said) != 1 or option[-1] not in said[0]:
                failures.append(f"{argv}: exit {code}: {err!r}")
            assert not any(tmp_path.iterdir()), f"{argv} wrote {list(tmp_path.iterdir())}"
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize(
    "argv",
    [
        ["ab", "HEAD"],  # no git checkout here
        ["ab", "HEAD", "--gpus", "-1", "--out", "deep/er/out"],
        ["bisect", "HEAD~1", "HEAD", "--out", "deep/er/out"],
    ],
)
def test_a_refused_ab_leaves_no_out_folder_behind(
    argv: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """An A/B refused before it ran a side (no checkout, GPUs this host lacks) leaves the
    folder it would have written to as it was: not there."""
    monkeypatch.chdir(tmp_path)
    code, err = _run(argv, capsys)
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1, err
    assert not list(tmp_path.iterdir()), err
