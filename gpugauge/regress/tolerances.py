"""Regression tolerances (policy), read from ``tolerances/*.toml``; baselines are the data.

Each metric's tolerance is the relative worsening allowed: ``time = 0.03`` lets the current
median be up to 3% above the baseline's; ``max_layers = 0`` (a higher-is-better count)
allows no drop at all. Keys are the metric names of :mod:`gpugauge.results.metrics`, whose
entries also give the built-in defaults. A file has up to three kinds of table::

    [default]                  # every benchmark
    time = 0.03
    [family.layers]            # one family
    time = 0.05
    [benchmark."relu-fwd-*"]   # benchmark ids, fnmatch globs; the longest pattern wins
    time = 0.08

More specific tables override less specific ones, metric by metric. A malformed file, an
unknown table or key, a ``[family.NAME]`` of a family the registry
(:mod:`gpugauge.family.entries`) does not declare (a typo would leave the family on the
default tolerances, unseen), a value that is not a number in [0, 10), or one key set by
two files is a :class:`ToleranceError` that names the file and the table or key.

Only regular files named ``*.toml`` are read, never a hidden one. Anything else whose name
holds ``.toml`` (an editor's lock file ``.#default.toml``, which is a link to nowhere, its
backup ``default.toml~``, a FIFO or folder of that name) is left unread and named in
:attr:`Tolerances.skipped`, said once in a warning: such files come and go beside the
real ones while someone edits them, and must not stop a gated run.
"""

from __future__ import annotations

import fnmatch
import math
import tomllib
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpugauge.family.entries import family_names
from gpugauge.results.files import FileError, read_parsed
from gpugauge.results.metrics import METRICS


class ToleranceError(ValueError):
    """A tolerance file that cannot be used."""


def _defaults() -> dict[str, float]:
    return {name: m.tolerance for name, m in METRICS.items()}


@dataclass(frozen=True)
class Tolerance:
    """Relative worsening allowed per metric (0.05 = 5%), for every registered metric."""

    by_metric: Mapping[str, float] = field(default_factory=_defaults)

    def __getitem__(self, name: str) -> float:
        """The tolerance of one metric."""
        return self.by_metric[name]

    def with_(self, **overrides: float) -> Tolerance:
        """A copy with some metrics' tolerances replaced."""
        return Tolerance({**self.by_metric, **overrides})


@dataclass(frozen=True)
class Tolerances:
    """Every table of every file, resolved per benchmark by :meth:`for_benchmark`."""

    default: dict[str, float] = field(default_factory=dict)
    families: dict[str, dict[str, float]] = field(default_factory=dict)
    benchmarks: dict[str, dict[str, float]] = field(default_factory=dict)
    skipped: tuple[str, ...] = ()  # entries not read: 'name (why)'
    folder: Path | None = None

    def skipped_line(self) -> str:
        """The one warning naming what was not read ('' when nothing was skipped)."""
        if not self.skipped:
            return ""
        return (
            f"tolerances: not read in {self.folder}: {'; '.join(self.skipped)} (only "
            "regular *.toml files are: editors' lock and backup files are left alone)"
        )

    def for_benchmark(self, family: str, bench_id: str) -> Tolerance:
        """Default, then the family's table, then matching benchmark globs (shortest first)."""
        tol = Tolerance().with_(**self.default)
        tol = tol.with_(**self.families.get(family, {}))
        for pattern in sorted(self.benchmarks, key=len):
            if fnmatch.fnmatchcase(bench_id, pattern):
                tol = tol.with_(**self.benchmarks[pattern])
        return tol


def _metrics(table: Any, path: Path, where: str) -> dict[str, float]:
    if not isinstance(table, dict):
        raise ToleranceError(f"{path}: [{where}] must be a table of metric = number")
    out = {}
    for key, value in table.items():
        if key not in METRICS:
            raise ToleranceError(
                f"{path}: unknown key {key!r} in [{where}]; metrics are {', '.join(METRICS)}"
            )
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
            or not 0 <= value < 10
        ):
            raise ToleranceError(
                f"{path}: [{where}] {key} = {value!r}: a tolerance is a "
                f"relative number in [0, 10) (0.05 means 5%)"
            )
        out[key] = float(value)
    return out


def _why_not_read(path: Path) -> str | None:
    """Why an entry of the tolerances folder is not read; None for a tolerance file."""
    name = path.name
    if ".toml" not in name:
        return None  # a README, anything else: not a tolerance file at all, and not news
    if path.is_symlink() and not path.exists():
        return "a link to nowhere, as an editor's lock file is"
    if name.startswith((".", "#")):
        return "hidden, as an editor's lock file is"
    if not name.endswith(".toml"):
        return "not *.toml, as an editor's backup is"
    if not path.is_file():
        return "a folder, not a file" if path.is_dir() else "not a regular file"
    return None


def tolerance_files(folder: Path) -> tuple[list[Path], list[str]]:
    """The files of ``folder`` to read, sorted, and the entries left unread: 'name (why)'."""
    if not folder.is_dir():
        return [], []
    read, skipped = [], []
    for path in sorted(folder.iterdir()):
        why = _why_not_read(path)
        if why is not None:
            skipped.append(f"{path.name} ({why})")
        elif path.name.endswith(".toml"):
            read.append(path)
    return read, skipped


def load_tolerances(folder: Path, families: Collection[str] | None = None) -> Tolerances:
    """Read and merge every ``*.toml`` file in ``folder`` (none: the built-in defaults).

    What is read, and what is named as skipped, is :func:`tolerance_files`'s. A ``folder``
    that exists but is not a directory is an error; whether a missing one is is the
    caller's choice (a folder named on the command line must exist). ``families`` are the
    names a ``[family.NAME]`` table may have: by default the declared families'.
    """
    if folder.exists() and not folder.is_dir():
        raise ToleranceError(f"tolerances folder {folder}: not a directory")
    if families is None:
        families = family_names()
    files, skipped = tolerance_files(folder)
    merged = Tolerances(skipped=tuple(skipped), folder=folder)
    owner: dict[tuple[str, str, str], Path] = {}
    for path in files:
        try:
            data = read_parsed(path, tomllib.loads, "TOML", (tomllib.TOMLDecodeError,))
        except FileError as err:
            raise ToleranceError(str(err)) from None
        for section, body in data.items():
            if section == "default":
                tables = {"": body}
                target = {"": merged.default}
            elif section in ("family", "benchmark"):
                if not isinstance(body, dict):
                    raise ToleranceError(f"{path}: [{section}] must hold named tables")
                tables = body
                unknown = sorted(set(body) - set(families)) if section == "family" else []
                if unknown:
                    raise ToleranceError(
                        f"{path}: unknown family in table [family.{unknown[0]}]; "
                        f"the families are {', '.join(sorted(families))}"
                    )
                store = merged.families if section == "family" else merged.benchmarks
                target = {name: store.setdefault(name, {}) for name in body}
            else:
                raise ToleranceError(
                    f"{path}: unknown table [{section}]; use [default], "
                    f'[family.NAME] or [benchmark."GLOB"]'
                )
            for name, table in tables.items():
                where = section if not name else f"{section}.{name}"
                for key, value in _metrics(table, path, where).items():
                    slot = (section, name, key)
                    if slot in owner:
                        raise ToleranceError(
                            f"{path}: [{where}] {key} is also set in {owner[slot]}"
                        )
                    owner[slot] = path
                    target[name][key] = value
    return merged
