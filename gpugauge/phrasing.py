"""Counted nouns in what gpugauge prints: '1 run', '2 runs', never '1 runs' or 'run(s)'."""

from __future__ import annotations


def plural(count: int, noun: str, many: str = "") -> str:
    """'1 outlier', '3 outliers'; ``many`` where the plural is not ``noun + 's'``."""
    return f"{count} {noun if count == 1 else many or noun + 's'}"
