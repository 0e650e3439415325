"""Small fake results and saved runs, built in memory: no benchmark has to run for them."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

from gpugauge.measure.environment import device_class as class_of
from gpugauge.measure.memory import Memory
from gpugauge.measure.timing import Timing
from gpugauge.regress.baselines import BaselineStore, entry_of
from gpugauge.results.measurement import Comparison, Measurement, SavedSpec

CLASS = class_of(("cpu",))  # this machine's CPU class, as the plugin names it

# The head of a bench module for pytester sandboxes: a spec the gauge accepts, ``Spec(name)``
SPEC_SOURCE = """
import time
from dataclasses import dataclass
import pytest

@dataclass(frozen=True)
class Spec:
    name: str
    family: str = "demo"
    device: str = "cpu"
    @property
    def id(self): return self.name
    def as_dict(self): return {"name": self.name, "device": self.device}
"""


def result(
    bid: str,
    ms: float = 2.0,
    *,
    family: str = "demo",
    device_class: str = CLASS,
    memory: tuple[Memory, ...] = (),
    params: dict[str, Any] | None = None,
) -> Measurement:
    """A timed result of ``bid``: 8 rounds around ``ms`` milliseconds."""
    rounds = tuple(ms * (1 + 0.001 * i) for i in range(8))
    timing = Timing(rounds, rounds, "perf_counter", 1, 0.0, "fixed rounds", False)
    spec = SavedSpec(family, bid, "cpu", ("cpu",), params or {"name": bid, "device": "cpu"})
    return Measurement(spec, timing=timing, memory=memory, device_class=device_class)


def device_timed(m: Measurement) -> Measurement:
    """``m`` as if its rounds were timed on a device (CUDA events), not by the host."""
    assert m.timing is not None
    return replace(m, timing=replace(m.timing, clock="cuda_event"))


def run_json(results: list[Measurement], comparisons: list[Comparison] = ()) -> dict[str, Any]:
    """A saved pytest-benchmark run holding ``results``, as gpugauge saves it."""
    return {
        "machine_info": {"gpugauge": {"gpus": [], "cpu": "fake", "torch": "2.x"}},
        "datetime": "2026-11-22T10:00:00",
        "benchmarks": [
            {"name": f"test_demo[{m.id}]", "param": m.id, "extra_info": m.as_dict()}
            for m in results
        ],
        "gpugauge": {"comparisons": [c.as_dict() for c in comparisons]},
    }


def save_run(path: Path, results: list[Measurement], comparisons: list[Comparison] = ()) -> Path:
    """Write :func:`run_json` to ``path``."""
    path.write_text(json.dumps(run_json(results, comparisons)))
    return path


def time_gate(
    result_id: str,
    ratio: float,
    verdict: str,
    reference: str,
    checks: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """A result's saved gate: its time check at ``ratio`` of a 3 ms baseline (6.5% allowed),
    judged against ``reference``; ``checks`` replaces the time check."""
    time_check = {
        "metric": "time",
        "baseline": 3.0,
        "current": 3.0 * ratio,
        "ratio": ratio,
        "ci_low": ratio,
        "ci_high": ratio,
        "tolerance": 0.065,
        "verdict": verdict,
    }
    return {
        "id": result_id,
        "verdict": verdict,
        "note": "",
        "checks": [time_check] if checks is None else checks,
        "references": {"time": reference},
    }


def save_baselines(root: Path, results: list[Measurement]) -> list[Path]:
    """Store ``results`` as baselines under ``root``."""
    return BaselineStore(root).write(map(entry_of, results), {})


def first_report(tmp_path: Path, current: Path) -> str:
    """``gpugauge report`` of ``current`` with no baselines and no other runs: its Markdown."""
    from gpugauge.__main__ import main

    empty = tmp_path / "baselines"
    empty.mkdir()
    out = tmp_path / "rep"
    args = ["report", "--current", str(current), "--baselines-dir", str(empty), "--out", str(out)]
    assert main([*args, "--storage", str(tmp_path / "none")]) == 0
    return (out / "report.md").read_text()
