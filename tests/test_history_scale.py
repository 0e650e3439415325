"""A history of years reads as fast as one of weeks, and says the same (issue 38, "Scale").

The readers of a long history read bounded windows: judging reads each host's first and
last accepted results of a case (:meth:`History.case_points`), the commands that read every
case read each host's recent runs (:meth:`History.recent_points`), and change points are
searched by a numpy PELT. Each must give exactly what the unbounded reading gave.
experiments/history_scale.py times them on 4 hosts x 70 cases x 3 years (docs/history.md).
"""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from gpugauge.history import changepoints
from gpugauge.history.changepoints import RECENT_RUNS, case_changes
from gpugauge.history.cli import main
from gpugauge.history.host_checks import check_case
from gpugauge.history.pelt import pelt, pelt_many
from gpugauge.history.records import MetricRecord
from gpugauge.history.store import History
from gpugauge.history.synthetic import (
    CLASS,
    Scenario,
    baseline_entry,
    nightly_case,
    nightly_history,
    series,
    synthetic_metric,
)
from gpugauge.regress.tolerances import Tolerance

from .test_history_store import pg_url, target  # noqa: F401  (the fixtures)


def _ruptures_pelt(z: np.ndarray, penalty: float, min_size: int) -> list[int]:
    """ruptures' own PELT with the l2 cost: the reference :func:`pelt` must equal."""
    import ruptures

    algo = ruptures.Pelt(model="l2", min_size=min_size, jump=1).fit(z.reshape(-1, 1))
    return algo.predict(pen=penalty)


@pytest.mark.parametrize("seed", range(40))
def test_numpy_pelt_finds_what_ruptures_finds(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(4, 160))
    z = rng.standard_normal(n)
    for _ in range(int(rng.integers(0, 4))):
        z[int(rng.integers(1, n)) :] += rng.normal(0, 4)
    if seed % 5 == 0:
        z = np.round(z)  # ties between segmentations: the same one is chosen
    for min_size in (2, 3):
        if n >= 2 * min_size:
            penalty = 3 * math.log(n)
            assert pelt(z, penalty, min_size) == _ruptures_pelt(z, penalty, min_size)


def _mixed_history(path: Path | str, seed: int) -> History:
    """Three hosts, 40 nights, a step; some results not accepted, some measured twice."""
    rng = np.random.default_rng(seed)
    scenario = Scenario(
        hosts=(("h0", -0.02, 0), ("h1", 0.0, 3), ("h2", 0.03, 25)),
        nights=40,
        step=0.04,
        step_night=30,
    )
    h = History.open(path)
    for p in series(scenario, seed):
        ok = rng.random() > 0.25
        results = [replace(p.result, accepted=ok)]
        if not ok and rng.random() < 0.5:  # a confirmation, accepted or not
            second = replace(p.result, attempt=2, accepted=rng.random() > 0.5)
            results.append(second)
        if rng.random() < 0.3:  # a second metric on some results only
            mem = MetricRecord("energy", 5.0, 5.0, 5.0, 1, (5.0,))
            results = [replace(r, metrics=(*r.metrics, mem)) for r in results]
        h.append(p.run, results)
    return h


@pytest.mark.parametrize("seed", range(6))
def test_judging_reads_a_window_and_judges_as_every_point_would(tmp_path: Path, seed: int) -> None:
    """case_points reads each host's first 5 and last 20 accepted results: the same verdicts."""
    with _mixed_history(tmp_path / "h.sqlite", seed) as h:
        baseline = baseline_entry(2.0) if seed % 2 else None
        for host in ("h0", "h1", "h2", "new-host"):
            current = (synthetic_metric(2.0 * (1 + 0.01 * seed), 0.002),)
            names = ["time", "energy"]
            windowed = h.case_points("synthetic-case", CLASS, names)
            every = {m: h.points("synthetic-case", m, CLASS) for m in names}
            assert sum(map(len, windowed.values())) < sum(map(len, every.values()))
            judged = [
                check_case(
                    "synthetic-case",
                    "synthetic",
                    CLASS,
                    current,
                    host=host,
                    points=points,
                    tolerance=Tolerance(),
                    baseline=baseline,
                )
                for points in (windowed, every)
            ]
            assert judged[0].as_dict() == judged[1].as_dict()
            assert judged[0].message() == judged[1].message()
            assert bool(any(windowed.values())) == bool(any(every.values()))


def test_recent_points_are_each_hosts_last_runs(target: str) -> None:  # noqa: F811
    """On SQLite and PostgreSQL: the window's runs are read apart from its metric rows."""
    with _mixed_history(target, 1) as h:
        recent = h.recent_points(["time", "energy"], 10)
        assert set(recent) == {("synthetic-case", CLASS, m) for m in ("time", "energy")}
        points = recent[("synthetic-case", CLASS, "time")]
        every = h.points("synthetic-case", "time", CLASS)
        last = {
            host: {q.run.id for q in [q for q in every if q.host == host][-10:]}
            for host in {q.host for q in every}
        }
        expected = [p for p in every if p.run.id in last[p.host]]
        assert [p.run.id for p in points] == [p.run.id for p in expected]
        assert [p.result.attempt for p in points] == [p.result.attempt for p in expected]
        assert h.points("synthetic-case", "time", CLASS, last=10) == points
        energy = recent[("synthetic-case", CLASS, "energy")]
        assert h.points("synthetic-case", "energy", CLASS, last=10) == energy
        assert h.recent_points(["time"], 10, ["no-such-case"]) == {}


def test_changes_search_each_hosts_recent_runs_and_say_so(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """A step older than the window is left to --last N (and said to be)."""
    path = tmp_path / "h.sqlite"
    scenario = Scenario(hosts=(("h0", 0.0, 0),), nights=RECENT_RUNS + 40, step=0.05, step_night=20)
    with History.open(path) as h:
        for p in series(scenario, 3):
            h.append(p.run, [p.result])
    assert main(["changes", "--history", str(path)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("no change points")
    assert f"searched each host's last {RECENT_RUNS} runs" in out
    assert main(["changes", "--history", str(path), "--last", str(RECENT_RUNS + 40)]) == 0
    out = capsys.readouterr().out
    assert "synthetic-case: time 1.05" in out
    assert "searched" not in out
    with History.open(path) as h:  # and `show`, one case, searches every run
        assert case_changes(h.points("synthetic-case"))


def test_a_nightly_history_is_built_through_the_store(tmp_path: Path) -> None:
    with History.open(tmp_path / "h.sqlite") as h:
        assert nightly_history(h, nights=3, hosts=2, cases=5) == 6
        assert len(h.runs()) == 6
        assert len(h.bench_ids()) == 5
        assert h.metrics() == ["memory", "time"]
        assert h.runs_per_host() == {f"GPU-{i:04x}{'0' * 28}": 3 for i in (1, 2)}
    assert nightly_case(0)[0] == "family-a-case00-fp32"


@pytest.mark.parametrize("step", [0.0, 0.03])
def test_a_class_is_searched_again_only_when_its_offsets_moved(
    monkeypatch: pytest.MonkeyPatch, step: float
) -> None:
    """The class series is searched a second time with host offsets from the steps the
    first search found. Where it found none, the offsets and so the search are the
    same: searching again was a third of a flat case's time."""
    searched: list[int] = []
    real = changepoints.pelt_many

    def counted(zs: list[np.ndarray], penalties: list[float], min_size: int) -> list[list[int]]:
        searched.extend(z.size for z in zs)
        return real(zs, penalties, min_size)

    monkeypatch.setattr(changepoints, "pelt_many", counted)
    points = series(Scenario(nights=30, step=step, step_night=20), seed=1)
    found = case_changes(points)
    assert bool(found) == bool(step)
    assert sorted(searched) == ([30, 30, 60, 60] if step else [30, 30, 60])  # hosts, class


def test_series_searched_together_find_what_each_finds_alone() -> None:
    """pelt_many searches series of one length in one numpy operation a step; each must
    get exactly what it gets alone, whatever else is searched with it."""
    rng = np.random.default_rng(5)
    zs, penalties = [], []
    for i in range(60):
        z = rng.standard_normal(int(rng.choice([4, 9, 30, 31, 60])))
        z[z.size // 2 :] += 3.0 * (i % 3 == 0)
        zs.append(np.round(z, 1) if i % 4 == 0 else z)  # ties, too
        penalties.append(float(rng.choice([0.5, 3 * math.log(z.size), 12.0])))
    for min_size in (1, 2, 3):
        alone = [pelt(z, p, min_size) for z, p in zip(zs, penalties, strict=True)]
        assert pelt_many(zs, penalties, min_size) == alone


def test_cases_searched_together_find_what_each_finds_alone() -> None:
    cases = [
        series(Scenario(nights=n, step=s, step_night=n - 6), seed=k)
        for k, (n, s) in enumerate([(30, 0.03), (30, 0.0), (24, 0.05), (40, 0.02)])
    ]
    together = changepoints.changes_of_cases(cases)
    assert any(together)
    assert together == [case_changes(points) for points in cases]


def test_the_scale_experiment_judges_with_today_s_api(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """experiments/history_scale.py's judging step, on a small history: it runs as docs say.

    It called ``Tracker.judge`` for a while after that method became ``by_history``.
    """
    from experiments.history_scale import build, current_run, judge_all

    path = tmp_path / "h.sqlite"
    build(path, 3)
    judge_all(str(path), str(current_run(tmp_path)))
    assert capsys.readouterr().out.startswith("judged 70 in ")
