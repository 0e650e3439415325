"""Command-line options of the suite, validated once and resolved into :class:`Options`.

Argument types reject bad values at parse time with argparse's message; the cross-option
checks in :func:`resolve` raise ``ValueError``, which the plugin turns into a usage error.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from gpugauge.measure.energy import MIN_WINDOW_S
from gpugauge.measure.timing import TimingPolicy
from gpugauge.plain import to_plain

PROFILES = ("smoke", "seed", "full")
DEVICE_CHOICES = ("auto", "cpu", "cuda", "all")

# Per profile: how hard to try for a tight median, in the sustained regime. The seeds
# warmed up 5 rounds and averaged 10: every profile warms up 5, and seed/full take at
# least 10 rounds. seed/full then warm up for 1-2 s of back-to-back batches until two batch
# medians agree within 2% (an H200 at its power cap leaves its 1980 MHz boost within
# 0.2 s), and time at least 1-2 s of rounds, so that the median spans the clock's wander.
PROFILE_POLICIES: dict[str, TimingPolicy] = {
    "smoke": TimingPolicy(warmup_rounds=5, min_rounds=5, target_ci=0.05, budget_s=2.0),
    "seed": TimingPolicy(
        warmup_rounds=5,
        warmup_s=1.0,
        settle=0.02,
        max_warmup_s=5.0,
        min_rounds=10,
        min_time_s=1.0,
        target_ci=0.01,
        budget_s=10.0,
    ),
    "full": TimingPolicy(
        warmup_rounds=5,
        warmup_s=2.0,
        settle=0.01,
        max_warmup_s=8.0,
        min_rounds=20,
        min_time_s=2.0,
        target_ci=0.005,
        budget_s=30.0,
    ),
}

# The burst regime: the GPU idles until its clock recovers, then a short run at boost.
# 2 s of idle brought an H200's 1980 MHz back; the boost then lasts 30-60 ms of heavy work.
BURST = {
    "regime": "burst",
    "idle_s": 2.0,
    "warmup_rounds": 2,
    "warmup_s": 0.0,
    "settle": 0.0,
    "min_time_s": 0.0,
    "min_rounds": 10,
    "budget_s": 0.1,
}
REGIMES = ("sustained", "burst")


def _number(kind: type, low: float, what: str, inclusive: bool = True) -> Callable[[str], Any]:
    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {what}") from None
        if value < low or (not inclusive and value == low):
            raise argparse.ArgumentTypeError(f"{text!r} is not {what}")
        return value

    parse.__name__ = what
    return parse


positive_int = _number(int, 1, "a whole number >= 1")
count = _number(int, 0, "a whole number >= 0")
seconds = _number(float, 0, "a number of seconds >= 0")
positive_seconds = _number(float, 0, "a number of seconds > 0", inclusive=False)
fraction = _number(float, 0, "a fraction > 0 (0.01 means ±1%)", inclusive=False)


def add_options(group: Any) -> None:
    """Declare the options on a pytest option group."""
    group.addoption(
        "--profile",
        choices=PROFILES,
        default=None,
        help="smoke: small shapes (default without a GPU); seed: the seeds' exact "
        "shapes (default with a GPU); full: sweeps",
    )
    group.addoption(
        "--device",
        choices=DEVICE_CHOICES,
        default="auto",
        help="where benchmarks run; auto: cuda if visible, else cpu; all: both",
    )
    group.addoption(
        "--rounds",
        type=positive_int,
        default=None,
        help="fixed timed rounds (the seeds used 10); default: adaptive",
    )
    group.addoption(
        "--min-rounds",
        type=positive_int,
        default=None,
        help="fewest timed rounds in adaptive mode (profile default)",
    )
    group.addoption(
        "--warmup", type=count, default=None, help="warm-up rounds before timing (default 5)"
    )
    group.addoption(
        "--warmup-time",
        type=seconds,
        default=None,
        help="also warm up for at least this many seconds (profile default)",
    )
    group.addoption(
        "--regime",
        choices=REGIMES,
        default="sustained",
        help="sustained (default): warm up until the clock settles, then time >= --min-time "
        "of rounds; burst: idle 2 s first, then a short run at boost clocks (no energy)",
    )
    group.addoption(
        "--min-time",
        type=seconds,
        default=None,
        help="adaptive stop: at least this many seconds of measured rounds (profile default)",
    )
    group.addoption(
        "--target-ci",
        type=fraction,
        default=None,
        help="adaptive stop: relative half-width of the 95%% CI of the median",
    )
    group.addoption(
        "--time-budget",
        type=positive_seconds,
        default=None,
        help="adaptive stop: seconds of timed rounds per benchmark at most",
    )
    group.addoption(
        "--flush-l2",
        action="store_true",
        default=False,
        help="flush the GPU's L2 cache before every timed round (outside the timing)",
    )
    group.addoption(
        "--energy-window",
        type=seconds,
        default=5.0,
        help="seconds of repeated runs per energy reading (>= 1; 0 turns energy off)",
    )
    group.addoption(
        "--idle-time",
        type=seconds,
        default=1.0,
        help="idle seconds before each energy window, for the idle power",
    )
    group.addoption(
        "--stop-after",
        type=positive_seconds,
        default=None,
        help="start no new test once this many seconds have passed; the run ends as "
        "usual, its results saved (for jobs with a time limit)",
    )
    group.addoption(
        "--gate",
        action="store_true",
        default=False,
        help="compare every result with the stored baseline of this device class; "
        "a regression fails its test",
    )
    group.addoption(
        "--update-baselines",
        action="store_true",
        default=False,
        help="after a run in which every test passed, store its results as the "
        "baselines of this device class",
    )
    group.addoption(
        "--record-kernels",
        action="store_true",
        default=False,
        help="after each GPU result is measured, run one more round under torch.profiler "
        "and keep its longest kernels (name, calls, µs, share of the round) in "
        "extra_info['kernels'] and in baselines, so that the gate can say when a case ran "
        "another cuDNN or cuBLAS algorithm; the nightly job and the baseline recipe use it "
        "(off by default: one more, profiled round per GPU result)",
    )
    group.addoption(
        "--require-baselines",
        action="store_true",
        default=False,
        help="with --gate: a result with no baseline of its device class fails its test "
        "(for nightly jobs, so that a missing baseline cannot pass as 'new')",
    )
    group.addoption(
        "--baselines-dir",
        type=Path,
        default=None,
        help="baselines folder (default: <rootdir>/baselines)",
    )
    group.addoption(
        "--tolerances-dir",
        type=Path,
        default=None,
        help="tolerance TOML folder (default: <rootdir>/tolerances)",
    )
    group.addoption(
        "--artifacts-dir",
        type=Path,
        default=None,
        help="where results' files (traces, tables) go, one folder per run "
        "(default: <rootdir>/artifacts)",
    )


@dataclass(frozen=True)
class Options:
    """The resolved configuration of one pytest run."""

    profile: str
    devices: tuple[str, ...]
    policy: TimingPolicy
    energy_window_s: float
    idle_s: float
    cuda_available: bool
    gate: bool = False
    update_baselines: bool = False
    require_baselines: bool = False
    record_kernels: bool = False
    baselines_dir: Path = Path("baselines")
    tolerances_dir: Path = Path("tolerances")
    artifacts_dir: Path = Path("artifacts")

    def as_dict(self) -> dict[str, Any]:
        """Plain dict for JSON."""
        return {
            "profile": self.profile,
            "devices": list(self.devices),
            "policy": to_plain(self.policy),
            "energy_window_s": self.energy_window_s,
            "idle_s": self.idle_s,
            "cuda_available": self.cuda_available,
            "gate": self.gate,
            "update_baselines": self.update_baselines,
            "require_baselines": self.require_baselines,
            "record_kernels": self.record_kernels,
            "baselines_dir": str(self.baselines_dir),
            "tolerances_dir": str(self.tolerances_dir),
            "artifacts_dir": str(self.artifacts_dir),
        }


def resolve(get: Callable[[str], Any], cuda_available: bool, root: Path = Path(".")) -> Options:
    """Resolve raw option values (``get(name)``) into :class:`Options`; ValueError if invalid."""
    profile = get("profile") or ("seed" if cuda_available else "smoke")
    device = get("device")
    if device == "cuda" and not cuda_available:
        raise ValueError(
            "--device cuda: no CUDA device is visible (torch.cuda.is_available() "
            "is False); use --device auto or cpu"
        )
    devices = {
        "auto": ("cuda",) if cuda_available else ("cpu",),
        "cpu": ("cpu",),
        "cuda": ("cuda",),
        "all": ("cpu", "cuda"),
    }[device]
    window = get("energy_window")
    if 0 < window < MIN_WINDOW_S:
        raise ValueError(
            f"--energy-window {window}: NVML's energy counter and power readings "
            f"update every 20-100 ms; use at least {MIN_WINDOW_S:g} s, or 0 for off"
        )
    overrides = {
        "rounds": get("rounds"),
        "min_rounds": get("min_rounds"),
        "warmup_rounds": get("warmup"),
        "warmup_s": get("warmup_time"),
        "target_ci": get("target_ci"),
        "budget_s": get("time_budget"),
        "min_time_s": get("min_time"),
        "flush_l2": get("flush_l2") or None,
    }
    base = PROFILE_POLICIES[profile]
    if get("regime") == "burst":
        base = replace(base, **BURST)
    merged = {k: v for k, v in overrides.items() if v is not None}
    if "min_rounds" in merged:
        merged.setdefault("max_rounds", max(base.max_rounds, merged["min_rounds"]))
    if merged.get("target_ci", 0.5) >= 1:
        raise ValueError("--target-ci must be below 1 (0.01 means ±1%)")
    policy = replace(base, **merged)
    _check_folders(get)
    return Options(
        profile,
        devices,
        policy,
        window,
        get("idle_time"),
        cuda_available,
        gate=get("gate"),
        update_baselines=get("update_baselines"),
        require_baselines=get("require_baselines"),
        record_kernels=bool(get("record_kernels")),
        baselines_dir=get("baselines_dir") or root / "baselines",
        tolerances_dir=get("tolerances_dir") or root / "tolerances",
        artifacts_dir=get("artifacts_dir") or root / "artifacts",
    )


def _folder_error(option: str, path: Path, must_exist: bool) -> str | None:
    if path.exists() and not path.is_dir():
        return f"{option} {path}: not a directory"
    if must_exist and not path.exists():
        return f"{option} {path}: no such directory"
    return None


def _check_folders(get: Callable[[str], Any]) -> None:
    """Folders named on the command line must be usable: a typo must not turn the gate off.

    With ``--gate`` a given ``--baselines-dir`` must exist (else every result would be
    'new'); a given ``--tolerances-dir`` must exist (else built-in tolerances would apply
    unseen). ``--update-baselines`` may create the baselines folder; no folder may be a file.
    """
    if get("require_baselines") and not get("gate"):
        raise ValueError("--require-baselines applies to --gate; add --gate")
    checks = [
        ("--baselines-dir", get("baselines_dir"), bool(get("gate"))),
        ("--tolerances-dir", get("tolerances_dir"), True),
        ("--artifacts-dir", get("artifacts_dir"), False),
    ]
    for option, path, must_exist in checks:
        problem = None if path is None else _folder_error(option, path, must_exist)
        if problem:
            raise ValueError(problem)
