"""A build's setup answers kept for its later processes: a frontier found, a cut fitted.

An A/B runs each build in rounds of fresh processes. A setup whose answer depends only on
the build and the device (how many layers fit one GPU, where a split's cut fits) would
cost every round its seconds again, though no round times it. With
``--gauge-setup-memo DIR`` a test keeps such answers in DIR, one JSON file per result and
name, each with the provenance it was worked out under (the run's environment
fingerprint: commit, torch, CUDA, GPUs; and the result's spec), and a later process with
the same provenance reads it instead of working it out. ``gpugauge ab`` gives each build
a folder of its own, emptied when the A/B starts: a working tree's uncommitted changes are
not in the fingerprint, and the folder is what keeps two such trees apart.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpugauge.results.files import FileError, atomic_write_json, read_json


@dataclass(frozen=True)
class SetupMemo:
    """Where a run keeps its setup answers (None: nowhere), and their provenance.

    ``provenance`` is plain JSON: an entry kept under another one is worked out again.
    """

    folder: Path | None = None
    provenance: dict[str, Any] = field(default_factory=dict)

    def kept(
        self, result_id: str, name: str, work_out: Callable[[], Any], fresh: bool = False
    ) -> tuple[Any, bool]:
        """The answer ``name`` of result ``result_id``, and whether an earlier process found it.

        Else ``work_out()``, kept for the next process; ``fresh`` works it out (and keeps
        it) even where an earlier process kept one: this process knows it better. The
        answer must be plain JSON, NaN and infinities excluded; it is returned as read
        back, so every process sees the same types (lists, not tuples). An entry that
        cannot be read, or was kept under another provenance, is worked out again and
        replaced.
        """
        path = None if self.folder is None else self.folder / result_id / f"{name}.json"
        if path is not None and path.exists() and not fresh:
            try:
                entry = read_json(path)
                if entry["provenance"] == self._provenance():
                    return entry["value"], True
            except (FileError, KeyError, TypeError):
                pass  # a broken entry: worked out again below
        value = json.loads(json.dumps(work_out(), allow_nan=False))
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_json(path, {"provenance": self._provenance(), "value": value})
        return value, False

    def _provenance(self) -> Any:
        """The provenance as read back from JSON, to compare with a kept entry's."""
        return json.loads(json.dumps(self.provenance))
