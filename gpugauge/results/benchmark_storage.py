"""pytest-benchmark's own files, written atomically and under unique names where gpugauge can.

pytest-benchmark 5.x writes ``--benchmark-json PATH`` with ``open(PATH, "wb")`` at the end
of the session, and ``--benchmark-autosave``/``--benchmark-save NAME`` with
``FileStorage.save``, which takes the next free ``NNNN_<name>.json`` from the files it sees
and opens it ``"wb"``. So a full disk truncates the previous JSON and loses it, and two
runs saving at once pick the same number: one run is lost.

:class:`BenchmarkFiles` (registered by the gpugauge plugin) replaces those two writes on
this session's pytest-benchmark objects, keeping pytest-benchmark's serialization and
file names:

- ``--benchmark-json``: the same bytes, through :func:`~gpugauge.results.files.atomic_write_bytes`
  (a temporary file renamed over the old one). A failed write keeps the previous file, is
  said in one line naming the file, and makes the run's exit status non-zero.
- saves into a file storage: under an ``flock`` of the storage folder the next number is
  taken from the files present, as pytest-benchmark does; the run is staged in a
  temporary file and hard-linked to its name, which fails if the name exists (a writer
  that does not take the lock), and then the next number is tried
  (:func:`~gpugauge.results.files.atomic_write_new`).

Where gpugauge cannot: an ``elasticsearch+`` storage is written by pytest-benchmark over the
network, untouched; ``--benchmark-csv``, ``--benchmark-histogram`` and
``--benchmark-cprofile-dump`` files are pytest-benchmark's own, written in place; and if a
pytest-benchmark version lacks the methods replaced here, its writes stay as they are and
the run says so in one line.

:func:`check_storage_destinations` checks, when gpugauge starts in a run, that these
destinations can be written before anything is measured: ``--benchmark-json`` naming a
folder, a FIFO or a file under a file, or a storage that cannot be written, is a usage
error.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpugauge.results.files import (
    atomic_write_bytes,
    atomic_write_new,
    folder_locked,
    signals_interrupt,
    writable_problem,
)

NUMBERED = re.compile(r"^(\d{4})_")


def storage_folder(config: pytest.Config) -> Path | None:
    """The file storage's folder of ``--benchmark-storage``; None for another backend."""
    storage = str(config.getoption("benchmark_storage", None) or "")
    if not storage:
        return None
    if storage.startswith("file://"):
        return Path(storage[len("file://") :])
    return None if "://" in storage else Path(storage)


def check_storage_destinations(config: pytest.Config) -> None:
    """pytest-benchmark's destinations must be writable now; ValueError naming the option."""
    json_path = config.getoption("benchmark_json", None)
    if hasattr(json_path, "write"):  # a pytest-benchmark that opens it (argparse.FileType)
        json_path = json_path.name
    if json_path is not None:
        path = Path(json_path)
        if str(json_path).strip() in ("", "."):
            raise ValueError("--benchmark-json: an empty path; name a file")
        if path.is_dir():
            raise ValueError(f"--benchmark-json {path}: is a directory; name a file")
        if path.exists() and not path.is_file():
            raise ValueError(f"--benchmark-json {path}: not a regular file (a FIFO or device)")
        problem = writable_problem(path.parent)
        if problem:
            raise ValueError(f"--benchmark-json {path}: its folder {path.parent}: {problem}")
    saving = config.getoption("benchmark_save", None) or config.getoption(
        "benchmark_autosave", None
    )
    folder = storage_folder(config)
    if saving and folder is not None:
        problem = writable_problem(folder)
        if problem:
            raise ValueError(f"--benchmark-storage {folder}: {problem}")


def _numbered(folder: Path, name: str) -> Iterator[Path]:
    """``NNNN_<name>.json`` from one past the highest number in ``folder``, upwards."""
    taken = [int(m.group(1)) for p in folder.glob("*.json") if (m := NUMBERED.match(p.name))]
    for n in itertools.count(max(taken, default=0) + 1):
        yield folder / f"{n:04}_{name}.json"


class BenchmarkFiles:
    """A pytest plugin object: pytest-benchmark's writes of this session made atomic."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.failures: list[str] = []
        self.notes: list[str] = []

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionstart(self, session: pytest.Session) -> None:
        """Replace the writes as the session starts (when registered before it)."""
        self.install()

    def install(self) -> None:
        """Replace the JSON and storage writes of pytest-benchmark's session object."""
        bs = getattr(self.config, "_benchmarksession", None)
        if bs is None:
            return
        if callable(getattr(bs, "save_json", None)) and hasattr(bs, "json"):
            bs.save_json = lambda output_json: self._save_json(bs, output_json)
        else:
            self.notes.append("pytest-benchmark has no save_json: --benchmark-json not atomic")
        storage = getattr(bs, "storage", None)
        from pytest_benchmark.storage.file import FileStorage

        if isinstance(storage, FileStorage) and callable(getattr(storage, "get", None)):
            storage.save = lambda output_json, save: self._save(storage, output_json, save)

    def _save_json(self, bs: Any, output_json: Any) -> None:
        from pytest_benchmark.utils import safe_dumps

        # pytest-benchmark before 5.3 hands over the file it opened (argparse.FileType):
        # it is truncated already, so it is closed and replaced whole by its name
        given = bs.json
        if hasattr(given, "write"):
            given.close()
            given = given.name  # a Path has a .name too, but only a file object is opened
        path = Path(given).absolute()
        content = safe_dumps(output_json, ensure_ascii=True, indent=4).encode()
        try:
            with signals_interrupt():  # SIGTERM, too, removes the staged file
                atomic_write_bytes(path, content)
        except OSError as err:
            self.failures.append(
                f"--benchmark-json {path}: not written ({err.strerror or err}); "
                "the previous file is kept"
            )
            return
        bs.logger.info(f"Wrote benchmark data in: {path}", purple=True)

    def _save(self, storage: Any, output_json: Any, save: str) -> None:
        from pytest_benchmark.utils import safe_dumps

        folder = storage.get("x").parent  # the machine's folder, made by get()
        content = safe_dumps(output_json, ensure_ascii=True, indent=4).encode()
        try:
            with signals_interrupt(), folder_locked(folder):
                path = atomic_write_new(content, _numbered(folder, save))
        except OSError as err:
            self.failures.append(
                f"--benchmark-storage {folder}: this run was not saved ({err.strerror or err})"
            )
            return
        storage.logger.info(f"Saved benchmark data in: {path}")

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        """A save that failed makes the run fail (pytest-benchmark saved before this)."""
        if self.failures and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        """One line per failed save or write that could not be made atomic."""
        for line in self.notes + self.failures:
            terminalreporter.write_line(f"[gpugauge] {line}", red=line in self.failures)


def guard(config: pytest.Config, started: bool = False) -> None:
    """Check pytest-benchmark's destinations and make its writes atomic (plugin wiring).

    ``started``: the session has started already (gpugauge was first used while collecting),
    so the writes are replaced now rather than in ``pytest_sessionstart``.
    """
    check_storage_destinations(config)
    if not config.pluginmanager.has_plugin("gpugauge-benchmark-files"):
        files = BenchmarkFiles(config)
        config.pluginmanager.register(files, "gpugauge-benchmark-files")
        if started:
            files.install()
