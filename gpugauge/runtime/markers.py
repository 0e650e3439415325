"""The suite's pytest markers, registered in every run without importing a family.

The device markers are registered in ``pytest_configure``. A family's marker must be
registered before a test carries it (``--strict-markers``) but without importing the
family, which may load torch: every family, built in or installed, by the name of its
entry point (:mod:`gpugauge.family.entries`), read without loading it.
:func:`gpugauge.plugin.parametrize_cases` marks each case with its family.
"""

from __future__ import annotations

from gpugauge.family.entries import FamilyError, entries

DEVICE_MARKERS = (
    "gpu: needs a CUDA device; skipped with a reason where none is visible",
    "cpu: runs on the CPU",
    "multi_gpu(n): needs n (default 2) CUDA devices; skipped with a reason where fewer are seen",
    "nightly: a case the nightly job gates (-m nightly): every case but those its family "
    "leaves to the seed and full runs",
    "untimed: a test that times no result of its own (a memory search, a count); a "
    "same-GPU A/B, which compares times, leaves it out",
    "launched: a test that times its case in processes it launches (torchrun ranks); a "
    "same-GPU A/B starts and ends both sides' launches at once, their blocks alternating alone",
)

# markers whose presence on a collected test means the run uses gpugauge
GAUGE_MARKERS = frozenset(line.split(":")[0].split("(")[0] for line in DEVICE_MARKERS)


def family_marker_line(name: str, about: str) -> str:
    """The ``markers`` ini line that registers a family's marker."""
    return f"{name}: family {name} ({about})"


def marker_lines() -> list[str]:
    """Every marker line the plugin registers up front: devices, then each declared family.

    A declaration that cannot be read registers no family marker here: this runs in every
    pytest run of the environment, and the error stops a run only once it uses gpugauge
    (:func:`gpugauge.runtime.startup.start` loads the registry, which raises it).
    """
    try:
        declared = entries()
    except FamilyError:
        declared = ()
    return [*DEVICE_MARKERS, *(family_marker_line(e.name, e.target) for e in declared)]
