"""Saved runs read back: pytest-benchmark's JSON (``--benchmark-json`` or autosave) as results.

This is the one reader of saved results: the report, the baseline command and anything
that merges results go through :func:`load_run`, which rebuilds every
:class:`~gpugauge.results.measurement.Measurement` from its ``extra_info``.
"""

from __future__ import annotations

import math
import platform
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpugauge.measure.environment import slug
from gpugauge.plain import RecordError
from gpugauge.results.files import FileError, read_json
from gpugauge.results.measurement import Measurement
from gpugauge.results.metrics import METRICS, Kind


class RunError(ValueError):
    """A file that is not a saved gpugauge run; the message names it and says why."""


@dataclass(frozen=True)
class SavedRun:
    """One saved pytest-benchmark run of gpugauge: its results and what they ran on."""

    path: Path
    label: str  # the run's date and time, or the file name
    measurements: list[Measurement]
    fingerprint: dict[str, Any] = field(default_factory=dict)
    verdicts: dict[str, dict[str, Any]] = field(default_factory=dict)  # the gate's, by id
    adhoc_comparisons: list[dict[str, Any]] = field(default_factory=list)  # gauge.compare's

    @property
    def machine(self) -> str:
        """'NVIDIA H200; torch 2.11.0; driver 580.159.04' (from the fingerprint)."""
        fp = self.fingerprint
        gpus = ", ".join(g.get("name", "?") for g in fp.get("gpus", [])) or fp.get("cpu", "")
        return f"{gpus}; torch {fp.get('torch', '?')}; driver {fp.get('driver') or '-'}"

    @property
    def device_classes(self) -> set[str]:
        """Every device class a result of this run was measured on."""
        return {m.device_class for m in self.measurements}


def _schema1_device_class(info: dict[str, Any]) -> str:
    """Device class of a schema-1 result saved before it was stored: from its fingerprint."""
    device = info["spec"]["device"]
    fp = info.get("fingerprint") or {}
    if not device.startswith("cuda"):
        return slug(f"cpu-{fp.get('platform', platform.machine()).split('-')[-2]}")
    index = int(device.partition(":")[2] or 0)
    return fp["gpus"][index]["device_class"]


def _check_readings(m: Measurement, where: str) -> None:
    """Every reading finite; samples positive (ratios divide by their median), values >= 0."""
    for name, values in m.readings().items():
        low_ok = (lambda v: v > 0) if METRICS[name].kind is Kind.SAMPLES else (lambda v: v >= 0)
        bad = [v for v in values if not (math.isfinite(v) and low_ok(v))]
        if bad:
            need = "positive" if METRICS[name].kind is Kind.SAMPLES else "non-negative"
            raise RunError(f"{where}: metric {name!r} has {bad[0]!r}; readings must be {need}")


def load_run(path: Path) -> SavedRun:
    """Every gpugauge result of a saved run; RunError if the file holds none.

    Benchmarks of the run that are not gpugauge's (plain pytest-benchmark tests) are left
    out; a gpugauge result that cannot be read is an error naming it.
    """
    try:
        data = read_json(path)
    except FileError as err:
        raise RunError(str(err)) from None
    if not isinstance(data, dict) or not isinstance(data.get("benchmarks"), list):
        raise RunError(f"{path}: not a pytest-benchmark JSON (no 'benchmarks' list)")
    found = []
    verdicts: dict[str, dict[str, Any]] = {}
    for i, bench in enumerate(data["benchmarks"]):
        info = bench.get("extra_info") if isinstance(bench, dict) else None
        if not isinstance(info, dict) or "gpugauge_schema" not in info:
            continue
        where = f"{path}: benchmarks[{i}]"
        try:
            if info["gpugauge_schema"] == 1:
                info = {
                    **info,
                    "id": info.get("id") or bench["param"],
                    "device_class": info.get("device_class") or _schema1_device_class(info),
                }
            m = Measurement.from_dict(info, where)
        except (RecordError, KeyError, IndexError, TypeError, AttributeError) as err:
            text = str(err)
            if not text.startswith(where):
                text = f"{where}: not a readable gpugauge result ({text})"
            raise RunError(text) from None
        _check_readings(m, where)
        found.append(m)
        if isinstance(info.get("gate"), dict):
            verdicts[m.id] = info["gate"]
    if not found:
        raise RunError(
            f"{path}: no gpugauge results in it (a pytest-benchmark run of other tests?)"
        )
    fp = (data.get("machine_info") or {}).get("gpugauge") or {}
    saved = data.get("gpugauge") or {}
    return SavedRun(
        path=path,
        label=str(data.get("datetime") or path.stem)[:19],
        measurements=found,
        fingerprint=fp if isinstance(fp, dict) else {},
        verdicts=verdicts,
        adhoc_comparisons=list(saved.get("comparisons") or []) if isinstance(saved, dict) else [],
    )
