"""One A/B spread over several GPUs of a host: a pair of processes on each, one report.

Each GPU runs an A/B of its own (:func:`~gpugauge.ab.rounds.run_sides`) in a thread of
this process. Its two sides see that GPU alone (``CUDA_VISIBLE_DEVICES``), so each pair of
blocks, and each round of a case, runs on one GPU: the pair cancels that GPU's own speed
as it does on a one-GPU host. The GPUs take the tests as a queue
(:class:`~gpugauge.ab.claims.Claims`), and each GPU's later rounds run the tests it paired.
The report holds every GPU's cases, judged with the spread of processes all of them showed.

A Ctrl-C or SIGTERM, or an error on one GPU, stops every GPU's sides.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path

from gpugauge.ab.claims import Claims, Stopped
from gpugauge.ab.config import ABConfig
from gpugauge.ab.result import ABReport
from gpugauge.ab.rounds import run_sides
from gpugauge.ab.sides import Checkout
from gpugauge.core.phrasing import Note
from gpugauge.measure.nvml import NvmlUnavailable, maybe_nvml

ALL = "all"  # --gpus all: every GPU this process may use
VISIBLE_ENV = "CUDA_VISIBLE_DEVICES"


def parse_gpus(text: str) -> tuple[str, ...]:
    """``--gpus 0,1``: the GPUs named once each, or ``all``.

    An index (``0``) or a UUID (``GPU-6a1e0e49-...``); a ValueError names what is wrong.
    The host is asked later (:func:`host_gpus`).
    """
    if text.strip() == ALL:
        return (ALL,)
    gpus = tuple(x.strip() for x in text.split(","))
    bad = [x for x in gpus if not x or any(c.isspace() for c in x)]
    if bad or not gpus:
        raise ValueError(
            f"--gpus {text!r}: give GPUs as CUDA indices or UUIDs, such as 0,1, or all"
        )
    twice = sorted({x for x in gpus if gpus.count(x) > 1})
    if twice:
        raise ValueError(f"--gpus {text!r}: {', '.join(twice)} named twice")
    return gpus


def uuid_of(gpu: str, uuids: Sequence[str]) -> str | None:
    """The UUID ``gpu`` names on a host with these GPUs; None: none, or several (a prefix).

    An index counts in NVML's order. A MIG instance is left to CUDA: itself.
    """
    if gpu.isdigit():
        return uuids[int(gpu)] if int(gpu) < len(uuids) else None
    if gpu.startswith("MIG-"):
        return gpu
    found = [u for u in uuids if u.startswith(gpu)]
    return found[0] if len(found) == 1 else None


def unknown_gpus(gpus: Sequence[str], uuids: Sequence[str]) -> list[str]:
    """The GPUs of ``gpus`` that a host with these GPUs (NVML's UUIDs) does not have.

    An index past the host's count, a UUID (or the start of one) it lacks, or the start of
    several.
    """
    return [g for g in gpus if uuid_of(g, uuids) is None]


def named_twice(gpus: Sequence[str], uuids: Sequence[str]) -> list[str]:
    """Two names in ``gpus`` of one GPU ('0 and GPU-6a1e'): its pairs would share it."""
    seen: dict[str, str] = {}
    twice = []
    for g in gpus:
        u = uuid_of(g, uuids)
        if u is not None and u in seen:
            twice.append(f"{seen[u]} and {g}")
        elif u is not None:
            seen[u] = g
    return twice


def resolved(
    asked: Sequence[str], visible: Sequence[str] | None, uuids: Sequence[str] | None
) -> tuple[str, ...]:
    """The GPUs asked for, as each side's ``CUDA_VISIBLE_DEVICES`` must name them.

    ``visible``: this process's ``CUDA_VISIBLE_DEVICES``, split (None where unset). An
    index counts within it, as ``cuda:N`` does here, so a job given GPUs 2 and 3 keeps to
    them. ``uuids``: the host's GPUs as NVML sees them (None where it cannot say), to
    refuse a GPU the host lacks. ``all``: every GPU this process may use.
    """
    if tuple(asked) == (ALL,):
        if visible is not None:
            pool = tuple(visible)
        elif uuids is not None:
            pool = tuple(str(i) for i in range(len(uuids)))
        else:
            raise ValueError("--gpus all: NVML sees no NVIDIA driver here, and no GPU is named")
        if not pool:
            raise ValueError(f"--gpus all: this process may use no GPU ({VISIBLE_ENV} is empty)")
        return pool
    out = []
    for gpu in asked:
        if visible is not None and gpu.isdigit():
            if int(gpu) >= len(visible):
                raise ValueError(
                    f"--gpus: no GPU {gpu} among the {len(visible)} this process may use "
                    f"({VISIBLE_ENV}={','.join(visible)})"
                )
            gpu = visible[int(gpu)]
        out.append(gpu)
    if uuids is not None and (missing := unknown_gpus(out, uuids)):
        seen = f"{len(uuids)}: 0-{len(uuids) - 1}" if uuids else "none"
        raise ValueError(f"--gpus: this host has no GPU {', '.join(missing)} (NVML sees {seen})")
    if uuids is not None and (twice := named_twice(out, uuids)):
        raise ValueError(f"--gpus: {'; '.join(twice)} name one GPU: its pairs would share it")
    return tuple(out)


def host_gpus(asked: Sequence[str]) -> tuple[str, ...]:
    """:func:`resolved` on this host: its ``CUDA_VISIBLE_DEVICES`` and NVML's GPUs.

    Without the check, a side given a GPU that is not there sees no CUDA, and skips
    every GPU case. Without NVML (no NVIDIA driver) named GPUs pass as they are: the
    sides then run CPU cases only.
    """
    env = os.environ.get(VISIBLE_ENV)
    visible = None if env is None else tuple(x.strip() for x in env.split(",") if x.strip())
    uuids = None  # where NVML is missing, or cannot list its GPUs
    with maybe_nvml() as nvml, contextlib.suppress(NvmlUnavailable):
        if not isinstance(nvml, NvmlUnavailable):
            uuids = nvml.uuids()
    return resolved(asked, visible, uuids)


def folder_of(out: Path, gpu: str) -> Path:
    """Where one GPU's sides write their logs, saved runs and rounds: ``out/gpu-<gpu>``."""
    return out / f"gpu-{gpu}"


def one_report(
    reports: Sequence[ABReport], gpus: Sequence[str], wall_s: float, complete: bool = True
) -> ABReport:
    """Every GPU's A/B as one: their cases, judged with the processes' spread over all.

    ``wall_s`` is the whole A/B's; the seconds of starts, ends and phases add up over the
    GPUs (:attr:`ABReport.device_s`).
    """
    first = reports[0]
    devices = dict.fromkeys(r.device for r in reports if r.device)
    return replace(
        first,
        cases=tuple(c for r in reports for c in r.cases),
        device="; ".join(devices),
        wall_s=wall_s,
        problems=tuple(p for r in reports for p in r.problems),
        complete=complete and all(r.complete for r in reports),
        start_s=sum(r.start_s for r in reports),
        end_s=sum(r.end_s for r in reports),
        gpus=tuple(gpus),
    ).pooled()


def over_gpus(
    gpus: Sequence[str],
    rounds_of: Callable[[str], tuple[ABConfig, Callable[[Sequence[str]], ABConfig]]],
    sides: Mapping[str, Checkout],
    note: Note,
    out: Path,
    cwd: Path | None = None,
    later: Callable[[Sequence[str]], Sequence[str]] | None = None,
) -> ABReport:
    """Run one A/B on each GPU at once, sharing the tests; the merged report.

    ``rounds_of(gpu)``: that GPU's round-1 configuration, and the one of a later round for a
    selection of node ids. ``out/ab.json`` holds every GPU's finished tests so far, after
    each one (an A/B stopped keeps them).
    """
    t0 = time.monotonic()

    def so_far(reports: Sequence[ABReport]) -> None:
        one_report(reports, gpus, time.monotonic() - t0, complete=False).save(out)

    claims = Claims(on_cases=so_far)
    said = threading.Lock()
    ended: dict[str, ABReport | BaseException] = {}
    # set as each GPU's thread ends: waited on, not joined (a join that a Ctrl-C
    # interrupts can mark a thread ended that is still stopping its sides)
    over = {g: threading.Event() for g in gpus}

    def one(gpu: str) -> None:
        def prefixed(line: str) -> None:
            with said:
                note(f"  GPU {gpu} |{line}")

        try:
            first, later_round = rounds_of(gpu)
            ended[gpu] = run_sides(
                replace(first, gpu=gpu),
                dict(sides),
                prefixed,
                cwd,
                lambda ids: replace(later_round(ids), gpu=gpu),
                later,
                claims,
            )
        except BaseException as err:  # handed to the main thread, which raises it
            ended[gpu] = err
            claims.stop.set()  # the other GPUs stop too
        finally:
            over[gpu].set()

    started: list[str] = []

    def every_gpu_over() -> None:
        for g in started:
            while not over[g].wait(0.5):
                pass

    try:
        for g in gpus:
            threading.Thread(target=one, args=(g,), name=f"ab-gpu-{g}").start()
            started.append(g)
        every_gpu_over()
    except BaseException:  # Ctrl-C or SIGTERM: every GPU's coordinator stops its sides
        claims.stop.set()
        every_gpu_over()
        raise
    errors = [e for e in ended.values() if isinstance(e, BaseException)]
    if errors:
        raise next((e for e in errors if not isinstance(e, Stopped)), errors[0])
    reports = [r for g in gpus if isinstance(r := ended[g], ABReport)]
    return one_report(reports, gpus, time.monotonic() - t0)
