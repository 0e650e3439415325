# Run: python docs/lab/block_replay.py (about 10 s); the table in docs/lab/ab-evidence.md.
"""Shorter blocks replayed on recorded H200 blocks: what an A/B would have said, and cost.

docs/lab/data/ab-blocks.json keeps every block of three H200 A/Bs (runs 124, 126 and 127 in
gpu-runs.md), from the sides' saved runs: the median of its first rounds (all of them, 3/4,
1/2 and 1/3, at least 3) and its timed seconds. A block cut to its first rounds is what a
shorter block would have timed after the same warm-up. What the replay cannot show: a
shorter block also heats the GPU less before the next one.

Each round is then cut where the recorded A/Bs' stopping rule (a first look of 4 pairs)
would have stopped, and the case judged over both rounds as the A/B judges it. Where the
rule asks for more pairs than were timed, the round keeps what it has ("short": the
verdict is then a guess, and the seconds a lower bound). The seconds are the kept blocks'
timed seconds, each scaled by its rounds kept.
"""

import json
import math
import sys
from collections import Counter
from pathlib import Path

from gpugauge.ab.pairs import Block, Pair

sys.path.insert(0, str(Path(__file__).parent))  # also when loaded from its file by a test
import rule_replay

DATA = Path(__file__).with_name("data") / "ab-blocks.json"


def shortened(block: list, k: int, fraction: float, least: int) -> Block:
    """The block cut to its first rounds (fraction ``k``'s median), its seconds scaled."""
    rounds, timed_s, medians = block
    kept = min(rounds, max(least, math.ceil(fraction * rounds)))
    return Block(medians[k], kept, wall_s=timed_s * kept / rounds)


def replay(cases: dict, k: int, fraction: float, least: int) -> tuple[dict, float, int]:
    """Each case's outcome at fraction ``k``, the kept blocks' timed seconds, rounds short."""

    def pairs_of(recorded_round: list) -> list[Pair]:
        return [
            Pair(shortened(b, k, fraction, least), shortened(h, k, fraction, least), True)
            for b, h in recorded_round
        ]

    got, seconds, short = rule_replay.replay(cases, rule_replay.RECORDED, pairs_of)
    return {c: str(o) for c, o in got.items()}, seconds, short


def main() -> None:
    data = json.loads(DATA.read_text())
    fractions, least = data["fractions"], data["least_rounds"]
    print("| run | block | timed s | verdicts | changed | short |")
    print("| --- | --- | --- | --- | --- | --- |")
    for run, rec in data["runs"].items():
        whole, _, _ = replay(rec["cases"], 0, 1.0, least)
        said = {c: r["outcome"] for c, r in rec["cases"].items()}
        # whole blocks under their own rule must give what the A/B said, or the replay is wrong
        assert whole == said, {c: (said[c], v) for c, v in whole.items() if v != said[c]}
        for k, fraction in enumerate(fractions):
            got, seconds, short = replay(rec["cases"], k, fraction, least)
            counts = ", ".join(f"{n} {o}" for o, n in Counter(got.values()).most_common())
            changed = [f"{c}: {whole[c]} -> {v}" for c, v in got.items() if v != whole[c]]
            label = f"{fraction:.2f} of 0.15 s"
            print(f"| {run} | {label} | {seconds:.0f} | {counts} | {len(changed)} | {short} |")
            for line in changed:
                print(f"|  |  |  |  | {line} |  |")


if __name__ == "__main__":
    main()
