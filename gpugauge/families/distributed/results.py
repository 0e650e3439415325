"""The distributed family on the pytest side: launch a series, read its ranks back, record.

A series (:class:`~gpugauge.families.distributed.cases.DistCase` that differ only in
batch) is one torchrun launch of :func:`~gpugauge.families.distributed.rank.run_series`;
:func:`to_measurement` turns a case's slowest-rank steps and its one-GPU reference into
the recorded result (scaling, communication share, bus bandwidth).
"""

from __future__ import annotations

import statistics
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpugauge.families.distributed.cases import (
    RESNET_BATCHES,
    DistCase,
)
from gpugauge.launch.torchrun import Launch, LaunchError, launch, slowest_rank_rounds
from gpugauge.measure.busy import BUSY_KEY, BusyShare
from gpugauge.measure.kernels import CommSplit
from gpugauge.measure.timing import Timing
from gpugauge.measure.wall import TIMED, WARMUP
from gpugauge.results.measurement import INJECTED_KEY, Measurement

CALL = "gpugauge.families.distributed.rank:run_series"
RANK_STEPS_CLOCK = "cuda_event, the rank's timed steps"  # what times a rank's busy share
START_AND_END = "torchrun start and end"  # a launch's seconds outside its ranks' phases
# why a result has no trace split (no busy share, no communication fractions)
NOT_PROFILED = "no profiled steps: an A/B's side (--gauge-skip-extras) compares times alone"


@dataclass(frozen=True)
class CaseResult:
    """One case of a series launch: its slowest-rank timing and every rank's record."""

    case: DistCase
    ranks: tuple[dict[str, Any], ...]
    skipped: str | None = None  # why it did not run: out of memory here or before

    @property
    def rank_timings(self) -> list[Timing]:
        """Each rank's own timed steps, in rank order."""
        return [Timing.from_dict(r["timing"]) for r in self.ranks]

    @property
    def rank_splits(self) -> list[CommSplit]:
        """Each rank's trace split (the mean of its traced windows), in rank order.

        Empty where the ranks ran no profiled steps (an A/B's side).
        """
        if not all(r.get("splits") for r in self.ranks):
            return []
        return [_mean_split(r["splits"]) for r in self.ranks]

    @property
    def timing(self) -> Timing:
        """Each step the slowest rank's time, ms."""
        return slowest_rank_rounds(self.rank_timings)

    @property
    def full_step_ms(self) -> tuple[float, ...]:
        """The timed steps of full batches, ms: an epoch's short last step left out.

        Per-step ratios (weak scaling, efficiency) compare equal work only; at the largest
        batches an epoch is a few steps (ResNet-18 at 8192: 7 on one GPU, 2 with DP on
        four), and a short last one moves the median.
        """
        ms = self.timing.device_ms
        return ms[:-1] if self.case.last_step_short else ms

    @property
    def epoch_s(self) -> float:
        """The timed epoch, seconds: the sum of its steps."""
        return sum(self.timing.device_ms) / 1e3

    @property
    def split(self) -> CommSplit | None:
        """The trace split of the rank with the most exposed communication (cycle mean)."""
        return max(self.rank_splits, key=lambda s: s.exposed_ms, default=None)

    def allreduce_ms(self) -> float | None:
        """Median time of the reference all-reduce (slowest rank per round), ms."""
        if "allreduce" not in self.ranks[0]:
            return None
        t = slowest_rank_rounds([Timing.from_dict(r["allreduce"]) for r in self.ranks])
        return t.summary.median

    def busy(self) -> BusyShare | None:
        """The least busy rank's GPU-busy share; None on the CPU.

        Device activity per profiled step (compute and communication, counted once) over
        that rank's timed steps: the profiled steps are not the timed ones, so a
        device-bound step reads about 1 and one the host paces (DataParallel's scatter and
        replicate at a small batch) well below :data:`~gpugauge.measure.busy.HOST_BOUND_BELOW`.
        """
        if self.case.device != "cuda" or not self.rank_splits:
            return None
        shares = [
            BusyShare(t.device_ms, split.active_ms, split.steps, clock=RANK_STEPS_CLOCK)
            for t, split in zip(self.rank_timings, self.rank_splits, strict=True)
        ]
        return min(shares, key=lambda b: b.share)


def _mean_split(splits: Sequence[dict[str, Any]]) -> CommSplit:
    keys = ("step_ms", "compute_ms", "comm_ms", "comm_kernel_ms", "exposed_ms")
    mean = {k: statistics.fmean(s[k] for s in splits) for k in keys}
    return CommSplit(steps=sum(s["steps"] for s in splits), timeline=splits[0]["timeline"], **mean)


def ring_bytes(grad_bytes: int, p: int) -> float:
    """Bytes each rank sends in a ring all-reduce: 2(P-1)/P of the buffer."""
    return grad_bytes * 2 * (p - 1) / p


def busbw_gbps(grad_bytes: int, p: int, ms: float) -> float:
    """nccl-tests' bus bandwidth of an all-reduce of ``grad_bytes`` taking ``ms``, GB/s."""
    return ring_bytes(grad_bytes, p) / (ms / 1e3) / 1e9


class SeriesRuns:
    """Series launched so far in this session: each case's result, or the launch's error.

    ``each``: every case is a launch of its own, made by its own test (``--gauge-launch-each``:
    an A/B pairs a case's blocks inside its test), at the cost of a launch per case.
    """

    def __init__(
        self,
        out_root: Path,
        note: Callable[[str], None] = print,
        each: bool = False,
        *,
        charge: Callable[[str, float], None] | None = None,
        extras: bool = True,
    ) -> None:
        self.out_root = out_root
        self.note = note
        self.each = each
        self.charge = charge  # the run's wall ledger: a launch's phases, to the test making it
        self.extras = extras  # False: the ranks skip their profiled steps and references
        self._done: dict[tuple[Any, ...], dict[str, CaseResult] | LaunchError] = {}

    def result(self, case: DistCase, selected: Sequence[DistCase]) -> CaseResult:
        """The case's result, launching its series (the selected cases of it) if needed."""
        key = (*case.series, case.batch) if self.each else case.series
        if key not in self._done:
            members = sorted(
                {c for c in selected if c.series == case.series and not self.each} | {case},
                key=lambda c: c.batch,
            )
            t0 = time.monotonic()
            try:
                self._done[key] = done = launch_series(
                    members,
                    self.out_root,
                    note=self.note,
                    alone=self.each,
                    extras=self.extras,
                )
            except LaunchError as err:
                self._done[key] = err
                if self.charge is not None:  # no rank said where its seconds went
                    self.charge(START_AND_END, time.monotonic() - t0)
                raise
            if self.charge is not None:
                for phase, s in launch_phases(done.values(), time.monotonic() - t0).items():
                    self.charge(phase, s)
        done = self._done[key]
        if isinstance(done, LaunchError):
            raise LaunchError(f"{case.id}: its series' launch failed: {done}")
        return done[case.id]

    def find(self, case: DistCase) -> CaseResult | None:
        """The result of the case with ``case``'s id if it ran this session, else None."""
        for done in self._done.values():
            r = done.get(case.id) if isinstance(done, dict) else None
            if r is not None and not r.skipped:
                return r
        return None


def launch_phases(results: Iterable[CaseResult], wall_s: float) -> dict[str, float]:
    """Where a launch's ``wall_s`` seconds went, by phase of the run's wall ledger.

    Rank 0's phases of every case (its data, model build, timing call, profiled steps),
    its cases' timed rounds and warm-up, and the rest: torchrun's and the ranks' start
    (imports, CUDA, the process group) and end.
    """
    out: dict[str, float] = defaultdict(float)
    for r in results:
        first = r.ranks[0] if r.ranks else {}
        for phase, s in (first.get("phases") or {}).items():
            out[phase] += float(s)
        if r.skipped is None:
            out[TIMED] += r.timing.timed_s
            out[WARMUP] += r.timing.warmup_s
    ranks_s = sum(s for phase, s in out.items() if phase not in (TIMED, WARMUP))
    out[START_AND_END] = max(0.0, wall_s - ranks_s)
    return dict(out)


def series_dir(out_root: Path, case: DistCase, alone: bool = False) -> Path:
    """Where a series' ranks write: one folder per series key (everything but the batch).

    ``<root>/<model>-<mode>-<N><unit>-<px>-<images>img-<device>``: AlexNet's data grows
    with its batch, so each of its batches is a series of its own and needs its own folder.
    A case launched ``alone`` gets a folder of its own (``-b<batch>`` added): a launch
    clears its folder's rank files first.
    """
    unit = "gpu" if case.device == "cuda" else "proc"
    name = f"{case.model}-{case.mode}-{case.gpus}{unit}-{case.image}px-{case.images}img"
    return out_root / (f"{name}-{case.device}" + (f"-b{case.batch}" if alone else ""))


def launch_series(
    members: Sequence[DistCase],
    out_root: Path,
    *,
    note: Callable[[str], None] = print,
    timeout_s: float | None = None,
    alone: bool = False,
    extras: bool = True,
) -> dict[str, CaseResult]:
    """Launch one series with torchrun and read every case back (skips carry the reason).

    ``alone``: one case of its series, in a folder of its own (:func:`series_dir`).
    ``extras`` False: the ranks time their cases and skip the profiled steps and the
    all-reduce reference (:func:`~gpugauge.families.distributed.rank.run_case`).
    """
    first = members[0]
    if any(c.series != first.series for c in members):
        raise ValueError("a series launch takes cases that differ only in batch")
    if alone and len(members) != 1:
        raise ValueError("a case launched alone is one case")
    folder = series_dir(out_root, first, alone)
    cases = [c.as_dict() for c in members]
    spec = {"device": first.device, "cases": cases, "out": str(folder), "extras": extras}
    budget = timeout_s if timeout_s is not None else 60 + sum(c.budget_s() for c in members)
    ranks = launch(Launch(CALL, spec, first.ranks), folder, timeout_s=budget, note=note)
    return read_series(members, [r.extra for r in ranks])


def read_series(
    members: Sequence[DistCase], rank_extras: Sequence[dict[str, Any]]
) -> dict[str, CaseResult]:
    """Each case's result from every rank's ``extra``; a case that did not run says why."""
    out = {}
    for c in members:
        per_rank = tuple(e["cases"][c.id] for e in rank_extras)
        bad = [(i, p) for i, p in enumerate(per_rank) if p["status"] != "ok"]
        why = None
        if bad:
            i, p = bad[0]
            why = (
                f"out of memory at per-GPU batch {c.batch} on rank {i} ({p['error']}); "
                "the sweep stops here"
                if p["status"] == "oom"
                else p.get("reason", p["status"])
            )
        out[c.id] = CaseResult(c, per_rank, skipped=why)
    return out


def to_measurement(r: CaseResult, reference: CaseResult | None) -> Measurement:
    """The result recorded for a case: slowest-rank steps and the scaling/comm metrics.

    With the one-GPU ``reference`` (same model, batch, data): strong-scaling speedup
    T(1)/T(N) of epoch times, weak-scaling speedup N·t(1)/t(N) of median step times,
    efficiency t(1)/t(N), and the seed's subtraction: compute T(1)/N, communication
    T(N) − T(1)/N per epoch. The sweep's last batch says that the sweep ended at its cap.
    """
    c, timing = r.case, r.timing
    values: dict[str, float] = {"epoch_time": r.epoch_s, "throughput": c.images / r.epoch_s}
    split = r.split
    extra: dict[str, Any] = {
        "images_per_epoch": c.images,
        "steps_per_epoch": c.steps_per_epoch,
        "data": c.data if c.model == "resnet18" else "synthetic",
        "grad_bytes": r.ranks[0]["grad_bytes"],
    }
    if split is None:
        extra["not_profiled"] = NOT_PROFILED
    else:
        extra["trace_split"] = split.as_dict()
        extra["trace_split_per_rank"] = [s.as_dict() for s in r.rank_splits]
        extra["profiler_schedule"] = dict(
            zip(("wait", "warmup", "active", "repeat"), c.schedule, strict=True)
        )
    busy = r.busy()
    if busy is not None:
        values["gpu_busy"] = busy.share
        extra[BUSY_KEY] = busy.as_dict()
    added = [p[INJECTED_KEY] for p in r.ranks if p.get(INJECTED_KEY)]
    if added:  # work added on purpose (gpugauge check): never a reference
        extra[INJECTED_KEY] = max(added)
    if c.model == "resnet18" and c.device == "cuda" and c.batch == RESNET_BATCHES[-1]:
        extra["sweep_end"] = (
            f"per-GPU batch {c.batch} fitted: the sweep ends at its cap, not at an out-of-memory"
        )
    if c.gpus > 1:
        if split is not None:
            values["comm_fraction"] = split.comm_fraction
            values["exposed_comm_fraction"] = split.exposed_fraction
        ref_ms = r.allreduce_ms()
        if ref_ms is not None:
            grad = r.ranks[0]["grad_bytes"]
            values["busbw"] = busbw_gbps(grad, c.gpus, ref_ms)
            extra["allreduce_reference"] = {
                "bytes": grad,
                "median_ms": ref_ms,
                "busbw_gbps": values["busbw"],
                "ring_bytes_per_rank": ring_bytes(grad, c.gpus),
            }
            if split is not None and split.comm_kernel_ms > 0:
                values["busbw_utilization"] = ref_ms / split.comm_kernel_ms
                extra["achieved_busbw_gbps_trace"] = busbw_gbps(grad, c.gpus, split.comm_kernel_ms)
    if reference is not None and c.gpus > 1:
        t1, tn = reference.epoch_s, r.epoch_s
        values["speedup"] = t1 / tn
        full1, fulln = reference.full_step_ms, r.full_step_ms
        if full1 and fulln:
            s1, sn = statistics.median(full1), statistics.median(fulln)
            values["weak_speedup"] = c.gpus * s1 / sn
            values["efficiency"] = s1 / sn
            extra["full_steps"] = {"reference": len(full1), "this": len(fulln)}
        else:
            extra["full_steps"] = "no full-batch step in an epoch: no per-step scaling"
        comm_s = tn - t1 / c.gpus
        values["subtraction_comm_fraction"] = comm_s / tn
        sub = {"compute_s": t1 / c.gpus, "comm_s": comm_s, "reference": reference.case.id}
        ref_ms = extra.get("allreduce_reference", {}).get("median_ms")
        per_step = comm_s / c.steps_per_epoch * 1e3
        if ref_ms is not None and per_step > 0:
            sub["busbw_utilization"] = ref_ms / per_step
        extra["subtraction"] = sub
    elif c.gpus > 1:
        extra["scaling"] = f"no one-GPU result of {c.reference().id} in this run: no speedup"
    artifacts = {k: v for p in r.ranks for k, v in p["artifacts"].items()}
    return Measurement(c, timing=timing, values=values, artifacts=artifacts, extra=extra)
