"""A module holds one concept: its length is a hint to look, not the rule.

Past :data:`LOOK_AT` lines the test warns, naming the module: a reader should ask whether it
holds two ideas, and split it by concept if so (never into pieces only to be shorter).
Past :data:`LIMIT`, no module of this library holds one idea, and the test fails.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

import gpugauge
from tests.test_import_graph import modules

LOOK_AT = 450  # lines: worth a look
LIMIT = 900  # lines: more than one concept, surely
PACKAGE = Path(gpugauge.__file__).parent


def _lengths() -> dict[str, int]:
    """Lines of every module the wheel ships, by path relative to gpugauge/ (models/...: the
    top-level folder it ships as gpugauge.models)."""
    root = PACKAGE.parent
    return {
        (
            path.relative_to(PACKAGE) if path.is_relative_to(PACKAGE) else path.relative_to(root)
        ).as_posix(): len(path.read_text(encoding="utf-8").splitlines())
        for path in sorted(modules(root).values())
    }


class LongModule(UserWarning):
    """A module worth a look: shown in the run's warnings summary, never an error."""


@pytest.mark.filterwarnings("default::tests.test_module_sizes.LongModule")
def test_a_long_module_is_named_and_none_is_past_the_limit() -> None:
    lengths = _lengths()
    long = {name: n for name, n in lengths.items() if n > LOOK_AT}
    if long:
        warnings.warn(
            f"modules over {LOOK_AT} lines (one concept each?): "
            + ", ".join(f"gpugauge/{name} ({n})" for name, n in sorted(long.items())),
            LongModule,
            stacklevel=1,
        )
    too_long = {name: n for name, n in lengths.items() if n > LIMIT}
    assert not too_long, f"modules over {LIMIT} lines: split them by concept: {too_long}"
