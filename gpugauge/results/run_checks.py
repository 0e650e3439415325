"""The shape of a saved run, checked once where it is read: every field a reader relies on.

:func:`gpugauge.results.runs.load_run` calls :func:`check_run` on the parsed file and
:func:`check_result` on each gpugauge result before anything is built from them, so a
field of the wrong type or range is one :class:`RunError` naming the file and the field
(``run.json: gpugauge.argv must be a list of strings, not int``), never an
AttributeError, a KeyError or a wrong number later in a reader: the report, ``baseline``
and ``history import`` all see the same checked run. Strings that are not valid Unicode
(a lone surrogate) and JSON nested too deep are refused by
:func:`gpugauge.results.files.read_json` itself.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

SCHEMAS = (1, 2)  # the gpugauge_schema values this gpugauge reads
# A run's date: not before this (no CUDA, no torch), and not more than FUTURE_SLACK ahead
# of this machine's clock (a run dated 2999 would stay "the latest" of a history forever).
EARLIEST = datetime(2000, 1, 1, tzinfo=UTC)
FUTURE_SLACK = timedelta(days=1)
_DEVICE = re.compile(r"^[a-z][a-z0-9_]*(:[0-9]+)?$")  # 'cpu', 'cuda', 'cuda:1'


class RunError(ValueError):
    """A file that is not a saved gpugauge run; the message names it and says why."""


def _kind(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _need(ok: bool, path: Path, field: str, what: str, value: Any) -> None:
    if not ok:
        shown = repr(value) if isinstance(value, str | int | float) else _kind(value)
        raise RunError(f"{path}: {field} must be {what}, not {shown}")


def _optional_object(data: Mapping[str, Any], key: str, path: Path, field: str) -> dict[str, Any]:
    value = data.get(key)
    _need(value is None or isinstance(value, dict), path, field, "an object", value)
    return value or {}


def _string_list(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(x, str) for x in value)


def run_time(value: Any, path: Path, field: str = "datetime") -> datetime | None:
    """The run's date (UTC; naive is UTC) from ISO 8601 text; None where it has none.

    RunError for text that is no date, or one before :data:`EARLIEST` or more than
    :data:`FUTURE_SLACK` after now.
    """
    if value is None:
        return None
    _need(isinstance(value, str), path, field, "an ISO 8601 date and time", value)
    try:
        t = datetime.fromisoformat(value)
    except ValueError:
        raise RunError(f"{path}: {field} {value!r} is not an ISO 8601 date and time") from None
    latest = datetime.now(UTC) + FUTURE_SLACK
    try:  # year 1 at +05:00 (or 9999-12-31 at -05:00) has no UTC time: outside too
        t = t.replace(tzinfo=UTC) if t.tzinfo is None else t.astimezone(UTC)
    except OverflowError:
        t = None
    if t is None or not EARLIEST <= t <= latest:
        raise RunError(
            f"{path}: {field} {value!r} lies outside {EARLIEST:%Y-%m-%d} to {latest:%Y-%m-%d} "
            "(tomorrow); a run cannot be dated there (check the machine's clock)"
        )
    return t


def check_run(data: dict[str, Any], path: Path) -> None:
    """The run's own fields: its date, the fingerprint and gpugauge's block."""
    run_time(data.get("datetime"), path)
    machine = _optional_object(data, "machine_info", path, "machine_info")
    fp = _optional_object(machine, "gpugauge", path, "machine_info.gpugauge")
    _check_fingerprint(fp, path)
    own = _optional_object(data, "gpugauge", path, "gpugauge")
    where = "gpugauge"
    argv = own.get("argv")
    _need(argv is None or _string_list(argv), path, f"{where}.argv", "a list of strings", argv)
    comps = own.get("comparisons")
    ok = comps is None or (isinstance(comps, list) and all(isinstance(c, dict) for c in comps))
    _need(ok, path, f"{where}.comparisons", "a list of objects", comps)
    run_id = own.get("history_run_id")
    ok = run_id is None or (isinstance(run_id, str) and bool(run_id.strip()))
    _need(ok, path, f"{where}.history_run_id", "a non-empty string", run_id)
    seconds = own.get("test_seconds")
    ok = seconds is None or (
        isinstance(seconds, dict)
        and all(_is_number(v) and math.isfinite(v) and v >= 0 for v in seconds.values())
    )
    _need(ok, path, f"{where}.test_seconds", "an object of seconds (numbers >= 0)", seconds)
    options = _optional_object(own, "options", path, f"{where}.options")
    profile = options.get("profile")
    _need(
        profile is None or isinstance(profile, str),
        path,
        f"{where}.options.profile",
        "a string",
        profile,
    )


def _check_fingerprint(fp: Mapping[str, Any], path: Path) -> None:
    where = "machine_info.gpugauge"
    version = fp.get("schema_version")
    ok = version is None or (_is_number(version) and version in SCHEMAS)
    _need(ok, path, f"{where}.schema_version", f"one of {SCHEMAS}", version)
    gpus = fp.get("gpus")
    ok = gpus is None or (isinstance(gpus, list) and all(isinstance(g, dict) for g in gpus))
    _need(ok, path, f"{where}.gpus", "a list of objects", gpus)
    for i, g in enumerate(gpus or ()):
        for key in ("name", "uuid", "device_class"):
            v = g.get(key)
            _need(v is None or isinstance(v, str), path, f"{where}.gpus[{i}].{key}", "a string", v)
    for key in ("host", "torch", "driver", "cuda_runtime", "cpu", "platform"):
        v = fp.get(key)
        _need(v is None or isinstance(v, str | int | float), path, f"{where}.{key}", "text", v)
    git = fp.get("git")
    _need(git is None or isinstance(git, dict), path, f"{where}.git", "an object", git)
    flags = fp.get("flags")
    _need(flags is None or isinstance(flags, dict), path, f"{where}.flags", "an object", flags)


def check_result(info: Mapping[str, Any], path: Path, where: str) -> None:
    """One gpugauge result's fields that readers take as they are (``where``: its place)."""
    field = f"{where}.gpugauge_schema"
    schema = info["gpugauge_schema"]
    ok = _is_number(schema) and schema in SCHEMAS
    if not ok:
        shown = repr(schema) if isinstance(schema, str | int | float) else _kind(schema)
        raise RunError(
            f"{path}: {field} is {shown}: this gpugauge reads schema "
            f"{' and '.join(map(str, SCHEMAS))}"
            + ("; upgrade gpugauge" if _is_number(schema) and schema > max(SCHEMAS) else "")
        )
    devices = info.get("devices")
    ok = devices is None or (_string_list(devices) and all(_DEVICE.match(d) for d in devices))
    _need(ok, path, f"{where}.devices", "a list of devices ('cpu', 'cuda', 'cuda:1')", devices)
    spec = info.get("spec")
    _need(spec is None or isinstance(spec, dict), path, f"{where}.spec", "an object", spec)
    device = (spec or {}).get("device")
    ok = device is None or (isinstance(device, str) and bool(_DEVICE.match(device)))
    _need(ok, path, f"{where}.spec.device", "a device ('cpu', 'cuda', 'cuda:1')", device)
    arts = info.get("artifacts")
    ok = arts is None or (
        isinstance(arts, dict) and all(isinstance(v, str) and v for v in arts.values())
    )
    _need(ok, path, f"{where}.artifacts", "an object of file paths (strings)", arts)
    for key in ("extra", "values", "memory_check"):
        v = info.get(key)
        _need(v is None or isinstance(v, dict), path, f"{where}.{key}", "an object", v)
    for name, v in (info.get("values") or {}).items():
        _need(_is_number(v), path, f"{where}.values.{name}", "a number", v)
    timing = info.get("timing")
    _need(timing is None or isinstance(timing, dict), path, f"{where}.timing", "an object", timing)
    if timing:
        _check_timing(timing, path, f"{where}.timing")


def _check_timing(timing: Mapping[str, Any], path: Path, where: str) -> None:
    """Samples are numbers (a boolean is not 1 ms) and batch rows hold numbers or null."""
    for key in ("device_ms", "host_ms", "warmup_batch_ms"):
        values = timing.get(key)
        if values is None:
            continue
        ok = isinstance(values, list) and all(_is_number(v) for v in values)
        _need(ok, path, f"{where}.{key}", "a list of numbers", values)
    batches = timing.get("batches")
    ok = batches is None or (
        isinstance(batches, list) and all(isinstance(b, dict) for b in batches)
    )
    _need(ok, path, f"{where}.batches", "a list of objects", batches)
    for i, b in enumerate(batches or ()):
        rounds = b.get("rounds")
        ok = _is_number(rounds) and float(rounds).is_integer() and rounds >= 0
        _need(ok, path, f"{where}.batches[{i}].rounds", "a whole number", rounds)
        for key in ("sm_clock_mhz", "mem_clock_mhz", "power_w"):
            v = b.get(key)
            ok = v is None or (_is_number(v) and math.isfinite(v) and v >= 0)
            _need(ok, path, f"{where}.batches[{i}].{key}", "a non-negative number or null", v)
