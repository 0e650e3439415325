"""Comparisons within one run, derived from the results present (never from test order).

A family says which results pair up (:func:`pair_up`): two timed results of one device
class whose parameters are equal except the ``vary`` fields, the baseline the one that
``is_baseline`` picks. The same rule runs at the end of a pytest session and in a report of
a saved run, so both show the same comparisons whatever order the tests ran in.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from gpugauge.results.measurement import Comparison, Measurement

Params = Mapping[str, Any]


def _key(m: Measurement, vary: Sequence[str]) -> tuple[Any, ...]:
    params = m.spec.as_dict()
    rest = tuple(sorted((k, repr(v)) for k, v in params.items() if k not in vary))
    return (m.device_class, rest)


def pair_up(
    measurements: Sequence[Measurement],
    family: str,
    vary: Sequence[str],
    is_baseline: Callable[[Params], bool],
    title: Callable[[Params], str],
    label: Callable[[Params], str],
) -> list[Comparison]:
    """Every (baseline, candidate) pair of ``family`` that differs only in ``vary``.

    Candidates keep the order they came in; a result with none of the ``vary`` fields
    (another kind of case of the family) pairs with nothing.
    """
    timed = [
        m
        for m in measurements
        if m.timing is not None
        and m.spec.family == family
        and all(v in m.spec.as_dict() for v in vary)
    ]
    base = {_key(m, vary): m for m in timed if is_baseline(m.spec.as_dict())}
    out = []
    for m in timed:
        params = m.spec.as_dict()
        ref = None if is_baseline(params) else base.get(_key(m, vary))
        if ref is not None:
            out.append(Comparison(title(params), ref, m, label(ref.spec.as_dict()), label(params)))
    return out
