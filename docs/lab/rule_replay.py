# Run: python docs/lab/rule_replay.py (about 30 s); the tables in docs/lab/ab-evidence.md.
"""The A/B's stopping rule replayed on recorded H200 pairs, with other first looks and caps.

docs/lab/data/ab-pairs.json keeps the pairs of every case that both rounds paired in three
A/Bs (runs 124, 126 and 127 in gpu-runs.md), in the order they were timed, and the outcome
each A/B gave. A case that round 2 left out ("not judged") is not there.
Each round is cut where a schedule would have stopped. The verdict is the real CaseAB's
over both rounds, judged with the pooled spread of the processes. A replay can only stop
sooner than the recorded run: where a schedule asks for more pairs than were timed, the
round keeps what it has. The "short" column counts those rounds; a replay's seconds are
then a lower bound.

Then synthetic A/Bs (20 cases, two rounds, a random offset per process, as in
tests/test_ab_rounds.py) compare a first look of 4 pairs with one of 3, where the rule
may ask for more pairs than any run recorded.
"""

import json
import math
import random
import statistics
from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from gpugauge.ab.pairs import Block, Pair
from gpugauge.ab.result import ABReport, CaseAB, SideInfo
from gpugauge.ab.verdict import Outcome, Schedule

DATA = Path(__file__).with_name("data") / "ab-pairs.json"
SIDE = SideInfo("base", "a", "a" * 40, "python3", "/x")
VARIANTS = [(4, 20), (4, 16), (4, 12), (4, 10), (3, 20), (3, 12)]  # (min_pairs, max_pairs)
# the rule those A/Bs ran: a first look of 4 pairs, then 3 more a look (until 2026-12-06)
RECORDED = replace(Schedule(), min_pairs=4)


def pair(log_ratio: float, wall_s: float) -> Pair:
    """A pair with the recorded ratio; each block carries half the pair's wall seconds."""
    half = wall_s / 2
    return Pair(Block(1.0, 1, wall_s=half), Block(math.exp(log_ratio), 1, wall_s=half), True)


def cut(s: Schedule, pairs: list[Pair]) -> tuple[list[Pair], bool]:
    """The pairs a round of schedule ``s`` would have timed; True where it wanted more."""
    n = 0
    while more := s.more([p.log_ratio for p in pairs[:n]]):
        if n + more > len(pairs):
            return pairs, True
        n += more
    return pairs[:n], False


def recorded() -> dict[str, dict]:
    """The recorded A/Bs by run: what each was, and its cases' rounds and outcomes."""
    return json.loads(DATA.read_text())["runs"]


def replay(
    cases: dict[str, dict], s: Schedule, pairs_of: Callable[[list], list[Pair]] | None = None
) -> tuple[dict, float, int]:
    """Each case's outcome under ``s``, the blocks' seconds it keeps, the rounds cut short.

    ``pairs_of``: a recorded round's pairs (default: its [log-ratio, wall s] records).
    """
    out, short = [], 0
    for cid, rec in cases.items():
        case = None
        for recorded_round in rec["rounds"]:
            pairs = pairs_of(recorded_round) if pairs_of else [pair(*p) for p in recorded_round]
            kept, wanted_more = cut(s, pairs)
            short += wanted_more
            one = CaseAB(cid, cid, tuple(kept), schedule=s)
            case = one if case is None else case.with_round(one)
        out.append(case)
    report = ABReport(SIDE, SIDE, tuple(out), "", 0.0, s).pooled()
    seconds = sum(
        b.wall_s for c in report.cases for r in c.rounds for p in r.pairs for b in (p.base, p.head)
    )
    return {c.id: c.outcome for c in report.cases}, seconds, short


def main() -> None:
    runs = recorded()
    print("| run | min, max pairs | blocks | verdicts | changed | short |")
    print("| --- | --- | --- | --- | --- | --- |")
    for run, rec in runs.items():
        asis, _, _ = replay(rec["cases"], RECORDED)
        for lo, hi in VARIANTS:
            got, seconds, short = replay(
                rec["cases"], replace(Schedule(), min_pairs=lo, max_pairs=hi)
            )
            counts = ", ".join(
                f"{n} {o}" for o, n in Counter(str(v) for v in got.values()).most_common()
            )
            changed = [f"{k}: {asis[k]} -> {v}" for k, v in got.items() if v != asis[k]]
            print(f"| {run} | {lo}, {hi} | {seconds:.0f} s | {counts} | {len(changed)} | {short} |")
            for line in changed:
                print(f"|  |  |  |  | {line} |  |")


# (label, change, noise a pair, process SD, what is counted)
CELLS = [
    ("A/A, 1% noise, processes 0.4%", 0.0, 0.01, 0.004, "false alarms"),
    ("A/A, 0.3% noise, processes 0.8%", 0.0, 0.003, 0.008, "false alarms"),
    ("A/A, 2% noise, processes 0.8%", 0.0, 0.02, 0.008, "false alarms"),
    ("A/A, 0.5% noise", 0.0, 0.005, 0.002, "same"),
    ("3% at 0.3% noise, processes 0.4%", 0.03, 0.003, 0.004, "slower"),
    ("3% at 1% noise, processes 0.4%", 0.03, 0.01, 0.004, "slower"),
    ("1% at 0.5% noise", 0.01, 0.005, 0.002, "same"),
    ("2x at 20% noise", 1.0, 0.2, 0.002, "slower"),
]


def synthetic(s: Schedule, change: float, noise: float, proc: float, seed: int = 11):
    """50 synthetic A/Bs of 20 cases: every outcome, and the mean pairs a round took."""
    rng, outcomes, pairs = random.Random(seed), [], []
    for _ in range(50):
        cases = []
        for i in range(20):
            case = None
            for _ in range(s.rounds):
                mean = math.log1p(change) + rng.gauss(0, proc) - rng.gauss(0, proc)
                logs: list[float] = []
                while k := s.more(logs):
                    logs += [rng.gauss(mean, noise) for _ in range(k)]
                one = CaseAB(f"c{i}", f"c{i}", tuple(pair(x, 0.0) for x in logs), schedule=s)
                case = one if case is None else case.with_round(one)
                pairs.append(len(logs))
            cases.append(case)
        report = ABReport(SIDE, SIDE, tuple(cases), "cpu", 0.0, s).pooled()
        outcomes += [c.outcome for c in report.cases]
    return outcomes, statistics.fmean(pairs)


def first_looks() -> None:
    print("\n| synthetic, 1,000 cases | counted | first look 4 | first look 3 |")
    print("| --- | --- | --- | --- |")
    counted = {
        "false alarms": (Outcome.SLOWER, Outcome.FASTER),
        "same": (Outcome.SAME,),
        "slower": (Outcome.SLOWER,),
    }
    for label, change, noise, proc, what in CELLS:
        row = []
        for lo in (4, 3):
            outcomes, pairs = synthetic(replace(Schedule(), min_pairs=lo), change, noise, proc)
            share = sum(o in counted[what] for o in outcomes) / len(outcomes)
            row.append(f"{100 * share:.1f}% ({pairs:.1f} pairs)")
        print(f"| {label} | {what} | {row[0]} | {row[1]} |")


if __name__ == "__main__":
    main()
    first_looks()
