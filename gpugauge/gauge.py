"""The benchmark-facing API: ``gauge.measure``, ``gauge.record``, ``gauge.compare``.

:class:`GaugeSession` is the state of one pytest run (kept in ``config.stash``): the
resolved options, NVML, the fingerprint and device ceilings (each measured once, lazily),
the run's artifact folder, and every measurement and comparison so far. :class:`Gauge` is
what a benchmark gets per test. ``measure`` builds a result here (the timing primitive,
then the memory and energy windows, on one device or several) and records it;
``record`` takes a result built anywhere (a torchrun worker's timing, a search) and hands
it to pytest-benchmark's fixture, so that its storage and compare work on device time,
and to the gate. One test records one result: its pytest id is the result's id.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from gpugauge.families import comparisons_of, registry
from gpugauge.measure.ceilings import Ceilings, measure_ceilings
from gpugauge.measure.energy import Energy, idle_power, measure_energy
from gpugauge.measure.environment import fingerprint
from gpugauge.measure.memory import ExpectedMemory, measure_cpu_memory, measure_cuda_memory
from gpugauge.measure.nvml import Nvml, NvmlDevice, NvmlUnavailable
from gpugauge.measure.profile import round_kernels
from gpugauge.measure.roofline import Work, roofline
from gpugauge.measure.sampler import GpuSampler
from gpugauge.measure.timing import (
    CudaEventClock,
    HostClock,
    RoundClock,
    Timing,
    TimingPolicy,
    measure,
)
from gpugauge.options import Options
from gpugauge.regress.baselines import BaselineStore, entry_of
from gpugauge.regress.gate import Gate, GateResult, Verdict
from gpugauge.report.tables import comparison_table, gate_table, results_table, roofline_table
from gpugauge.results.measurement import Comparison, Measurement, Spec, devices_of
from gpugauge.results.metrics import METRICS

Note = Callable[[str], None]


@dataclass
class GaugeSession:
    """State of one pytest run; created in ``pytest_configure``, closed in ``unconfigure``."""

    options: Options
    root: Path
    note: Note = print
    measurements: list[Measurement] = field(default_factory=list)
    adhoc_comparisons: list[Comparison] = field(default_factory=list)  # gauge.compare's
    gate: Gate | None = None
    gate_results: list[GateResult] = field(default_factory=list)
    messages: list[str] = field(default_factory=list)
    unmeasured: set[str] = field(default_factory=set)  # ids run once under --benchmark-disable
    _nvml: Nvml | NvmlUnavailable | None = None
    _fingerprint: dict[str, Any] | None = None
    _ceilings: dict[str, Ceilings] = field(default_factory=dict)
    _artifact_run: Path | None = None

    @property
    def nvml(self) -> Nvml | None:
        """Open NVML on first use; None where it is unavailable (see ``nvml_reason``)."""
        if self._nvml is None:
            try:
                self._nvml = Nvml().__enter__()
            except NvmlUnavailable as err:
                self._nvml = err
        return self._nvml if isinstance(self._nvml, Nvml) else None

    @property
    def nvml_reason(self) -> str | None:
        """Why NVML is unavailable, or None."""
        return str(self._nvml) if self.nvml is None else None

    def nvml_device(self, device: str) -> NvmlDevice | None:
        """The NVML handle behind a torch CUDA device string, or None."""
        import torch

        dev = torch.device(device)
        if dev.type != "cuda" or self.nvml is None:
            return None
        return self.nvml.device(dev.index if dev.index is not None else 0)

    def fingerprint(self) -> dict[str, Any]:
        """The environment fingerprint, taken once per run."""
        if self._fingerprint is None:
            self._fingerprint = fingerprint(self.root, self.nvml, self.nvml_reason)
        return self._fingerprint

    def ceilings(self, device: str) -> Ceilings:
        """The device's measured ceilings, measured on first request."""
        if device not in self._ceilings:
            self.note(f"measuring {device} ceilings (copy bandwidth, matmul per dtype) ...")
            c = self._ceilings[device] = measure_ceilings(device)
            rates = ", ".join(f"{k} {v:.1f}" for k, v in c.matmul_tflops.items())
            self.note(f"{device}: copy {c.copy_gbps:.0f} GB/s; matmul TFLOP/s {rates}")
        return self._ceilings[device]

    def all_ceilings(self) -> dict[str, dict[str, Any]]:
        """Every ceiling measured so far, for the saved JSON."""
        return {k: v.as_dict() for k, v in self._ceilings.items()}

    @property
    def comparisons(self) -> list[Comparison]:
        """Each family's comparisons among the results present, then gauge.compare's.

        Derived, so they do not depend on the order in which the tests ran.
        """
        return comparisons_of(self.measurements) + self.adhoc_comparisons

    def tables(self) -> dict[str, str]:
        """The end-of-run tables, by name: printed, and saved in the JSON."""
        ms, skip = self.measurements, self.unmeasured
        out = {"results": results_table(ms, unmeasured=skip)} if ms else {}
        if any(m.roofline for m in ms if m.id not in skip):
            out["roofline"] = roofline_table([m for m in ms if m.id not in skip])
        for family in registry().values():
            mine = [m for m in ms if m.spec.family == family.name and m.id not in skip]
            if mine:
                out.update(family.tables(mine))
        comparisons = self.comparisons
        if comparisons:
            out["comparisons"] = comparison_table(comparisons, unmeasured=skip)
        if self.gate is not None and self.measurements:
            out["gate"] = gate_table(self.gate_results, self.missing_from_run())
        return out

    def missing_from_run(self) -> list[str]:
        """Baseline entries of the families that ran, which this run did not measure."""
        if self.gate is None:
            return []
        seen = {(m.device_class, m.spec.family, m.id) for m in self.measurements}
        out = []
        for dev, fam in sorted({(d, f) for d, f, _ in seen}):
            ids = {i for d, f, i in seen if (d, f) == (dev, fam)}
            out += [f"{dev}/{fam}: {i}" for i in self.gate.missing(dev, fam, ids)]
        return out

    def gate_notes(self) -> list[str]:
        """Lines that say loudly when a gated run compared nothing, and why."""
        if self.gate is None or not self.measurements:
            return []
        if self.unmeasured:
            return ["gate: NOTHING GATED: --benchmark-disable ran each benchmark once, untimed"]
        if self.gate_results and not any(r.checks for r in self.gate_results):
            hint = "" if self.options.require_baselines else " (--require-baselines fails the run)"
            return [
                f"gate: NOTHING COMPARED: none of the {len(self.gate_results)} results had a "
                f"baseline of its device class in {self.options.baselines_dir}{hint}"
            ]
        return []

    def write_baselines(self, passed: bool) -> None:
        """Store this run's results as baselines (only a run in which every test passed).

        A run that did not measure properly (results taken under --benchmark-disable) never
        writes: one cold round would become the reference every later run is judged by.
        """
        if not passed:
            self.messages.append("baselines NOT written: the run had failures or errors")
            return
        if self.unmeasured:
            self.messages.append(
                f"baselines NOT written: {len(self.unmeasured)} result(s) were not measured "
                f"(--benchmark-disable runs each benchmark once, untimed)"
            )
            return
        if not self.measurements:
            self.messages.append("baselines NOT written: nothing was measured")
            return
        fp = self.fingerprint()
        meta = {
            "recorded_with": {
                k: fp.get(k) for k in ("torch", "cuda_runtime", "cudnn", "driver", "git", "python")
            },
            "profile": self.options.profile,
        }
        for path in BaselineStore(self.options.baselines_dir).write(
            map(entry_of, self.measurements), meta
        ):
            self.messages.append(f"baseline written: {path}")

    def find(self, spec: Spec) -> Measurement | None:
        """The measurement of ``spec`` in this run, if it ran."""
        return next((m for m in self.measurements if m.spec == spec), None)

    @property
    def artifact_run_dir(self) -> Path:
        """The run's artifact folder, ``<artifacts-dir>/<UTC time>-<pid>``, made on first use."""
        if self._artifact_run is None:
            stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
            self._artifact_run = self.options.artifacts_dir / f"{stamp}-{os.getpid()}"
        return self._artifact_run

    def close(self) -> None:
        """Shut NVML down."""
        if isinstance(self._nvml, Nvml):
            self._nvml.__exit__(None, None, None)
        self._nvml = None


def _clock(devices: tuple[str, ...]) -> RoundClock:
    return CudaEventClock(devices) if devices[0].startswith("cuda") else HostClock()


@contextlib.contextmanager
def _watch(nvml_device: NvmlDevice | None) -> Iterator[GpuSampler | None]:
    if nvml_device is None:
        yield None
        return
    with GpuSampler(nvml_device) as sampler:
        yield sampler


def _nothing() -> None:
    return None


def _chain(first: Callable[[], object], then: Callable[[], object]) -> Callable[[], object]:
    def both() -> object:
        first()
        return then()

    return both


def _one_line(m: Measurement) -> str:
    values = ", ".join(f"{k} {v:.4g} {METRICS[k].unit}" for k, v in m.values.items())
    if m.timing is None:
        return values or "recorded"
    s, t = m.summary, m.timing
    flags = [
        f
        for f, on in (("noisy", t.noisy), (f"{t.throttled_rounds} throttled", t.throttled_rounds))
        if on
    ]
    line = f"median {s.median:.4g} ms [{s.ci_low:.4g}, {s.ci_high:.4g}] n={s.n} ({t.stop_reason})"
    line += f" [{', '.join(flags)}]" if flags else ""
    return f"{line}; {values}" if values else line


def plain_params(params: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """A test's parameters as JSON values, so pytest-benchmark stores and groups by them.

    A spec parameter becomes its id, and its fields become parameters of their own (so
    ``--benchmark-group-by=param:mode`` works); other values that JSON cannot hold, their repr.
    """
    if params is None:
        return None
    out: dict[str, Any] = {}
    fields: dict[str, Any] = {}
    for name, value in params.items():
        if hasattr(value, "as_dict") and hasattr(value, "id"):
            out[name] = value.id
            fields.update(value.as_dict())
        else:
            out[name] = value
    for name, value in {**fields, **out}.items():
        try:
            json.dumps(value, allow_nan=False)
        except (TypeError, ValueError):
            value = repr(value)
        out[name] = value
    return out


def stored_options(t: Timing) -> dict[str, Any]:
    """What pytest-benchmark stores as a benchmark's ``options``: what gpugauge did (s, ms)."""
    p = t.policy
    return {
        "timer": t.clock,
        "rounds": p.rounds,
        "min_rounds": p.min_rounds,
        "max_rounds": p.max_rounds,
        "max_time": p.budget_s,
        "target_ci": p.target_ci,
        "regime": t.regime,
        "min_time": p.min_time_s,
        "warmup": t.warmup_rounds,
        "warmup_time": t.warmup_s,
        "flush_l2": t.l2_flushed,
        "disable_gc": False,
        "stop_reason": t.stop_reason,
        "measured_by": "gpugauge",
    }


def l2_flusher(device: str) -> Callable[[], object]:
    """Zero a buffer twice the L2 size: evicts whatever the last round left in L2."""
    import torch

    l2 = torch.cuda.get_device_properties(torch.device(device)).L2_cache_size
    buf = torch.empty(max(2 * l2, 1 << 20), dtype=torch.uint8, device=device)
    return buf.zero_


class GaugeError(RuntimeError):
    """A benchmark used the gauge in a way that would lose or mislabel a result."""


class Gauge:
    """Per-test measuring API; wraps the pytest-benchmark fixture it records into.

    One test records one result: the pytest-benchmark row, the pytest id and the baseline
    key are all that result's id, so a second ``record`` (or ``measure``) in the same test
    is refused with :class:`GaugeError` rather than stored under the first one's name.
    """

    def __init__(self, session: GaugeSession, benchmark: Any) -> None:
        self.session = session
        self._benchmark = benchmark
        self._recorded: Measurement | None = None
        self._started = time.perf_counter()

    @property
    def options(self) -> Options:
        """The run's resolved options."""
        return self.session.options

    def _policy(self, flush_l2: bool) -> TimingPolicy:
        policy = self.options.policy
        if flush_l2 and not policy.flush_l2:
            policy = replace(policy, flush_l2=True)
        if self._benchmark_disabled:
            policy = replace(policy, warmup_rounds=0, warmup_s=0, rounds=1)
        return policy

    def measure(
        self,
        spec: Spec,
        fn: Callable[[], object],
        *,
        setup: Callable[[], object] | None = None,
        work: Work | None = None,
        expected_memory: ExpectedMemory | None = None,
        flush_l2: bool = False,
        energy: bool = True,
        values: Mapping[str, float] | None = None,
        artifacts: Mapping[str, Path | str] | None = None,
        extra: dict[str, Any] | None = None,
    ) -> Measurement:
        """Time ``fn``, then its memory and energy; record and return the measurement.

        ``fn`` is one complete round (one inference, one training step); on a spec with
        several devices a round ends when every device has finished it. ``setup`` runs
        before every round outside the timing and memory windows (fresh inputs, grads set
        to None); the energy window runs it too. ``work`` adds a roofline,
        ``expected_memory`` a check of the peak, ``flush_l2`` a cold L2 for every round,
        ``values`` further metrics by registry name, ``artifacts`` files the result owns
        (see :meth:`artifact_path`). The samples go to pytest-benchmark's fixture,
        everything else into ``extra_info``.
        """
        self._check_not_recorded(spec)
        devices = devices_of(spec)
        on_gpu = devices[0].startswith("cuda")
        policy = self._policy(flush_l2)
        nvdevs = [self.session.nvml_device(d) for d in devices]
        known = [d for d in nvdevs if d is not None]
        nvdev = nvdevs[0]
        gc.collect()
        if on_gpu:
            import torch

            torch.cuda.empty_cache()
        ceilings = None if self._benchmark_disabled else self.session.ceilings(devices[0])
        prepare = setup or _nothing
        prepare()
        # CPU allocators keep freed memory, so only the first run shows RSS growth.
        memory = () if on_gpu else (measure_cpu_memory(fn),)
        clock = _clock(devices)
        energy_devs = known if len(known) == len(devices) else []
        why_not = self._no_energy(energy, energy_devs, policy)
        idle_w = None
        if why_not is None:
            # idle power first, so that warm-up, timing and the energy window that follows
            # it right away all run in the same (sustained) regime
            idle_w = idle_power(energy_devs, clock.synchronize, self.options.idle_s)
        self.session.note(f"{spec.id}: {policy.regime} warm-up, timing ...")
        before = tuple(d.state() for d in known)
        flush = l2_flusher(devices[0]) if (on_gpu and policy.flush_l2) else None
        between = setup if flush is None else _chain(prepare, flush)
        with _watch(nvdev) as watch:
            timing = measure(fn, policy, clock, between=between, watch=watch)
        if on_gpu:
            prepare()
            memory = measure_cuda_memory(fn, devices, nvdevs)
        result_energy: tuple[Energy, ...] = ()
        energy_note = why_not
        if why_not is None:
            result_energy, energy_note = self._energy(
                fn if setup is None else _chain(setup, fn),
                energy_devs,
                devices,
                clock,
                timing.summary.median,
                idle_w,
            )
        if on_gpu and self.options.record_kernels:
            prepare()
            extra = {**(extra or {}), "kernels": round_kernels(fn, clock.synchronize)}
        m = Measurement(
            spec=spec,
            timing=timing,
            values=dict(values or {}),
            memory=memory,
            energy=result_energy,
            energy_note=energy_note,
            gpu_before=before,
            gpu_after=tuple(d.state() for d in known),
            roofline=None
            if work is None or ceilings is None
            else roofline(work, timing.summary.median, ceilings),
            artifacts={k: str(v) for k, v in (artifacts or {}).items()},
            extra={**(extra or {}), "ceilings": ceilings and ceilings.as_dict()},
        )
        if expected_memory is not None and memory:
            m = replace(m, memory_check=expected_memory.check(m.peak_bytes))
        return self.record(m)

    def record(self, m: Measurement) -> Measurement:
        """Record a result built anywhere: store it, gate it, and return it.

        ``m`` may come from :meth:`measure`, from a worker process
        (``Measurement(spec, timing=Timing.from_dict(...))``) or from a search with no
        timing at all (``Measurement(spec, values={"max_layers": 61})``). Its rounds, if
        any, become pytest-benchmark's stats; everything else goes into ``extra_info``.
        A regression against the baseline fails the calling test.
        """
        self._check_not_recorded(m.spec)
        missing = [f"{k}={v}" for k, v in m.artifacts.items() if not Path(v).exists()]
        if missing:
            raise GaugeError(f"{m.id}: artifact file(s) not written: {', '.join(missing)}")
        self._recorded = m
        info = m.as_dict()  # the fingerprint is the run's: pytest-benchmark's machine_info
        bench = self._benchmark
        if bench is not None:
            bench.extra_info.update(info)
            if bench.disabled:
                self.session.unmeasured.add(m.id)
            # read by pytest-benchmark when the stats are made: set them first
            bench.group = bench.group or getattr(m.spec, "group", None) or m.spec.family
            bench.params = plain_params(bench.params)
            if not bench.disabled:
                # pytest-benchmark has no public API for externally timed rounds: this is
                # what its pedantic mode does per round (Metadata.update takes seconds).
                stats = bench._make_stats(1)
                if m.timing is not None:
                    stats.options = stored_options(m.timing)
                    for ms in m.timing.device_ms:
                        stats.update(ms / 1e3)
                else:
                    # pytest-benchmark saves only rows with stats: a result with no timing
                    # (a search) gets the test's host wall time, labelled so; it is no
                    # metric of the result, which the gate and report read from extra_info
                    stats.options = {
                        "timer": "host wall time of the test (result has no timing)",
                        "measured_by": "gpugauge",
                    }
                    stats.update(time.perf_counter() - self._started)
            # no public API either to say the fixture was used (it warns otherwise)
            bench._mode = "gpugauge.record"
        self.session.measurements.append(m)
        self.session.note(f"{m.id}: {_one_line(m)}")
        self._gate(m)
        return m

    def artifact_path(self, spec: Spec, name: str) -> Path:
        """Where this result's file ``name`` goes: ``<run folder>/<spec id>/<name>``.

        The folder is made; write the file, then pass ``artifacts={"label": path}`` to
        :meth:`measure`, or put it in the Measurement given to :meth:`record`.
        """
        if not name or "/" in name or name in (".", ".."):
            raise GaugeError(f"artifact name {name!r} must be a plain file name")
        folder = self.session.artifact_run_dir / spec.id
        folder.mkdir(parents=True, exist_ok=True)
        return folder / name

    def _check_not_recorded(self, spec: Spec) -> None:
        if self._recorded is not None:
            raise GaugeError(
                f"this test already recorded {self._recorded.id!r}; it cannot also record "
                f"{spec.id!r}: one test records one result (its pytest id, pytest-benchmark "
                f"row and baseline key). Parametrize the test with one case per result."
            )

    def _gate(self, m: Measurement) -> None:
        """Judge against the baseline; a regression fails the test that owns it."""
        gate = self.session.gate
        if gate is None or self._benchmark_disabled:
            return
        result = gate.judge(entry_of(m))
        self.session.gate_results.append(result)
        if self._benchmark is not None:
            self._benchmark.extra_info["gate"] = result.as_dict()
        if result.verdict is Verdict.REGRESSED:
            pytest.fail(f"gpugauge gate: {result.message()}", pytrace=False)
        if result.verdict is Verdict.NEW and self.options.require_baselines:
            pytest.fail(f"gpugauge gate: {result.message()} (--require-baselines)", pytrace=False)

    @property
    def _benchmark_disabled(self) -> bool:
        return self._benchmark is not None and self._benchmark.disabled

    def _no_energy(
        self, wanted: bool, nvdevs: list[NvmlDevice], policy: TimingPolicy
    ) -> str | None:
        """Why energy is not read for this measurement, or None when it is."""
        if not wanted or self._benchmark_disabled:
            return "energy not measured for this benchmark"
        if self.options.energy_window_s == 0:
            return "energy turned off with --energy-window 0"
        if policy.regime != "sustained":
            return (
                f"energy is read in the sustained regime only: a {policy.regime} run is "
                f"shorter than NVML's counter can resolve"
            )
        if not nvdevs:
            reason = self.session.nvml_reason or "not a CUDA device"
            return f"no NVML energy counter on this device: {reason}"
        return None

    def _energy(
        self,
        fn: Callable[[], object],
        nvdevs: list[NvmlDevice],
        devices: tuple[str, ...],
        clock: RoundClock,
        median_ms: float,
        idle_w: list[float | None] | None,
    ) -> tuple[tuple[Energy, ...], str | None]:
        window = self.options.energy_window_s
        self.session.note(f"energy window {window:g} s ...")
        try:
            e = measure_energy(
                fn,
                nvdevs,
                clock.synchronize,
                seconds_per_iter=median_ms / 1e3,
                window_s=window,
                idle_power_w=idle_w,
                names=devices,
            )
        except RuntimeError as err:
            return (), str(err)
        return e, ("short window (< 2 s): energy is unreliable" if e[0].short_window else None)

    def compare(
        self,
        baseline: Measurement,
        candidate: Measurement,
        *,
        title: str,
        labels: tuple[str, str] = ("baseline", "candidate"),
    ) -> Comparison:
        """Compare two timed results a benchmark holds; shown in the run's comparison table.

        A family's own comparisons are derived from the results present at the end
        (:attr:`Family.comparisons`); this is for a benchmark that has both sides in hand.
        """
        c = Comparison(title, baseline, candidate, *labels)
        self.session.adhoc_comparisons.append(c)
        return c
