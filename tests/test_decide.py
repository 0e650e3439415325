"""The judge takes the whole decision a test acts on: measure again, fail, leave to confirm,
pass as a first night. The gauge only records and acts (issue 50).

Each test builds a real baseline store, tolerances and, where it matters, a SQLite history,
and asks :meth:`Judge.decide` with a stand-in for "measure it again".
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from gpugauge.judging.first_nights import FirstNights
from gpugauge.judging.judge import Action, Judge
from gpugauge.judging.tracking import Tracker
from gpugauge.regress.baselines import BaselineStore, combine_runs, entry_of
from gpugauge.regress.gate import Gate
from gpugauge.regress.tolerances import load_tolerances
from gpugauge.results.measurement import Measurement
from gpugauge.results.verdicts import Verdict

from .fakes import result


def _gate(root: Path, baseline_ms: float | None = 2.0) -> Gate:
    """A gate on a 1.5% tolerance, with a baseline of ``gemm`` at ``baseline_ms`` ms."""
    (root / "t").mkdir(exist_ok=True)
    (root / "t" / "t.toml").write_text("[default]\ntime = 0.015\n")
    store = BaselineStore(root / "b")
    if baseline_ms is not None:
        runs = [[entry_of(result("gemm", baseline_ms * k))] for k in (1.0, 1.001)]
        store.write(combine_runs(runs), {})
    return Gate(store, load_tolerances(root / "t"))


def _again(*medians: float) -> tuple[Callable[[], Measurement], list[float]]:
    """A stand-in for measuring the case again: each call reads the next median."""
    calls: list[float] = []

    def measure() -> Measurement:
        calls.append(medians[len(calls)])
        return result("gemm", calls[-1])

    return measure, calls


def test_an_unchanged_result_passes_measured_once(tmp_path: Path) -> None:
    again, calls = _again(2.0)
    d = Judge(_gate(tmp_path)).decide(result("gemm", 2.0), again)
    assert (d.action, d.result.verdict, d.said, calls) == (
        Action.PASS,
        Verdict.UNCHANGED,
        "",
        [],
    )


def test_a_regression_measured_twice_fails_and_keeps_both(tmp_path: Path) -> None:
    again, calls = _again(4.0)
    d = Judge(_gate(tmp_path)).decide(result("gemm", 4.0), again)
    assert d.action is Action.FAIL
    assert calls == [4.0]
    assert [r.verdict for _, r in d.attempts] == [Verdict.REGRESSED, Verdict.REGRESSED]
    assert d.measurement is d.attempts[-1][0]
    assert [a.verdict for a in d.measurement.earlier] == ["regressed"]  # the first, kept
    assert "first measurement regressed" in d.result.note
    assert d.said == d.result.message()


def test_a_regression_that_does_not_repeat_passes_and_says_so(tmp_path: Path) -> None:
    again, _ = _again(2.0)
    d = Judge(_gate(tmp_path)).decide(result("gemm", 4.0), again)
    assert (d.action, d.result.verdict) == (Action.PASS, Verdict.UNCHANGED)
    assert d.result.note.startswith("first measurement regressed: time")
    assert d.measurement.timing is not None
    assert d.measurement.timing.summary.median == pytest.approx(2.0, rel=0.01)


@pytest.mark.parametrize(
    ("remeasure", "measurable", "why"),
    [(False, True, "--gauge-no-remeasure"), (True, False, "recorded from elsewhere")],
)
def test_a_regression_not_measured_again_says_why(
    tmp_path: Path, remeasure: bool, measurable: bool, why: str
) -> None:
    again, calls = _again(2.0)
    judge = Judge(_gate(tmp_path), remeasure=remeasure)
    d = judge.decide(result("gemm", 4.0), again if measurable else None)
    assert (d.action, calls, len(d.attempts)) == (Action.FAIL, [], 1)
    assert f"not measured again ({why})" in d.result.note


@pytest.mark.parametrize(("required", "action"), [(True, Action.FAIL), (False, Action.PASS)])
def test_a_result_with_no_baseline_fails_only_where_baselines_are_required(
    tmp_path: Path, required: bool, action: Action
) -> None:
    judge = Judge(_gate(tmp_path, None), require_baselines=required)
    d = judge.decide(result("gemm", 2.0), None)
    assert (d.result.verdict, d.action) == (Verdict.NEW, action)
    assert d.said.endswith("(--gauge-require-baselines)") is required


def test_a_new_classes_first_night_passes_where_baselines_are_required(tmp_path: Path) -> None:
    tracker = Tracker(str(tmp_path / "h.sqlite"), "seed")
    nights = FirstNights(3, tracker)
    judge = Judge(_gate(tmp_path, None), tracker, nights, require_baselines=True)
    d = judge.decide(result("gemm", 2.0), None)
    tracker.close()
    assert (d.result.verdict, d.action) == (Verdict.NEW, Action.FIRST_NIGHT)
    assert d.said.startswith("gemm: new, passes: first nights of ")
    assert "night 1 of 3" in d.said


@pytest.mark.parametrize(
    ("to_confirm", "action"), [(True, Action.LEFT_TO_CONFIRM), (False, Action.FAIL)]
)
def test_a_time_regression_on_a_new_host_is_left_to_confirm_when_asked(
    tmp_path: Path, to_confirm: bool, action: Action
) -> None:
    """The history knows no run of this host: only a same-GPU A/B tells host from code."""
    tracker = Tracker(str(tmp_path / "h.sqlite"), "seed")
    again, calls = _again(4.0)
    judge = Judge(_gate(tmp_path), tracker, new_host_to_confirm=to_confirm)
    d = judge.decide(result("gemm", 4.0), again)
    tracker.close()
    assert d.result.verdict is Verdict.REGRESSED
    assert calls == [4.0]  # measured again first: a disturbed first measurement passes
    assert d.action is action
    if to_confirm:
        assert "left to `gpugauge confirm`" in d.said
