"""Saved runs read back: pytest-benchmark's JSON (``--benchmark-json`` or autosave) as results.

This is the one reader of saved results: the report, the baseline command and anything
that merges results go through :func:`load_run`, which rebuilds every
:class:`~gpugauge.results.measurement.Measurement` from its ``extra_info``. It refuses,
naming the file and the result, what would mislead a reader later: a family or device class
that is not a plain name (they become folder and file names of baselines), one
result held twice (it would count as two runs), a stored verdict (``gate``) that its
readers (the report, ``confirm``) could not read, and readings that are not finite or whose
magnitude lies outside [:data:`SMALLEST`, :data:`LARGEST`] (a sample of 5e-324 makes
every ratio to it infinite). Ids are keys only, so any non-empty string will do.
"""

from __future__ import annotations

import hashlib
import json
import platform
import sys
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from gpugauge.core.json_records import RecordError, finite_number
from gpugauge.measure.environment import host_name, slug
from gpugauge.results.files import FileError, name_problem, read_json
from gpugauge.results.measurement import Measurement
from gpugauge.results.metrics import METRICS, Kind
from gpugauge.results.outcome import RunOutcome
from gpugauge.results.run_checks import RunError, check_result, check_run, run_time
from gpugauge.results.verdicts import GateResult, Verdict

# The magnitudes a reading may have (0 aside, for values). Any ratio of two such readings
# and its confidence interval stay finite and normal; no time in ms, byte count, energy in
# J or rate the suite records comes near either end.
SMALLEST = 1e-100
LARGEST = 1e100


class NotOurs(RunError):
    """A readable pytest-benchmark run that holds no gpugauge result (other tests' run)."""


def reading_problem(value: float, samples: bool) -> str | None:
    """Why a reading cannot be compared, or None.

    ``samples`` readings (every round's time) are divided by, so they must be positive; a
    value may also be 0. Every reading is finite, and its magnitude is at least
    :data:`SMALLEST` (subnormal samples turn a ratio into inf) and at most :data:`LARGEST`.
    """
    if not finite_number(value):
        return "must be a finite number"
    if samples and value <= 0:
        return "must be positive"
    if value < 0:
        return "must be non-negative"
    if value != 0 and not SMALLEST <= value <= LARGEST:
        return f"lies outside [{SMALLEST:g}, {LARGEST:g}], where ratios stay finite"
    return None


@dataclass(frozen=True)
class SavedRun:
    """One saved pytest-benchmark run of gpugauge: its results and what they ran on."""

    path: Path
    label: str  # the run's date and time, or the file name
    measurements: list[Measurement]
    fingerprint: dict[str, Any] = field(default_factory=dict)
    verdicts: dict[str, dict[str, Any]] = field(default_factory=dict)  # the gate's, by id
    adhoc_comparisons: list[dict[str, Any]] = field(default_factory=list)  # gauge.compare's
    outcome: RunOutcome | None = None  # None: saved before runs kept their outcome
    profile: str | None = None  # the run's --gauge-profile, where it was saved
    node: str | None = None  # the machine's name: pytest-benchmark's machine_info['node']
    time: datetime | None = None  # pytest-benchmark's 'datetime' (UTC), where it was saved
    argv: tuple[str, ...] = ()  # the command line the plugin saved
    run_id: str | None = None  # the history run id the plugin stored with the run
    digest: str = ""  # sha256 of the run's content (its date and results), not its bytes
    # the results that could not be read, each 'PATH: benchmarks[i]: why': left out, named
    refused: tuple[str, ...] = ()
    # the gate's stored verdict of each gated result left out, by id (None: not readable)
    refused_verdicts: dict[str, str | None] = field(default_factory=dict)

    @property
    def regressed(self) -> list[str]:
        """The ids of the results it read whose stored gate verdict is regressed."""
        return [i for i, v in self.verdicts.items() if v.get("verdict") == Verdict.REGRESSED]

    @property
    def machine(self) -> str:
        """'NVIDIA H200; torch 2.11.0; driver 580.159.04' (from the fingerprint)."""
        fp = self.fingerprint
        gpus = ", ".join(g.get("name", "?") for g in fp.get("gpus", [])) or fp.get("cpu", "")
        return f"{gpus}; torch {fp.get('torch', '?')}; driver {fp.get('driver') or '-'}"

    @property
    def host(self) -> str | None:
        """The host the run names, as a live append of it was filed.

        Its fingerprint's 'host', else :func:`host_name` of its first GPU's UUID and its
        machine's name.
        """
        gpus = self.fingerprint.get("gpus") or [{}]
        first = gpus[0] if isinstance(gpus[0], dict) else {}
        found = self.fingerprint.get("host") or host_name(first.get("uuid"), self.node)
        return str(found) if found else None


def _schema1_device_class(info: dict[str, Any]) -> str:
    """Device class of a schema-1 result saved before it was stored: from its fingerprint."""
    device = info["spec"]["device"]
    fp = info.get("fingerprint") or {}
    if not device.startswith("cuda"):
        return slug(f"cpu-{fp.get('platform', platform.machine()).split('-')[-2]}")
    index = int(device.partition(":")[2] or 0)
    return fp["gpus"][index]["device_class"]


def _check_readings(m: Measurement, where: str) -> None:
    """Every reading usable (see :func:`reading_problem`)."""
    for name, values in m.readings().items():
        samples = METRICS[name].kind is Kind.SAMPLES
        for v in values:
            problem = reading_problem(v, samples)
            if problem:
                raise RunError(f"{where}: metric {name!r} has {v!r}; a reading {problem}")


def _check_names(info: dict[str, Any], where: str) -> None:
    """The id a non-empty string; family and device class plain names (baselines' paths)."""
    for key in ("id", "family", "device_class"):
        if key not in info:
            raise RunError(f"{where}: missing field {key!r}")
        value = info[key]
        if key == "id":
            ok = isinstance(value, str) and value.strip()
            problem = None if ok else "must be a non-empty string"
        else:
            problem = name_problem(value)
        if problem:
            raise RunError(f"{where}: {key} {value!r} {problem}")


def content_digest(data: dict[str, Any]) -> str:
    """sha256 (hex) of a saved run's date and results, whatever its formatting.

    A copy of a run written again (other indentation, key order or file name) has the same
    digest: it is the same run, and must count once (a baseline's run-to-run spread, an
    import).
    """
    content = {
        "datetime": data.get("datetime"),
        "results": [b.get("extra_info") for b in data["benchmarks"] if isinstance(b, dict)],
    }
    return hashlib.sha256(json.dumps(content, sort_keys=True, default=str).encode()).hexdigest()


def load_run(path: Path) -> SavedRun:
    """Every readable gpugauge result of a saved run; RunError if the file holds none.

    Benchmarks of the run that are not gpugauge's (plain pytest-benchmark tests) are left
    out. A gpugauge result that cannot be read is left out too, named in
    :attr:`SavedRun.refused`: one bad result must not stop a nightly's confirm and report
    from reading the others (issue 49). RunError where none can be read.
    """
    try:
        data = read_json(path)
    except FileError as err:
        raise RunError(str(err)) from None
    if not isinstance(data, dict) or not isinstance(data.get("benchmarks"), list):
        raise RunError(f"{path}: not a pytest-benchmark JSON (no 'benchmarks' list)")
    check_run(data, path)  # every run-level field a reader takes: RunError naming it
    machine = data.get("machine_info")
    found: list[Measurement] = []
    refused: list[str] = []
    refused_verdicts: dict[str, str | None] = {}
    held: dict[tuple[str, str], int] = {}
    verdicts: dict[str, dict[str, Any]] = {}

    def refuse(why: str, bench: dict[str, Any], info: dict[str, Any], i: int) -> None:
        """Leave a result out, named, and keep the verdict its gate stored, if any."""
        refused.append(why)
        if (gate := info.get("gate")) is not None:
            said = gate.get("verdict") if isinstance(gate, dict) else None
            rid = str(info.get("id") or bench.get("param") or f"benchmarks[{i}]")
            refused_verdicts[rid] = said if isinstance(said, str) else None

    for i, bench in enumerate(data["benchmarks"]):
        info = bench.get("extra_info") if isinstance(bench, dict) else None
        if not isinstance(info, dict):
            continue
        if "gpugauge_schema" not in info:
            if "gate" in info:  # a gate's verdict is ours: a result that lost its schema
                where = f"{path}: benchmarks[{i}]"
                refuse(f"{where}: a gate verdict but no gpugauge_schema", bench, info, i)
            continue
        try:
            m, verdict = _result(bench, info, path, i)
        except RunError as err:  # named and left out: the run's other results stand
            refuse(str(err), bench, info, i)
            continue
        key = (m.device_class, m.id)
        if key in held:
            why = (
                f"{path}: benchmarks[{i}]: {m.id!r} on {m.device_class} is held twice (also "
                f"benchmarks[{held[key]}]); one run holds one result per id"
            )
            refuse(why, bench, info, i)
            continue
        held[key] = i
        found.append(m)
        if verdict is not None:
            verdicts[m.id] = verdict
    if not found and refused:
        raise RunError("; ".join(refused))
    if not found:
        raise NotOurs(f"{path}: no gpugauge results in it (a pytest-benchmark run of other tests?)")
    fp = (machine or {}).get("gpugauge") or {}
    saved = data.get("gpugauge") or {}
    outcome = None
    if isinstance(saved, dict) and saved.get("outcome") is not None:
        try:
            outcome = RunOutcome.from_dict(saved["outcome"])
        except ValueError as err:
            raise RunError(f"{path}: {err}") from None
    options = saved.get("options") if isinstance(saved, dict) else None
    profile = options.get("profile") if isinstance(options, dict) else None
    return SavedRun(
        path=path,
        label=str(data.get("datetime") or path.stem)[:19],
        time=run_time(data.get("datetime"), path),
        argv=tuple(saved.get("argv") or ()),
        run_id=saved.get("history_run_id"),
        digest=content_digest(data),
        measurements=found,
        fingerprint=fp if isinstance(fp, dict) else {},
        verdicts=verdicts,
        adhoc_comparisons=list(saved.get("comparisons") or []) if isinstance(saved, dict) else [],
        outcome=outcome,
        profile=profile if isinstance(profile, str) else None,
        node=str((machine or {}).get("node") or "") or None,
        refused=tuple(refused),
        refused_verdicts=refused_verdicts,
    )


def _result(
    bench: dict[str, Any], info: dict[str, Any], path: Path, i: int
) -> tuple[Measurement, dict[str, Any] | None]:
    """One saved gpugauge result and its gate verdict (None: ungated); RunError naming it."""
    where = f"{path}: benchmarks[{i}]"
    check_result(info, path, f"benchmarks[{i}].extra_info")
    try:
        if info["gpugauge_schema"] == 1:
            info = {
                **info,
                "id": info.get("id") or bench["param"],
                "device_class": info.get("device_class") or _schema1_device_class(info),
            }
        _check_names(info, where)
        m = Measurement.from_dict(info, where)
    except (
        RecordError,
        KeyError,
        IndexError,
        TypeError,
        ValueError,
        AttributeError,
        OverflowError,
    ) as err:
        text = str(err)
        if not text.startswith(where):
            text = f"{where}: not a readable gpugauge result ({text})"
        raise RunError(text) from None
    _check_readings(m, where)
    if info.get("gate") is None:
        return m, None
    try:  # read as every reader of verdicts reads it
        GateResult.from_dict(info["gate"], m.spec.family, m.device_class)
    except ValueError as err:
        raise RunError(f"{where}.extra_info.gate: {err}") from None
    return m, info["gate"]


def say_refused(run: SavedRun, who: str) -> list[str]:
    """Each result ``run`` left out, said on stderr as ``who``'s warning; the lines said."""
    lines = [f"left out a result that cannot be read: {why}" for why in run.refused]
    for line in lines:
        print(f"{who}: warning: {line}", file=sys.stderr)
    return lines
