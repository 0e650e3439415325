"""What the history holds: one run (a pytest session) and its results, as frozen records.

A :class:`RunRecord` is one session on one host: when (UTC), where (the host: a GPU's
NVML UUID, or the hostname on a CPU), the device class, the fingerprint fields a number
depends on (driver, CUDA runtime, cuDNN, torch, the suite's commit, the numerics flags)
and how it was started (argv, profile). A :class:`ResultRecord` is one benchmark of that
run: each metric's median with its CI and n (:class:`MetricRecord`), the SM clock (MHz)
and power (W) it ran at, its main kernels, its verdict and whether it is *accepted*, that
is, may serve as a reference for later runs. A :class:`Point` is one metric of one result
read back with its run: the unit that references and change points work on.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from gpugauge.core.json_records import finite_number
from gpugauge.regress.baselines import KernelShare


class HistoryError(ValueError):
    """A history that cannot be used; the one-line message names it and says why."""


class HistoryUnavailable(HistoryError):
    """A history out of reach for now, not misnamed: a full disk, a server gone.

    Also an I/O error, or a server that does not answer. A pytest session goes on without
    it, in one line.
    """


def some(names: Sequence[str], most: int = 6) -> str:
    """Up to ``most`` names for a message, and how many more: 'a, b, c and 4 more'."""
    shown = ", ".join(names[:most])
    rest = len(names) - most
    return f"{shown} and {rest} more" if rest > 0 else shown or "none"


def utc(t: datetime) -> datetime:
    """``t`` as an aware UTC time (a naive time is taken as UTC)."""
    return t.replace(tzinfo=UTC) if t.tzinfo is None else t.astimezone(UTC)


def time_text(t: datetime) -> str:
    """Stored form of a time: ISO 8601 in UTC with microseconds, so text order is time order.

    The year always has four digits: ``strftime("%Y")`` writes year 999 as '999', which
    no ISO reader takes back and which sorts after '2026'.
    """
    t = utc(t)
    return f"{t.year:04d}-{t:%m-%dT%H:%M:%S}.{t.microsecond:06d}Z"


_SHORT_YEAR = re.compile(r"^(\d{1,3})-")


def parse_time(text: str) -> datetime:
    """Read back :func:`time_text` (or any ISO 8601 time; naive means UTC).

    Defensive, since every reader goes through it: a year stored with fewer than four
    digits (by a gpugauge before :func:`time_text` padded it) is read as padded, and text
    that is no time at all is a HistoryError saying how to remove the run, not a crash.
    """
    if not isinstance(text, str):
        raise HistoryError(f"a stored run time is {text!r}, not text")
    fixed = _SHORT_YEAR.sub(lambda m: m.group(1).zfill(4) + "-", text.strip())
    try:
        return utc(datetime.fromisoformat(fixed.replace("Z", "+00:00")))
    except OverflowError:  # year 1 at +05:00: no UTC time
        raise HistoryError(
            f"a stored run time {text!r} has no UTC time (before year 1 or after 9999); "
            "remove that run (gpugauge history remove RUN)"
        ) from None
    except ValueError:
        raise HistoryError(
            f"a stored run time {text!r} is not an ISO 8601 time; remove that run "
            "(gpugauge history remove RUN)"
        ) from None


@dataclass(frozen=True)
class RunRecord:
    """One pytest session on one host: when, where, and with what software."""

    id: str
    time: datetime  # UTC
    host: str  # 'GPU-8f2c…' (NVML UUID) or the hostname on a CPU
    device_class: str
    driver: str | None = None
    cuda_runtime: str | None = None
    cudnn: str | None = None
    torch: str | None = None
    commit: str | None = None
    flags: Mapping[str, Any] = field(default_factory=dict, hash=False)
    argv: tuple[str, ...] = ()
    profile: str | None = None
    source: str = "pytest"  # or 'import <file name>'

    def __post_init__(self) -> None:
        if not self.id or not self.host or not self.device_class:
            raise HistoryError("a run needs an id, a host and a device class")
        object.__setattr__(self, "time", utc(self.time))

    def fields(self) -> dict[str, Any]:
        """The fingerprint fields whose change can explain a change of speed."""
        return {
            "torch": self.torch,
            "driver": self.driver,
            "cuda": self.cuda_runtime,
            "cudnn": self.cudnn,
            "commit": self.commit,
            "flags": dict(self.flags),
        }


@dataclass(frozen=True)
class MetricRecord:
    """One metric of one result: median, CI of the median and n, in the metric's unit.

    ``run_medians`` are the medians of the separate measurements behind it (a re-measured
    result has two); ``reference`` says what judged it ('host history: last 5 runs,
    spread 0.4%'), ``verdict`` what that said (None: not judged).
    """

    metric: str
    median: float
    ci_low: float
    ci_high: float
    n: int = 1
    run_medians: tuple[float, ...] = ()
    verdict: str | None = None
    reference: str = ""


@dataclass(frozen=True)
class ResultRecord:
    """One benchmark of one run: its metrics and the conditions it ran in.

    ``attempt`` counts measurements of the case in the run (2: the re-measurement of a
    first regressed one; both are kept). ``accepted`` results may serve as references.
    """

    bench_id: str
    family: str
    device_class: str
    metrics: tuple[MetricRecord, ...]
    sm_clock_mhz: float | None = None
    power_w: float | None = None
    kernels: tuple[KernelShare, ...] = ()
    verdict: str | None = None
    accepted: bool = True
    attempt: int = 1
    note: str = ""

    def metric(self, name: str) -> MetricRecord | None:
        """One metric's record, if the result holds it."""
        return next((m for m in self.metrics if m.metric == name), None)


@dataclass(frozen=True)
class ABRecord:
    """A same-GPU A/B that decided one result of a run: its time verdict and every pair.

    ``base_commit`` is the build it was compared against; ``ratio`` head/base with its
    CI; ``pairs`` each pair's two blocks as :meth:`gpugauge.ab.pairs.Pair.as_dict` gives.
    """

    run_id: str
    bench_id: str
    device_class: str
    base_commit: str
    verdict: str
    ratio: float
    ci_low: float
    ci_high: float
    min_effect: float
    pairs: tuple[dict[str, Any], ...]

    def __post_init__(self) -> None:
        """Refuse a field the history cannot keep: HistoryError naming run, case and field.

        Text and finite numbers only. A writer's record is checked as a row read back is,
        so the history never keeps a row its own reader refuses.
        """
        where = f"the A/B of {self.bench_id!r} on {self.device_class} in run {self.run_id}"
        for name in ("run_id", "bench_id", "device_class", "base_commit", "verdict"):
            if not isinstance(v := getattr(self, name), str):
                raise HistoryError(f"{where}: {name} is {v!r}, not text")
        for name in ("ratio", "ci_low", "ci_high", "min_effect"):
            if not finite_number(v := getattr(self, name)):
                raise HistoryError(f"{where}: {name} is {v!r}, not a finite number")

    @classmethod
    def from_row(cls, row: Sequence[Any]) -> ABRecord:
        """From an ``ab_cases`` row (its columns in table order), checked.

        HistoryError naming the run, the case and the column for a row no writer of
        gpugauge's leaves (pairs that are not a JSON list of objects, a ratio that is text).
        """
        *head, pairs = row
        where = f"the A/B of {head[1]!r} on {head[2]} in run {head[0]}"
        try:
            read = json.loads(pairs) if isinstance(pairs, str) else None
        except ValueError:
            read = None
        if not isinstance(read, list) or not all(isinstance(p, dict) for p in read):
            shown = pairs if isinstance(pairs, int | float) else str(pairs)[:40]
            raise HistoryError(f"{where}: pairs {shown!r} are not a JSON list of objects")
        return cls(*head, pairs=tuple(read))


def ab_records(rows: Sequence[Sequence[Any]], skip: list[str] | None, where: str) -> list[ABRecord]:
    """``ab_cases`` rows read; one that cannot be is an error, or named in ``skip`` and left out.

    With ``skip``, a row that cannot be read never hides the rest from a listing.
    """
    out = []
    for r in rows:
        try:
            out.append(ABRecord.from_row(r))
        except HistoryError as err:
            if skip is None:
                raise HistoryError(f"{where}: {err}") from None
            skip.append(str(err))
    return out


@dataclass(frozen=True)
class Point:
    """One metric of one result, read back with its run: a point of a case's trend."""

    run: RunRecord
    result: ResultRecord
    metric: MetricRecord

    @property
    def median(self) -> float:
        """The metric's median, in its unit."""
        return self.metric.median

    @property
    def host(self) -> str:
        """The run's host."""
        return self.run.host

    @property
    def accepted(self) -> bool:
        """Whether the result may serve as a reference."""
        return self.result.accepted
