"""The suite's pytest options as declared: names, argparse types, choices and defaults.

Importing this module imports nothing beyond the standard library and
:mod:`gpugauge.core.arguments` (the argument types), so that the plugin can declare its
options in every pytest run of an environment without loading torch or the harness
(:mod:`gpugauge.runtime.options` resolves the values once gpugauge is used).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from gpugauge.core.arguments import (
    DEVICE_CHOICES,
    HISTORY_ENV_VAR,
    MAX_BENCH_S,
    MIN_WINDOW_S,
    REGIMES,
    count,
    first_nights,
    fraction,
    number,
    path_option,
    positive_int,
    positive_seconds,
    run_seconds,
    seconds,
)
from gpugauge.core.profiles import PROFILES, by_profile

if TYPE_CHECKING:
    import pytest

_WINDOW = (
    f"a number of seconds: 0 (off), or {MIN_WINDOW_S:g} to {MAX_BENCH_S:g} (NVML's energy "
    "counter and power readings update every 20-100 ms)"
)
_window_on = number(float, MIN_WINDOW_S, _WINDOW, high=MAX_BENCH_S)


def energy_window(text: str) -> float:
    """An argparse type: ``--gauge-energy-window``'s seconds, 0 or at least the least window."""
    try:
        off = float(text) == 0
    except ValueError:
        off = False
    return 0.0 if off else _window_on(text)


# Every option is --gauge-*, its dest gauge_*, as pytest-benchmark's are --benchmark-*: a
# project's own --device, --profile or --rounds never clashes with gpugauge's.
DEST_PREFIX = "gauge_"


def add_options(group: Any) -> None:
    """Declare the options on a pytest option group."""
    group.addoption(
        "--gauge-profile",
        choices=PROFILES,
        default=None,
        help="smoke: small shapes (default without a GPU); seed: the seeds' exact "
        "shapes (default with a GPU); full: sweeps",
    )
    group.addoption(
        "--gauge-device",
        choices=DEVICE_CHOICES,
        default="auto",
        help="where benchmarks run; auto: cuda if visible, else cpu; all: both",
    )
    group.addoption(
        "--gauge-rounds",
        type=positive_int,
        default=None,
        help="fixed timed rounds (the seeds used 10); default: adaptive",
    )
    group.addoption(
        "--gauge-min-rounds",
        type=positive_int,
        default=None,
        help="fewest timed rounds in adaptive mode (profile default)",
    )
    group.addoption(
        "--gauge-warmup",
        type=count,
        default=None,
        help="warm-up rounds before timing (default 5; 2 with --gauge-regime burst)",
    )
    group.addoption(
        "--gauge-warmup-time",
        type=seconds,
        default=None,
        help=f"also warm up for at least this many seconds ({by_profile('warmup_s')})",
    )
    group.addoption(
        "--gauge-regime",
        choices=REGIMES,
        default="sustained",
        help="sustained (default): warm up until the clock settles, then time >= --gauge-min-time "
        "of rounds; burst: idle 2 s first, then a short run at boost clocks (no energy)",
    )
    group.addoption(
        "--gauge-min-time",
        type=seconds,
        default=None,
        help="adaptive stop: at least this many seconds of measured rounds "
        f"({by_profile('min_time_s')})",
    )
    group.addoption(
        "--gauge-target-ci",
        type=fraction,
        default=None,
        help="adaptive stop: relative half-width of the 95%% CI of the median, a fraction in "
        f"(0, 1) ({by_profile('target_ci')})",
    )
    group.addoption(
        "--gauge-max-time",
        type=positive_seconds,
        default=None,
        help="adaptive stop: seconds of timed rounds per benchmark at most "
        f"({by_profile('budget_s')})",
    )
    group.addoption(
        "--gauge-flush-l2",
        action="store_true",
        default=False,
        help="flush the GPU's L2 cache before every timed round (outside the timing)",
    )
    group.addoption(
        "--gauge-energy-window",
        type=energy_window,
        default=5.0,
        help=f"seconds of back-to-back timed rounds per energy reading (0 turns energy off, "
        f"else at least {MIN_WINDOW_S:g}; default %(default)s)",
    )
    group.addoption(
        "--gauge-idle-time",
        type=seconds,
        default=1.0,
        help="idle seconds before each energy window, for the idle power (default %(default)s)",
    )
    group.addoption(
        "--gauge-stop-after",
        type=run_seconds,
        default=None,
        help="start no new test once this many seconds have passed since the session began "
        "(asked as each test ends: the first test always runs): the run ends there, "
        "its results and JSON saved, as an interrupted run (exit status 2, kept out of "
        "the history and the baselines), for jobs with a time limit that a kill would lose",
    )
    group.addoption(
        "--gauge-gate",
        action="store_true",
        default=False,
        help="compare every result with the stored baseline of this device class; "
        "a regression fails its test",
    )
    group.addoption(
        "--gauge-update-baselines",
        action="store_true",
        default=False,
        help="after a run in which every test passed, store its results as the "
        "baselines of this device class",
    )
    group.addoption(
        "--gauge-record-kernels",
        action="store_true",
        default=False,
        help="after each GPU result is measured, run one more round under torch.profiler "
        "and keep its longest kernels (name, calls, µs, share of the round) in "
        "extra_info['extra']['kernels'] and in baselines, so that the gate can say when a case ran "
        "another cuDNN or cuBLAS algorithm; the nightly job and the baseline recipe use it "
        "(off by default: one more, profiled round per GPU result)",
    )
    group.addoption(
        "--gauge-skip-extras",
        action="store_true",
        default=False,
        help="skip the work a case does beside its timed result (its diagnostics, its GPU-busy "
        "share, its roofline and the device ceilings it needs, its checks against a reference "
        "such as graphed against eager, a launched rank's profiled steps and all-reduce "
        "reference): the results "
        "keep their times and lose those extras; `gpugauge ab` sets it on both sides, whose "
        "results are compared by time alone",
    )
    group.addoption(
        "--gauge-skip-diagnostics",
        action="store_true",
        default=False,
        help="skip the work that explains a result but is not judged (a family's profiler "
        "tables and traces, a GPU case's CPU reference); what the gate judges (time, memory, "
        "GPU-busy share, kernels) and the checks stay; the nightly job sets it",
    )
    group.addoption(
        "--gauge-launch-each",
        action="store_true",
        default=False,
        help="time each test's case inside that test, in a launch of its own: a family that "
        "launches several tests' cases at once (the distributed family's series) launches "
        "each alone; `gpugauge ab` sets it, since a case's blocks are paired inside its test",
    )
    group.addoption(
        "--gauge-require-baselines",
        action="store_true",
        default=False,
        help="with --gauge-gate: a result nothing could judge ('new': no baseline of its "
        "device class, and no history that judges it) fails its test (for nightly jobs, so "
        "that a missing baseline cannot pass as 'new')",
    )
    group.addoption(
        "--gauge-confirm-new-host",
        action="store_true",
        default=False,
        help="with --gauge-gate: a result whose time alone regressed against its class "
        "reference, on a host the history knows too few runs of, does not fail its test: "
        "`gpugauge confirm` A/Bs it on this GPU and fails if it is still regressed (a class "
        "baseline cannot tell this host's speed from the code's)",
    )
    group.addoption(
        "--gauge-baselines-dir",
        type=path_option,
        default=None,
        help="baselines folder (default: <rootdir>/baselines)",
    )
    group.addoption(
        "--gauge-tolerances-dir",
        type=path_option,
        default=None,
        help="tolerance TOML folder (default: <rootdir>/tolerances)",
    )
    group.addoption(
        "--gauge-artifacts-dir",
        type=path_option,
        default=None,
        help="where results' files (traces, tables) go, one folder per run "
        "(default: <rootdir>/artifacts)",
    )
    group.addoption(
        "--gauge-setup-memo",
        type=path_option,
        default=None,
        help="a folder where tests keep setup answers that depend only on the build and the "
        "device (how many layers fit, where a split's cut fits), so that a later process of "
        "the same build on the same host reads them instead of searching again; one folder "
        "per build and host (`gpugauge ab` gives each build its own for its rounds; default: "
        "none, every process works them out)",
    )


def add_history_options(group: Any) -> None:
    """The results history's options, in the gpugauge group."""
    group.addoption(
        "--gauge-history",
        metavar="PATH|URL",
        default=None,
        help=(
            "results history: a SQLite file or a postgresql:// URL that several runners "
            f"share (default: ${HISTORY_ENV_VAR}, else gpugauge-history.sqlite in "
            "pytest-benchmark's storage folder). Every measured run is appended; with "
            "--gauge-gate, each result is judged against its host's own history once it has one"
        ),
    )
    group.addoption(
        "--gauge-no-history",
        action="store_true",
        default=False,
        help="neither read nor append the results history, one that --gauge-history or "
        "addopts names included",
    )
    group.addoption(
        "--gauge-first-nights",
        type=first_nights,
        default=None,
        metavar="N",
        help=(
            "with --gauge-gate: a result that neither a baseline nor the history can judge (a "
            "new GPU's first nights) is recorded in the history and passes, said so, while the "
            "history holds fewer than N accepted runs of it; from then on it is judged against "
            "them. "
            "Needs the history. python -m gpugauge baseline --from-history CLASS turns those "
            "runs into committed baselines"
        ),
    )
    group.addoption(
        "--gauge-no-remeasure",
        "--gauge-no-confirm",  # its name before 'confirm' meant only `gpugauge confirm`
        action="store_true",
        dest="gauge_no_remeasure",
        default=False,
        help=(
            "fail a regressed result at once; by default it is measured again (a fresh "
            "warm-up) and fails only if the second measurement regresses too "
            "(--gauge-no-confirm: its old name)"
        ),
    )


class _Defaults:
    """An option group that only notes each option's destination and default."""

    def __init__(self) -> None:
        self.found: dict[str, Any] = {}

    def addoption(self, *names: str, **attrs: Any) -> None:
        long = next(n for n in names if n.startswith("--"))
        dest = attrs.get("dest") or long[2:].replace("-", "_")  # pytest's rule
        self.found[dest] = attrs["default"]  # every option here states its default


def defaults() -> Mapping[str, Any]:
    """Each gpugauge option's destination and default: a value not the default was given."""
    group = _Defaults()
    add_options(group)
    add_history_options(group)
    return group.found


def getter(config: pytest.Config) -> Callable[[str], Any]:
    """``get(name)``: this run's value of ``--gauge-<name>`` (``name`` as ``resolve`` asks)."""
    return lambda name: config.getoption(DEST_PREFIX + name)
