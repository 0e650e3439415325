"""The split planner: where to cut the model over two devices.

:func:`plan_split` chooses the cut from the memory model (balance memory) and from
per-block costs (balance time), among the cuts whose predicted peaks fit both budgets.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from gpugauge.families.layer_fit.budget import GiB
from gpugauge.families.layer_fit.costs import BlockCosts
from gpugauge.families.layer_fit.memory_model import MemoryModel
from gpugauge.families.layer_fit.pipe import held_parts

SCHEDULES = ("single", "naive", "gpipe", "1f1b")
PIPELINED = ("gpipe", "1f1b")


@dataclass(frozen=True)
class Cut:
    """A split after block ``k``: device 0 holds blocks [0, k), device 1 the rest."""

    k: int
    n: int
    m: int
    bytes: tuple[int, int]  # predicted peak per device
    cost: tuple[float, float]  # per-device step cost (BlockCosts units)

    @property
    def layers(self) -> tuple[tuple[int, int], tuple[int, int]]:
        """(conv, fc) blocks on each device."""
        c0 = min(self.k, self.n)
        return (c0, self.k - c0), (self.n - c0, self.m - (self.k - c0))

    def memory_share(self, budgets: tuple[float, float]) -> float:
        """The fuller device's predicted peak / its budget."""
        return max(b / cap for b, cap in zip(self.bytes, budgets, strict=True))

    def time_share(self) -> float:
        """The slower device's share of the total cost (0.5 = balanced)."""
        return max(self.cost) / sum(self.cost)

    def as_dict(self) -> dict[str, Any]:
        """Plain dict for JSON."""
        return {**asdict(self), "layers": self.layers}


class SplitError(ValueError):
    """No cut puts the model within both devices' budgets."""


@dataclass(frozen=True)
class SplitPlan:
    """Where to cut (N, M) over two devices: by memory, by time, and the one chosen.

    ``chosen`` is the most time-balanced cut whose predicted peaks fit both budgets (with
    ``margin`` of each budget left free); ``limiting`` is the device with less predicted
    headroom under it.
    """

    n: int
    m: int
    micro_batches: int
    budgets: tuple[float, float]
    by_memory: Cut
    by_time: Cut
    chosen: Cut
    costs: BlockCosts
    margin: float
    schedule: str = "naive"

    @property
    def predicted_step(self) -> float:
        """The chosen cut's step by the bubble model, in the costs' units (ms if measured).

        Naive: one stage after the other. Pipelined over two stages whose micro-batch
        costs are a >= b: m · a + b, the slower stage busy m slots and the other's one
        slot of fill or drain (GPipe's bubble, which 1F1B shares; (m + 1) · a when the cut
        is balanced), with no launch gaps and no time for the copies: the ideal the
        schedules can approach.
        """
        cost = self.chosen.cost  # one micro-batch's, per stage
        if self.schedule in PIPELINED:
            return self.micro_batches * max(cost) + min(cost)
        return sum(cost)

    @property
    def limiting(self) -> int:
        """Index of the device closer to its budget under the chosen cut."""
        b, caps = self.chosen.bytes, self.budgets
        return 0 if b[0] / caps[0] >= b[1] / caps[1] else 1

    def as_dict(self) -> dict[str, Any]:
        """Plain dict for JSON."""
        return {
            "n": self.n,
            "m": self.m,
            "micro_batches": self.micro_batches,
            "budgets": list(self.budgets),
            "by_memory": self.by_memory.as_dict(),
            "by_time": self.by_time.as_dict(),
            "chosen": self.chosen.as_dict(),
            "limiting_device": self.limiting,
            "costs": self.costs.as_dict(),
            "margin": self.margin,
            "schedule": self.schedule,
            "predicted_step": self.predicted_step,
        }


def split_peaks(
    model: MemoryModel, n: int, m: int, cut: int, micro_batches: int, schedule: str
) -> tuple[int, int]:
    """Predicted peak bytes of each device when (N, M) is cut after block ``cut``."""
    held = held_parts(schedule, micro_batches)
    return (
        model.stage(n, m, 0, cut, "train", micro_batches, held[0]).total,
        model.stage(n, m, cut, n + m, "train", micro_batches, held[1]).total,
    )


def plan_split(
    model: MemoryModel,
    n: int,
    m: int,
    budgets: tuple[float, float],
    costs: BlockCosts,
    micro_batches: int = 1,
    margin: float = 0.02,
    schedule: str = "naive",
) -> SplitPlan:
    """Every cut's predicted per-device peak and cost; the balanced ones and the chosen one.

    Peaks are the ``schedule``'s at ``micro_batches`` parts (:func:`~.pipe.held_parts`); costs are
    per step, so measure them at the micro-batch size when they are to balance a pipeline.
    """
    per_block = costs.per_block(model, n, m)
    cuts = [
        Cut(
            k,
            n,
            m,
            split_peaks(model, n, m, k, micro_batches, schedule),
            (sum(per_block[:k]), sum(per_block[k:])),
        )
        for k in range(1, n + m)
    ]
    if not cuts:
        raise SplitError(f"(N={n}, M={m}) has one block: nothing to split")
    by_memory = min(cuts, key=lambda c: c.memory_share(budgets))
    by_time = min(cuts, key=lambda c: (c.time_share(), c.memory_share(budgets)))
    room = tuple(cap * (1 - margin) for cap in budgets)
    feasible = [c for c in cuts if all(b <= r for b, r in zip(c.bytes, room, strict=True))]
    if not feasible:
        raise SplitError(
            f"(N={n}, M={m}) fits no cut within {[f'{b / GiB:.3g} GiB' for b in budgets]}: "
            f"the most memory-balanced cut needs {by_memory.bytes} bytes"
        )
    chosen = min(feasible, key=lambda c: (c.time_share(), c.memory_share(budgets)))
    return SplitPlan(
        n, m, micro_batches, budgets, by_memory, by_time, chosen, costs, margin, schedule
    )
