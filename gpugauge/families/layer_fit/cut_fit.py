"""Fitting a split's cut: settle its steps under the budget, move the cut after each miss.

A miss runs out of memory, and a process remembers that in its cuDNN plans, so on a GPU
each attempt runs in a fresh process (:func:`fit_cut`); :func:`fitted_runner` builds the
cut that fitted in this one.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Sequence
from typing import Any

import torch

from gpugauge.families.layer_fit.budget import budgets, parse_budget
from gpugauge.families.layer_fit.cases import SplitCase
from gpugauge.families.layer_fit.memory_model import MemoryModel
from gpugauge.families.layer_fit.plan import SplitError
from gpugauge.families.layer_fit.runner import SplitRunner
from gpugauge.launch.fresh import in_fresh_process
from gpugauge.measure.memory import allocator_events
from gpugauge.models.stacked import CHANNELS, conv_block


def prime_conv_plans(model: MemoryModel, devices: Sequence[str], batch: int) -> None:
    """Run a conv block's training step at ``batch`` on each CUDA device, before a budget.

    The first convolution of given shapes fixes its cuDNN plan for the thread that ran it.
    Run first inside a case's budget, at its peak, a backward's workspace may not fit and
    cuDNN keeps a slower plan on that device's autograd thread, for every later step and
    case. Primed on the whole device, the backward plans (and the forward plans of this
    thread, which issues every forward unless a pipeline runs with ``threads``) are the
    ones cuDNN's heuristic ranks first. A plan that falls back later (its workspace not
    fitting) is kept: OOM counts show it.
    """
    for d in dict.fromkeys(devices):
        if not d.startswith("cuda"):
            continue
        net = conv_block(d)
        x = torch.randn(batch, CHANNELS, model.image, model.image, device=d, requires_grad=True)
        net(x).sum().backward()
        torch.cuda.synchronize(d)
        del net, x


def settle(
    step: Callable[[], object], devices: Sequence[str], least: int = 3, most: int = 12
) -> int:
    """Run ``step`` until no CUDA device's reserved memory grew for two steps; the count.

    One step that fits does not mean the timed rounds will: the first adds the momentum
    buffers, later ones the caching allocator's fragmentation (a GPipe step on two H200s
    ran 3 steps and then ran out of memory in its warm-up). At least ``least`` steps, at
    most ``most``; on a CPU, ``least``.
    """
    cuda = [d for d in dict.fromkeys(devices) if d.startswith("cuda")]
    seen: list[tuple[int, ...]] = []
    for i in range(1, most + 1):
        step()
        if not cuda:
            if i >= least:
                return i
            continue
        seen.append(tuple(torch.cuda.memory_reserved(d) for d in cuda))
        if i >= least and len(seen) >= 3 and seen[-1] == seen[-2] == seen[-3]:
            return i
    return most


def fit_attempts(
    n: int,
    m: int,
    cut: int,
    toward: int,
    attempt: Callable[[int, int], dict[str, Any]],
    tries: int = 6,
    shift: int = 2,
) -> list[dict[str, Any]]:
    """Try ``attempt(n, cut)`` at ``cut``, moving it after each miss; every attempt made.

    The model's prediction may miss a term (a workspace, fragmentation); rather than fail,
    each miss (an attempt whose ``"fits"`` is false) moves the cut so that the device
    ``toward`` (0 or 1) gets more blocks: ``shift`` blocks, then twice as many each time
    (2, 4, 8, 16, ... away, the last try at the end of the range), so that a miss of a few
    hundred MiB is found in a few tries. A model on one device (``cut == n + m``) sheds a
    conv block instead (its search's answer fitted once, near the edge). At most
    ``tries``; the last attempt returned fits, with its ``conv`` count and ``cut``.
    """
    attempts: list[dict[str, Any]] = []
    single = cut == n + m
    origin, move = cut, shift
    for _ in range(tries):
        result = attempt(n, cut)
        attempts.append({"conv": n, "cut": cut, **result})
        if result["fits"]:
            return attempts
        if single:
            n, cut = n - 1, cut - 1
            if n < 1:
                break
            continue
        edge = n + m - 1 if toward == 0 else 1
        if cut == edge:
            break
        wanted = origin + move if toward == 0 else origin - move
        cut = min(wanted, edge) if toward == 0 else max(wanted, edge)
        move *= 2
    raise SplitError(f"no cut fitted after {len(attempts)} attempts: {attempts}")


def fitted_runner(
    case: SplitCase, n: int, cut: int, toward: int, tries: int = 6, shift: int = 2
) -> tuple[SplitRunner, Callable[[], object], list[dict[str, Any]]]:
    """``case``'s runner with ``n`` conv blocks, settled at ``cut`` or, after an OOM, another.

    The step runs until its reserved memory stops growing (:func:`settle`); an OOM frees
    the runner and moves the cut (:func:`fit_attempts`). Every attempt is returned, the
    last with the ``conv`` count, ``cut`` and ``steps`` that fitted.
    """
    built: list[tuple[SplitRunner, Callable[[], object]]] = []

    def attempt(n: int, cut: int) -> dict[str, Any]:
        try:
            runner, step, steps = _settled(case, n, cut)
        except torch.OutOfMemoryError as err:
            error = _first_line(err)
        else:
            built.append((runner, step))
            return {"fits": True, "steps": steps}
        gc.collect()
        if case.devices[0].startswith("cuda"):
            torch.cuda.empty_cache()
        return {"fits": False, "error": error}

    attempts = fit_attempts(n, case.fc, cut, toward, attempt, tries, shift)
    runner, step = built[-1]
    return runner, step, attempts


def _settled(case: SplitCase, n: int, cut: int) -> tuple[SplitRunner, Callable[[], object], int]:
    """``case``'s runner at ``cut``, its schedule's step, and the steps it took to settle."""
    runner = SplitRunner(case.memory_model, n, case.fc, cut, case.devices, graphs=case.graphs)
    step = runner.schedule(case.schedule, case.micro_batches)
    return runner, step, settle(step, case.devices)


def _first_line(err: BaseException) -> str:
    """An error's first line, at most 200 characters: enough to say which device and how much."""
    return str(err).splitlines()[0][:200]


def fit_cut(case: SplitCase, n: int, cut: int, toward: int, tries: int = 8) -> list[dict[str, Any]]:
    """:func:`fit_attempts` with each attempt in a fresh process (``case``'s budget, allocator).

    A cut fits when its steps settle without any out-of-memory error, raised or caught: a
    caught one is a cuDNN plan whose workspace did not fit, replaced by a slower one for
    the rest of that process (:func:`~gpugauge.launch.fresh.in_fresh_process`). Hence a
    process per attempt, and this one builds only the cut that fitted; ``tries`` is two
    more than in-process, as misses are more (GPipe ×2 on two H200s needed 6 tries by
    raised errors alone). The
    one-device case (``single``, the largest model that fits, as the search counts it)
    fails on a raised error only. Each attempt records its OOMs per device (``ooms``,
    raised and caught) and ``"where": "child"``.
    """

    def attempt(n: int, cut: int) -> dict[str, Any]:
        what = f"a {case.schedule} split's attempt at cut {cut}"
        return {**in_fresh_process(what, _attempt, case, n, cut), "where": "child"}

    return fit_attempts(n, case.fc, cut, toward, attempt, tries)


def _attempt(case: SplitCase, n: int, cut: int) -> dict[str, Any]:
    """:func:`fit_cut`'s attempt: plans primed, then the step settled under the budget."""
    devices = case.devices
    prime_conv_plans(case.memory_model, devices, case.batch // case.micro_batches)
    cuda = [d for d in dict.fromkeys(devices) if d.startswith("cuda")]
    with budgets(devices, parse_budget(case.budget), case.allocator):
        before = allocator_events(cuda)
        try:
            steps = _settled(case, n, cut)[2]
            result: dict[str, Any] = {"fits": True, "steps": steps}
        except torch.OutOfMemoryError as err:
            result = {"fits": False, "error": _first_line(err)}
        after = allocator_events(cuda)
    ooms = [a["num_ooms"] - b["num_ooms"] for b, a in zip(before, after, strict=True)]
    strict = case.schedule != "single"  # the largest model on one device fits as searched
    if result["fits"] and strict and any(ooms):  # every one of them was caught
        result = {"fits": False, "error": f"cuDNN plans fell back: OOMs caught {ooms}"}
    return {**result, "ooms": ooms}  # per CUDA device, raised and caught
