"""layer_fit's cases: the frontier searches (:class:`FitCase`), the splits (:class:`SplitCase`)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, ClassVar

from gpugauge.families.layer_fit.budget import SEED_BUDGET, budget_label, parse_budget
from gpugauge.families.layer_fit.memory_model import MODES, SEED_INPUT, MemoryModel
from gpugauge.families.layer_fit.plan import PIPELINED, SCHEDULES, split_peaks
from gpugauge.measure.allocator import check_allocator
from gpugauge.models.stacked import HEAD_WIDTH

# the split schedules the nightly gates, from CUDA graphs (SplitCase.nightly says why)
NIGHTLY_SPLITS = (("naive", 1), ("1f1b", 2))


@dataclass(frozen=True)
class FitCase:
    """One frontier search: mode, head size M, budget and where it runs.

    On ``cpu`` the search runs against the memory model on the simulated allocator.
    ``start`` is 'model' (gallop from the model's predicted N) or 'one' (exponential from 1).
    """

    family: ClassVar[str] = "layer_fit"
    mode: str
    fc: int
    budget: str  # "11GiB" or "device"
    device: str  # "cuda" | "cpu" (simulated)
    cap: int
    start: str = "model"
    batch: int = SEED_INPUT[0]
    image: int = SEED_INPUT[2]
    width: int = HEAD_WIDTH
    profile: str = "seed"

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"mode {self.mode!r}; modes are {MODES}")
        if self.start not in ("model", "one"):
            raise ValueError(f"start {self.start!r}: 'model' or 'one'")
        if self.device == "cpu" and self.budget == "device":
            raise ValueError("a simulated search needs a budget, not 'device'")
        parse_budget(self.budget)

    @property
    def id(self) -> str:
        """``fit-train-m62-11gib-cuda``; simulated: ``fit-train-m62-11gib-sim-cpu``."""
        where = "sim-cpu" if self.device == "cpu" else self.device
        start = "" if self.start == "model" else "-from1"
        return f"fit-{self.mode}-m{self.fc}-{budget_label(self.budget)}{start}-{where}"

    @property
    def memory_model(self) -> MemoryModel:
        """The analytic model at this case's shapes."""
        return MemoryModel(batch=self.batch, image=self.image, width=self.width)

    @property
    def budget_bytes(self) -> int | None:
        """The budget in bytes; None for the whole device."""
        return parse_budget(self.budget)

    def as_dict(self) -> dict[str, Any]:
        """Plain dict for JSON."""
        return asdict(self)


# head sizes searched at 11 GiB: the seed's 61 and 62, a small head, and none to speak of
SEED_HEADS = (1, 32, 61, 62)


def cases(profile: str) -> list[FitCase]:
    """Searches of a profile: CPU cases run on the simulated allocator at the seed's shapes."""
    sim = [FitCase("train", m, SEED_BUDGET, "cpu", 4096, profile=profile) for m in SEED_HEADS]
    sim += [
        FitCase("train", 62, SEED_BUDGET, "cpu", 4096, start="one", profile=profile),
        FitCase("infer", 62, SEED_BUDGET, "cpu", 4096, profile=profile),
        FitCase("infer", 250, SEED_BUDGET, "cpu", 4096, profile=profile),
    ]
    gpu = [FitCase("train", 62, SEED_BUDGET, "cuda", 4096, profile=profile)]
    if profile == "smoke":
        return sim + gpu
    gpu = [FitCase("train", m, SEED_BUDGET, "cuda", 4096, profile=profile) for m in SEED_HEADS]
    gpu += [
        FitCase("infer", 62, SEED_BUDGET, "cuda", 4096, profile=profile),
        FitCase("infer", 250, SEED_BUDGET, "cuda", 4096, profile=profile),
    ]
    if profile == "full":
        # the nightly (seed) keeps the budgeted searches, which see every change of the
        # memory a block needs; the whole device (80-141 GiB of probes) and the search
        # started from one block, which checks the search itself, are the full profile's
        gpu += [
            FitCase("train", 62, SEED_BUDGET, "cuda", 4096, start="one", profile=profile),
            FitCase("train", 62, "device", "cuda", 4096, profile=profile),
            FitCase("infer", 62, "device", "cuda", 4096, profile=profile),
        ]
        gpu += [
            FitCase("train", m, SEED_BUDGET, "cuda", 4096, profile=profile) for m in (8, 16, 48, 70)
        ]
    return sim + gpu


@dataclass(frozen=True)
class SplitCase:
    """One timed run of the model over two devices (or, ``single``, the largest on one).

    ``naive``: device 0's blocks, a copy, device 1's blocks, loss, backward, step: one
    device works at a time. ``gpipe``: the batch in ``micro_batches`` parts, all forwards
    first (fill), then all backwards (drain), one optimizer step; the devices overlap.
    ``1f1b``: the same parts, each part's backward issued right after its forward, so a
    stage holds one or two parts' activations instead of all (:func:`~.pipe.held_parts`).
    ``single``: the largest N that fits one device under the same budget (the frontier
    search's answer) with the same head, for comparison.
    """

    family: ClassVar[str] = "layer_fit"
    schedule: str
    conv: int
    fc: int
    micro_batches: int = 1
    budget: str = SEED_BUDGET  # per device
    device: str = "cuda"  # "cuda" (cuda:0 and cuda:1) | "cpu" (a smoke run of the code)
    batch: int = SEED_INPUT[0]
    image: int = SEED_INPUT[2]
    width: int = HEAD_WIDTH
    profile: str = "seed"
    allocator: str = "default"  # gpugauge.measure.allocator.ALLOCATORS; "expandable": "-expseg"
    graphs: bool = (
        False  # steps replayed from CUDA graphs (gpugauge.families.layer_fit.graphed): "-graphs"
    )

    def __post_init__(self) -> None:
        if self.schedule not in SCHEDULES:
            raise ValueError(f"schedule {self.schedule!r}; schedules are {SCHEDULES}")
        if self.graphs and (self.schedule == "single" or self.device != "cuda"):
            raise ValueError("CUDA graphs replay a split over two CUDA devices only")
        check_allocator(self.allocator)
        if (self.schedule in PIPELINED) != (self.micro_batches > 1):
            raise ValueError(f"{PIPELINED} take micro_batches > 1; the others take 1")
        if self.batch % self.micro_batches:
            raise ValueError(f"batch {self.batch} does not split into {self.micro_batches}")
        parse_budget(self.budget)

    @property
    def nightly(self) -> bool:
        """Whether the nightly job gates this case.

        Of the split, the graphed naive and 1F1B x2 schedules: issued op by op, the split's
        schedules are as fast as the host (:mod:`~gpugauge.families.layer_fit.graphed`), and
        from graphs each case costs about 26 s of a nightly on two H100s, where its median moved
        at most 0.4% over five runs (docs/lab/distributed-evidence.md). The other schedules
        stay in the seed and full runs; ``single`` and the CPU smoke cases are the single-GPU job's.
        """
        if self.schedule == "single" or self.device != "cuda":
            return True
        return self.graphs and (self.schedule, self.micro_batches) in NIGHTLY_SPLITS

    @property
    def devices(self) -> tuple[str, ...]:
        """cuda:0 and cuda:1 (single: cuda:0 only); on a CPU, 'cpu' twice."""
        count = 1 if self.schedule == "single" else 2
        if self.device == "cpu":
            return ("cpu",) * count
        return tuple(f"cuda:{i}" for i in range(count))

    @property
    def id(self) -> str:
        """``split-gpipe4-c138-m62-11gib-expseg-cuda``; ``split-single-m62-11gib-cuda``."""
        pipelined = self.schedule in PIPELINED
        sched = f"{self.schedule}{self.micro_batches}" if pipelined else self.schedule
        size = "" if self.schedule == "single" else f"c{self.conv}-"
        small = (
            "" if (self.batch, self.image) == SEED_INPUT[::2] else f"b{self.batch}-{self.image}px-"
        )
        alloc = "-expseg" if self.allocator == "expandable" else ""
        graphs = "-graphs" if self.graphs else ""
        where = f"{budget_label(self.budget)}{alloc}{graphs}-{self.device}"
        return f"split-{sched}-{size}m{self.fc}-{small}{where}"

    @property
    def memory_model(self) -> MemoryModel:
        """The analytic model at this case's shapes."""
        return MemoryModel(batch=self.batch, image=self.image, width=self.width)

    def predicted(self, n: int, cut: int) -> list[int]:
        """Predicted peak bytes per device of this case's schedule with ``n`` conv blocks."""
        model, m = self.memory_model, self.fc
        if self.schedule == "single":
            return [model.predict(n, m, "train").total]
        return list(split_peaks(model, n, m, cut, self.micro_batches, self.schedule))

    @property
    def fit_case(self) -> FitCase:
        """The search whose answer a ``single`` case runs."""
        return FitCase("train", self.fc, self.budget, self.device, 4096, profile=self.profile)

    def as_dict(self) -> dict[str, Any]:
        """Plain dict for JSON."""
        return {**asdict(self), "devices": list(self.devices)}


def split_cases(profile: str) -> list[SplitCase]:
    """The seed's split (138 conv + 62 fc, 11 GiB per GPU), naive and pipelined.

    The naive split with PyTorch's default allocator (the seed's), then naive, GPipe and
    1F1B at 2, 4 and 8 micro-batches with expandable segments: the default allocator's
    fragmentation (on whole H200s 2.8 GiB reserved beyond allocated on cuda:1 for GPipe
    ×2, 0.9 GiB for the naive split) decides the cut more than the schedule's own memory
    does (GPipe ×2 fitted at cut 117 with it under 11 GiB, at 85 without). Then naive and
    the pipelines at 2 and 4 replayed from CUDA graphs: issued op by op, the pipelines
    are as fast as the host (:mod:`gpugauge.families.layer_fit.graphed`).
    Tiny CPU runs in smoke. The full profile adds 16 micro-batches, the pipelines with the
    default allocator, and the split on the whole devices (no budget), where the schedules
    run without memory pressure.
    """
    # ``single`` last: its model fills cuda:0 to the cap, and the slower cuDNN plans it
    # falls back to there would serve the naive split's cuda:0 (same shapes) after it
    grow = dict(profile=profile, allocator="expandable")
    graphed = dict(grow, graphs=True)
    seed = [
        SplitCase("naive", 138, 62, profile=profile),
        SplitCase("naive", 138, 62, **grow),
        *(SplitCase(s, 138, 62, mb, **grow) for s in PIPELINED for mb in (2, 4, 8)),
        SplitCase("naive", 138, 62, **graphed),
        *(SplitCase(s, 138, 62, mb, **graphed) for s in PIPELINED for mb in (2, 4)),
    ]
    single = SplitCase("single", 0, 62, profile=profile)
    if profile == "smoke":
        tiny = dict(budget="64MiB", device="cpu", batch=2, image=8, width=64, profile=profile)
        small = [SplitCase(s, 4, 3, 2, **tiny) for s in PIPELINED]
        return [SplitCase("naive", 4, 3, **tiny), *small, *seed, single]
    if profile == "full":
        seed += [SplitCase(s, 138, 62, 16, **grow) for s in PIPELINED]
        seed += [SplitCase(s, 138, 62, mb, profile=profile) for s in PIPELINED for mb in (2, 4)]
        # the same split with the whole devices: the schedules without memory pressure
        free = dict(budget="device", profile=profile)
        seed += [
            SplitCase("naive", 138, 62, **free),
            *(SplitCase(s, 138, 62, mb, **free) for s in PIPELINED for mb in (2, 4)),
        ]
    return [*seed, single]
