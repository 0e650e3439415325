"""amp's profiler pass (seed 003's tables) and the host data loader whose share it measures.

Run before, never inside, the timed rounds: operator tables by self device and host time
(CSV and Markdown), a Chrome trace, and the loader's share of a step against steps on one
batch already on the device.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from gpugauge.families.amp.workload import AmpCase, Trainer
from gpugauge.measure.profile import (
    OP_HEADERS,
    ProfileSchedule,
    endless,
    loader_share,
    op_cells,
    op_table,
    profile_steps,
    to_csv,
    to_markdown,
)
from gpugauge.measure.timing import CudaEventClock, HostClock


class HostImages(torch.utils.data.Dataset):
    """A dataset on the host, as MNIST/CIFAR keep it: uint8 images, converted per item.

    ``__getitem__`` does what ``ToTensor`` + ``Normalize(0.5, 0.5)`` do: uint8 to float in
    [0, 1], then normalized. ``length`` items; only ``min(length, stored)`` distinct images
    are kept, item ``i`` is image ``i % stored`` (the per-item work is the same).
    """

    def __init__(self, shape: tuple[int, int, int], classes: int, length: int, stored: int = 256):
        g = torch.Generator().manual_seed(1)
        n = min(length, stored)
        self.images = torch.randint(0, 256, (n, *shape), generator=g, dtype=torch.uint8)
        self.labels = torch.randint(0, classes, (n,), generator=g)
        self.length = length

    def __len__(self) -> int:
        """Items in one epoch."""
        return self.length

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Image ``i`` as a normalized float tensor, and its label."""
        j = i % len(self.images)
        return self.images[j].float().div_(255).sub_(0.5).div_(0.5), self.labels[j]


# The seeds' loader: one process (num_workers 0), shuffled, no pinned memory.
LOADER_SETTINGS = {"num_workers": 0, "pin_memory": False, "shuffle": True, "drop_last": True}


def host_loader(case: AmpCase, batches: int) -> torch.utils.data.DataLoader:
    """A real DataLoader over a :class:`HostImages` of ``batches`` batches of the case."""
    shape = case.input_shape[1:]
    data = HostImages(shape, case.defn.num_classes, batches * case.batch)
    g = torch.Generator().manual_seed(2)
    return torch.utils.data.DataLoader(data, batch_size=case.batch, generator=g, **LOADER_SETTINGS)


PROFILE_SCHEDULE = {
    "smoke": ProfileSchedule(wait=1, warmup=1, active=2),
    "seed": ProfileSchedule(wait=1, warmup=1, active=3),  # the seeds' tables: 3 ProfilerSteps
    "full": ProfileSchedule(wait=1, warmup=2, active=5),
}
LOADER_STEPS = {"smoke": 2, "seed": 4, "full": 8}  # per window; 3 windows each way
TOP_MARKDOWN = 30  # rows in the Markdown operator tables; the CSVs hold every operator


def _synchronizer(device: str) -> Callable[[], None] | None:
    if torch.device(device).type != "cuda":
        return None
    return lambda: torch.cuda.synchronize(device)


def profile_pass(case: AmpCase, path: Callable[[str], Path]) -> tuple[dict[str, Path], dict]:
    """The case's profiler pass and loader share, on a fresh model; never timed rounds.

    The profiled steps are fed by a real DataLoader (as in the seeds, whose tables show
    ``enumerate(DataLoader)`` on top). ``path(name)`` is where a file goes. Writes the
    operator tables by self device time (CUDA only) and by self CPU time, CSV and
    Markdown, the device kernel table (CUDA only) and the Chrome trace. Returns the files
    by label and a summary for the result's ``extra``.
    """
    trainer = Trainer(case)
    schedule = PROFILE_SCHEDULE[case.profile]
    steps = LOADER_STEPS[case.profile]
    loader = host_loader(case, schedule.steps + 3 * steps + 2)
    sync = _synchronizer(case.device)

    def train(batch: tuple[torch.Tensor, torch.Tensor]) -> object:
        return trainer.step(*trainer.to_device(*batch))

    batches = endless(loader)
    trace = path("profile.pt.trace.json")
    prof = profile_steps(
        lambda: train(next(batches)), trace, device=case.device, schedule=schedule, synchronize=sync
    )
    files: dict[str, Path] = {"trace": trace}
    on_gpu = torch.device(case.device).type == "cuda"
    sorts = ("self_device", "self_cpu") if on_gpu else ("self_cpu",)
    for by in sorts:
        rows = op_table(prof.rows, by)
        title = f"{case.id}: top operators by {by.replace('_', ' ')} time ({schedule.active} steps)"
        files[f"ops_by_{by}_csv"] = _write(
            path(f"ops_by_{by}.csv"), to_csv(OP_HEADERS, op_cells(rows, prof.rows))
        )
        files[f"ops_by_{by}_md"] = _write(
            path(f"ops_by_{by}.md"),
            to_markdown(OP_HEADERS, op_cells(rows[:TOP_MARKDOWN], prof.rows), title),
        )
    summary: dict[str, Any] = {"profile": prof.summary()}
    if on_gpu:
        kernels = prof.kernels()
        if not kernels.rows or not kernels.on_device:
            raise RuntimeError(f"{case.id}: the trace {trace} holds no device kernel events")
        files["kernels_csv"] = _write(path("kernels.csv"), kernels.to_csv())
        files["kernels_md"] = _write(
            path("kernels.md"),
            kernels.head(TOP_MARKDOWN).to_markdown(
                f"{case.id}: device kernels and copies ({schedule.active} steps)"
            ),
        )
        summary["profile"]["top_kernels"] = [k.name for k in kernels.rows[:5]]
    else:
        summary["profile"]["device_tables"] = "none: no device activity on a CPU"
    clock = CudaEventClock(case.device) if on_gpu else HostClock()
    share = loader_share(loader, train, clock, steps=steps, settings=dict(LOADER_SETTINGS))
    summary["loader"] = share.as_dict()
    return files, summary


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path
