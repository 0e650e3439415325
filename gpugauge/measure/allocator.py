"""Which way PyTorch's CUDA caching allocator grows its memory, for the length of a case.

Fixed segments (PyTorch's default) or expandable segments (one segment per stream that
grows in place, the setting PyTorch's out-of-memory message suggests when reserved memory
is fragmented). On the head's GPU of the layer_fit split, on whole H200s, the default
allocator reserved 0.9 GiB beyond allocated for the naive split and 2.8 GiB for GPipe ×2,
expandable segments 0.07-0.13 GiB; under 11 GiB GPipe ×2 fitted at cut 117 with the
default allocator and at 85 with expandable segments (docs/lab/layer-fit-evidence.md).

PyTorch reads ``PYTORCH_CUDA_ALLOC_CONF`` (or ``PYTORCH_ALLOC_CONF``) once per process; a
running process changes it through a private setter, which PyTorch's own messages
recommend. Setting it resets the keys it does not name (``max_split_size_mb``,
``garbage_collection_threshold``, ``roundup_power2_divisions``), so :func:`use_allocator`
passes the process's own settings along with its one change and puts them back after. A
setting made in code rather than in the environment is not seen, and the ``backend`` key
is left alone (it cannot change in a running process).
"""

from __future__ import annotations

import contextlib
import gc
import os
from collections.abc import Iterator, Sequence
from typing import Any

ALLOCATORS = {"default": False, "expandable": True}
"""Allocator names -> whether segments are expandable."""


def check_allocator(name: str) -> str:
    """``name`` if it is one of :data:`ALLOCATORS`, else a ValueError that lists them."""
    if name not in ALLOCATORS:
        raise ValueError(f"allocator {name!r}; allocators are {sorted(ALLOCATORS)}")
    return name


def process_conf() -> str:
    """The allocator settings this process started with (the environment's)."""
    return os.environ.get("PYTORCH_CUDA_ALLOC_CONF") or os.environ.get("PYTORCH_ALLOC_CONF", "")


def _items(conf: str) -> list[str]:
    """``key:value`` items of a settings string; commas inside ``[...]`` stay in their item."""
    items, depth, start = [], 0, 0
    for i, ch in enumerate(conf + ","):
        depth += (ch == "[") - (ch == "]")
        if ch == "," and depth == 0:
            if conf[start:i].strip():
                items.append(conf[start:i].strip())
            start = i + 1
    return items


def conf_with(base: str, expandable: bool | None) -> str:
    """``base`` with expandable segments ``expandable`` (None: as ``base`` has them, else off).

    Every other key of ``base`` is kept but ``backend``; the expandable key is always
    named, since leaving it out does not switch it back.
    """
    items = _items(base)
    key = "expandable_segments"
    given = [kv for kv in items if kv.split(":", 1)[0].strip() == key]
    keep = [kv for kv in items if kv.split(":", 1)[0].strip() not in (key, "backend")]
    if expandable is None:
        last = given[-1] if given else f"{key}:False"
        expandable = last.split(":", 1)[1].strip() == "True"
    return ",".join([*keep, f"{key}:{expandable}"])


def set_conf(conf: str) -> None:
    """Apply allocator settings to this running process.

    ``torch._C._accelerator_setAllocatorSettings`` from torch 2.9,
    ``torch.cuda.memory._set_allocator_settings`` before (deprecated since); both private.
    """
    import torch

    setter = getattr(torch._C, "_accelerator_setAllocatorSettings", None)
    if setter is None:
        setter = torch.cuda.memory._set_allocator_settings
    setter(conf)


def release_blas_workspaces(torch: Any) -> None:
    """Free the cuBLAS workspaces earlier work left allocated (one per handle and stream).

    They live in the caching allocator as allocated memory, which ``empty_cache`` keeps, so
    a memory budget set after other tests (amp's graphed steps capture on streams of their
    own) starts smaller than in a fresh process; PyTorch's own leak check frees them the
    same way. A graph captured before this must not be replayed after it: none is, since
    every case captures its own. No-op where the binding is absent.
    """
    clear = getattr(torch._C, "_cuda_clearCublasWorkspaces", None)
    if clear is not None and torch.cuda.is_initialized():
        clear()


@contextlib.contextmanager
def use_allocator(name: str, devices: Sequence[str]) -> Iterator[None]:
    """Inside, new CUDA segments are ``name``'s kind, with nothing cached from before.

    After, the cache is emptied again and the process's own settings are back, on every
    exit. On devices that are not CUDA it checks the name and does nothing else.
    """
    check_allocator(name)
    if not any(str(d).startswith("cuda") for d in devices):
        yield
        return
    import torch

    base = process_conf()
    gc.collect()
    release_blas_workspaces(torch)
    torch.cuda.empty_cache()
    set_conf(conf_with(base, ALLOCATORS[name]))
    try:
        yield
    finally:
        gc.collect()
        torch.cuda.empty_cache()
        set_conf(conf_with(base, None))
