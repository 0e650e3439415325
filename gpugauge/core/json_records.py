"""Frozen dataclasses to and from plain JSON dicts, one rule for every record the suite saves.

``to_plain`` writes every field (tuples as lists); ``from_plain`` takes the fields a class
declares, ignores the derived values written beside them, and says which field is missing
or of the wrong shape, so a saved result that cannot be read is a clear error.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

_T = TypeVar("_T")


def finite_number(value: Any) -> bool:
    """A finite int or float: not a bool, None, text, NaN or an infinity."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


class RecordError(ValueError):
    """A saved record that cannot be read back; the message says which field."""


def to_plain(obj: Any) -> dict[str, Any]:
    """Every field of a dataclass instance, tuples turned into lists (shallow)."""
    return {
        f.name: list(v) if isinstance(v := getattr(obj, f.name), tuple) else v
        for f in dataclasses.fields(obj)
    }


def from_plain(
    cls: type[_T],
    data: Any,
    where: str,
    convert: Mapping[str, Callable[[Any], Any]] | None = None,
) -> _T:
    """Build ``cls`` from a dict written by :func:`to_plain`; RecordError if it cannot."""
    if not isinstance(data, Mapping):
        raise RecordError(f"{where}: expected an object, got {type(data).__name__}")
    convert = convert or {}
    kwargs = {}
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        if f.name not in data:
            required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
            if required:
                raise RecordError(f"{where}: missing field {f.name!r}")
            continue
        value = data[f.name]
        try:
            kwargs[f.name] = convert[f.name](value) if f.name in convert else value
        except (TypeError, ValueError, KeyError) as err:
            raise RecordError(f"{where}.{f.name}: cannot read {value!r} ({err})") from None
    try:
        return cls(**kwargs)
    except (TypeError, ValueError) as err:
        raise RecordError(f"{where}: {err}") from None
