"""Which GPU's pair of processes runs which test, where one A/B spreads over a host's GPUs.

Every GPU's two sides collect the whole selection and walk it in order. At each test the
GPU's coordinator asks :meth:`Claims.take`: the first GPU to reach a test runs it, and the
others skip it. A GPU that ends a test sooner reaches the next one first, so the GPUs
share the work as a queue would, whatever each test costs. Base and head name a test
alike, so a test that only one build has is taken once too.

The claims also carry the stop: a Ctrl-C, or an error on one GPU, sets it, and every
GPU's coordinator stops its sides at their next message (:class:`Stopped`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from gpugauge.ab.result import ABReport


class Stopped(KeyboardInterrupt):
    """One GPU's A/B, stopped from outside it: a Ctrl-C, or an error on another GPU."""


@dataclass
class Claims:
    """The tests taken so far, by GPU, and the stop every GPU's coordinator watches.

    ``on_cases``: called with every GPU's first-round report so far, after each test any
    GPU finishes (the merged ``ab.json`` of an A/B still running).
    """

    on_cases: Callable[[Sequence[ABReport]], None] | None = None
    stop: threading.Event = field(default_factory=threading.Event)
    taken: dict[str, str] = field(default_factory=dict)  # node id -> the GPU that took it
    total: int = 0  # tests in the selection: the most any GPU's sides collected
    _so_far: dict[str, ABReport] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _write: threading.Lock = field(default_factory=threading.Lock)  # on_cases, one at a time
    _made: int = 0  # snapshots of _so_far taken
    _written: int = 0  # the last one passed to on_cases

    def take(self, nodeid: str, gpu: str) -> bool:
        """Whether ``gpu`` runs ``nodeid``: True for the first GPU to ask, and for it again."""
        with self._lock:
            return self.taken.setdefault(nodeid, gpu) == gpu

    def collected(self, count: int) -> None:
        """A GPU's sides collected ``count`` tests between them."""
        with self._lock:
            self.total = max(self.total, count)

    @property
    def done(self) -> int:
        """Tests finished so far, over every GPU."""
        with self._lock:
            return sum(len(r.cases) for r in self._so_far.values())

    def finished(self, gpu: str, so_far: ABReport) -> None:
        """``gpu``'s first round so far, after one more test: passed on to ``on_cases``."""
        with self._lock:  # take() waits on this lock: the write is done outside it
            self._so_far[gpu] = so_far
            reports = list(self._so_far.values())
            self._made += 1
            mine = self._made
        if self.on_cases is None:
            return
        with self._write:
            if mine > self._written:  # else a later snapshot is written already
                self.on_cases(reports)
                self._written = mine
