"""The gated run as round 1's head side: ``gpugauge confirm RUN.json --measure -- ARGS``.

A night that runs its gated suite and then A/Bs the results times each confirmed case in
five processes: the gated run, then two rounds of two. With ``--measure`` the gated run is
round 1's head process. It runs as its command line says (its gate, its history, its saved
run, every test), while the base process, the commit that recorded this host's baselines,
pairs blocks with it. Its saved run becomes RUN.json after round 1, and round 2 runs only
the results that run leaves to an A/B (:func:`~gpugauge.ab.confirm.borderline`).
"""

from __future__ import annotations

import platform
import subprocess
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path

from gpugauge.ab.confirm import deepened
from gpugauge.ab.launch import ABError
from gpugauge.ab.sides import git
from gpugauge.measure.environment import slug
from gpugauge.results.files import FileError, atomic_write_text, writable_problem

GATE_LINE = "gpugauge gate:"  # the gated run's verdict table starts here


def gpu_names() -> list[str]:
    """The GPU names ``nvidia-smi`` lists (none where it is missing or fails).

    Not torch: the coordinator must not hold a CUDA context on the GPU its sides time.
    """
    try:
        done = subprocess.run(
            ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=60,
        )
    except (OSError, subprocess.TimeoutExpired):
        return []
    if done.returncode != 0:
        return []
    return [line.strip() for line in done.stdout.splitlines() if line.strip()]


def host_classes(gpus: Sequence[str]) -> set[str]:
    """The baseline classes a host with these GPUs can produce: each GPU, 2..N of them, its CPU.

    Named as :func:`gpugauge.measure.environment.device_class` names a result's class.
    """
    out = {slug(f"cpu-{platform.machine()}")}
    for name in {slug(g) for g in gpus}:
        out.add(name)
        out.update(f"{k}x-{name}" for k in range(2, len(gpus) + 1))
    return out


def baselines_commit(repo: Path, baselines: Path, classes: Iterable[str]) -> str | None:
    """The commit that last wrote most of these classes' baseline files; None where none did.

    Of a tie, the newest commit (by ancestry: commit times tie within a second). A result
    whose own class baseline another commit recorded is A/B'd against that one afterwards,
    as ``confirm`` does without ``--measure``.
    """
    deepened(repo)
    folder = baselines.resolve()
    counts: Counter[str] = Counter()
    for cls in sorted(classes):
        for path in sorted((folder / cls).glob("*.json")):
            commit = git(repo, "log", "-1", "--format=%H", "--", str(path))
            if commit:
                counts[commit] += 1
    if not counts:
        return None
    most = max(counts.values())
    tied = sorted(c for c, n in counts.items() if n == most)
    if len(tied) == 1:
        return tied[0]
    return git(repo, "rev-list", "-1", "--topo-order", *tied)  # the descendant of the others


def check_new(run: Path) -> None:
    """FileError where ``--measure`` could not write RUN.json: it exists, or its folder is shut.

    An existing file is refused, not replaced: it may be an earlier night's only copy, or a
    gated run whose A/B was stopped, which ``confirm`` without ``--measure`` goes on with.
    """
    if run.exists():
        raise FileError(
            f"{run} exists: --measure writes the gated run there (remove it, or name "
            f"another; to A/B the gated run it holds: gpugauge confirm {run})"
        )
    problem = writable_problem(run.parent)
    if problem is not None:
        raise FileError(f"{run}: the gated run could not be written there: {problem}")


def keep_gated_run(saved: Path, run: Path) -> None:
    """Copy round 1's head side's saved run (the gated run) to RUN.json, atomically.

    ABError (exit 1) where it saved none: its pytest broke before its end.
    """
    if run.exists():
        return
    if not saved.exists():  # its pytest broke before it saved: a failed night, not bad input
        raise ABError(f"the gated run saved no results ({saved} is missing): see its log")
    atomic_write_text(run, saved.read_text())


def gate_summary(log: Path) -> str:
    """The gated run's verdict table, from its side's log ('' if none).

    Not its efficiency line: a side's wall time holds the other side's blocks, so the A/B's
    own line says what the night's timing cost.
    """
    try:
        lines = log.read_text(errors="replace").splitlines()
    except OSError:
        return ""
    out: list[str] = []
    inside = False
    for line in lines:
        if line.startswith(GATE_LINE):
            inside = True
        elif inside and not line.strip():
            inside = False
        if inside:
            out.append(line)
    return "\n".join(out)
