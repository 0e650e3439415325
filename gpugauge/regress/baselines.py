"""Stored baselines: one JSON file per device class and family, samples included.

``baselines/<device-class>/<family>.json`` holds, per benchmark id, every timed round
(ms), the peak memory (bytes) and the energy per iteration (J). Files are parsed as JSON
only and validated; a bad file is a :class:`BaselineError` naming it. Writes go to a
temporary file renamed over the old one, so a failed run never leaves a half-written
baseline.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gpugauge.measure.environment import SCHEMA_VERSION, device_class, slug
from gpugauge.results.measurement import Measurement


class BaselineError(ValueError):
    """A baseline file that cannot be used; the message names the file and the problem."""


@dataclass(frozen=True)
class Entry:
    """One benchmark's numbers, as stored in a baseline or read from a run."""

    id: str
    family: str
    device_class: str
    time_ms: tuple[float, ...]
    peak_bytes: int | None = None
    energy_j: float | None = None
    # median ms of each independent run the baseline was recorded from (the gate reads
    # their spread as run-to-run noise); empty for a one-run baseline
    run_medians_ms: tuple[float, ...] = ()

    @property
    def run_spread(self) -> float:
        """Relative spread of the recorded runs' medians, max/min - 1 (0 for one run)."""
        if len(self.run_medians_ms) < 2:
            return 0.0
        return max(self.run_medians_ms) / min(self.run_medians_ms) - 1

    def as_dict(self) -> dict[str, Any]:
        """Stored form (id, family and device class are the file's keys)."""
        out: dict[str, Any] = {
            "time_ms": list(self.time_ms),
            "peak_bytes": self.peak_bytes,
            "energy_j_per_iter": self.energy_j,
        }
        if self.run_medians_ms:
            out["run_medians_ms"] = list(self.run_medians_ms)
        return out


def entry_of(m: Measurement) -> Entry:
    """The storable numbers of a measurement."""
    return Entry(
        id=m.spec.id,
        family=m.spec.family,
        device_class=device_class(m.spec.device),
        time_ms=m.timing.device_ms,
        # allocator peaks only: a CPU's first-run RSS growth does not repeat run to run
        peak_bytes=m.memory.peak_allocated_bytes if m.memory else None,
        energy_j=m.energy.joules_per_iter if m.energy else None,
    )


def entries_of_benchmark_json(path: Path) -> list[Entry]:
    """Entries of a gpugauge run saved by pytest-benchmark (json or autosave).

    Benchmarks without gpugauge's extra_info are skipped.
    """
    data = _read_json(path)
    out = []
    try:
        for b in data["benchmarks"]:
            info = b.get("extra_info") or {}
            if "gpugauge_schema" not in info:
                continue
            memory, energy = info.get("memory") or {}, info.get("energy") or {}
            out.append(
                Entry(
                    # runs saved before the id was stored: the pytest param id is the spec id
                    id=info.get("id") or b["param"],
                    family=info["family"],
                    device_class=info.get("device_class") or _saved_device_class(info),
                    time_ms=tuple(float(x) for x in info["timing"]["device_ms"]),
                    peak_bytes=memory.get("peak_allocated_bytes"),
                    energy_j=energy.get("joules_per_iter"),
                )
            )
    except (KeyError, TypeError, ValueError, AttributeError) as err:
        raise BaselineError(f"{path}: not a gpugauge pytest-benchmark JSON ({err!r})") from None
    return out


def _saved_device_class(info: dict[str, Any]) -> str:
    """Device class of a result saved before it was stored: from its fingerprint."""
    device = info["spec"]["device"]
    if not device.startswith("cuda"):
        return slug(f"cpu-{info['fingerprint']['platform'].split('-')[-2]}")
    index = int(device.partition(":")[2] or 0)
    return info["fingerprint"]["gpus"][index]["device_class"]


def combine_runs(runs: list[list[Entry]]) -> list[Entry]:
    """One entry per benchmark from several runs given oldest first.

    Each entry holds the newest run's numbers and every run's median, so that the gate
    can see the run-to-run noise.
    """
    latest: dict[tuple[str, str, str], Entry] = {}
    medians: dict[tuple[str, str, str], list[float]] = {}
    for run in runs:
        for e in run:
            key = (e.device_class, e.family, e.id)
            latest[key] = e
            medians.setdefault(key, []).append(statistics.median(e.time_ms))
    return [
        replace(e, run_medians_ms=tuple(medians[k]) if len(medians[k]) > 1 else ())
        for k, e in latest.items()
    ]


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except OSError as err:
        raise BaselineError(f"{path}: cannot be read ({err.strerror})") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise BaselineError(f"{path}: not valid JSON ({err})") from None


def _number(value: Any, path: Path, where: str, *, integer: bool = False) -> Any:
    kinds = (int,) if integer else (int, float)
    if value is None:
        return None
    if (
        isinstance(value, bool)
        or not isinstance(value, kinds)
        or not math.isfinite(value)
        or value < 0
    ):
        raise BaselineError(f"{path}: {where} must be a non-negative number, got {value!r}")
    return value


def parse_baseline(path: Path) -> dict[str, Entry]:
    """Read and validate one baseline file; entries by benchmark id."""
    data = _read_json(path)
    if not isinstance(data, dict):
        raise BaselineError(f"{path}: expected a JSON object at the top")
    if data.get("schema_version") != SCHEMA_VERSION:
        raise BaselineError(
            f"{path}: schema_version {data.get('schema_version')!r} is not "
            f"{SCHEMA_VERSION}; re-record it with --update-baselines"
        )
    for key in ("device_class", "family", "benchmarks"):
        if key not in data:
            raise BaselineError(f"{path}: missing key {key!r}")
    if not isinstance(data["benchmarks"], dict):
        raise BaselineError(f"{path}: 'benchmarks' must be an object keyed by benchmark id")
    out = {}
    for bid, raw in data["benchmarks"].items():
        where = f"benchmarks[{bid!r}]"
        if not isinstance(raw, dict):
            raise BaselineError(f"{path}: {where} must be an object")
        unknown = set(raw) - {"time_ms", "peak_bytes", "energy_j_per_iter", "run_medians_ms"}
        if unknown:
            raise BaselineError(f"{path}: {where} has unknown key(s) {sorted(unknown)}")
        samples = raw.get("time_ms")
        if not isinstance(samples, list) or not samples:
            raise BaselineError(f"{path}: {where}.time_ms must be a non-empty list of ms")
        times = tuple(_number(x, path, f"{where}.time_ms[{i}]") for i, x in enumerate(samples))
        if any(t is None for t in times):
            raise BaselineError(f"{path}: {where}.time_ms holds null")
        medians = raw.get("run_medians_ms", [])
        if not isinstance(medians, list) or any(
            _number(x, path, f"{where}.run_medians_ms[{i}]") is None for i, x in enumerate(medians)
        ):
            raise BaselineError(f"{path}: {where}.run_medians_ms must be a list of ms")
        out[bid] = Entry(
            id=bid,
            family=data["family"],
            device_class=data["device_class"],
            time_ms=times,
            peak_bytes=_number(raw.get("peak_bytes"), path, f"{where}.peak_bytes", integer=True),
            energy_j=_number(raw.get("energy_j_per_iter"), path, f"{where}.energy_j_per_iter"),
            run_medians_ms=tuple(float(x) for x in medians),
        )
    return out


def atomic_write_text(path: Path, text: str) -> None:
    """Write to a temporary file beside ``path``, then rename it over ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_json(path: Path, data: Any) -> None:
    """Serialize first (a bad value leaves nothing behind), then write atomically."""
    atomic_write_text(path, json.dumps(data, indent=1) + "\n")


class BaselineStore:
    """The ``baselines/`` folder: ``<device-class>/<family>.json``."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._cache: dict[tuple[str, str], dict[str, Entry]] = {}

    def path(self, device_cls: str, family: str) -> Path:
        """Where one device class's baseline of one family lives."""
        return self.root / device_cls / f"{family}.json"

    def load(self, device_cls: str, family: str) -> dict[str, Entry] | None:
        """The baseline entries, or None where none was recorded for this device class."""
        key = (device_cls, family)
        if key not in self._cache:
            p = self.path(device_cls, family)
            if not p.exists():
                return None
            self._cache[key] = parse_baseline(p)
        return self._cache[key]

    def validate_all(self) -> int:
        """Parse every baseline file (raises BaselineError on the first bad one)."""
        files = sorted(self.root.glob("*/*.json"))
        for p in files:
            parse_baseline(p)
        return len(files)

    def write(self, entries: Iterable[Entry], meta: dict[str, Any]) -> list[Path]:
        """Merge entries into their files (others in the file are kept); atomic per file."""
        groups: dict[tuple[str, str], list[Entry]] = {}
        for e in entries:
            groups.setdefault((e.device_class, e.family), []).append(e)
        written = []
        for (dev, fam), group in sorted(groups.items()):
            p = self.path(dev, fam)
            old = parse_baseline(p) if p.exists() else {}
            merged = {**old, **{e.id: e for e in group}}
            atomic_write_json(
                p,
                {
                    "schema_version": SCHEMA_VERSION,
                    "device_class": dev,
                    "family": fam,
                    "written": datetime.now(UTC).isoformat(timespec="seconds"),
                    **meta,
                    "benchmarks": {k: merged[k].as_dict() for k in sorted(merged)},
                },
            )
            self._cache.pop((dev, fam), None)
            written.append(p)
        return written
