# Run: python docs/lab/host_paced_rule.py (about 45 s); the tables in docs/lab/ab-evidence.md.
"""How often a host-paced step's class regression on a new host passes its night.

Synthetic A/Bs through the real schedule, verdict and settling rules (two rounds, a 1%
offset per process, the noise of a pair of blocks as given): a result that regressed
against its class at 1.17x (allowance 7.2%, the eager LeNet step's) passes where the A/B
clears it (:func:`gpugauge.ab.overruled.clears`) or leaves it inconclusive
(:func:`gpugauge.ab.overruled.undecided_host_paced`), and does not read slower.
"""

import math
import random
import statistics

from gpugauge.ab.overruled import clears, undecided_host_paced
from gpugauge.ab.pairs import Block, Pair
from gpugauge.ab.result import CaseAB
from gpugauge.ab.verdict import Schedule
from gpugauge.results.verdicts import Basis, GateResult, MetricCheck, Verdict

BEFORE = GateResult(
    "c",
    "f",
    "gpu",
    (
        MetricCheck(
            "time", 3.0, 3.51, 1.17, 1.17, 1.17, 0.072, Verdict.REGRESSED, Basis.CLASS_BASELINE
        ),
    ),
)
CHANGES = (1.0, 1.1, 1.15, 1.2, 1.3, 2.0)
NOISES = (0.15, 0.25, 0.5)  # a pair's log-ratio SD: 12-64% in five eager steps of an H200 A/A


def one_round(
    s: Schedule, change: float, noise: float, rng: random.Random, proc: float = 0.01
) -> CaseAB:
    offset, logs = rng.gauss(0, proc), []
    while k := s.more(logs):
        logs += [math.log(change) + offset + rng.gauss(0, noise) for _ in range(k)]
    pairs = tuple(Pair(Block(3.0, 10), Block(3.0 * math.exp(x), 10), True) for x in logs)
    return CaseAB("c", "c", pairs, schedule=s)


def passes(case: CaseAB, host_rule: bool = True) -> bool:
    """Whether the night passes the result: ``host_rule`` False is the rule before it."""
    check = case.check
    if check is None or check.verdict is Verdict.REGRESSED:
        return False
    return clears(BEFORE, case) or (host_rule and undecided_host_paced(BEFORE, case))


def main(n: int = 1000) -> None:
    rng, s = random.Random(7), Schedule()
    print("| noise a pair | " + " | ".join(f"{c:.2f}x" for c in CHANGES) + " | 1.00x, before |")
    print("| --- |" + " --- |" * (len(CHANGES) + 1))
    for noise in NOISES:
        row = []
        for change in CHANGES:
            cases = [
                one_round(s, change, noise, rng).with_round(one_round(s, change, noise, rng))
                for _ in range(n)
            ]
            row.append(f"{100 * statistics.fmean(passes(c) for c in cases):.0f}%")
            if change == 1.0:
                before = f"{100 * statistics.fmean(passes(c, False) for c in cases):.0f}%"
        row.append(before)
        print(f"| {noise:.0%} | " + " | ".join(row) + " |")


def offsets(n: int = 1000) -> None:
    """An unchanged step's nights that pass, by the SD of a process's own offset."""
    rng, s = random.Random(7), Schedule()
    print("\n| between processes | 15% noise a pair | 50% noise a pair |")
    print("| --- | --- | --- |")
    for proc in (0.01, 0.05, 0.08):
        row = []
        for noise in (0.15, 0.5):
            cases = [
                one_round(s, 1.0, noise, rng, proc).with_round(one_round(s, 1.0, noise, rng, proc))
                for _ in range(n)
            ]
            row.append(f"{100 * statistics.fmean(passes(c) for c in cases):.0f}%")
        print(f"| {proc:.0%} | " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
    offsets()
