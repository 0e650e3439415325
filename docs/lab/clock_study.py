# Run: python docs/lab/clock_study.py (about 25 s); the table in docs/lab/ab-evidence.md.
"""Synthetic A/Bs of short linear-like cases: clock wander, two-speed processes.

Rule 'stop': a pair whose clocks are >5% apart is not counted; a 4th such pair stops the round.
Rule 'count': every pair counts. Verdict: the real CaseAB/ABReport over 2 rounds.
"""

import math
import random

from gpugauge.ab.pairs import Block, Pair
from gpugauge.ab.result import ABReport, CaseAB, SideInfo
from gpugauge.ab.verdict import Outcome, Schedule

SIDE = SideInfo("base", "a", "a" * 40, "python3", "/x")


def process(rng, proc, two_speed_share, gap):
    off = rng.gauss(0, proc)
    p_slow = rng.uniform(0.1, 0.6) if rng.random() < two_speed_share else 0.0
    return off, p_slow


def block(rng, base_log, proc_state, slope, wander, noise, gap):
    off, p_slow = proc_state
    clock = math.exp(rng.gauss(0, wander))
    t = base_log + off + slope * math.log(clock) + rng.gauss(0, noise)
    if rng.random() < p_slow:
        t += gap
    return Block(math.exp(t), 10, clock * 1800.0)


def one_round(rng, s, rule, effect, slope, wander, noise, proc, two, gap, cid):
    """One round's case, and whether the 'stop' rule stopped it (a 4th pair set aside)."""
    b_state, h_state = process(rng, proc, two, gap), process(rng, proc, two, gap)
    pairs, again = [], 0
    while more := s.more([p.log_ratio for p in pairs]):
        for _ in range(more):
            bb = block(rng, 0.0, b_state, slope, wander, noise, gap)
            hb = block(rng, math.log1p(effect), h_state, slope, wander, noise, gap)
            if rule == "stop" and abs(hb.sm_clock_mhz / bb.sm_clock_mhz - 1) > 0.05:
                again += 1  # set aside: its clocks are too far apart
                if again > 3:
                    return CaseAB(cid, cid, tuple(pairs), schedule=s), True
                continue
            pairs.append(Pair(bb, hb, len(pairs) % 2 == 0))
    return CaseAB(cid, cid, tuple(pairs), schedule=s), False


def study(rule, effect, n_ab, seed, wander=0.05, noise=0.004, proc=0.003, two=0.3, gap=0.05):
    rng, s, out = random.Random(seed), Schedule(), []
    for _ in range(n_ab):
        cases, stopped = [], set()
        for i in range(20):
            slope = rng.uniform(-0.25, 0.1)
            case = None
            for _ in range(s.rounds):
                one, stop = one_round(
                    rng, s, rule, effect, slope, wander, noise, proc, two, gap, f"c{i}"
                )
                case = one if case is None else case.with_round(one)
                if stop:
                    stopped.add(case.id)
            cases.append(case)
        report = ABReport(SIDE, SIDE, tuple(cases), "cpu", 0.0, s).pooled()
        # a round the stop rule stopped decided nothing: its case needs more samples
        out += [Outcome.NEED_MORE if c.id in stopped else c.outcome for c in report.cases]
    return out


if __name__ == "__main__":
    for two, gap in [(0.0, 0.05), (0.3, 0.05), (0.6, 0.05)]:
        for wander in (0.02, 0.05):
            row = []
            for rule in ("stop", "count"):
                aa = study(rule, 0.0, 25, 1, wander=wander, two=two, gap=gap)
                inj = study(rule, 0.03, 25, 2, wander=wander, two=two, gap=gap)
                fa = sum(o in (Outcome.SLOWER, Outcome.FASTER) for o in aa)
                caught = sum(o is Outcome.SLOWER for o in inj)
                row.append(f"{rule}: A/A false {fa}/{len(aa)}, 3% caught {caught}/{len(inj)}")
            print(
                f"two-speed share {two} gap {gap} wander {wander}: " + " | ".join(row), flush=True
            )
