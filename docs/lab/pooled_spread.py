# Run: python docs/lab/pooled_spread.py (about a minute); the table in docs/lab/ab-evidence.md.
"""The pooled spread of processes with cases bimodal across processes left out.

First the three recorded H200 A/Bs (docs/lab/data/ab-pairs.json), judged as recorded:
each case's verdict and the A/B's pooled SD, to compare before and after a change of
:func:`gpugauge.ab.verdict.pooled_process_sd`. Then synthetic A/As of few cases (two
rounds, a random offset per process, as in tests/test_ab_rounds.py): the share of cases
read slower or faster, which the trim can raise where it leaves out more.
"""

import random
from collections import Counter

from rule_replay import SIDE, cut, pair, recorded

from gpugauge.ab.result import ABReport, CaseAB
from gpugauge.ab.verdict import Outcome, Schedule


def recorded_verdicts() -> None:
    s = Schedule()
    for run, rec in recorded().items():
        cases = []
        for cid, r in rec["cases"].items():
            case = None
            for rr in r["rounds"]:
                one = CaseAB(cid, cid, tuple(cut(s, [pair(*p) for p in rr])[0]), schedule=s)
                case = one if case is None else case.with_round(one)
            cases.append(case)
        report = ABReport(SIDE, SIDE, tuple(cases), "", 0.0, s)
        sd, _ = report.process_sd
        counts = Counter(str(c.outcome) for c in report.pooled().cases)
        print(f"run {run}: pooled SD {sd:.4f}; {dict(counts)}")


def false_alarms(n: int, noise: float, proc: float, abs_: int = 300) -> tuple[int, int]:
    """Cases read slower or faster in ``abs_`` A/As of ``n`` cases, and the cases judged."""
    s, rng, alarms = Schedule(), random.Random(7), 0
    for _ in range(abs_):
        cases = []
        for i in range(n):
            case = None
            for _ in range(s.rounds):
                mean = rng.gauss(0, proc) - rng.gauss(0, proc)
                logs: list[float] = []
                while k := s.more(logs):
                    logs += [rng.gauss(mean, noise) for _ in range(k)]
                one = CaseAB(f"c{i}", f"c{i}", tuple(pair(x, 0.0) for x in logs), schedule=s)
                case = one if case is None else case.with_round(one)
            cases.append(case)
        report = ABReport(SIDE, SIDE, tuple(cases), "cpu", 0.0, s).pooled()
        alarms += sum(c.outcome in (Outcome.SLOWER, Outcome.FASTER) for c in report.cases)
    return alarms, n * abs_


if __name__ == "__main__":
    recorded_verdicts()
    print("| cases | noise a pair | processes (SD) | false alarms |")
    print("| --- | --- | --- | --- |")
    for n in (5, 8, 12, 20):
        for noise, proc in ((0.01, 0.004), (0.003, 0.008)):
            alarms, total = false_alarms(n, noise, proc)
            print(f"| {n} | {noise:.1%} | {proc:.1%} | {alarms}/{total} ({alarms / total:.2%}) |")
