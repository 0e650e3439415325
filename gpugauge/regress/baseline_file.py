"""The baseline file format: its records, and the one reader that checks a file.

``baselines/<device-class>/<family>.json`` holds, per benchmark id, each registry metric's
readings (``{"unit", "samples"[, "run_medians", "run_hosts"]}`` or
``{"unit", "value"[, "run_medians"]}``)
and, where a
round's kernels were recorded, ``kernels``: ``[{"name", "share"}]``. :func:`parse_baseline`
reads a file and :func:`parse_baseline_data` checks parsed JSON; a bad file is a
:class:`BaselineError` naming it and the entry. The writer
(:class:`gpugauge.regress.baselines.BaselineStore`) checks what it is about to write with
this same reader (:func:`checked_text`), so no file it writes can fail a later read.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpugauge.core.json_records import finite_number
from gpugauge.measure.environment import SCHEMA_VERSION
from gpugauge.results.files import FileError, name_problem, read_json
from gpugauge.results.metrics import METRICS, Kind
from gpugauge.results.runs import reading_problem

# Shares are rounded when recorded: their sum may pass 1 by this much.
SHARE_SLACK = 1e-6


class BaselineError(ValueError):
    """A baseline file that cannot be used; the message names the file and the problem."""


@dataclass(frozen=True)
class KernelShare:
    """A kernel (or copy) of one recorded round and its share of the round's device time."""

    name: str
    share: float  # 0-1, of the round's device time (older baselines: of the kernels listed)


@dataclass(frozen=True)
class Entry:
    """One benchmark's metric readings, as stored in a baseline or taken from a result.

    ``readings`` maps registry metric names to their readings (every round's time in ms, one
    peak in bytes, ...). ``run_medians`` holds, per metric, the median (for a value metric,
    the reading) of each independent run the baseline was recorded from: the gate reads
    their spread as run-to-run noise. It is empty for a one-run baseline. ``kernels`` holds
    one round's kernels with their shares of its device time, longest first (empty when
    the run did not record them).
    """

    id: str
    family: str
    device_class: str
    readings: Mapping[str, tuple[float, ...]]
    run_medians: Mapping[str, tuple[float, ...]] = field(default_factory=dict)
    kernels: tuple[KernelShare, ...] = ()
    # per samples metric, the host of each run (parallel to run_medians; one host for a
    # one-run entry); "" where a run's host is unknown (recorded before hosts were kept)
    run_hosts: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    def hosts(self, name: str) -> int | None:
        """How many hosts the runs of metric ``name`` came from; None where any is unknown."""
        hosts = self.run_hosts.get(name, ())
        if not hosts or not all(hosts):
            return None
        return len(set(hosts))

    def nearest_reading(self, name: str, current: float | None = None) -> float:
        """A value metric's reference for ``current``: the recorded run reading nearest it.

        ``current`` itself where it lies within the recorded runs' range: each run's reading
        (a peak with the cuDNN workspace one host chose, another's with its own) is one the
        baseline's code took on this device class, so none of them is a change. Its central
        run's reading without ``current``, or where one run was recorded.
        """
        if current is None:
            return self.readings[name][0]
        runs = self.run_medians.get(name) or self.readings[name][:1]
        return min(max(current, min(runs)), max(runs))

    def run_spread(self, name: str) -> float:
        """Relative spread of the recorded runs' medians, max/min - 1 (0 for one run)."""
        medians = self.run_medians.get(name, ())
        if len(medians) < 2 or min(medians) <= 0:
            return 0.0
        return max(medians) / min(medians) - 1

    def as_dict(self) -> dict[str, Any]:
        """Stored form, by metric (id, family and device class are the file's keys)."""
        out: dict[str, Any] = {}
        for name, values in self.readings.items():
            m = METRICS[name]
            stored: dict[str, Any] = {"unit": m.unit}
            if m.kind is Kind.SAMPLES:
                stored["samples"] = list(values)
                if self.run_medians.get(name):
                    stored["run_medians"] = list(self.run_medians[name])
                if self.run_hosts.get(name):
                    stored["run_hosts"] = list(self.run_hosts[name])
            else:
                stored["value"] = values[0]
                if self.run_medians.get(name):
                    stored["run_medians"] = list(self.run_medians[name])
            out[name] = stored
        if self.kernels:
            out["kernels"] = [{"name": k.name, "share": k.share} for k in self.kernels]
        return out


def kernel_shares(recorded: Any) -> tuple[KernelShare, ...]:
    """``extra["kernels"]`` (rows of name, calls, us, share; longest first) as shares.

    A row's ``share`` is of its round's whole device time; rows recorded without it
    (the first baselines listed 8 kernels and no share), or whose shares add up to more than the
    round (kernels of several streams overlap), get their share of the listed rows' time.
    Anything else (a result from elsewhere, edited by hand; a kernel named twice) gives no
    kernels: the gate then says nothing about them rather than failing.
    """
    if not isinstance(recorded, list) or not recorded:
        return ()
    rows = []
    for k in recorded:
        us = k.get("us") if isinstance(k, dict) else None
        name = k.get("name") if isinstance(k, dict) else None
        if not isinstance(name, str) or not name or not _finite_non_negative(us):
            return ()
        rows.append((name, float(us), k.get("share")))
    if len({name for name, _, _ in rows}) != len(rows):
        return ()
    listed = sum(us for _, us, _ in rows)
    shares = [share for _, _, share in rows]
    if all(_is_share(x) for x in shares) and sum(shares) <= 1 + SHARE_SLACK:
        return tuple(KernelShare(name, float(share)) for name, _, share in rows)
    if listed <= 0:
        return ()
    return tuple(KernelShare(name, us / listed) for name, us, _ in rows)


def _finite_non_negative(x: Any) -> bool:
    return finite_number(x) and x >= 0


def _is_share(x: Any) -> bool:
    """A number from 0 to 1."""
    return _finite_non_negative(x) and x <= 1


def entry_problem(e: Entry) -> str | None:
    """What the baseline reader would refuse in a file holding ``e`` alone, or None."""
    doc = {
        "schema_version": SCHEMA_VERSION,
        "device_class": e.device_class,
        "family": e.family,
        "benchmarks": {e.id: e.as_dict()},
    }
    here = Path("<entry>")
    try:
        parse_baseline_data(json.loads(json.dumps(doc, allow_nan=False)), here)
    except ValueError as err:  # BaselineError, or a NaN json.dumps refused
        return str(err).removeprefix(f"{here}: ")
    return None


def _read_json(path: Path) -> Any:
    try:
        return read_json(path)
    except FileError as err:
        raise BaselineError(str(err)) from None


def _number(
    value: Any, path: Path, where: str, *, integer: bool = False, positive: bool = False
) -> Any:
    kinds = (int,) if integer else (int, float)
    if value is None:
        return None
    what = "a positive" if positive else "a non-negative"
    if isinstance(value, bool) or not isinstance(value, kinds):
        raise BaselineError(f"{path}: {where} must be {what} number, got {value!r}")
    problem = reading_problem(value, samples=positive)
    if problem:
        raise BaselineError(f"{path}: {where} must be {what} number, got {value!r} (it {problem})")
    return value


def _v1_metrics(raw: dict[str, Any], path: Path, where: str) -> dict[str, Any]:
    """A schema-1 benchmark entry in the schema-2 layout (errors name the schema-1 keys)."""
    unknown = set(raw) - {"time_ms", "peak_bytes", "energy_j_per_iter", "run_medians_ms"}
    if unknown:
        raise BaselineError(f"{path}: {where} has unknown key(s) {sorted(unknown)}")
    time = {"unit": "ms", "samples": list(_numbers(raw.get("time_ms"), path, f"{where}.time_ms"))}
    if raw.get("run_medians_ms"):
        at = f"{where}.run_medians_ms"
        time["run_medians"] = list(_numbers(raw["run_medians_ms"], path, at))
    out: dict[str, Any] = {"time": time}
    peak = _number(raw.get("peak_bytes"), path, f"{where}.peak_bytes", integer=True)
    if peak is not None:
        out["memory"] = {"unit": "bytes", "value": peak}
    energy = _number(raw.get("energy_j_per_iter"), path, f"{where}.energy_j_per_iter")
    if energy is not None:
        out["energy"] = {"unit": "J", "value": energy}
    return out


def _numbers(values: Any, path: Path, where: str, positive: bool = True) -> tuple[float, ...]:
    """Samples: positive (current/baseline divides by their median), finite, at least one.

    A value metric's readings need only be non-negative (a case that allocates nothing).
    """
    if not isinstance(values, list) or not values:
        raise BaselineError(f"{path}: {where} must be a non-empty list of numbers")
    return tuple(
        float(_number(x, path, f"{where}[{i}]", positive=positive)) for i, x in enumerate(values)
    )


def _hosts(value: Any, runs: int, path: Path, where: str) -> tuple[str, ...]:
    """A metric's run hosts: strings, one per run ("" unknown)."""
    if not isinstance(value, list) or not all(isinstance(x, str) for x in value):
        raise BaselineError(f"{path}: {where} must be a list of host names")
    if len(value) != runs:
        raise BaselineError(f"{path}: {where} names {len(value)} hosts for {runs} runs")
    return tuple(value)


def _parse_metrics(
    raw: dict[str, Any], path: Path, where: str
) -> tuple[dict[str, tuple[float, ...]], dict[str, tuple[float, ...]], dict[str, tuple[str, ...]]]:
    readings: dict[str, tuple[float, ...]] = {}
    medians: dict[str, tuple[float, ...]] = {}
    hosts: dict[str, tuple[str, ...]] = {}
    for name, stored in raw.items():
        at = f"{where}.{name}"
        if name not in METRICS:
            raise BaselineError(f"{path}: {at}: unknown metric; metrics are {', '.join(METRICS)}")
        m = METRICS[name]
        if not isinstance(stored, dict):
            raise BaselineError(f"{path}: {at} must be an object")
        keys = (
            {"unit", "samples", "run_medians", "run_hosts"}
            if m.kind is Kind.SAMPLES
            else {"unit", "value", "run_medians"}
        )
        if set(stored) - keys:
            raise BaselineError(f"{path}: {at} has unknown key(s) {sorted(set(stored) - keys)}")
        if stored.get("unit") != m.unit:
            raise BaselineError(f"{path}: {at}.unit is {stored.get('unit')!r}, not {m.unit!r}")
        if m.kind is Kind.SAMPLES:
            readings[name] = _numbers(stored.get("samples"), path, f"{at}.samples")
            if "run_medians" in stored:
                medians[name] = _numbers(stored["run_medians"], path, f"{at}.run_medians")
            if "run_hosts" in stored:
                runs = len(medians.get(name, ())) or 1
                hosts[name] = _hosts(stored["run_hosts"], runs, path, f"{at}.run_hosts")
        else:
            value = _number(stored.get("value"), path, f"{at}.value")
            if value is None:
                raise BaselineError(f"{path}: {at}.value must be a number")
            readings[name] = (float(value),)
            if "run_medians" in stored:
                runs = _numbers(stored["run_medians"], path, f"{at}.run_medians", positive=False)
                if not any(math.isclose(float(value), r, rel_tol=1e-9) for r in runs):
                    raise BaselineError(
                        f"{path}: {at}.value {value:g} is none of its runs' readings "
                        f"{list(runs)}; record it anew"
                    )
                medians[name] = runs
    return readings, medians, hosts


def parse_baseline(path: Path, place: tuple[str, str] | None = None) -> dict[str, Entry]:
    """Read and validate one baseline file (schema 2, or 1); entries by benchmark id.

    ``place`` is the (device class, family) its location in a store says it holds: a file
    that holds another one would be compared across device classes, so it is an error.
    """
    return read_baseline(path, place)[0]


def read_baseline(
    path: Path, place: tuple[str, str] | None = None
) -> tuple[dict[str, Entry], list[str]]:
    """A baseline file's entries and the runs it names (``recorded_from``), from one read."""
    data = _read_json(path)
    entries = parse_baseline_data(data, path, place)  # recorded_from validated here
    return entries, list(data.get("recorded_from", []))


def parse_baseline_data(
    data: Any, path: Path, place: tuple[str, str] | None = None
) -> dict[str, Entry]:
    """Validate a baseline file's parsed JSON ``data`` (said to be at ``path``): the reader.

    :func:`parse_baseline` reads a file with it; :meth:`BaselineStore.write` checks with it
    what it is about to write.
    """
    if not isinstance(data, dict):
        raise BaselineError(f"{path}: expected a JSON object at the top")
    version = data.get("schema_version")
    if version not in (1, SCHEMA_VERSION):
        raise BaselineError(
            f"{path}: schema_version {version!r} is not 1 or {SCHEMA_VERSION}; "
            f"re-record it with --gauge-update-baselines"
        )
    for key in ("device_class", "family", "benchmarks"):
        if key not in data:
            raise BaselineError(f"{path}: missing key {key!r}")
    for key in ("device_class", "family"):
        problem = name_problem(data[key])
        if problem:
            raise BaselineError(f"{path}: {key} {data[key]!r} {problem}")
    if place and place != (data["device_class"], data["family"]):
        raise BaselineError(
            f"{path}: holds device_class {data['device_class']!r} and family "
            f"{data['family']!r}, but its place says {path.parent.name}/{path.stem}.json"
        )
    listed = data.get("recorded_from", [])
    if not isinstance(listed, list) or not all(isinstance(x, str) for x in listed):
        raise BaselineError(f"{path}: recorded_from must be a list of strings, not {listed!r}")
    if not isinstance(data["benchmarks"], dict):
        raise BaselineError(f"{path}: 'benchmarks' must be an object keyed by benchmark id")
    out = {}
    for bid, raw in data["benchmarks"].items():
        where = f"benchmarks[{bid!r}]"
        if not isinstance(raw, dict):
            raise BaselineError(f"{path}: {where} must be an object")
        if version == 1:
            raw = _v1_metrics(raw, path, where)
        raw = dict(raw)
        kernels = _kernels(raw.pop("kernels", []), path, f"{where}.kernels")
        readings, medians, hosts = _parse_metrics(raw, path, where)
        if not readings:
            raise BaselineError(f"{path}: {where} holds no metric")
        out[bid] = Entry(
            bid, data["family"], data["device_class"], readings, medians, kernels, hosts
        )
    return out


def _kernels(value: Any, path: Path, where: str) -> tuple[KernelShare, ...]:
    def fine(k: Any) -> bool:
        return (
            isinstance(k, dict)
            and set(k) == {"name", "share"}
            and isinstance(k["name"], str)
            and bool(k["name"])
            and _is_share(k["share"])
        )

    if not isinstance(value, list) or not all(fine(k) for k in value):
        raise BaselineError(
            f"{path}: {where} must be a list of {{name, share}} objects (share 0-1)"
        )
    names = [k["name"] for k in value]
    if len(set(names)) != len(names):
        raise BaselineError(f"{path}: {where} names a kernel twice")
    if sum(k["share"] for k in value) > 1 + SHARE_SLACK:
        raise BaselineError(f"{path}: {where}: the shares add up to more than 1")
    return tuple(KernelShare(k["name"], float(k["share"])) for k in value)


def checked_text(doc: dict[str, Any], path: Path, place: tuple[str, str]) -> str:
    """The JSON text of a baseline file, once its reader has accepted that very text.

    A BaselineError naming ``path`` and the entry otherwise: a file the gate could not
    read would fail every later gate and report of its device class, good entries too.
    """
    try:
        text = json.dumps(doc, indent=1, allow_nan=False) + "\n"
    except ValueError as err:  # a NaN or infinity that slipped past
        raise BaselineError(f"{path}: not written: {err}") from None
    try:
        parse_baseline_data(json.loads(text), path, place)
    except BaselineError as err:
        raise BaselineError(f"not written, it would not read back: {err}") from None
    return text
