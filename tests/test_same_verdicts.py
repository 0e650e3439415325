"""A restructure keeps every id and verdict: a fixed set of results judged as before.

``BEFORE`` is what commit e5d6570, the last before gpugauge's packages were rearranged
(issue 50), said of this set: the same synthetic results against the same saved
baselines, judged by the one judge with the default tolerances. The judge of today must
say the same of every id and every metric.
"""

from __future__ import annotations

from pathlib import Path

from gpugauge.judging.judge import Judge
from gpugauge.measure.memory import Memory
from gpugauge.regress.baselines import BaselineStore
from gpugauge.regress.gate import Gate
from gpugauge.regress.tolerances import Tolerances
from gpugauge.results.measurement import Measurement

from .fakes import result, save_baselines

BASELINE_MS = {
    "same": 2.0,
    "slower": 2.0,
    "faster": 2.0,
    "a-little": 2.0,
    "four": 2.0,
    "mem": 2.0,
    "other-family": 5.0,
    "tiny": 0.01,
}
NOW_MS = {**BASELINE_MS, "slower": 2.3, "faster": 1.6, "a-little": 2.02, "four": 2.08}
NOW_MS |= {"tiny": 0.012, "new": 1.0}
BEFORE = {
    "a-little": ("unchanged", [("time", "unchanged")]),
    "faster": ("improved", [("time", "improved")]),
    "four": ("regressed", [("time", "regressed")]),
    "mem": ("unchanged", [("time", "unchanged")]),
    "new": ("new", []),
    "other-family": ("unchanged", [("time", "unchanged")]),
    "same": ("unchanged", [("time", "unchanged")]),
    "slower": ("regressed", [("time", "regressed")]),
    "tiny": ("regressed", [("time", "regressed")]),
}


def _result(bid: str, ms: float, now: bool) -> Measurement:
    family = "other" if bid == "other-family" else "demo"
    grown = (4 if now else 1) << 20
    memory = (Memory(device="cpu", peak_rss_growth_bytes=grown),) if bid == "mem" else ()
    return result(bid, ms, family=family, memory=memory)


def test_every_id_and_verdict_is_what_it_was_before_the_restructure(tmp_path: Path) -> None:
    save_baselines(tmp_path, [_result(b, ms, now=False) for b, ms in BASELINE_MS.items()])
    judge = Judge(Gate(BaselineStore(tmp_path), Tolerances()))
    now = {}
    for bid, ms in NOW_MS.items():
        r = judge.judge(_result(bid, ms, now=True))
        now[r.id] = (r.verdict.value, sorted((c.metric, c.verdict.value) for c in r.checks))
    assert now == BEFORE
