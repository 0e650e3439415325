"""The suite's options resolved into :class:`Options`, once gpugauge is used in a run.

The options are declared in :mod:`gpugauge.runtime.flags` (light: the plugin declares them in
every pytest run). The cross-option checks in :func:`resolve` raise ``ValueError`` naming
the option, which the plugin turns into a usage error before anything is measured; so do
the destinations the run will write to (:func:`check_destinations`), checked up front
rather than after the measuring.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from gpugauge.core.json_records import to_plain
from gpugauge.core.profiles import PROFILE_SETTINGS
from gpugauge.measure.timing import TimingPolicy
from gpugauge.results.files import writable_problem

# the profiles' settings, made policies (gpugauge.core.profiles says why these numbers)
PROFILE_POLICIES: dict[str, TimingPolicy] = {
    name: TimingPolicy(**settings) for name, settings in PROFILE_SETTINGS.items()
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
    confirm_new_host: bool = False  # a new host's time regression left to `gpugauge confirm`
    record_kernels: bool = False
    skip_extras: bool = False  # a family skips the work beside the timed result
    skip_diagnostics: bool = False  # ... only the work that explains a result, unjudged
    launch_each: bool = False  # a family launches each test's case in its own test
    first_nights: int = 0  # --gauge-first-nights N; 0: off (gpugauge.judging.first_nights)
    baselines_dir: Path = Path("baselines")
    tolerances_dir: Path = Path("tolerances")
    artifacts_dir: Path = Path("artifacts")
    setup_memo: Path | None = None  # --gauge-setup-memo (gpugauge.runtime.setup_memo)

    @property
    def diagnostics(self) -> bool:
        """Whether a case does the work that explains its result but is not judged.

        Profiler tables and traces, a GPU case's CPU reference: off under
        ``--gauge-skip-diagnostics`` (the nightly's) and ``--gauge-skip-extras`` (an A/B's).
        """
        return not (self.skip_extras or self.skip_diagnostics)

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
            "confirm_new_host": self.confirm_new_host,
            "record_kernels": self.record_kernels,
            "skip_extras": self.skip_extras,
            "skip_diagnostics": self.skip_diagnostics,
            "launch_each": self.launch_each,
            "first_nights": self.first_nights,
            "baselines_dir": str(self.baselines_dir),
            "tolerances_dir": str(self.tolerances_dir),
            "artifacts_dir": str(self.artifacts_dir),
            "setup_memo": None if self.setup_memo is None else str(self.setup_memo),
        }


def resolve(get: Callable[[str], Any], cuda_available: bool, root: Path = Path(".")) -> Options:
    """Resolve raw option values (``get(name)``) into :class:`Options`; ValueError if invalid."""
    profile = get("profile") or ("seed" if cuda_available else "smoke")
    device = get("device")
    if device in ("cuda", "all") and not cuda_available:
        raise ValueError(
            f"--gauge-device {device}: no CUDA device is visible (torch.cuda.is_available() "
            "is False); use --gauge-device auto or cpu"
        )
    devices = {
        "auto": ("cuda",) if cuda_available else ("cpu",),
        "cpu": ("cpu",),
        "cuda": ("cuda",),
        "all": ("cpu", "cuda"),
    }[device]
    window = get("energy_window")  # 0, or at least MIN_WINDOW_S: flags.energy_window
    overrides = {
        "rounds": get("rounds"),
        "min_rounds": get("min_rounds"),
        "warmup_rounds": get("warmup"),
        "warmup_s": get("warmup_time"),
        "target_ci": get("target_ci"),
        "budget_s": get("max_time"),
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
    _check_stopping(merged)
    try:
        policy = replace(base, **merged)
    except ValueError as err:
        raise ValueError(_policy_problem(str(err), merged)) from None
    if policy.rounds is None and policy.min_time_s > policy.budget_s:

        def given(option: str, key: str, value: float) -> str:
            said = f"--gauge-{option} {value:g}"
            return said if key in merged else f"the {profile} profile's {said}"

        raise ValueError(
            f"{given('max-time', 'budget_s', policy.budget_s)} ends a case's rounds before its "
            f"least time ({given('min-time', 'min_time_s', policy.min_time_s)}): every result "
            "would stop short and read noisy; give a max time of at least the min time"
        )
    _check_gate_options(get)
    _check_folders(get)
    if "cuda" in devices:
        _check_regime(get, profile, policy)
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
        confirm_new_host=bool(get("confirm_new_host")),
        record_kernels=bool(get("record_kernels")),
        skip_extras=bool(get("skip_extras")),
        skip_diagnostics=bool(get("skip_diagnostics")),
        launch_each=bool(get("launch_each")),
        first_nights=get("first_nights") or 0,
        baselines_dir=get("baselines_dir") or root / "baselines",
        tolerances_dir=get("tolerances_dir") or root / "tolerances",
        artifacts_dir=get("artifacts_dir") or root / "artifacts",
        # a Path from the command line, a str from gpugauge ab's side settings
        setup_memo=None if get("setup_memo") is None else Path(get("setup_memo")),
    )


# TimingPolicy fields and the options that set them, to name an option in its errors.
POLICY_OPTIONS = {
    "rounds": "--gauge-rounds",
    "min_rounds": "--gauge-min-rounds",
    "max_rounds": "--gauge-min-rounds",
    "warmup_rounds": "--gauge-warmup",
    "warmup_s": "--gauge-warmup-time",
    "max_warmup_s": "--gauge-warmup-time",
    "target_ci": "--gauge-target-ci",
    "budget_s": "--gauge-max-time",
    "min_time_s": "--gauge-min-time",
}


# the options by which an adaptive run decides when its rounds stop; a fixed count ignores them
ADAPTIVE_FIELDS = ("min_rounds", "target_ci", "budget_s", "min_time_s")


def _check_stopping(merged: dict[str, Any]) -> None:
    """``--gauge-rounds N`` times N rounds: an option of the adaptive stop beside it is void."""
    if "rounds" not in merged:
        return
    void = [POLICY_OPTIONS[f] for f in ADAPTIVE_FIELDS if f in merged]
    if void:
        raise ValueError(
            f"--gauge-rounds {merged['rounds']} times exactly that many rounds, so "
            f"{', '.join(void)} would have no effect: drop one or the other"
        )


def _policy_problem(message: str, merged: dict[str, Any]) -> str:
    """TimingPolicy's complaint about its fields, said with the options that set them."""
    named = [f"{o} {merged[f]}" for f, o in POLICY_OPTIONS.items() if f in merged and f in message]
    given = ", ".join(dict.fromkeys(named)) or "the profile's timing policy"
    return f"{given}: not a valid timing policy with the profile's other settings ({message})"


def _check_regime(get: Callable[[str], Any], profile: str, policy: TimingPolicy) -> None:
    """A GPU run that makes or meets references must time in their regime: sustained.

    Baselines and the history's references are timed after a warm-up until the clock
    settles (seed, full). A smoke run times whatever clock the GPU is at, and a burst run
    its boost after an idle: both read faster than the sustained clock of a GPU at its
    power limit, so against those references they would hide a slowdown, and as references
    they would flag every later night.
    """
    uses = [o for o, name in REFERENCE_OPTIONS.items() if get(name)]
    if not uses:
        return
    if policy.regime != "sustained":
        why = f"--gauge-regime {policy.regime} times the boost clock after an idle"
    elif policy.settle == 0:
        why = f"--gauge-profile {profile} times without waiting for the clock to settle"
    elif policy.warmup_s <= 0:
        why = "--gauge-warmup-time 0 times without waiting for the clock to settle"
    else:
        return
    raise ValueError(
        f"{' and '.join(uses)} on a GPU: the references are timed in the sustained regime "
        f"(a warm-up until the clock settles), and {why}; use --gauge-profile seed or full"
    )


# the options whose run is judged against references or becomes one
REFERENCE_OPTIONS = {"--gauge-gate": "gate", "--gauge-update-baselines": "update_baselines"}


def _folder_error(option: str, path: Path | str, must_exist: bool) -> str | None:
    path = Path(path)  # a str where gpugauge ab's side settings gave it
    if path.exists() and not path.is_dir():
        return f"{option} {path}: not a directory"
    if must_exist and not path.exists():
        return f"{option} {path}: no such directory"
    return None


def _check_gate_options(get: Callable[[str], Any]) -> None:
    """Options that mean something only beside another, or not beside a third: refused.

    Each would otherwise be taken and do nothing (an option of the gate without
    ``--gauge-gate``), or undo what the other asked (the history turned off under an option
    that reads it).
    """
    if get("require_baselines") and not get("gate"):
        raise ValueError("--gauge-require-baselines applies to --gauge-gate; add --gauge-gate")
    if get("confirm_new_host") and not get("gate"):
        raise ValueError("--gauge-confirm-new-host applies to --gauge-gate; add --gauge-gate")
    if get("confirm_new_host") and get("no_history"):
        raise ValueError(
            "--gauge-confirm-new-host asks the results history whether it knows this host; "
            "--gauge-no-history turns the history off: drop one of them"
        )
    if get("no_remeasure") and not get("gate"):
        raise ValueError("--gauge-no-remeasure applies to --gauge-gate; add --gauge-gate")
    if get("confirm_new_host") and get("update_baselines"):
        raise ValueError(
            "--gauge-confirm-new-host lets a regressed result pass its test: it cannot write "
            "baselines (--gauge-update-baselines)"
        )
    nights = get("first_nights")
    if nights and not get("gate"):
        raise ValueError(f"--gauge-first-nights {nights} applies to --gauge-gate; add --gauge-gate")
    if nights and get("no_history"):
        raise ValueError(
            f"--gauge-first-nights {nights} records a class's first runs in the results history "
            "and counts them there; --gauge-no-history turns the history off: drop one of them"
        )


def _check_folders(get: Callable[[str], Any]) -> None:
    """Folders named on the command line must be usable: a typo must not turn the gate off.

    With ``--gauge-gate`` a given ``--gauge-baselines-dir`` must exist (else every result would be
    'new'); a given ``--gauge-tolerances-dir`` must exist (else built-in tolerances would apply
    unseen). ``--gauge-update-baselines`` may create the baselines folder; no folder may be a file.
    """
    checks = [
        ("--gauge-baselines-dir", get("baselines_dir"), bool(get("gate"))),
        ("--gauge-tolerances-dir", get("tolerances_dir"), True),
        ("--gauge-artifacts-dir", get("artifacts_dir"), False),
        ("--gauge-setup-memo", get("setup_memo"), False),
    ]
    for option, path, must_exist in checks:
        problem = None if path is None else _folder_error(option, path, must_exist)
        if problem:
            raise ValueError(problem)


def check_destinations(options: Options, get: Callable[[str], Any]) -> None:
    """Folders the run will write to must be writable now, not after it has measured.

    ``--gauge-artifacts-dir`` and ``--gauge-setup-memo`` when given (a folder under a file
    fails here, not inside a test);
    the baselines folder with ``--gauge-update-baselines`` (a read-only one would fail only once
    every benchmark had run). ValueError naming the option.
    """
    targets = []
    if get("artifacts_dir") is not None:
        targets.append(("--gauge-artifacts-dir", options.artifacts_dir))
    if options.setup_memo is not None:
        targets.append(("--gauge-setup-memo", options.setup_memo))
    if options.update_baselines:
        option = "--gauge-update-baselines into --gauge-baselines-dir"
        targets.append((option, options.baselines_dir))
        if options.baselines_dir.is_dir():  # each device class's folder is written too
            targets += [(option, p) for p in sorted(options.baselines_dir.iterdir()) if p.is_dir()]
    for option, folder in targets:
        problem = writable_problem(folder)
        if problem:
            raise ValueError(f"{option} {folder}: {problem}")


# declared in gpugauge.runtime.flags; kept importable from here for the code that reads them so
__all__ = ["Options", "check_destinations", "resolve"]
