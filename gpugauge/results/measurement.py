"""What one benchmark produced: its spec, its metrics, and everything measured beside them.

A :class:`Measurement` holds metrics of the registry (:mod:`gpugauge.results.metrics`):
``time`` from its :class:`~gpugauge.measure.timing.Timing` (optional: a search result has
none), ``memory`` and ``energy`` from its per-device records, and any other registered
metric as a value. Raw samples are kept and summaries derived. ``as_dict`` is the
self-describing record that goes into pytest-benchmark's ``extra_info``; ``from_dict``
reads it back, so the saved JSON is the one source for reports, baselines and merges.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from gpugauge.core.json_records import RecordError, from_plain, to_plain
from gpugauge.measure.energy import Energy
from gpugauge.measure.environment import SCHEMA_VERSION, device_class
from gpugauge.measure.memory import Memory
from gpugauge.measure.nvml import GpuState
from gpugauge.measure.roofline import Roofline
from gpugauge.measure.stats import Ratio, Summary, ratio_of_medians, ratio_of_pairs
from gpugauge.measure.timing import Timing
from gpugauge.results.metrics import METRICS, Kind, MetricError, check_readings, metric


class Spec(Protocol):
    """What is measured: a frozen, hashable value whose ``id`` is the pytest id too.

    ``device`` is where it runs ('cuda', 'cpu'); a spec over several devices (a split
    model, one rank per GPU) also has ``devices``, a tuple of device strings. A spec may
    say ``nightly = False``: the nightly job (``-m nightly``) leaves it to the seed and full
    runs (:func:`in_nightly`).
    """

    family: str
    device: str

    @property
    def id(self) -> str:
        """Readable, unique within the family."""

    def as_dict(self) -> dict[str, Any]:
        """Plain dict for JSON."""


def in_nightly(spec: Spec) -> bool:
    """Whether the nightly job gates ``spec``: its ``nightly``, True where it has none."""
    return bool(getattr(spec, "nightly", True))


INJECTED_KEY = "injected_slowdown_ms"  # gpugauge.check.slowdown's record of added work


def injected(m: Measurement) -> bool:
    """Whether work was added to the measurement on purpose (``gpugauge.check.slowdown``).

    Such a result measures the injection, not the build: it may be judged against the
    history or a baseline but never becomes either, or a later slowdown of the build up to
    the injected work would read unchanged against it.
    """
    return bool(m.extra.get(INJECTED_KEY))


def devices_of(spec: Spec) -> tuple[str, ...]:
    """Every device a spec runs on: its ``devices``, else its one ``device``."""
    return tuple(getattr(spec, "devices", None) or (spec.device,))


def on_gpu(measurements: Iterable[Measurement]) -> bool:
    """Whether any of these results was measured on a CUDA device."""
    return any(d.startswith("cuda") for m in measurements for d in devices_of(m.spec))


@dataclass(frozen=True)
class SavedSpec:
    """A spec read back from a saved result: its id, family, devices and parameters."""

    family: str
    id: str
    device: str
    devices: tuple[str, ...]
    params: Mapping[str, Any] = field(default_factory=dict, hash=False, compare=False)

    def as_dict(self) -> dict[str, Any]:
        """The parameters the spec was saved with."""
        return dict(self.params)


def _sum(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) if known and len(known) == len(values) else None


@dataclass(frozen=True)
class Attempt:
    """An earlier measurement of a result, set aside for the one its verdict used.

    A result whose first measurement regressed is measured again (a fresh warm-up), and
    the gate's verdict is that second measurement's: the second is then the result, its
    number everywhere (the saved rounds, every table and chart). The first is kept as this
    record, so that a reader sees it was taken and what it read. Times in ms.
    """

    median_ms: float
    ci_low_ms: float
    ci_high_ms: float
    n: int
    verdict: str  # the gate's verdict on this measurement: 'regressed'

    def __post_init__(self) -> None:
        times = (self.median_ms, self.ci_low_ms, self.ci_high_ms)
        if not all(isinstance(x, int | float) and 0 < x < float("inf") for x in times):
            raise ValueError(f"an earlier attempt's times must be positive and finite: {self}")
        if isinstance(self.n, bool) or not isinstance(self.n, int) or self.n < 1:
            raise ValueError(f"an earlier attempt's n must be a whole number >= 1: {self}")
        if not isinstance(self.verdict, str) or not self.verdict:
            raise ValueError(f"an earlier attempt's verdict must be a word: {self}")

    @classmethod
    def of(cls, m: Measurement, verdict: str) -> Attempt:
        """The record of a timed measurement ``m`` that the gate judged ``verdict``."""
        s = m.summary
        return cls(s.median, s.ci_low, s.ci_high, s.n, verdict)

    def describe(self) -> str:
        """'measured again: first 35.67 ms [35.1, 36.2] n=5, regressed'."""
        return (
            f"measured again: first {self.median_ms:.4g} ms "
            f"[{self.ci_low_ms:.4g}, {self.ci_high_ms:.4g}] n={self.n}, {self.verdict}"
        )


@dataclass(frozen=True)
class Measurement:
    """One benchmark's result.

    ``memory`` and ``energy`` hold one record per device (energy: one shared window), and
    the ``memory``/``energy`` metrics are their sums; ``energy`` is empty with
    ``energy_note`` saying why. ``values`` are further single-value metrics by registry
    name; ``artifacts`` are files the result owns, by name. ``device_class`` is the
    baseline key; it is worked out from the spec's devices unless given (a result
    measured in other processes, or read back, brings its own). ``earlier`` holds the
    measurements of the same result taken before this one in the same run (a regressed
    first measurement, set aside for its re-measurement), oldest first: this one is the result.
    """

    spec: Spec
    timing: Timing | None = None
    values: Mapping[str, float] = field(default_factory=dict)
    memory: tuple[Memory, ...] = ()
    energy: tuple[Energy, ...] = ()
    energy_note: str | None = None
    gpu_before: tuple[GpuState, ...] = ()
    gpu_after: tuple[GpuState, ...] = ()
    roofline: Roofline | None = None
    memory_check: Mapping[str, Any] | None = None
    artifacts: Mapping[str, str] = field(default_factory=dict)
    extra: Mapping[str, Any] = field(default_factory=dict)
    device_class: str = ""
    earlier: tuple[Attempt, ...] = ()

    def __post_init__(self) -> None:
        for name in self.values:
            if metric(name).kind is not Kind.VALUE:
                raise MetricError(f"metric {name!r} has samples: give it through timing")
            if name in ("memory", "energy"):
                raise MetricError(f"metric {name!r} comes from the per-device records")
        if not self.device_class:
            object.__setattr__(self, "device_class", device_class(devices_of(self.spec)))
        check_readings(self.readings())

    @property
    def id(self) -> str:
        """The spec's id: pytest id and baseline key."""
        return self.spec.id

    @property
    def summary(self) -> Summary:
        """Statistics of the device-timed rounds, ms (ValueError for a result without time)."""
        if self.timing is None:
            raise ValueError(f"{self.id}: this result has no timing")
        return self.timing.summary

    @property
    def peak_bytes(self) -> int | None:
        """Peak allocated above the start, summed over devices; None without allocator peaks.

        A CPU's first-run RSS growth is kept in ``memory`` but is no metric: it does not
        repeat run to run, so it is never gated or compared.
        """
        peaks = [m.peak_allocated_bytes for m in self.memory]
        total = _sum(peaks) if peaks else None
        return None if total is None else int(total)

    @property
    def joules_per_iter(self) -> float | None:
        """Energy of one round summed over devices, J; None where it was not read."""
        return _sum([e.joules_per_iter for e in self.energy]) if self.energy else None

    def readings(self) -> dict[str, tuple[float, ...]]:
        """Every metric this result holds, by registry name, in registry order."""
        found: dict[str, tuple[float, ...]] = {}
        if self.timing is not None:
            found["time"] = self.timing.device_ms
        if self.peak_bytes is not None:
            found["memory"] = (float(self.peak_bytes),)
        if self.joules_per_iter is not None:
            found["energy"] = (self.joules_per_iter,)
        found.update({k: (float(v),) for k, v in self.values.items()})
        return {k: found[k] for k in METRICS if k in found}

    def value(self, name: str) -> float | None:
        """One metric as a single number: the median for samples; None if absent."""
        r = self.readings().get(name)
        return None if r is None else statistics.median(r)

    def as_dict(self) -> dict[str, Any]:
        """Everything, for pytest-benchmark's ``extra_info``; :meth:`from_dict` reads it."""
        return {
            "gpugauge_schema": SCHEMA_VERSION,
            "id": self.id,
            "family": self.spec.family,
            "device_class": self.device_class,
            "devices": list(devices_of(self.spec)),
            "spec": self.spec.as_dict(),
            "metrics": {
                name: {"unit": METRICS[name].unit, "better": METRICS[name].better.value}
                | (
                    {"median": statistics.median(r), "n": len(r)}
                    if METRICS[name].kind is Kind.SAMPLES
                    else {"value": r[0]}
                )
                for name, r in self.readings().items()
            },
            "timing": None if self.timing is None else self.timing.as_dict(),
            "values": dict(self.values),
            "memory": [m.as_dict() for m in self.memory],
            "energy": [e.as_dict() for e in self.energy],
            "energy_note": self.energy_note,
            "gpu_before": [g.as_dict() for g in self.gpu_before],
            "gpu_after": [g.as_dict() for g in self.gpu_after],
            "roofline": None if self.roofline is None else self.roofline.as_dict(),
            "memory_check": None if self.memory_check is None else dict(self.memory_check),
            "artifacts": dict(self.artifacts),
            "extra": dict(self.extra),
            "earlier_attempts": [to_plain(a) for a in self.earlier],
        }

    @classmethod
    def from_dict(cls, info: Any, where: str = "result") -> Measurement:
        """Read back :meth:`as_dict` (schema 2) or a schema-1 ``extra_info``.

        Keys written beside the record (the fingerprint, the gate's verdict) are ignored;
        a missing or malformed field is a RecordError naming it.
        """
        if not isinstance(info, Mapping) or "gpugauge_schema" not in info:
            raise RecordError(f"{where}: not a gpugauge result (no 'gpugauge_schema')")
        try:
            spec_params = info.get("spec") or {}
            devices = tuple(info.get("devices") or (spec_params["device"],))
            spec = SavedSpec(info["family"], info["id"], devices[0], devices, spec_params)
            listed = _listed(info, where)
            timing = info.get("timing")
            return cls(
                spec=spec,
                timing=None if timing is None else Timing.from_dict(timing, f"{where}.timing"),
                values={k: float(v) for k, v in (info.get("values") or {}).items()},
                memory=tuple(
                    Memory.from_dict(m, f"{where}.memory[{i}]")
                    for i, m in enumerate(listed["memory"])
                ),
                energy=tuple(
                    Energy.from_dict(e, f"{where}.energy[{i}]")
                    for i, e in enumerate(listed["energy"])
                ),
                energy_note=info.get("energy_note"),
                gpu_before=tuple(GpuState.from_dict(g) for g in listed["gpu_before"]),
                gpu_after=tuple(GpuState.from_dict(g) for g in listed["gpu_after"]),
                roofline=None
                if info.get("roofline") is None
                else Roofline.from_dict(info["roofline"], f"{where}.roofline"),
                memory_check=info.get("memory_check"),
                artifacts=dict(info.get("artifacts") or {}),
                extra=dict(info.get("extra") or {}),
                device_class=info["device_class"],
                earlier=_attempts(info.get("earlier_attempts"), f"{where}.earlier_attempts"),
            )
        except KeyError as err:
            raise RecordError(f"{where}: missing field {err}") from None
        except (TypeError, ValueError, AttributeError) as err:
            if isinstance(err, RecordError):
                raise
            raise RecordError(f"{where}: {err}") from None


def _attempts(raw: Any, where: str) -> tuple[Attempt, ...]:
    """Saved earlier attempts (absent before they were kept: none)."""
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise RecordError(f"{where}: expected a list of attempts")
    return tuple(from_plain(Attempt, a, f"{where}[{i}]") for i, a in enumerate(raw))


def _listed(info: Mapping[str, Any], where: str) -> dict[str, list[Any]]:
    """Per-device records as lists (schema 1 saved one dict, or null)."""
    out = {}
    for key in ("memory", "energy", "gpu_before", "gpu_after"):
        raw = info.get(key)
        if raw is None:
            raw = []
        elif isinstance(raw, Mapping):
            raw = [raw]
        elif not isinstance(raw, list):
            raise RecordError(f"{where}.{key}: expected a list of records")
        out[key] = raw
    return out


@dataclass(frozen=True)
class Comparison:
    """Candidate against baseline of the same workload: speedup and memory saved.

    ``speedup`` is baseline time / candidate time (above 1: the candidate is faster), with
    a bootstrap CI over both sample sets. Allocator peaks are deterministic for a fixed
    workload, so memory saved is one exact reading, not an interval; where there is no
    allocator peak (a CPU) it is None, not a number.
    """

    title: str
    baseline: Measurement
    candidate: Measurement
    baseline_label: str
    candidate_label: str

    def __post_init__(self) -> None:
        for m in (self.baseline, self.candidate):
            if m.timing is None:
                raise ValueError(f"cannot compare {m.id}: it has no timing")

    @property
    def paired_log_ratios(self) -> tuple[float, ...]:
        """The candidate's pairs of blocks timed against this baseline; () where none.

        Each is ``ln(baseline / candidate)`` of two blocks' medians
        (:mod:`gpugauge.measure.paired`).
        """
        paired = self.candidate.extra.get("paired")
        if not isinstance(paired, dict) or paired.get("against") != self.baseline.id:
            return ()
        return tuple(float(x) for x in paired.get("log_ratios", ()))

    @property
    def speedup(self) -> Ratio:
        """Baseline time / candidate time, with its CI.

        From the pairs of alternating blocks where the candidate was timed against this
        baseline (host-timed rounds, which drift between tests); else the ratio of the two
        results' medians.
        """
        assert self.baseline.timing is not None
        assert self.candidate.timing is not None
        if pairs := self.paired_log_ratios:
            return ratio_of_pairs(pairs)
        return ratio_of_medians(self.baseline.timing.device_ms, self.candidate.timing.device_ms)

    @property
    def memory_saved_bytes(self) -> int | None:
        """Baseline peak minus candidate peak, bytes."""
        a, b = self.baseline.peak_bytes, self.candidate.peak_bytes
        return None if a is None or b is None else a - b

    @property
    def memory_saved_fraction(self) -> float | None:
        """Memory saved as a share of the baseline's peak."""
        saved, base = self.memory_saved_bytes, self.baseline.peak_bytes
        return None if saved is None or not base else saved / base

    def as_dict(self) -> dict[str, Any]:
        """Plain dict for JSON."""
        return {
            "title": self.title,
            "baseline": self.baseline.id,
            "candidate": self.candidate.id,
            "baseline_label": self.baseline_label,
            "candidate_label": self.candidate_label,
            "baseline_median_ms": self.baseline.summary.median,
            "candidate_median_ms": self.candidate.summary.median,
            "speedup": self.speedup.as_dict(),
            "memory_saved_bytes": self.memory_saved_bytes,
            "memory_saved_fraction": self.memory_saved_fraction,
            "paired_blocks": len(self.paired_log_ratios),
        }
