"""Where families are declared: the ``gpugauge.families`` entry points, read without loading one.

One mechanism for every family, the built-in ones too: an entry point
``name = "module:FAMILY"`` in the group ``gpugauge.families``, the name being the family's.
An installed distribution's entry points come from its metadata. A plain checkout run
(``python -m pytest benches`` with nothing installed, the GPU runners' way) has no metadata
of its own, so gpugauge's own list is read from the checkout's ``pyproject.toml``, the very
table an install turns into metadata; where both exist (an editable install) the checkout's
file is the newer and is the one read.

This module imports nothing of gpugauge: the markers, the tolerances and the checks need
the names, and loading a family (:mod:`gpugauge.family.registry`) is left to what needs its record.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from functools import cache
from importlib.metadata import entry_points
from pathlib import Path

GROUP = "gpugauge.families"  # the entry-point group a family registers in
OWN = "gpugauge"  # the distribution whose list a checkout's pyproject.toml holds
_TARGET = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")


class FamilyError(ValueError):
    """A family that cannot be declared or registered; the message names it and where."""


@dataclass(frozen=True)
class Declaration:
    """One declared family, not loaded: its name, where its record is, who declared it.

    ``name`` is the family's (its marker, its specs' ``family``, its baseline file's stem);
    ``target`` is ``"module:attribute"``, the attribute a ``Family``; ``source`` is the
    ``pyproject.toml`` or the installed distribution that declared it.
    """

    name: str
    target: str
    source: str

    def __post_init__(self) -> None:
        if not self.name.isidentifier():
            raise FamilyError(
                f"family {self.name!r} ({self.source}): the name must be a Python identifier"
            )
        if not _TARGET.match(self.target):
            raise FamilyError(
                f"family {self.name} ({self.source}): {self.target!r} is not 'module:attribute'"
            )


def checkout_pyproject(package_dir: Path | None = None) -> Path | None:
    """Gpugauge's own ``pyproject.toml`` where gpugauge is imported from a checkout, else None.

    ``package_dir`` is where the ``gpugauge`` package lies (by default this one's). An
    installed wheel has no ``pyproject.toml`` beside its package; a file there that is not
    gpugauge's project is not ours either.
    """
    here = package_dir or Path(__file__).resolve().parents[1]  # gpugauge/, above family/
    path = here.parent / "pyproject.toml"
    if not path.is_file():
        return None
    project = _read(path).get("project")
    return path if isinstance(project, dict) and project.get("name") == OWN else None


def _read(path: Path) -> dict:
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as err:
        raise FamilyError(f"{path}: cannot read the families it declares: {err}") from None


def declared_in(path: Path) -> list[Declaration]:
    """The families a ``pyproject.toml`` declares in ``[project.entry-points."gpugauge.families"]``.

    An error names the file: a checkout run must not start with a family list it misread.
    """
    project = _read(path).get("project", {})
    table = project.get("entry-points", {}).get(GROUP, {}) if isinstance(project, dict) else {}
    if not isinstance(table, dict):
        raise FamilyError(f'{path}: [project.entry-points."{GROUP}"] must be a table')
    out = []
    for name, target in table.items():
        if not isinstance(target, str):
            raise FamilyError(f"{path}: family {name} = {target!r} must be a 'module:attribute'")
        out.append(Declaration(name, target, str(path)))
    return out


def _canonical(dist: str) -> str:
    return re.sub(r"[-_.]+", "-", dist).lower()


def gather(own: list[Declaration] | None) -> tuple[Declaration, ...]:
    """``own`` (the checkout's list; None where gpugauge is installed) and the installed ones.

    An installed gpugauge's own entries are skipped where the checkout's list is read: the
    checkout is the code that runs. A name declared twice with two targets is an error
    naming both; the same declaration seen twice (one distribution on two paths) is one.
    """
    found: dict[str, Declaration] = {}
    installed = []
    for ep in entry_points(group=GROUP):
        dist = ep.dist.name if ep.dist is not None else ""
        if own is not None and _canonical(dist) == OWN:
            continue
        installed.append(Declaration(ep.name, ep.value, f"installed by {dist or '?'}"))
    for entry in [*(own or []), *installed]:
        seen = found.setdefault(entry.name, entry)
        if seen.target != entry.target:
            raise FamilyError(
                f"family {entry.name} is declared twice: {seen.target} ({seen.source}) "
                f"and {entry.target} ({entry.source})"
            )
    return tuple(sorted(found.values(), key=lambda e: e.name))


@cache
def entries() -> tuple[Declaration, ...]:
    """Every declared family, by name: the registry's order, the same from a checkout or an install.

    An install keeps no declaration order (setuptools writes entry points sorted), so the
    order of a family's tables, comparisons and charts is its name's, never the list's.
    """
    path = checkout_pyproject()
    return gather(declared_in(path) if path is not None else None)


def family_names() -> tuple[str, ...]:
    """The declared families' names (nothing is loaded)."""
    return tuple(e.name for e in entries())
