"""What differs between the runs either side of a change point, most telling first.

Fingerprint fields (torch, CUDA, cuDNN, driver, flags, the suite's commit) whose value
after the step was never seen in the runs before it, main kernels (a share of a round of
:data:`~gpugauge.regress.gate.MAIN_KERNEL_SHARE` or more) that appeared or went, and SM
clock and power medians that moved (:data:`HOST_CLOCK_MOVED`, :data:`POWER_MOVED`).
:mod:`gpugauge.history.changepoints` finds the steps.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from gpugauge.history.records import Point
from gpugauge.regress.gate import MAIN_KERNEL_SHARE, short_kernel

HOST_CLOCK_MOVED = 0.02  # relative change of the median SM clock that is reported
POWER_MOVED = 0.03  # relative change of the median power that is reported
_FIELDS = ("torch", "cuda", "cudnn", "driver", "flags", "commit")


def _value(p: Point, field: str) -> str:
    v = p.run.fields()[field]
    if field == "commit" and isinstance(v, str):
        return v[:12]
    return str(v)


def _fields_changed(before: Sequence[Point], after: Sequence[Point]) -> list[str]:
    out = []
    for field in _FIELDS:
        if field == "flags":
            out += _flags_changed(before, after)
            continue
        seen = {_value(p, field) for p in before}
        now, was = _value(after[0], field), _value(before[-1], field)
        if now not in seen and now != was:
            out.append(f"{field} {was} → {now}")
    return out


def _flags_changed(before: Sequence[Point], after: Sequence[Point]) -> list[str]:
    was, now = dict(before[-1].run.flags), dict(after[0].run.flags)
    return [
        f"flag {k} {was.get(k)} → {now.get(k)}"
        for k in sorted(set(was) | set(now))
        if was.get(k) != now.get(k) and now.get(k) not in {p.run.flags.get(k) for p in before}
    ]


def _main_kernels(p: Point) -> set[str]:
    return {k.name for k in p.result.kernels if k.share >= MAIN_KERNEL_SHARE}


def _kernels_changed(before: Sequence[Point], after: Sequence[Point]) -> list[str]:
    was = next((p for p in reversed(before) if p.result.kernels), None)
    now = next((p for p in after if p.result.kernels), None)
    if was is None or now is None:
        return []
    listed_before = {k.name for k in was.result.kernels}
    listed_now = {k.name for k in now.result.kernels}
    came = sorted(_main_kernels(now) - listed_before)
    went = sorted(_main_kernels(was) - listed_now)
    out = [f"now runs {short_kernel(k, 60)}" for k in came]
    return out + [f"no longer runs {short_kernel(k, 60)}" for k in went]


def _moved(
    before: Sequence[Point], after: Sequence[Point], attr: str, name: str, unit: str, at: float
) -> list[str]:
    a = [getattr(p.result, attr) for p in before if getattr(p.result, attr)]
    b = [getattr(p.result, attr) for p in after if getattr(p.result, attr)]
    if not a or not b:
        return []
    was, now = statistics.median(a), statistics.median(b)
    return [f"{name} {was:.0f} → {now:.0f} {unit}"] if abs(now / was - 1) >= at else []


def what_changed(before: Sequence[Point], after: Sequence[Point]) -> tuple[str, ...]:
    """Fingerprint fields, main kernels, clocks and power that differ across a step."""
    if not before or not after:
        return ()
    return tuple(
        _fields_changed(before, after)
        + _kernels_changed(before, after)
        + _moved(before, after, "sm_clock_mhz", "SM clock", "MHz", HOST_CLOCK_MOVED)
        + _moved(before, after, "power_w", "power", "W", POWER_MOVED)
    )
