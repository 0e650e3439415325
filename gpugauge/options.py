"""Command-line options of the suite, validated once and resolved into :class:`Options`.

Argument types reject bad values at parse time with argparse's message, which names the
option: every number must be finite and within its range (a budget of ``inf`` or 1e308 s
overflows the clock arithmetic; ``--min-rounds 99999999999`` never ends), and a path must
not be empty (``""`` would mean the current folder). The cross-option checks in
:func:`resolve` raise ``ValueError`` naming the option, which the plugin turns into a usage
error before anything is measured; so do the destinations the run will write to
(:func:`check_destinations`), checked up front rather than after the measuring.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from gpugauge.measure.energy import MIN_WINDOW_S
from gpugauge.measure.timing import TimingPolicy
from gpugauge.plain import to_plain
from gpugauge.results.files import writable_problem

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


# Upper bounds of the numeric options. A result keeps every round, so a million rounds is
# already tens of megabytes of JSON; a day of timing or warm-up per benchmark, or a week of
# a whole run, is past any job's limit, and far below where the clock arithmetic overflows.
MAX_ROUNDS = 1_000_000
MAX_BENCH_S = 86_400.0
MAX_RUN_S = 7 * 86_400.0


def _number(
    kind: type, low: float, what: str, inclusive: bool = True, high: float = math.inf
) -> Callable[[str], Any]:
    """An argparse type: a finite ``kind`` from ``low`` (or above it) to ``high``."""

    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except (ValueError, OverflowError):
            raise argparse.ArgumentTypeError(f"{text!r} is not {what}") from None
        if (
            not math.isfinite(value)
            or value < low
            or (not inclusive and value == low)
            or value > high
        ):
            raise argparse.ArgumentTypeError(f"{text!r} is not {what}")
        return value

    parse.__name__ = what
    return parse


positive_int = _number(int, 1, f"a whole number >= 1 (at most {MAX_ROUNDS})", high=MAX_ROUNDS)
count = _number(int, 0, f"a whole number >= 0 (at most {MAX_ROUNDS})", high=MAX_ROUNDS)
seconds = _number(float, 0, f"a number of seconds >= 0 (at most {MAX_BENCH_S:g})", high=MAX_BENCH_S)
positive_seconds = _number(
    float, 0, f"a number of seconds > 0 (at most {MAX_BENCH_S:g})", False, MAX_BENCH_S
)
run_seconds = _number(
    float, 0, f"a number of seconds > 0 (at most {MAX_RUN_S:g})", False, MAX_RUN_S
)
fraction = _number(float, 0, "a fraction > 0 and < 1 (0.01 means ±1%)", inclusive=False, high=1)


def path_option(text: str) -> Path:
    """An argparse type: a path that is not empty (an empty one would mean the current folder)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("an empty path (it would mean the current folder)")
    return Path(text)


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
        type=run_seconds,
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
        type=path_option,
        default=None,
        help="baselines folder (default: <rootdir>/baselines)",
    )
    group.addoption(
        "--tolerances-dir",
        type=path_option,
        default=None,
        help="tolerance TOML folder (default: <rootdir>/tolerances)",
    )
    group.addoption(
        "--artifacts-dir",
        type=path_option,
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
    if device in ("cuda", "all") and not cuda_available:
        raise ValueError(
            f"--device {device}: no CUDA device is visible (torch.cuda.is_available() "
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
    if "warmup_s" in merged:  # a longer warm-up keeps the profile's time to settle after it
        slack = base.max_warmup_s - base.warmup_s
        merged.setdefault("max_warmup_s", max(base.max_warmup_s, merged["warmup_s"] + slack))
    if merged.get("target_ci", 0.5) >= 1:
        raise ValueError("--target-ci must be below 1 (0.01 means ±1%)")
    try:
        policy = replace(base, **merged)
    except ValueError as err:
        raise ValueError(_policy_problem(str(err), merged)) from None
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


# TimingPolicy fields and the options that set them, to name an option in its errors.
POLICY_OPTIONS = {
    "rounds": "--rounds",
    "min_rounds": "--min-rounds",
    "max_rounds": "--min-rounds",
    "warmup_rounds": "--warmup",
    "warmup_s": "--warmup-time",
    "max_warmup_s": "--warmup-time",
    "target_ci": "--target-ci",
    "budget_s": "--time-budget",
    "min_time_s": "--min-time",
}


def _policy_problem(message: str, merged: dict[str, Any]) -> str:
    """TimingPolicy's complaint about its fields, said with the options that set them."""
    named = [f"{o} {merged[f]}" for f, o in POLICY_OPTIONS.items() if f in merged and f in message]
    given = ", ".join(dict.fromkeys(named)) or "the profile's timing policy"
    return f"{given}: not a valid timing policy with the profile's other settings ({message})"


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


def check_destinations(options: Options, get: Callable[[str], Any]) -> None:
    """Folders the run will write to must be writable now, not after it has measured.

    ``--artifacts-dir`` when given (a folder under a file fails here, not inside a test);
    the baselines folder with ``--update-baselines`` (a read-only one would fail only once
    every benchmark had run). ValueError naming the option.
    """
    targets = []
    if get("artifacts_dir") is not None:
        targets.append(("--artifacts-dir", options.artifacts_dir))
    if options.update_baselines:
        option = "--update-baselines into --baselines-dir"
        targets.append((option, options.baselines_dir))
        if options.baselines_dir.is_dir():  # each device class's folder is written too
            targets += [(option, p) for p in sorted(options.baselines_dir.iterdir()) if p.is_dir()]
    for option, folder in targets:
        problem = writable_problem(folder)
        if problem:
            raise ValueError(f"{option} {folder}: {problem}")
