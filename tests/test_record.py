"""Results recorded from anywhere: no timing, a refused second result, artifacts, two devices."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import pytest

from gpugauge.__main__ import main
from gpugauge.measure.timing import CudaEventClock, TimingPolicy, measure
from gpugauge.results.measurement import Measurement, SavedSpec
from gpugauge.results.metrics import MetricError
from tests.fakes import SPEC_SOURCE

FIT_BENCH = (
    SPEC_SOURCE
    + """
import os
import pytest
from gpugauge.results.measurement import Measurement

@pytest.mark.cpu
def test_fit(gauge):
    n = int(os.environ["FIT_N"])
    gauge.record(Measurement(Spec("fit-m62", family="fit"), values={"max_layers": n}))
"""
)


def _run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest("-p", "no:cacheprovider", *args)


def test_a_result_without_timing_is_saved_gated_and_reported(
    gauge_pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """max_layers is higher-is-better and exact: a drop fails the gate, a rise passes."""
    gauge_pytester.makepyfile(test_fit=FIT_BENCH)
    base = gauge_pytester.path / "baselines"
    common = [f"--gauge-baselines-dir={base}"]
    monkeypatch.setenv("FIT_N", "61")
    saved = gauge_pytester.path / "fit.json"
    _run(gauge_pytester, *common, "--gauge-update-baselines", f"--benchmark-json={saved}")
    [stored] = json.loads(next(base.rglob("fit.json")).read_text())["benchmarks"].values()
    assert stored == {"max_layers": {"unit": "layers", "value": 61.0}}
    [row] = json.loads(saved.read_text())["benchmarks"]
    assert row["extra_info"]["timing"] is None
    assert row["options"]["timer"] == "host wall time of the test (result has no timing)"

    monkeypatch.setenv("FIT_N", "60")
    dropped = _run(gauge_pytester, *common, "--gauge-gate")
    dropped.assert_outcomes(failed=1)
    dropped.stdout.fnmatch_lines(["*fit-m62: regressed: max_layers 0.984x vs >= 1.000 allowed*"])
    monkeypatch.setenv("FIT_N", "64")
    risen = _run(gauge_pytester, *common, "--gauge-gate")
    risen.assert_outcomes(passed=1)
    risen.stdout.fnmatch_lines(["*fit-m62*improved*"])

    # the saved JSON is the report's source: the value is in it, with no time
    assert (
        main(
            [
                "report",
                "--current",
                str(saved),
                "--baselines-dir",
                str(base),
                "--storage",
                str(tmp_path / "none"),
                "--out",
                str(tmp_path),
            ]
        )
        == 0
    )
    md = (tmp_path / "report.md").read_text()
    assert "max_layers ratio" in md
    assert any(line.startswith("| fit-m62 ") and "| 61 " in line for line in md.splitlines())


@pytest.mark.slow
def test_a_second_result_in_one_test_is_refused(gauge_pytester: pytest.Pytester) -> None:
    gauge_pytester.makepyfile(
        test_two=SPEC_SOURCE
        + """
import pytest
from gpugauge.runtime.gauge import GaugeError

@pytest.mark.cpu
def test_two(gauge):
    gauge.measure(Spec("first"), lambda: None)
    with pytest.raises(GaugeError, match="already recorded 'first'.*one test records one result"):
        gauge.measure(Spec("second"), lambda: None)
"""
    )
    saved = gauge_pytester.path / "two.json"
    _run(gauge_pytester, "--gauge-rounds", "3", f"--benchmark-json={saved}").assert_outcomes(
        passed=1
    )
    [row] = json.loads(saved.read_text())["benchmarks"]
    assert row["extra_info"]["id"] == "first"


@pytest.mark.slow
def test_two_tests_cannot_record_one_id(gauge_pytester: pytest.Pytester) -> None:
    """An id keys the run file's verdicts, the baseline and the history: one test owns it."""
    gauge_pytester.makepyfile(
        test_same=SPEC_SOURCE
        + """
import pytest

@pytest.mark.cpu
def test_one(gauge):
    gauge.measure(Spec("same"), lambda: None)

@pytest.mark.cpu
def test_other(gauge):
    gauge.measure(Spec("same"), lambda: None)
"""
    )
    saved = gauge_pytester.path / "same.json"
    result = _run(gauge_pytester, "--gauge-rounds", "3", f"--benchmark-json={saved}")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        ["*'same' was recorded already in this run, by test_same.py::test_one*"]
    )
    rows = json.loads(saved.read_text())["benchmarks"]
    assert [(r["name"], r["extra_info"]["id"]) for r in rows] == [("test_one", "same")]


def test_an_artifact_survives_into_the_report(
    gauge_pytester: pytest.Pytester, tmp_path: Path
) -> None:
    gauge_pytester.makepyfile(
        test_art=SPEC_SOURCE
        + """
import pytest
from gpugauge.results.measurement import Measurement

@pytest.mark.cpu
def test_art(gauge):
    spec = Spec("with-table")
    path = gauge.artifact_path(spec, "ops.csv")
    path.write_text("op,ms\\nmm,1.0\\n")
    gauge.measure(spec, lambda: None, artifacts={"operator table": path})

@pytest.mark.cpu
def test_missing(gauge):
    from gpugauge.runtime.gauge import GaugeError
    with pytest.raises(GaugeError, match="artifact file"):
        gauge.record(Measurement(Spec("no-file"), artifacts={"trace": "/nonexistent.json"}))
    gauge.record(Measurement(Spec("no-file")))
"""
    )
    saved = gauge_pytester.path / "art.json"
    arts = gauge_pytester.path / "arts"
    _run(
        gauge_pytester,
        "--gauge-rounds",
        "3",
        f"--gauge-artifacts-dir={arts}",
        f"--benchmark-json={saved}",
    )
    rows = {r["extra_info"]["id"]: r for r in json.loads(saved.read_text())["benchmarks"]}
    assert rows["no-file"]["extra_info"]["artifacts"] == {}  # the refused record left nothing
    path = Path(rows["with-table"]["extra_info"]["artifacts"]["operator table"])
    assert path.read_text().startswith("op,ms")
    assert path.parent.name == "with-table"
    assert path.parent.parent.parent == arts  # <artifacts-dir>/<run>/<spec id>/ops.csv
    out = tmp_path / "rep"
    (tmp_path / "b").mkdir()
    assert (
        main(
            [
                "report",
                "--current",
                str(saved),
                "--storage",
                str(tmp_path / "none"),
                "--baselines-dir",
                str(tmp_path / "b"),
                "--out",
                str(out),
            ]
        )
        == 0
    )
    md = (out / "report.md").read_text()
    link = md.split("[operator table](")[1].split(")")[0]
    assert (out / link).resolve() == path.resolve()
    assert f'<a href="{link}">operator table</a>' in (out / "report.html").read_text()


def test_a_measurement_round_trips_through_a_plain_dict() -> None:
    spec = SavedSpec("f", "x", "cpu", ("cpu",), {"k": 1})
    m = Measurement(spec, values={"max_layers": 7, "busbw": 300.5}, artifacts={"a": "/p"})
    back = Measurement.from_dict(json.loads(json.dumps(m.as_dict())))
    assert back.readings() == {"max_layers": (7.0,), "busbw": (300.5,)}
    assert back.artifacts == {"a": "/p"}
    assert back.device_class == m.device_class
    with pytest.raises(MetricError, match="unknown metric 'speed'"):
        Measurement(spec, values={"speed": 1.0})
    with pytest.raises(MetricError, match="has samples"):
        Measurement(spec, values={"time": 1.0})


class _Stream:
    """A fake CUDA stream: a time cursor, ms, that work and waits move forward."""

    def __init__(self) -> None:
        self.t = 0.0

    def work(self, ms: float, after: _Stream | None = None) -> None:
        self.t = max(self.t, after.t if after else 0.0) + ms

    def wait_event(self, event: _Event) -> None:
        self.t = max(self.t, event.t)


class _Event:
    def __init__(self, default: _Stream) -> None:
        self.t = float("nan")
        self._default = default

    def record(self, stream: _Stream | None = None) -> None:
        self.t = (stream or self._default).t

    def synchronize(self) -> None:
        return None

    def elapsed_time(self, end: _Event) -> float:
        return end.t - self.t


class FakeCuda:
    """The parts of torch.cuda that CudaEventClock calls, over two fake devices.

    ``_sleep`` spins the current device (cuda:0 here) one nanosecond a cycle.
    """

    def __init__(self) -> None:
        self.streams = [_Stream(), _Stream()]

    def Event(self, enable_timing: bool = False) -> _Event:
        return _Event(self.streams[0])

    def _sleep(self, cycles: int) -> None:
        self.streams[0].work(cycles / 1e6)

    def current_stream(self, device: object) -> _Stream:
        return self.streams[getattr(device, "index", 0) or 0]

    def synchronize(self, device: object = None) -> None:
        return None

    def device(self, device: object) -> contextlib.AbstractContextManager[None]:
        return contextlib.nullcontext()


def test_a_two_device_round_ends_when_both_devices_finish() -> None:
    """A split model: 3 ms on cuda:0, then 5 ms on cuda:1 that waits for it."""
    policy = TimingPolicy(warmup_rounds=2, rounds=5)

    def timed(devices: list[str]) -> tuple[float, ...]:
        cuda = FakeCuda()
        s0, s1 = cuda.streams
        pipeline = lambda: (s0.work(3.0), s1.work(5.0, after=s0))  # noqa: E731
        return measure(pipeline, policy, CudaEventClock(devices, cuda=cuda)).device_ms

    assert timed(["cuda:0", "cuda:1"]) == pytest.approx((8.0,) * 5)
    # events on cuda:0 alone miss the cuda:1 part of the round
    assert timed(["cuda:0"]) == pytest.approx((3.0,) * 5)


def test_a_device_cannot_start_a_round_before_it_begins() -> None:
    """Independent work on both devices: the round is the longer one, not their sum, and
    cuda:1 waits for the round's start even when it is idle earlier."""
    cuda = FakeCuda()
    s0, s1 = cuda.streams
    s0.work(50.0)  # cuda:0 is busy with something queued before the timing starts
    parallel = lambda: (s0.work(3.0), s1.work(5.0))  # noqa: E731
    t = measure(
        parallel,
        TimingPolicy(warmup_rounds=0, rounds=4),
        CudaEventClock(["cuda:0", "cuda:1"], cuda=cuda),
    )
    assert t.device_ms == pytest.approx((5.0,) * 4)
