from pathlib import Path

import pytest

from gpugauge.runtime.options import PROFILE_POLICIES, resolve

DEFAULTS = {
    "profile": None,
    "device": "auto",
    "rounds": None,
    "min_rounds": None,
    "warmup": None,
    "warmup_time": None,
    "target_ci": None,
    "max_time": None,
    "flush_l2": False,
    "regime": "sustained",
    "min_time": None,
    "energy_window": 5.0,
    "idle_time": 1.0,
    "gate": False,
    "update_baselines": False,
    "require_baselines": False,
    "confirm_new_host": False,
    "record_kernels": False,
    "skip_extras": False,
    "skip_diagnostics": False,
    "launch_each": False,
    "first_nights": None,
    "no_history": False,
    "no_remeasure": False,
    "baselines_dir": None,
    "tolerances_dir": None,
    "artifacts_dir": None,
    "setup_memo": None,
}


def resolve_with(cuda: bool = False, **given: object):
    values = {**DEFAULTS, **given}
    return resolve(values.__getitem__, cuda)


def test_defaults_follow_the_machine() -> None:
    cpu = resolve_with(cuda=False)
    assert (cpu.profile, cpu.devices) == ("smoke", ("cpu",))
    assert cpu.policy == PROFILE_POLICIES["smoke"]
    gpu = resolve_with(cuda=True)
    assert (gpu.profile, gpu.devices) == ("seed", ("cuda",))


def test_overrides_replace_profile_fields() -> None:
    o = resolve_with(cuda=True, profile="seed", rounds=10, warmup=3, flush_l2=True, device="all")
    assert o.policy.rounds == 10
    assert o.policy.warmup_rounds == 3
    assert o.policy.flush_l2
    assert o.policy.target_ci == PROFILE_POLICIES["seed"].target_ci
    assert o.devices == ("cpu", "cuda")


def test_min_rounds_above_the_profile_max_raises_the_max() -> None:
    assert resolve_with(min_rounds=50_000).policy.max_rounds == 50_000


def test_cuda_without_a_gpu_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="--gauge-device cuda: no CUDA device"):
        resolve_with(device="cuda")


@pytest.mark.parametrize("window", ["0.2", "0.99", "1e-9", "86401", "nan"])
def test_short_energy_windows_are_refused(window: str) -> None:
    """NVML's readings update every 20-100 ms: a window is 0 (off) or 1 s at least."""
    import argparse

    from gpugauge.runtime.flags import energy_window

    with pytest.raises(argparse.ArgumentTypeError, match="0 \\(off\\), or 1 to 86400"):
        energy_window(window)
    assert energy_window("0") == 0.0
    assert energy_window("1") == 1.0


def test_energy_window_zero_turns_energy_off() -> None:
    assert resolve_with(energy_window=0.0).energy_window_s == 0.0


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--gauge-rounds", "0"], "argument --gauge-rounds: '0' is not a whole number >= 1"),
        (["--gauge-rounds", "ten"], "argument --gauge-rounds: 'ten' is not a whole number >= 1"),
        (["--gauge-profile", "huge"], "argument --gauge-profile: invalid choice: 'huge'"),
        (["--gauge-device", "tpu"], "argument --gauge-device: invalid choice: 'tpu'"),
        (["--gauge-target-ci", "-1"], "argument --gauge-target-ci: '-1' is not a fraction > 0"),
        # refused as it is read, as its message says, not later by the policy
        (["--gauge-target-ci", "1"], "argument --gauge-target-ci: '1' is not a fraction > 0"),
        # one rule, said once, as it is read: 0 is off, else 1 s at least
        (["--gauge-energy-window", "0.5"], "'0.5' is not a number of seconds: 0 (off), or 1"),
        (["--gauge-energy-window", "-1"], "'-1' is not a number of seconds: 0 (off), or 1"),
        (["--gauge-device", "cuda"], "no CUDA device is visible"),
        (["--no-such-option"], "unrecognized arguments: --no-such-option"),
    ],
)
def test_bad_command_lines_fail_with_a_message(
    gauge_pytester: pytest.Pytester, argv: list[str], message: str
) -> None:
    gauge_pytester.makepyfile("def test_x(): pass")
    result = gauge_pytester.runpytest(*argv)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert message in result.stderr.str()


def test_record_kernels_sums_each_device_kernel_of_one_round(monkeypatch) -> None:
    """--gauge-record-kernels keeps one round's kernels (name, calls, µs), largest first."""
    import contextlib
    from types import SimpleNamespace

    import torch.profiler

    from gpugauge.measure.profile import round_kernels

    def event(name: str, device: str, us: float) -> SimpleNamespace:
        span = SimpleNamespace(elapsed_us=lambda: us)
        return SimpleNamespace(name=name, device_type=SimpleNamespace(name=device), time_range=span)

    seen = [
        event("sm90_xmma_fprop_tf32", "CUDA", 90.0),
        event("aten::conv2d", "CPU", 500.0),  # host side: not a kernel
        event("elementwise_kernel", "CUDA", 5.0),
        event("sm90_xmma_fprop_tf32", "CUDA", 80.0),
    ]
    calls = []

    @contextlib.contextmanager
    def fake_profile(activities):
        yield SimpleNamespace(events=lambda: seen)

    monkeypatch.setattr(torch.profiler, "profile", fake_profile)
    rows = round_kernels(lambda: calls.append("fn"), lambda: calls.append("sync"))
    assert calls == ["fn", "sync"]
    assert rows == [
        {"name": "sm90_xmma_fprop_tf32", "calls": 2, "us": 170.0, "share": 170.0 / 175.0},
        {"name": "elementwise_kernel", "calls": 1, "us": 5.0, "share": 5.0 / 175.0},
    ]
    # the share stays of the whole round when only the longest are listed
    [top] = round_kernels(lambda: None, lambda: None, top=1)
    assert top["share"] == 170.0 / 175.0
    assert resolve_with(record_kernels=True).record_kernels
    assert not resolve_with().record_kernels


def test_confirm_new_host_needs_the_gate() -> None:
    with pytest.raises(ValueError, match="--gauge-confirm-new-host applies to --gauge-gate"):
        resolve_with(confirm_new_host=True)
    assert resolve_with(gate=True, confirm_new_host=True).confirm_new_host
    assert not resolve_with(gate=True).confirm_new_host  # off unless given
    with pytest.raises(ValueError, match="cannot write baselines"):
        resolve_with(gate=True, confirm_new_host=True, update_baselines=True)


@pytest.mark.parametrize("option", ["gate", "update_baselines"])
def test_a_gpu_run_judged_or_recorded_must_time_the_sustained_clock(option: str) -> None:
    """Smoke and burst runs read a GPU's boost clock: against references, or as one, false."""
    with pytest.raises(ValueError, match=r"profile smoke times without waiting.*seed or full"):
        resolve_with(cuda=True, profile="smoke", **{option: True})
    with pytest.raises(ValueError, match="regime burst times the boost clock"):
        resolve_with(cuda=True, regime="burst", **{option: True})
    with pytest.raises(ValueError, match="sustained regime"):
        resolve_with(cuda=True, profile="smoke", device="all", **{option: True})
    # a seed run with no warm-up never waits for the clock either (the option sweep)
    with pytest.raises(ValueError, match="warmup-time 0 times without waiting"):
        resolve_with(cuda=True, profile="seed", warmup_time=0.0, **{option: True})
    for profile in ("seed", "full"):
        assert getattr(resolve_with(cuda=True, profile=profile, **{option: True}), option)
    # a CPU run, or a GPU run that neither meets nor makes a reference, may time as it likes
    assert resolve_with(cuda=True, profile="smoke", device="cpu", **{option: True}).profile
    assert resolve_with(cuda=True, profile="smoke").profile == "smoke"
    assert resolve_with(cuda=True, regime="burst").policy.regime == "burst"


def test_a_setup_memo_under_a_file_is_refused_before_the_run(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    with pytest.raises(ValueError, match=r"--gauge-setup-memo .*file: not a directory"):
        resolve_with(setup_memo=tmp_path / "file")
    # gpugauge ab's side settings give it as a string
    assert resolve_with(setup_memo=str(tmp_path / "memo")).setup_memo == tmp_path / "memo"
