"""The profiles' timing settings, as plain numbers: light to import.

The plugin's help states them without importing the timing code (and torch), and
:data:`gpugauge.runtime.options.PROFILE_POLICIES` is made from them: one source.

Per profile: how hard to try for a tight median, in the sustained regime. The seeds
warmed up 5 rounds and averaged 10: every profile warms up 5, and seed/full take at
least 10 rounds. seed/full then warm up for 1-2 s of back-to-back batches until two batch
medians agree within 2% (an H200 at its power cap leaves its 1980 MHz boost within
0.2 s), and time at least 1-2 s of rounds, so that the median spans the clock's wander.
Seconds are s; ``target_ci`` is the relative half-width of the median's 95% CI.
"""

from __future__ import annotations

PROFILE_SETTINGS: dict[str, dict[str, float]] = {
    "smoke": {
        "warmup_rounds": 5,
        "warmup_s": 0.0,
        "min_rounds": 5,
        "min_time_s": 0.0,
        "target_ci": 0.05,
        "budget_s": 2.0,
    },
    "seed": {
        "warmup_rounds": 5,
        "warmup_s": 1.0,
        "settle": 0.02,
        "max_warmup_s": 5.0,
        "min_rounds": 10,
        "min_time_s": 1.0,
        "target_ci": 0.01,
        "budget_s": 10.0,
    },
    "full": {
        "warmup_rounds": 5,
        "warmup_s": 2.0,
        "settle": 0.01,
        "max_warmup_s": 8.0,
        "min_rounds": 20,
        "min_time_s": 2.0,
        "target_ci": 0.005,
        "budget_s": 30.0,
    },
}
PROFILES = tuple(PROFILE_SETTINGS)


def by_profile(field: str) -> str:
    """'profile default: smoke 0.05, seed 0.01, full 0.005': a setting, for a help text."""
    said = ", ".join(f"{k} {v[field]:g}" for k, v in PROFILE_SETTINGS.items())
    return f"profile default: {said}"
