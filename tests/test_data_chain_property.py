"""Property: whatever the writers write from any accepted reading, every reader reads.

Issue 49: the gate wrote ``"ratio": Infinity`` for a peak that went from 0 B to 100 MiB,
and confirm, report, history import and baseline --add all refused the run. Here 10,000
results, their readings drawn (seeded) from the whole range a reader accepts (0, the
smallest and largest magnitudes, allocator slack at its edge, counts from 0, metrics
missing on one side), go through the real writers (the baseline store, the gate, the run
file, the history) and are read back by every reader: :func:`load_run` (confirm's), the
report, ``history import`` and the listing, and ``baseline``'s reader and writer.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from gpugauge.history.capture import saved_records
from gpugauge.history.render import cases_text
from gpugauge.history.store import History
from gpugauge.measure.memory import Memory
from gpugauge.measure.timing import Timing
from gpugauge.regress.baselines import (
    BaselineError,
    BaselineStore,
    combine_runs,
    entries_of_benchmark_json,
)
from gpugauge.regress.baselines import entry_of as entry
from gpugauge.regress.gate import Gate
from gpugauge.regress.tolerances import Tolerances
from gpugauge.report.document import collect, render_markdown
from gpugauge.results.measurement import Measurement, SavedSpec
from gpugauge.results.metrics import METRICS, Kind
from gpugauge.results.runs import LARGEST, SMALLEST
from gpugauge.results.verdicts import GateResult
from tests.fakes import CLASS, run_json

RUNS, PER_RUN = 50, 200  # 10,000 results
MiB = 2**20
# Every edge a reading may sit at: 0, the reader's bounds, the memory slack's edge.
VALUES = (0.0, 0.0, SMALLEST, 1e-9, 0.02, 0.5, 1.0, 3.0, 1e3, 1e8, 1e15, LARGEST)
PEAKS = (0, 0, 1, 2 * MiB, 2 * MiB + 1, 100 * MiB, 10**15, 10**30)
TIMES = ((SMALLEST,) * 3, (0.01, 0.011, 0.012), (2.0, 2.1, 1.9, 2.05), (LARGEST,) * 2)
VALUE_METRICS = [n for n, m in METRICS.items() if m.kind is Kind.VALUE and n != "energy"]


def _result(rng: random.Random, bid: str, timed: bool) -> Measurement:
    """A result holding a random subset (never none) of the metrics at random edges."""
    names = [n for n in VALUE_METRICS if rng.random() < 0.3] or [rng.choice(VALUE_METRICS)]
    values = {n: rng.choice(VALUES) for n in names if n != "memory"}
    memory = ()
    if "memory" in names:
        memory = (Memory(device="cuda:0", peak_allocated_bytes=rng.choice(PEAKS)),)
    timing = None
    if timed:
        rounds = rng.choice(TIMES)
        timing = Timing(rounds, rounds, "cuda_event", 1, 0.0, "fixed rounds", False)
    spec = SavedSpec("demo", bid, "cuda", ("cuda",), {"name": bid})
    return Measurement(spec, timing=timing, values=values, memory=memory, device_class=CLASS)


def test_every_reader_reads_what_every_writer_wrote_from_any_reading(tmp_path: Path) -> None:
    rng = random.Random(49)
    ids = [f"case-{i:03d}" for i in range(PER_RUN)]
    timed = {i for i in ids if rng.random() < 0.03}  # the bootstrap costs 3 ms a check
    store = BaselineStore(tmp_path / "baselines")
    store.write([entry(_result(rng, i, i in timed)) for i in ids if rng.random() < 0.9], {})
    gate = Gate(BaselineStore(tmp_path / "baselines"), Tolerances())
    paths, verdicts = [], 0
    for r in range(RUNS):
        now = [_result(rng, i, i in timed) for i in ids]
        data = run_json(now)
        data["datetime"] = f"2026-11-{1 + r % 28:02d}T{r % 24:02d}:00:00"
        for bench, m in zip(data["benchmarks"], now, strict=True):
            judged = gate.by_baseline(entry(m))
            bench["extra_info"]["gate"] = judged.as_dict()
            verdicts += bool(judged.checks)
        text = json.dumps(data, allow_nan=False)  # standard JSON: no NaN, no Infinity
        paths.append(tmp_path / f"{r:04d}_run.json")
        paths[-1].write_text(text)
    assert verdicts > RUNS * PER_RUN // 2  # most were judged against a baseline

    # the report reads each run with load_run (confirm's reader) and the current one's
    # stored verdicts as the report and confirm read them
    data = collect(
        paths[-1],
        baseline_run=None,
        baselines=tmp_path / "baselines",
        tolerances=Tolerances(),
        history=paths,
    )
    assert len(data.history) == RUNS  # not one refused
    assert sum(len(s.measurements) for s in data.history) == RUNS * PER_RUN
    for s in data.history:
        for m in s.measurements:
            GateResult.from_dict(s.verdicts[m.id], m.spec.family, m.device_class)
    md = render_markdown(data, {}, tmp_path)
    assert "regressed" in md
    assert "(reference 0)" in md  # new amount where the baseline had none

    hist = str(tmp_path / "h.sqlite")
    with History.open(hist) as h:  # history import's reader and the history's writer
        added = h.append_runs([saved_records(p, host="GPU-1") for p in paths])
        assert all(added)
        assert len(cases_text(h.cases()).splitlines()) > PER_RUN
        assert sum(1 for _ in h.iter_points()) > RUNS * PER_RUN

    # baseline's reader: a run whose gate failed is read whole, then refused as a baseline;
    # the same runs saved ungated are recorded
    ungated = []
    for p in paths:
        data = json.loads(p.read_text())
        failed = any(
            (b["extra_info"].get("gate") or {}).get("verdict") == "regressed"
            for b in data["benchmarks"]
        )
        if failed:
            with pytest.raises(BaselineError, match="its gate failed"):
                entries_of_benchmark_json(p)
        for b in data["benchmarks"]:
            b["extra_info"].pop("gate", None)
        ungated.append(p.with_name("ungated-" + p.name))
        ungated[-1].write_text(json.dumps(data, allow_nan=False))
    runs = [entries_of_benchmark_json(p) for p in ungated]
    out = BaselineStore(tmp_path / "recorded")
    out.write(combine_runs(runs), {"recorded_from": [str(p) for p in ungated]})
    assert len(BaselineStore(tmp_path / "recorded").load(CLASS, "demo") or {}) == PER_RUN
