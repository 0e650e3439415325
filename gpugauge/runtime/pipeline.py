"""The measurement pipeline behind ``gauge.measure``: one result from one callable.

In order: idle power (so that warm-up, timing and the energy window that follows all run in
the same sustained regime), warm-up and timed rounds with the suite's one timing primitive
(:func:`gpugauge.measure.timing.measure`), the peak memory of one round, NVML energy over a
window of rounds, and, with ``--gauge-record-kernels``, one profiled round's kernels. The result
is a :class:`~gpugauge.results.measurement.Measurement`; storing and gating it is the
gauge's job (:mod:`gpugauge.runtime.gauge`).
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpugauge.measure.energy import Energy, idle_power, measure_energy
from gpugauge.measure.memory import ExpectedMemory, measure_cpu_memory, measure_cuda_memory
from gpugauge.measure.nvml import NvmlDevice
from gpugauge.measure.paired import PairedReference, paired_blocks
from gpugauge.measure.profile import round_kernels
from gpugauge.measure.roofline import Work, roofline
from gpugauge.measure.sampler import watching
from gpugauge.measure.threads import pinned
from gpugauge.measure.timing import (
    CudaEventClock,
    HostClock,
    RoundClock,
    RunQueueClock,
    TimingPolicy,
    measure,
)
from gpugauge.measure.wall import AROUND, PROFILED, TIMED, WARMUP
from gpugauge.results.measurement import Measurement, Spec, devices_of

if TYPE_CHECKING:
    from gpugauge.runtime.session import GaugeSession


def clock_for(devices: tuple[str, ...], cpu_threads: int = 1) -> RoundClock:
    """CUDA events on a GPU (every device of a multi-GPU round), perf_counter_ns on a CPU.

    A CPU case on one thread leaves out the time it waited for a core where the platform
    counts it (:class:`~gpugauge.measure.clocks.RunQueueClock`): the code's time, not the
    scheduler's. On more threads the others' waits are unseen: wall time, as said.
    """
    if devices[0].startswith("cuda"):
        return CudaEventClock(devices)
    return RunQueueClock() if cpu_threads == 1 and RunQueueClock.available() else HostClock()


def _nothing() -> None:
    return None


def _chain(first: Callable[[], object], then: Callable[[], object]) -> Callable[[], object]:
    def both() -> object:
        first()
        return then()

    return both


def l2_flusher(device: str) -> Callable[[], object]:
    """Zero a buffer twice the L2 size: evicts whatever the last round left in L2."""
    import torch

    l2 = torch.cuda.get_device_properties(torch.device(device)).L2_cache_size
    buf = torch.empty(max(2 * l2, 1 << 20), dtype=torch.uint8, device=device)
    return buf.zero_


def no_energy_reason(
    session: GaugeSession,
    wanted: bool,
    measured: bool,
    nvdevs: list[NvmlDevice],
    policy: TimingPolicy,
) -> str | None:
    """Why energy is not read for this measurement, or None when it is."""
    if not wanted or not measured:
        return "energy not measured for this benchmark"
    if session.options.energy_window_s == 0:
        return "energy turned off with --gauge-energy-window 0"
    if policy.regime != "sustained":
        return (
            f"energy is read in the sustained regime only: a {policy.regime} run is "
            f"shorter than NVML's counter can resolve"
        )
    if not nvdevs:
        reason = session.nvml_reason or "not a CUDA device"
        return f"no NVML energy counter on this device: {reason}"
    return None


def _energy(
    session: GaugeSession,
    fn: Callable[[], object],
    nvdevs: list[NvmlDevice],
    devices: tuple[str, ...],
    clock: RoundClock,
    median_ms: float,
    idle_w: list[float | None] | None,
) -> tuple[tuple[Energy, ...], str | None]:
    window = session.options.energy_window_s
    session.note(f"energy window {window:g} s ...")
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


def measure_case(
    session: GaugeSession,
    spec: Spec,
    fn: Callable[[], object],
    policy: TimingPolicy,
    *,
    measured: bool = True,
    setup: Callable[[], object] | None = None,
    work: Work | None = None,
    expected_memory: ExpectedMemory | None = None,
    energy: bool = True,
    values: Mapping[str, float] | None = None,
    artifacts: Mapping[str, Path | str] | None = None,
    extra: dict[str, Any] | None = None,
    reference: PairedReference | None = None,
) -> Measurement:
    """Measure ``fn`` (one round) on the spec's devices; see :meth:`Gauge.measure`.

    ``measured`` is False under ``--benchmark-disable``: no ceilings and no energy, and the
    policy the caller passes runs one round. The device's ceilings are measured only for a
    case with ``work`` (its roofline), once per run. A CPU case runs on the session's intra-op
    threads (:mod:`gpugauge.measure.threads`), the load average read before and after.
    """
    devices = devices_of(spec)
    with _on_its_threads(session, devices):
        on_gpu = devices[0].startswith("cuda")
        nvdevs = [session.nvml_device(d) for d in devices]
        known = [d for d in nvdevs if d is not None]
        wall = session.wall
        with wall.phase("before rounds"):
            gc.collect()
            if on_gpu:
                import torch

                torch.cuda.empty_cache()
        # the ceilings (seconds of copies and matmuls) serve a roofline alone: measured on the
        # first case that states its work, never for a run with none, nor for an A/B's side
        # (--gauge-skip-extras: its results are compared by time alone)
        rooflined = measured and work is not None and not session.options.skip_extras
        with wall.phase("ceilings"):
            ceilings = session.ceilings(devices[0]) if rooflined else None
        prepare = setup or _nothing
        with wall.phase("before rounds"):
            prepare()
            # CPU allocators keep freed memory, so only the first run shows RSS growth.
            memory = () if on_gpu else (measure_cpu_memory(fn),)
        clock = clock_for(devices, session.cpu_threads.count)
        energy_devs = known if len(known) == len(devices) else []
        why_not = no_energy_reason(session, energy, measured, energy_devs, policy)
        idle_w = None
        if why_not is None:
            # idle power first, so that warm-up, timing and the energy window that follows
            # it right away all run in the same (sustained) regime
            with wall.phase("idle power"):
                idle_w = idle_power(energy_devs, clock.synchronize, session.options.idle_s)
        session.note(f"{spec.id}: {policy.warmup_plan()}; timing ...")
        before = tuple(d.state() for d in known)
        flush = l2_flusher(devices[0]) if (on_gpu and policy.flush_l2) else None
        between = setup if flush is None else _chain(prepare, flush)
        with wall.phase(AROUND), watching(nvdevs[0]) as watch:
            timing = measure(fn, policy, clock, between=between, watch=watch)
        wall.charge(TIMED, timing.timed_s)
        wall.charge(WARMUP, timing.warmup_s)
        if reference is not None and measured and not on_gpu and not session.options.skip_extras:
            # host-timed rounds drift with the host between tests: pair the blocks (an A/B
            # side, run with --gauge-skip-extras, compares times and no comparison)
            against = reference.build()
            paired = fn if reference.candidate is None else reference.candidate()
            with wall.phase(AROUND):
                pairs = paired_blocks(against, paired, policy, clock)
            wall.charge(TIMED, pairs.timed_s)
            wall.charge(WARMUP, pairs.warmup_s)
            extra = {**(extra or {}), "paired": {"against": reference.id, **pairs.as_dict()}}
        if on_gpu:
            with wall.phase("memory round"):
                prepare()
                memory = measure_cuda_memory(fn, devices, nvdevs)
        result_energy: tuple[Energy, ...] = ()
        energy_note = why_not
        if why_not is None:
            with wall.phase("energy"):
                result_energy, energy_note = _energy(
                    session,
                    fn if setup is None else _chain(setup, fn),
                    energy_devs,
                    devices,
                    clock,
                    timing.summary.median,
                    idle_w,
                )
        if on_gpu and session.options.record_kernels:
            with wall.phase(PROFILED):
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
        return m


@contextmanager
def _on_its_threads(session: GaugeSession, devices: tuple[str, ...]) -> Iterator[None]:
    """A CPU case on the session's intra-op threads, the load average read around it."""
    if devices[0].startswith("cuda"):
        yield
        return
    session.sample_load()
    with pinned(session.cpu_threads.count):
        yield
    session.sample_load()
