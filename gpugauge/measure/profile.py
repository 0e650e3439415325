"""A profiler pass, run apart from every timed round: operator and kernel tables, a trace.

:func:`profile_steps` runs a step callable under ``torch.profiler`` with a schedule
(wait, warm-up, active steps) and returns the active steps' operator averages
(:class:`OpRow`, times in µs as torch reports them) and writes a Chrome trace that Perfetto
(ui.perfetto.dev) and TensorBoard's profiler plugin open. :func:`op_table` sorts them (by
self device time or self CPU time, as the seeds' tables) and :func:`to_csv` and
:func:`to_markdown` write them. :meth:`Profile.kernels` reads the trace back into the
nvprof-style kernel table of :mod:`gpugauge.measure.kernels` (Time%, total, calls, avg,
min, max, name; its own CSV and Markdown). :func:`loader_share` times a real
training loop fed by a data loader, to give the loader's share of a step.

Nothing here runs inside a timed round: the profiler adds host overhead to every op. Nor
after one: every profiler here first calls :func:`release_cupti_on_stop`.
"""

from __future__ import annotations

import csv
import io
import os
import statistics
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from gpugauge.measure.kernels import KernelTable, kernel_table, read_trace
from gpugauge.measure.timing import RoundClock


def release_cupti_on_stop() -> None:
    """Have Kineto tear CUPTI down when a trace stops (``TEARDOWN_CUPTI=1``), unless set.

    Kineto leaves CUPTI subscribed after a trace unless told, and every later kernel
    launch in the process pays for it: on two H200s (torch 2.11) a host-paced GPipe ×2
    step read 111.2 ms [111.1, 111.3] before a traced step and 115.9 [115.5, 117.1] after;
    with teardown, 111.3 [111.2, 111.4] and 111.2 [111.2, 111.3] (docs/lab/experiments.md,
    ``pipe_probe``). Kineto reads the variable each time a trace stops, and tears CUPTI down on a
    thread of its own. PyTorch sets it to 0 itself in some CUDA-graph cases (Inductor's,
    and its profiler's own check on CUDA before 12.6), where a CUPTI re-init after a
    teardown crashed; whoever captures CUDA graphs otherwise and profiles may want
    ``TEARDOWN_CUPTI=0``, which this leaves alone.
    """
    os.environ.setdefault("TEARDOWN_CUPTI", "1")


@dataclass(frozen=True)
class ProfileSchedule:
    """``torch.profiler.schedule``: skip ``wait`` steps, warm up, record ``active`` steps."""

    wait: int = 1
    warmup: int = 1
    active: int = 3

    def __post_init__(self) -> None:
        if self.wait < 0 or self.warmup < 0 or self.active < 1:
            raise ValueError(
                f"invalid profiler schedule {self}: need wait, warmup >= 0, active >= 1"
            )

    @property
    def steps(self) -> int:
        """Steps the pass runs in all."""
        return self.wait + self.warmup + self.active


@dataclass(frozen=True)
class OpRow:
    """One operator (or device kernel) averaged over the active steps; times in µs, totals."""

    name: str
    calls: int
    self_cpu_us: float
    cpu_total_us: float
    self_device_us: float
    device_total_us: float


@dataclass(frozen=True)
class Profile:
    """What a profiler pass saw: every operator row, the schedule and the trace file."""

    rows: tuple[OpRow, ...]
    schedule: ProfileSchedule
    trace: Path
    device: str

    @property
    def self_cpu_total_us(self) -> float:
        """Sum of self CPU time over all rows (torch's 'Self CPU time total'), µs."""
        return sum(r.self_cpu_us for r in self.rows)

    @property
    def self_device_total_us(self) -> float:
        """Sum of self device time over all rows ('Self CUDA time total'), µs."""
        return sum(r.self_device_us for r in self.rows)

    def kernels(self, top: int | None = None) -> KernelTable:
        """The trace's nvprof-style kernel table: the ``top`` names (None: all), µs.

        GPU activity when the trace holds any, else CPU operators by self time
        (``KernelTable.activity`` says which).
        """
        return kernel_table(read_trace(self.trace), top)

    def summary(self) -> dict[str, Any]:
        """Totals and settings for a result's ``extra`` (µs; the rows go to the tables)."""
        return {
            "schedule": asdict(self.schedule),
            "device": self.device,
            "operators": len(self.rows),
            "self_cpu_total_us": self.self_cpu_total_us,
            "self_device_total_us": self.self_device_total_us,
            "trace": str(self.trace),
        }


def _device_us(avg: Any, name: str) -> float:
    """A FunctionEventAvg's device time: ``*_device_*`` since torch 2.4, ``*_cuda_*`` before."""
    value = getattr(avg, name, None)
    if value is None:
        value = getattr(avg, name.replace("device", "cuda"), 0.0)
    return float(value)


def op_rows(averages: Iterable[Any]) -> tuple[OpRow, ...]:
    """Rows from ``prof.key_averages()`` (FunctionEventAvg objects)."""
    return tuple(
        OpRow(
            name=str(a.key),
            calls=int(a.count),
            self_cpu_us=float(a.self_cpu_time_total),
            cpu_total_us=float(a.cpu_time_total),
            self_device_us=_device_us(a, "self_device_time_total"),
            device_total_us=_device_us(a, "device_time_total"),
        )
        for a in averages
    )


def profile_steps(
    step: Callable[[], object],
    trace: Path,
    *,
    device: str,
    schedule: ProfileSchedule = ProfileSchedule(),
    synchronize: Callable[[], None] | None = None,
    cpu: bool = True,
) -> Profile:
    """Run ``step`` ``schedule.steps`` times under the profiler; write the trace to ``trace``.

    On a CUDA device the device activity is recorded too, and ``synchronize`` runs at the
    end of every step so that each ProfilerStep span holds its kernels and none is lost
    when the profiler stops. ``cpu=False`` (CUDA devices only) records the device and its
    launch calls but not the host's operators, whose tracing slows the host.
    """
    import torch
    from torch.profiler import ProfilerActivity, profile
    from torch.profiler import schedule as make_schedule

    release_cupti_on_stop()
    on_gpu = torch.device(device).type == "cuda"
    activities = [ProfilerActivity.CPU] if cpu or not on_gpu else []
    activities += [ProfilerActivity.CUDA] if on_gpu else []
    seen: dict[str, tuple[OpRow, ...]] = {}

    def ready(prof: Any) -> None:
        prof.export_chrome_trace(str(trace))
        seen["rows"] = op_rows(prof.key_averages())

    with profile(
        activities=activities,
        schedule=make_schedule(
            wait=schedule.wait, warmup=schedule.warmup, active=schedule.active, repeat=1
        ),
        on_trace_ready=ready,
    ) as prof:
        for _ in range(schedule.steps):
            step()
            if synchronize is not None:
                synchronize()
            prof.step()
    if "rows" not in seen:
        raise RuntimeError(f"the profiler recorded no active step (schedule {schedule})")
    if not trace.exists():
        raise RuntimeError(f"the profiler did not write its trace to {trace}")
    return Profile(seen["rows"], schedule, trace, device)


def round_kernels(
    fn: Callable[[], object], synchronize: Callable[[], None], top: int | None = 16
) -> list[dict[str, Any]]:
    """The device kernels and copies of one call of ``fn``, longest first (``top`` of them).

    Each row: name, calls, total µs, and ``share``, of the whole call's device time (all
    kernels, listed or not).

    What a result's median alone cannot say: which algorithm cuDNN or cuBLAS ran (on one
    H200 the tf32 seed conv took 9.52 ms in some processes and 9.78 in others, at one
    clock). One call under ``torch.profiler`` with CUDA activity only.
    """
    from torch.profiler import ProfilerActivity, profile

    release_cupti_on_stop()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        synchronize()
    rows: dict[str, list[float]] = {}
    for e in prof.events():
        if getattr(e.device_type, "name", "") != "CUDA":
            continue
        row = rows.setdefault(e.name, [0, 0.0])
        row[0] += 1
        row[1] += e.time_range.elapsed_us()
    total = sum(us for _, us in rows.values())
    ranked = sorted(rows.items(), key=lambda kv: -kv[1][1])[:top]
    return [
        {"name": name, "calls": int(n), "us": us, "share": us / total if total else 0.0}
        for name, (n, us) in ranked
    ]


SORT_KEYS = {"self_device": "self_device_us", "self_cpu": "self_cpu_us"}


def op_table(rows: Sequence[OpRow], by: str) -> list[OpRow]:
    """Rows sorted by ``by`` ('self_device' or 'self_cpu'), largest first; zero rows dropped."""
    if by not in SORT_KEYS:
        raise ValueError(f"unknown sort key {by!r}; choose from {sorted(SORT_KEYS)}")
    key = SORT_KEYS[by]
    return sorted((r for r in rows if getattr(r, key) > 0), key=lambda r: -getattr(r, key))


OP_HEADERS = [
    "name",
    "calls",
    "self_cpu_ms",
    "self_cpu_pct",
    "cpu_total_ms",
    "cpu_avg_us",
    "self_device_ms",
    "self_device_pct",
    "device_total_ms",
    "device_avg_us",
]


def _pct(part: float, whole: float) -> float:
    return 100 * part / whole if whole > 0 else 0.0


def op_cells(rows: Sequence[OpRow], everything: Sequence[OpRow]) -> list[list[str]]:
    """Formatted cells under :data:`OP_HEADERS`; shares are of ``everything``'s totals."""
    cpu = sum(r.self_cpu_us for r in everything)
    dev = sum(r.self_device_us for r in everything)
    return [
        [
            r.name,
            str(r.calls),
            f"{r.self_cpu_us / 1e3:.4f}",
            f"{_pct(r.self_cpu_us, cpu):.2f}",
            f"{r.cpu_total_us / 1e3:.4f}",
            f"{r.cpu_total_us / max(r.calls, 1):.3f}",
            f"{r.self_device_us / 1e3:.4f}",
            f"{_pct(r.self_device_us, dev):.2f}",
            f"{r.device_total_us / 1e3:.4f}",
            f"{r.device_total_us / max(r.calls, 1):.3f}",
        ]
        for r in rows
    ]


def to_csv(headers: Sequence[str], cells: Sequence[Sequence[str]]) -> str:
    """CSV text with a header row."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(headers)
    writer.writerows(cells)
    return buf.getvalue()


def to_markdown(headers: Sequence[str], cells: Sequence[Sequence[str]], title: str = "") -> str:
    """A GitHub Markdown table; '|' in a cell is escaped, long names are kept whole."""

    def line(row: Sequence[str]) -> str:
        return "| " + " | ".join(str(c).replace("|", "\\|") for c in row) + " |"

    out = [f"**{title}**", ""] if title else []
    out += [line(headers), "|" + "|".join(" --- " for _ in headers) + "|"]
    out += [line(r) for r in cells]
    return "\n".join(out) + "\n"


@dataclass(frozen=True)
class LoaderShare:
    """The data loader's share of a training loop, from windows with and without it.

    ``repeats`` times, one window of ``steps`` loader-fed steps, then one of as many steps
    on a batch already fetched; both are one round of the device's clock (CUDA events on a
    GPU), synchronized before and after. ``fetch_ms`` is the host time of every ``next()``
    on the loader (CPU work, ``perf_counter``), ``steps`` per loader-fed window.
    Shares are medians over the repeats, so one disturbed window does not decide them.
    """

    steps: int
    fetch_ms: tuple[float, ...]
    loop_ms: tuple[float, ...]
    fixed_ms: tuple[float, ...]
    clock: str
    settings: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        n = len(self.loop_ms)
        if n < 1 or len(self.fixed_ms) != n or len(self.fetch_ms) != n * self.steps:
            raise ValueError(
                f"LoaderShare needs equal loop and fixed windows and {self.steps} fetches each"
            )

    @property
    def fetch_share(self) -> float:
        """Host time fetching batches / wall time of the loader-fed window (median)."""
        k = self.steps
        return statistics.median(
            sum(self.fetch_ms[i * k : (i + 1) * k]) / loop for i, loop in enumerate(self.loop_ms)
        )

    @property
    def cost_share(self) -> float:
        """1 - fixed-batch window / loader-fed window (medians): what the loader costs.

        Below ``fetch_share`` where fetching overlaps device work still queued.
        """
        return 1 - statistics.median(self.fixed_ms) / statistics.median(self.loop_ms)

    def as_dict(self) -> dict[str, Any]:
        """Raw samples and derived shares, for JSON (ms)."""
        return {
            **asdict(self),
            "fetch_ms": list(self.fetch_ms),
            "loop_ms": list(self.loop_ms),
            "fixed_ms": list(self.fixed_ms),
            "fetch_ms_per_step": statistics.median(self.fetch_ms),
            "loop_ms_per_step": statistics.median(self.loop_ms) / self.steps,
            "fixed_ms_per_step": statistics.median(self.fixed_ms) / self.steps,
            "fetch_share": self.fetch_share,
            "cost_share": self.cost_share,
        }


def endless(loader: Iterable[Any]) -> Iterator[Any]:
    """Batches of ``loader`` epoch after epoch (a new iterator, so a new shuffle, each time)."""
    while True:
        empty = True
        for batch in loader:
            empty = False
            yield batch
        if empty:
            raise ValueError("the data loader yields no batches")


def loader_share(
    loader: Iterable[Any],
    step: Callable[[Any], object],
    clock: RoundClock,
    *,
    steps: int = 5,
    repeats: int = 3,
    warmup: int = 1,
    settings: dict[str, Any] | None = None,
    now_ns: Callable[[], int] = time.perf_counter_ns,
) -> LoaderShare:
    """Time windows of ``steps`` steps fed by ``loader`` and on one fixed batch, alternating.

    ``step(batch)`` copies the batch to the device and trains on it. Each window is one
    round of ``clock`` (its start after a synchronize, its end after the last step), so a
    device that waits for the host's next batch is counted as waiting.
    """
    if steps < 1 or repeats < 1 or warmup < 0:
        raise ValueError(
            f"loader_share needs steps, repeats >= 1 and warmup >= 0, got {steps}, {repeats}, "
            f"{warmup}"
        )
    batches = endless(loader)
    batch = next(batches)
    for _ in range(warmup):
        step(batch)
        batch = next(batches)

    def window(feed: Callable[[], Any]) -> float:
        clock.synchronize()
        clock.prepare(1)
        clock.begin()
        for _ in range(steps):
            step(feed())
        clock.end()
        (ms,) = clock.collect()
        return ms

    fetch: list[float] = []

    def fetched() -> Any:
        t0 = now_ns()
        b = next(batches)
        fetch.append((now_ns() - t0) / 1e6)
        return b

    loop_ms, fixed_ms = [], []
    for _ in range(repeats):
        loop_ms.append(window(fetched))
        fixed_ms.append(window(lambda: batch))
    return LoaderShare(
        steps, tuple(fetch), tuple(loop_ms), tuple(fixed_ms), clock.name, dict(settings or {})
    )
