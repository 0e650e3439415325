"""The suite's pytest markers, registered in every run without importing a family.

The device markers are registered in ``pytest_configure``. A family's marker must be
registered before a test carries it (``--strict-markers``) but without importing the
family, which may load torch: a built-in family by the name of its package under
``gpugauge/families/``, found on disk; an installed one by its entry point's name, read
without loading it. Once gpugauge starts, a family whose name was not known by then gets
its own line (:func:`gpugauge.startup.register_family_markers`), and
:func:`gpugauge.plugin.parametrize_cases` marks each case with its family.
"""

from __future__ import annotations

import importlib.util
import pkgutil
from importlib.metadata import entry_points

DEVICE_MARKERS = (
    "gpu: needs a CUDA device; skipped with a reason where none is visible",
    "cpu: runs on the CPU",
    "multi_gpu(n): needs n (default 2) CUDA devices; skipped with a reason where fewer are seen",
    "nightly: a case the nightly job gates (-m nightly): every case but those its family "
    "leaves to the seed and full runs",
)
ENTRY_POINT_GROUP = "gpugauge.families"  # where installed packages register a family

# markers whose presence on a collected test means the run uses gpugauge
GAUGE_MARKERS = frozenset(line.split(":")[0].split("(")[0] for line in DEVICE_MARKERS)


def family_marker_line(name: str, about: str) -> str:
    """The ``markers`` ini line that registers a family's marker."""
    return f"{name}: family {name} ({about})"


def built_in_family_names() -> list[str]:
    """The packages under ``gpugauge/families/``, each a built-in family; none is imported."""
    spec = importlib.util.find_spec("gpugauge.families")  # imports gpugauge only
    where = spec.submodule_search_locations if spec is not None else None
    return sorted(m.name for m in pkgutil.iter_modules(where or []) if m.ispkg)


def marker_lines() -> list[str]:
    """Every marker line the plugin registers up front: devices, then families by name."""
    lines = [*DEVICE_MARKERS]
    names = built_in_family_names()
    lines += [family_marker_line(name, "built in") for name in names]
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        if ep.name not in names:
            lines.append(family_marker_line(ep.name, f"installed from {ep.value}"))
    return lines
