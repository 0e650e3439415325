# Run: python docs/lab/first_pair.py results/ab/ab.json [more ab.json ...]
"""Whether a test's first pair of blocks is biased by its warm-ups, from an A/B's ab.json.

Within a pair, the block that goes second follows the first on a warm GPU. In a test's
first pair, the first block warmed up from 0.3 s (the GPU idle during both setups), and
the second only until its own short batches agreed. If either warm-up were too short, the
first pair's ln(second / first) would sit apart from the later pairs' in an A/A. Later
pairs alternate, so their mean of ln(second / first) is the order's own effect.

Prints, per file: the pairs' ln(second / first) in % (mean, SE, count) for first pairs
and later ones, and the median warm-up of each kind of block (s).
"""

import json
import math
import statistics
import sys
from pathlib import Path


def rounds(case: dict) -> list[dict]:
    """A case's rounds as ab.json nests them: round 1, then its ``rounds``."""
    return [case, *case.get("rounds", [])]


def second_over_first(pair: dict) -> float:
    """ln(second block's median / first's), in %."""
    d = pair["log_ratio"] if pair["base_first"] else -pair["log_ratio"]
    return 100 * d


def describe(xs: list[float]) -> str:
    if len(xs) < 2:
        return f"n={len(xs)}"
    se = statistics.stdev(xs) / math.sqrt(len(xs))
    return f"{statistics.fmean(xs):+.3f}% ± {se:.3f} (n={len(xs)})"


def main(paths: list[str]) -> None:
    for path in paths:
        data = json.loads(Path(path).read_text())
        first, later = [], []
        warm = {"first side, first block": [], "second side, first block": [], "later": []}
        for case in data["cases"]:
            for one in rounds(case):
                pairs = one.get("pairs") or []
                if len(pairs) < 2:
                    continue
                first.append(second_over_first(pairs[0]))
                later += [second_over_first(p) for p in pairs[1:]]
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
        print(f"  first pairs, ln(second/first): {describe(first)}")
        print(f"  later pairs, ln(second/first): {describe(later)}")
        for label, xs in warm.items():
            if xs:
                mid = statistics.median(xs)
                print(f"  warm-up, {label}: median {mid:.3f} s, sum {sum(xs):.1f} s (n={len(xs)})")


if __name__ == "__main__":
    main(sys.argv[1:])
