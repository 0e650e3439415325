"""A build's setup answers kept for its later processes: a frontier found, a cut fitted.

An A/B runs each build in rounds of fresh processes. A setup whose answer depends only on
the build and the device (how many layers fit one GPU, where a split's cut fits) would
cost every round its seconds again, though no round times it. With
``--gauge-setup-memo DIR`` a test keeps such answers in DIR, one JSON file per result and
name, and a later process reads them instead of working them out. The folder belongs to
one build on one host: ``gpugauge ab`` gives each build its own, emptied when the A/B
starts. Without the option nothing is kept.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpugauge.results.files import FileError, atomic_write_json, read_json


@dataclass(frozen=True)
class SetupMemo:
    """Where a run keeps its setup answers (None: nowhere; each is worked out)."""

    folder: Path | None = None

    def kept(self, result_id: str, name: str, work_out: Callable[[], Any]) -> tuple[Any, bool]:
        """The answer ``name`` of result ``result_id``, and whether an earlier process found it.

        Else ``work_out()``, kept for the next process. The answer must be plain JSON; it
        is returned as read back, so every process sees the same types (lists, not
        tuples). An entry that cannot be read is worked out again and replaced.
        """
        path = None if self.folder is None else self.folder / result_id / f"{name}.json"
        if path is not None and path.exists():
            try:
                return read_json(path)["value"], True
            except (FileError, KeyError, TypeError):
                pass  # a broken entry: worked out again below
        value = json.loads(json.dumps(work_out()))
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_json(path, {"value": value})
        return value, False
