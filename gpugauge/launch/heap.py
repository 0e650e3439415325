"""A process's heap made ready for its tests: torch's lazy imports done, start-up frozen.

gpugauge collects garbage before each measurement and after each A/B test, so that no
tensor of the last test holds GPU memory. A full collection walks every object the
collector tracks; after torch, its compiler stack and the suite are imported that is
some 340,000 objects, and a collection took 0.13-0.18 s on an H200 host and 0.19 s on CI's
CPU, twice a test. ``gc.freeze`` moves what start-up made to a generation collections
skip (0.19 s to under 1 ms on CI's CPU). What the tests make is collected as before.

torch 2.11 imports ``torch._dynamo`` at the first step of any ``torch.optim`` optimizer
(``import torch._dynamo`` inside the step; torch 2.14 imports it with torch). That import
is seconds where torch has no bytecode cache, and a million objects: made before the
freeze, it is paid once a process, and by a fork server once for all its children.
"""

from __future__ import annotations

import gc
import importlib
from collections.abc import Iterator
from contextlib import contextmanager

LAZY_IMPORTS = ("torch._dynamo",)  # what torch imports on a first training step


def import_lazy() -> None:
    """Import :data:`LAZY_IMPORTS` now (none touches CUDA)."""
    for name in LAZY_IMPORTS:
        importlib.import_module(name)


@contextmanager
def frozen() -> Iterator[None]:
    """Within the block, collections skip what exists at its start (imports done first).

    The objects are given back to the collector at its end, so that a process running
    several sessions (pytester's in-process runs) keeps collecting them.
    """
    import_lazy()
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()
