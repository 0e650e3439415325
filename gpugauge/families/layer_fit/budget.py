"""Memory budgets: parsed from the command line's text, and enforced on CUDA devices.

A budget below the device's memory is emulated with
``torch.cuda.set_per_process_memory_fraction``, which caps only PyTorch's caching
allocator (not the CUDA context) and is a fraction of total, not free, memory.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Sequence

import torch

from gpugauge.measure.allocator import use_allocator
from gpugauge.results.metrics import MiB

GiB = 2**30
SEED_BUDGET = "11GiB"


def parse_budget(text: str) -> int | None:
    """'11GiB' / '512MiB' / '11GB' -> bytes; 'device' -> None (the whole device)."""
    if text == "device":
        return None
    units = {"GiB": GiB, "MiB": MiB, "GB": 10**9, "MB": 10**6}
    for unit, scale in units.items():
        if text.endswith(unit):
            number = text[: -len(unit)]
            try:
                value = float(number)
            except ValueError:
                break
            if value <= 0:
                break
            return int(value * scale)
    raise ValueError(f"budget {text!r}: give 'device' or a size such as '11GiB', '512MiB'")


def budget_label(text: str) -> str:
    """The id part of a budget: '11gib', 'device'."""
    return text.lower()


@contextlib.contextmanager
def budgets(
    devices: Sequence[str], budget: int | None, allocator: str = "default"
) -> Iterator[tuple[float, ...]]:
    """Cap each CUDA device's caching allocator at ``budget`` bytes (emulated), then lift it.

    Inside, the allocator is ``allocator`` (:func:`~gpugauge.measure.allocator.use_allocator`)
    with nothing cached from before. Yields each device's budget for the model (the cap,
    or its free memory without one; on a CPU the budget as given, else the machine's
    memory: nothing is enforced there).
    """
    with use_allocator(allocator, devices):
        unique = list(dict.fromkeys(devices))
        if not unique[0].startswith("cuda"):
            ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
            yield tuple(float(budget or ram) for _ in devices)
            return
        previous = {}
        getter = getattr(torch.cuda, "get_per_process_memory_fraction", None)
        try:
            out = []
            for d in unique:
                total = torch.cuda.get_device_properties(d).total_memory
                if budget is not None:
                    if budget > total:
                        raise ValueError(f"budget {budget} B exceeds {d}'s {total} B")
                    previous[d] = getter(torch.device(d)) if getter else 1.0
                    torch.cuda.set_per_process_memory_fraction(budget / total, d)
            for d in devices:
                if budget is not None:
                    out.append(float(budget - torch.cuda.memory_reserved(d)))
                else:
                    out.append(float(torch.cuda.mem_get_info(d)[0]))
            yield tuple(out)
        finally:
            for d, fraction in previous.items():
                torch.cuda.set_per_process_memory_fraction(fraction, d)
