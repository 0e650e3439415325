"""Profiler traces read back: nvprof-style kernel tables and the compute/communication split.

Both work on a Chrome trace written by ``torch.profiler`` (``export_chrome_trace``), parsed
into :class:`Activity` records (times in microseconds, as the trace stores them).

- :func:`kernel_table`: the seeds' nvprof "GPU activities" summary (seeds 000, 001): per
  kernel or copy name, Time% of all GPU activity, total, calls, avg, min, max. On a CPU
  trace (no device activity) the rows are CPU operators by self time instead. Both the
  distributed family (per rank) and the amp family's profiler pass
  (:meth:`gpugauge.measure.profile.Profile.kernels`) write it, as CSV (µs) and Markdown.
- Device work counts for the steps that launched it (:func:`launched_in_steps`), not for
  the window it happened to run in.
- :func:`comm_split`: interval arithmetic on the device timeline. Communication is every
  NCCL kernel (and peer-to-peer copy); compute is every other kernel, copy and memset
  (host-to-device copies count as compute, as in seed 002). ``exposed`` is the part of
  the communication's time during which no compute runs on any device of the process: the
  time communication adds to a step. On a CPU trace communication is gloo's
  ``gloo:*`` spans on its worker threads and compute every CPU operator elsewhere.
- :func:`device_overlap`: per-device busy time and the time all devices work at once (a
  model split over GPUs: how much a pipeline overlaps its stages).
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

DEVICE_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
LAUNCH_CATS = ("cuda_runtime", "cuda_driver")  # the host calls that queue device work
TOP_KERNELS = 3  # kernels per device named in an overlap
GPU_ACTIVITIES = "GPU activities"  # a kernel table's rows on a GPU trace, as nvprof says
Interval = tuple[float, float]


class TraceError(ValueError):
    """A trace file that cannot be read as a profiler trace; the message names it."""


@dataclass(frozen=True)
class Activity:
    """One span of a trace: a GPU kernel, copy or memset, or a CPU operator (µs)."""

    name: str
    cat: str  # "kernel", "gpu_memcpy", "gpu_memset", "cpu_op", "user_annotation"
    start_us: float
    dur_us: float
    device: int | None = None
    thread: int = 0
    correlation: int | None = None  # a device activity's launch call (args.correlation)
    launched_us: float | None = None  # when the host called that launch, µs

    @property
    def end_us(self) -> float:
        """Start plus duration, µs."""
        return self.start_us + self.dur_us

    @property
    def on_device(self) -> bool:
        """A GPU activity (kernel, copy, memset)."""
        return self.cat in DEVICE_CATS

    @property
    def is_comm(self) -> bool:
        """Communication: an NCCL kernel, a peer-to-peer copy, or a gloo collective span."""
        if self.cat == "kernel":
            return "nccl" in self.name.lower()
        if self.cat == "gpu_memcpy":
            return "PtoP" in self.name
        return self.cat == "user_annotation" and self.name.startswith("gloo:")


def read_trace(path: Path) -> list[Activity]:
    """The complete spans ("ph": "X") of a Chrome trace (plain or ``.gz``).

    Device work is kept only where it was launched inside a profiled step: see
    :func:`launched_in_steps`.
    """
    try:
        raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
        data = json.loads(raw)
        events = data["traceEvents"] if isinstance(data, dict) else data
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise TraceError(f"{path}: not a readable profiler trace ({err})") from None
    if not isinstance(events, list):
        raise TraceError(f"{path}: not a readable profiler trace (no list of trace events)")
    return parse_events(events)


def parse_events(events: Iterable[dict[str, Any]]) -> list[Activity]:
    """Activities from Chrome trace events, device work of the profiled steps only.

    Other phases and categories are dropped; launch calls only place device work in steps.
    """
    out = []
    launches: dict[int, float] = {}  # correlation id -> when the host queued the work, µs
    for e in events:
        if not isinstance(e, dict) or e.get("ph") != "X" or "dur" not in e:
            continue
        cat = str(e.get("cat", ""))
        args = e.get("args") or {}
        if cat in LAUNCH_CATS and isinstance(args.get("correlation"), int):
            launches[args["correlation"]] = float(e["ts"])
            continue
        if cat not in (*DEVICE_CATS, "cpu_op", "user_annotation"):
            continue
        device = args.get("device") if cat in DEVICE_CATS else None
        corr = args.get("correlation") if cat in DEVICE_CATS else None
        out.append(
            Activity(
                name=str(e["name"]),
                cat=cat,
                start_us=float(e["ts"]),
                dur_us=float(e["dur"]),
                device=None if device is None else int(device),
                thread=int(e.get("tid", 0)) if str(e.get("tid", 0)).isdigit() else 0,
                correlation=corr if isinstance(corr, int) else None,
            )
        )
    out = [
        replace(a, launched_us=launches[a.correlation])
        if a.on_device and a.correlation in launches
        else a
        for a in out
    ]
    return launched_in_steps(out, launches)


def launched_in_steps(activities: list[Activity], launches: dict[int, float]) -> list[Activity]:
    """Drop device work that the host launched outside every ``ProfilerStep#`` span.

    A traced window opens while the GPU still runs the step before it (it runs behind the
    host): on two H200s a VGG-16 window of 5 steps held 6.3 steps of device time, and its
    per-step time read 67 ms against 48.5 ms timed. Work is placed by its launch call
    (``args.correlation``). A trace with no steps or no launch records is kept whole.
    """
    spans = [
        (a.start_us, a.end_us)
        for a in activities
        if a.cat == "user_annotation" and a.name.startswith("ProfilerStep#")
    ]
    device = [a for a in activities if a.on_device]
    if not spans or not any(a.correlation in launches for a in device):
        return activities

    def inside(a: Activity) -> bool:
        at = launches.get(a.correlation) if a.correlation is not None else None
        return at is not None and any(s <= at <= e for s, e in spans)

    return [a for a in activities if not a.on_device or inside(a)]


# --- interval arithmetic -------------------------------------------------------------


def union(intervals: Iterable[Interval]) -> list[Interval]:
    """Sorted, disjoint intervals covering exactly what the given ones cover."""
    merged: list[Interval] = []
    for s, e in sorted(i for i in intervals if i[1] > i[0]):
        if merged and s <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], e))
        else:
            merged.append((s, e))
    return merged


def length(intervals: Iterable[Interval]) -> float:
    """Total length of the union."""
    return sum(e - s for s, e in union(intervals))


def subtract(a: Iterable[Interval], b: Iterable[Interval]) -> list[Interval]:
    """The parts of ``a`` covered by no interval of ``b``."""
    out: list[Interval] = []
    cut = union(b)
    for s, e in union(a):
        cur = s
        for bs, be in cut:
            if be <= cur:
                continue
            if bs >= e:
                break
            if bs > cur:
                out.append((cur, bs))
            cur = max(cur, be)
            if cur >= e:
                break
        if cur < e:
            out.append((cur, e))
    return out


# --- compute / communication ---------------------------------------------------------


@dataclass(frozen=True)
class CommSplit:
    """One traced window: compute, communication and its exposed part, ms per step.

    ``comm_ms`` is the union of communication spans, ``comm_kernel_ms`` their summed
    durations (nvprof's "NCCL kernel time"; above ``comm_ms`` only where they overlap each
    other). ``exposed_ms`` is communication during which nothing computes. ``step_ms``:
    the device timeline from the first to the last activity, per step (CPU: the
    ``ProfilerStep`` spans). An NCCL kernel's time includes waiting for its peers.
    """

    steps: int
    step_ms: float
    compute_ms: float
    comm_ms: float
    comm_kernel_ms: float
    exposed_ms: float
    timeline: str  # "device" or "cpu"

    @property
    def comm_fraction(self) -> float:
        """Communication time per step / step time."""
        return self.comm_ms / self.step_ms if self.step_ms else 0.0

    @property
    def exposed_fraction(self) -> float:
        """Exposed communication per step / step time."""
        return self.exposed_ms / self.step_ms if self.step_ms else 0.0

    @property
    def overlapped_ms(self) -> float:
        """Communication hidden under compute, ms per step."""
        return self.comm_ms - self.exposed_ms

    @property
    def active_ms(self) -> float:
        """Device activity per step, compute and communication counted once, ms."""
        return self.compute_ms + self.exposed_ms

    def as_dict(self) -> dict[str, Any]:
        """Plain dict for JSON (ms per step, fractions of the step)."""
        return {
            "steps": self.steps,
            "step_ms": self.step_ms,
            "compute_ms": self.compute_ms,
            "comm_ms": self.comm_ms,
            "comm_kernel_ms": self.comm_kernel_ms,
            "exposed_ms": self.exposed_ms,
            "overlapped_ms": self.overlapped_ms,
            "comm_fraction": self.comm_fraction,
            "exposed_fraction": self.exposed_fraction,
            "timeline": self.timeline,
        }


def comm_split(activities: Sequence[Activity], steps: int) -> CommSplit:
    """Split a traced window of ``steps`` steps into compute and communication."""
    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    device = [a for a in activities if a.on_device]
    if device:
        comm = [a for a in device if a.is_comm]
        compute = [a for a in device if not a.is_comm]
        span = max(a.end_us for a in device) - min(a.start_us for a in device)
        timeline = "device"
    else:
        comm = [a for a in activities if a.is_comm]
        comm_threads = {a.thread for a in comm}
        compute = [
            a
            for a in activities
            if a.cat == "cpu_op"
            and a.thread not in comm_threads
            and not a.name.startswith("c10d::")
        ]
        span = sum(a.dur_us for a in activities if a.name.startswith("ProfilerStep#"))
        timeline = "cpu"
    iv = lambda xs: [(a.start_us, a.end_us) for a in xs]  # noqa: E731
    per = 1e3 * steps  # µs in the window -> ms per step
    return CommSplit(
        steps=steps,
        step_ms=span / per,
        compute_ms=length(iv(compute)) / per,
        comm_ms=length(iv(comm)) / per,
        comm_kernel_ms=sum(a.dur_us for a in comm) / per,
        exposed_ms=sum(e - s for s, e in subtract(iv(comm), iv(compute))) / per,
        timeline=timeline,
    )


@dataclass(frozen=True)
class Overlap:
    """How much of a traced window each device worked, and all of them at once (ms/step).

    ``busy_ms`` is each device's kernels, copies and memsets (their union). A pipeline
    over devices is only faster than running them one after another by the time they
    work together: ``together_ms`` near 0 is the naive split, near the busiest device's
    ``busy_ms`` a pipeline without bubbles (None with one device). ``step_ms`` is the
    device timeline from the first to the last activity over the window, per step: it
    includes the gaps between traced steps, so ``utilisation`` is a lower bound.
    ``queued_ms`` is, per device, the median time from a kernel's launch call to its
    start: near 0, the device ran what the host had just issued (the host set the pace);
    None without launch records. ``top_kernels`` is, per device, the kernels that took
    the most time, as (name, ms per step): which cuDNN or cuBLAS algorithm ran.
    """

    steps: int
    step_ms: float
    devices: tuple[int, ...]
    busy_ms: tuple[float, ...]
    together_ms: float | None
    queued_ms: tuple[float | None, ...] = ()
    top_kernels: tuple[tuple[tuple[str, float], ...], ...] = ()

    def as_dict(self) -> dict[str, Any]:
        """Plain dict for JSON (ms per step), with each device's share of the step."""
        busy = [b / self.step_ms if self.step_ms else 0.0 for b in self.busy_ms]
        return {**asdict(self), "utilisation": busy}


def device_overlap(activities: Sequence[Activity], steps: int) -> Overlap:
    """Per-device busy time and the time every traced device was busy at once."""
    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    work = [a for a in activities if a.on_device and a.device is not None]
    if not work:
        raise TraceError("the trace holds no device activity")
    devices = tuple(sorted({a.device for a in work if a.device is not None}))
    busy = [union((a.start_us, a.end_us) for a in work if a.device == d) for d in devices]
    together = busy[0]
    for other in busy[1:]:
        together = subtract(together, subtract(together, other))  # intersection
    per = 1e3 * steps
    span = max(a.end_us for a in work) - min(a.start_us for a in work)
    queued = []
    for d in devices:
        waits = sorted(
            a.start_us - a.launched_us
            for a in work
            if a.device == d and a.cat == "kernel" and a.launched_us is not None
        )
        queued.append(waits[len(waits) // 2] / 1e3 if waits else None)
    top = []
    for d in devices:
        kernels = [a for a in work if a.device == d and a.cat == "kernel"]
        rows = kernel_table(kernels, TOP_KERNELS).rows if kernels else ()
        top.append(tuple((r.name, r.total_us / per) for r in rows))
    return Overlap(
        steps=steps,
        step_ms=span / per,
        devices=devices,
        busy_ms=tuple(length(b) / per for b in busy),
        together_ms=length(together) / per if len(devices) > 1 else None,
        queued_ms=tuple(queued),
        top_kernels=tuple(top),
    )


# --- kernel tables -------------------------------------------------------------------


def nvprof_name(a: Activity) -> str:
    """The nvprof name of a copy or memset ('[CUDA memcpy HtoD]'); a kernel keeps its own."""
    if a.cat == "gpu_memcpy":
        m = re.match(r"Memcpy (\w+)", a.name)
        return f"[CUDA memcpy {m.group(1) if m else a.name}]"
    if a.cat == "gpu_memset":
        return "[CUDA memset]"
    return a.name


@dataclass(frozen=True)
class KernelRow:
    """Every call of one kernel (or copy, or CPU operator) in a traced window, µs."""

    name: str
    kind: str  # "kernel", "memcpy", "memset", "cpu_op"
    calls: int
    total_us: float
    min_us: float
    max_us: float

    @property
    def avg_us(self) -> float:
        """Mean time of one call, µs."""
        return self.total_us / self.calls


@dataclass(frozen=True)
class KernelTable:
    """An nvprof-style summary: the top rows of a window, and the window's total time.

    ``total_us`` is all GPU activity of the window (every kernel, copy and memset, also
    those not listed), which Time% is a share of, as in nvprof; on a CPU trace it is all
    operators' self time.
    """

    rows: tuple[KernelRow, ...]
    total_us: float
    activity: str  # "GPU activities" or "CPU operators (self time)"
    listed_of: int  # how many distinct names the window had

    @property
    def on_device(self) -> bool:
        """The rows are GPU activity (not CPU operators)."""
        return self.activity == GPU_ACTIVITIES

    def head(self, top: int) -> KernelTable:
        """The same table with only its ``top`` rows (and every copy row below them)."""
        return replace(self, rows=top_rows(self.rows, top))

    def percent(self, row: KernelRow) -> float:
        """Time% of the row."""
        return 100.0 * row.total_us / self.total_us if self.total_us else 0.0

    HEADERS = ("Type", "Time(%)", "Time", "Calls", "Avg", "Min", "Max", "Name")

    def cells(self) -> list[list[str]]:
        """Rows as nvprof prints them: times with units, Time% with two decimals."""
        return [
            [
                self.activity if i == 0 else "",
                f"{self.percent(r):.2f}%",
                fmt_us(r.total_us),
                str(r.calls),
                fmt_us(r.avg_us),
                fmt_us(r.min_us),
                fmt_us(r.max_us),
                r.name,
            ]
            for i, r in enumerate(self.rows)
        ]

    def to_csv(self) -> str:
        """Machine-readable: one row per name, times in µs, Time% unrounded."""
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(["type", "time_pct", "total_us", "calls", "avg_us", "min_us", "max_us", "name"])
        for r in self.rows:
            w.writerow(
                [
                    r.kind,
                    f"{self.percent(r):.4f}",
                    f"{r.total_us:.3f}",
                    r.calls,
                    f"{r.avg_us:.3f}",
                    f"{r.min_us:.3f}",
                    f"{r.max_us:.3f}",
                    r.name,
                ]
            )
        return buf.getvalue()

    def to_markdown(self, title: str = "") -> str:
        """A Markdown table like the seeds' nvprof output (names shortened to 100 chars)."""
        head = f"{title}\n\n" if title else ""
        lines = ["| " + " | ".join(self.HEADERS) + " |", "|" + "---|" * len(self.HEADERS)]
        for c in self.cells():
            c[-1] = "`" + (c[-1] if len(c[-1]) <= 100 else c[-1][:97] + "...") + "`"
            lines.append("| " + " | ".join(x.replace("|", "\\|") for x in c) + " |")
        shown = sum(r.total_us for r in self.rows)
        foot = (
            f"\n\n{len(self.rows)} of {self.listed_of} names, "
            f"{100 * shown / self.total_us if self.total_us else 0:.1f}% of "
            f"{fmt_us(self.total_us)} total {self.activity.lower()}."
        )
        return head + "\n".join(lines) + foot + "\n"


def fmt_us(us: float) -> str:
    """A time in nvprof's format: 992ns, 180.94us, 1.7844ms, 2.3513s."""
    if us < 1:
        return f"{us * 1e3:.0f}ns"
    if us < 1e3:
        return f"{us:.2f}us"
    if us < 1e6:
        return f"{us / 1e3:.4f}ms"
    return f"{us / 1e6:.4f}s"


def self_times(activities: Sequence[Activity]) -> list[tuple[Activity, float]]:
    """Each CPU operator with its self time (its span less its children's), µs."""
    out: list[tuple[Activity, float]] = []
    by_thread: dict[int, list[Activity]] = {}
    for a in activities:
        if a.cat == "cpu_op":
            by_thread.setdefault(a.thread, []).append(a)
    for ops in by_thread.values():
        ops.sort(key=lambda a: (a.start_us, -a.dur_us))
        stack: list[list[Any]] = []  # [activity, children's time]
        for a in ops:
            while stack and stack[-1][0].end_us <= a.start_us:
                done, kids = stack.pop()
                out.append((done, max(done.dur_us - kids, 0.0)))
            if stack:
                stack[-1][1] += a.dur_us
            stack.append([a, 0.0])
        out += [(done, max(done.dur_us - kids, 0.0)) for done, kids in reversed(stack)]
    return out


def top_rows(rows: Sequence[KernelRow], top: int) -> tuple[KernelRow, ...]:
    """The first ``top`` of ``rows`` (sorted largest first), then every copy row after them."""
    return (*rows[:top], *(r for r in rows[top:] if r.kind == "memcpy"))


def kernel_table(activities: Sequence[Activity], top: int | None = 15) -> KernelTable:
    """The ``top`` names by total time (None: all), and every copy row outside the top.

    GPU activity when the trace has any, else CPU operators by self time.
    """
    device = [a for a in activities if a.on_device]
    rows: dict[str, list[float]] = {}
    kinds: dict[str, str] = {}
    if device:
        timed = [(a, a.dur_us) for a in device]
        activity = GPU_ACTIVITIES
    else:
        timed = self_times(activities)
        activity = "CPU operators (self time)"
    for a, us in timed:
        name = nvprof_name(a)
        rows.setdefault(name, []).append(us)
        kinds[name] = {"kernel": "kernel", "gpu_memcpy": "memcpy", "gpu_memset": "memset"}.get(
            a.cat, "cpu_op"
        )
    all_rows = [
        KernelRow(n, kinds[n], len(ts), sum(ts), min(ts), max(ts)) for n, ts in rows.items()
    ]
    all_rows.sort(key=lambda r: -r.total_us)
    return KernelTable(
        rows=top_rows(all_rows, len(all_rows) if top is None else top),
        total_us=sum(r.total_us for r in all_rows),
        activity=activity,
        listed_of=len(all_rows),
    )
