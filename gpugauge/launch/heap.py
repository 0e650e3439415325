"""A process's heap made ready for its tests: torch's lazy imports done, start-up frozen.

gpugauge collects garbage before each measurement and after each A/B test, so that no
tensor of the last test holds GPU memory. A full collection walks every object the
collector tracks: some 340,000 once torch, ``torch._dynamo`` and the suite are imported.
A collection took 0.19 s on CI's CPU, and 0.08-0.14 s on an H100 host, twice a test
on each side of an A/B. ``gc.freeze`` moves what start-up made to a generation collections
skip: an A/B side's collections over 24 tests took 0.39 s, against 4.46 s unfrozen (an
H100 host, 2026-12-06). What the tests make is collected as before. Inside the timed
calls only young collections run, frozen or not (20 GPU cases on an H100 host: 4-5 ms of
them a process), so the freeze leaves the timed rounds as they were.

``torch.optim`` imports ``torch._dynamo`` lazily: torch 2.11 at an optimizer's first step,
torch 2.14 by the time an optimizer is made. That import adds some 135,000 objects, and
takes seconds where torch has no bytecode cache (4.4-5.3 s of a search's fresh process on
an H200 host). Made before the freeze, it is paid once a process, and by a fork server once
for all its children. A run that steps no optimizer pays it too: once, at its start.
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

    It freezes even where the process has a frozen generation already: the GPU hosts'
    Python 3.12.3 starts with one (375 objects, 2026-12-06), and a check for an earlier
    freeze had left every run there unfrozen, a collection taking 0.08-0.14 s. The
    collector has one frozen generation, so its end gives back an earlier freeze too:
    a process running several sessions (pytester's in-process runs) keeps collecting
    what each left.
    """
    import_lazy()
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()
