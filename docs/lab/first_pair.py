# Run: python docs/lab/first_pair.py results/ab/ab.json [more ab.json ...]
"""Whether a test's first pair of blocks is biased by its warm-ups, from an A/B's ab.json.

Within a pair, the block that goes second follows the first on a warm GPU. In a test's
first pair, the first block warmed up from 0.3 s (the GPU idle during both setups), and
the second only until its own short batches agreed. If either warm-up were too short, the
second block of the first pair would read slow or fast against the round's later pairs.

For each round of each case: its first pair's ln(head / base) less the mean of its later
pairs', signed so that + means the block that went second read slower. A change of head
(an injected slowdown) is in every pair alike and drops out. Printed per file in %: mean,
SE and count; and the median warm-up of each kind of block (s).
"""

import json
import math
import statistics
import sys
from pathlib import Path


def rounds(case: dict) -> list[dict]:
    """A case's rounds as ab.json nests them: round 1, then its ``rounds``."""
    return [case, *case.get("rounds", [])]


def first_pair_bias(pairs: list[dict]) -> float:
    """The first pair's ln(head / base) less the later pairs' mean, in %.

    Signed + where the block that went second in the first pair read slower.
    """
    later = statistics.fmean(p["log_ratio"] for p in pairs[1:])
    sign = 1 if pairs[0]["base_first"] else -1  # head went second
    return 100 * sign * (pairs[0]["log_ratio"] - later)


def describe(xs: list[float]) -> str:
    if len(xs) < 2:
        return f"n={len(xs)}"
    se = statistics.stdev(xs) / math.sqrt(len(xs))
    return f"{statistics.fmean(xs):+.3f}% ± {se:.3f} (n={len(xs)})"


def main(paths: list[str]) -> None:
    for path in paths:
        data = json.loads(Path(path).read_text())
        bias = []
        warm = {"first side, first block": [], "second side, first block": [], "later": []}
        for case in data["cases"]:
            for one in rounds(case):
                pairs = one.get("pairs") or []
                if len(pairs) < 2:
                    continue
                bias.append(first_pair_bias(pairs))
                p0 = pairs[0]
                lead, follow = (
                    (p0["base"], p0["head"]) if p0["base_first"] else (p0["head"], p0["base"])
                )
                for label, block in (
                    ("first side, first block", lead),
                    ("second side, first block", follow),
                ):
                    if block.get("warmup_s") is not None:
                        warm[label].append(block["warmup_s"])
                warm["later"] += [
                    b["warmup_s"]
                    for p in pairs[1:]
                    for b in (p["base"], p["head"])
                    if b.get("warmup_s") is not None
                ]
        print(path)
        print(f"  first pair against the later ones, + second slower: {describe(bias)}")
        for label, xs in warm.items():
            if xs:
                mid = statistics.median(xs)
                print(f"  warm-up, {label}: median {mid:.3f} s, sum {sum(xs):.1f} s (n={len(xs)})")


if __name__ == "__main__":
    main(sys.argv[1:])
