"""Synthetic histories with known noise, host offsets, steps and drift.

For measuring what the host-aware gate and the change-point search do when the truth is
known: :func:`simulate` plays nights of runs on several hosts, judges each new result
against the history before it (exactly as a gated run would, through
:func:`~gpugauge.history.host_checks.check_case`), and keeps it, accepted or not, in memory or
in a real :class:`~gpugauge.history.store.History`. Medians are in ms around ``level``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

import numpy as np

from gpugauge.history.host_checks import accepted, check_case
from gpugauge.history.records import MetricRecord, Point, ResultRecord, RunRecord
from gpugauge.history.reference import DEFAULT_POLICY, ReferencePolicy
from gpugauge.history.store import History
from gpugauge.regress.baselines import Entry, KernelShare
from gpugauge.regress.tolerances import Tolerance
from gpugauge.results.verdicts import Verdict

START = datetime(2026, 1, 1, 2, 0)
CASE, FAMILY, CLASS = "synthetic-case", "synthetic", "synthetic-gpu"


@dataclass(frozen=True)
class Scenario:
    """What the truth is: noise, hosts and their offsets, and any step or drift.

    ``hosts`` maps a host name to (its offset from the class level, the night it joins).
    A ``step`` (relative) hits the ``affected`` hosts (None: all) from ``step_night`` on,
    and the fingerprint's torch version changes with it; a ``drift`` (relative, compounded
    per night) from ``drift_night`` on.
    """

    hosts: tuple[tuple[str, float, int], ...] = (("h0", -0.025, 0), ("h1", 0.0, 0))
    nights: int = 20
    noise: float = 0.005  # run-to-run, relative standard deviation
    ci: float = 0.002  # half-width of a run's own CI of the median, relative
    level: float = 2.0  # ms
    step: float = 0.0
    step_night: int = 10**9
    drift: float = 0.0
    drift_night: int = 10**9
    affected: tuple[str, ...] | None = None  # hosts the step and drift hit; None: all

    def truth(self, host: str, offset: float, night: int) -> float:
        """The true median of ``host`` on ``night``, ms."""
        level = self.level * (1 + offset)
        if self.affected is not None and host not in self.affected:
            return level
        if night >= self.step_night:
            level *= 1 + self.step
        if night >= self.drift_night:
            level *= (1 + self.drift) ** (night - self.drift_night + 1)
        return level


def synthetic_run(night: int, host: str, torch: str = "2.11.0", minute: int = 0) -> RunRecord:
    """The run of ``host`` on ``night``, ``minute`` minutes after the nightly's start."""
    return RunRecord(
        id=f"n{night:03d}-{host}",
        time=START + timedelta(days=night, minutes=minute),
        host=host,
        device_class=CLASS,
        torch=torch,
        commit=f"c{night:03d}".ljust(40, "0"),
    )


def synthetic_metric(median: float, ci: float) -> MetricRecord:
    """A time metric around ``median`` with a relative CI half-width ``ci``."""
    return MetricRecord("time", median, median * (1 - ci), median * (1 + ci), 20, (median,))


def point(night: int, host: str, median: float, ci: float = 0.002, ok: bool = True) -> Point:
    """One synthetic point, accepted unless ``ok`` is False."""
    m = synthetic_metric(median, ci)
    result = ResultRecord(CASE, FAMILY, CLASS, (m,), accepted=ok)
    return Point(synthetic_run(night, host), result, m)


def baseline_entry(median: float) -> Entry:
    """A committed class baseline of the synthetic case, recorded from one run."""
    return Entry(CASE, FAMILY, CLASS, {"time": (median,) * 5})


@dataclass(frozen=True)
class Judged:
    """One judged synthetic result."""

    night: int
    host: str
    median: float
    verdict: Verdict
    kind: str  # the reference's: 'host', 'class' or '' (none)
    drift: bool = False  # regressed by the class baseline anchor only


def simulate(
    scenario: Scenario,
    seed: int,
    *,
    baseline: Entry | None = None,
    history: History | None = None,
    policy: ReferencePolicy = DEFAULT_POLICY,
    floor: float = 0.015,
) -> list[Judged]:
    """Play every night: each host's run is judged against the history so far, then kept.

    With ``history`` the runs go into it and the points are read back from it; without,
    they are kept in memory. Hosts run in the order given, each night.
    """
    rng = np.random.default_rng(seed)
    kept: list[Point] = []
    out = []
    tolerance = Tolerance().with_(time=floor)
    for night in range(scenario.nights):
        for minute, (host, offset, joins) in enumerate(scenario.hosts):
            if night < joins:
                continue
            truth = scenario.truth(host, offset, night)
            median = truth * (1 + scenario.noise * rng.standard_normal())
            current = synthetic_metric(median, scenario.ci)
            points = history.points(CASE, "time", CLASS) if history is not None else kept
            j = check_case(
                CASE,
                FAMILY,
                CLASS,
                (current,),
                host=host,
                points={"time": points},
                tolerance=tolerance,
                baseline=baseline,
                policy=policy,
            )
            ref = j.judgements[0].reference
            drift = j.judgements[0].drift
            out.append(Judged(night, host, median, j.verdict, ref.kind if ref else "", drift))
            torch = "2.12.0" if night >= scenario.step_night else "2.11.0"
            run = synthetic_run(night, host, torch, minute)
            m = replace(current, verdict=j.verdict.value, reference=ref.reason if ref else "")
            result = ResultRecord(
                CASE, FAMILY, CLASS, (m,), verdict=j.verdict.value, accepted=accepted(j.verdict)
            )
            if history is not None:
                history.append(run, [result])
            else:
                kept.append(Point(run, result, m))
    return out


def series(scenario: Scenario, seed: int, hosts: Sequence[str] | None = None) -> list[Point]:
    """Every host's runs over the nights, all accepted, in time order (for change points)."""
    rng = np.random.default_rng(seed)
    out = []
    for night in range(scenario.nights):
        for minute, (host, offset, joins) in enumerate(scenario.hosts):
            if night < joins or (hosts is not None and host not in hosts):
                continue
            median = scenario.truth(host, offset, night) * (
                1 + scenario.noise * rng.standard_normal()
            )
            torch = "2.12.0" if night >= scenario.step_night else "2.11.0"
            m = synthetic_metric(median, scenario.ci)
            out.append(
                Point(
                    synthetic_run(night, host, torch, minute),
                    ResultRecord(CASE, FAMILY, CLASS, (m,)),
                    m,
                )
            )
    return out


NIGHTLY_END = datetime(2026, 11, 1, 2, 0)  # the last night of a synthetic nightly history
FAMILIES = ("family-a", "family-b", "family-c", "family-d", "family-e")  # no real ones


def nightly_case(i: int) -> tuple[str, str, float, float, bool]:
    """Case ``i`` of a synthetic nightly: (id, family, level ms, run-to-run noise, memory)."""
    rng = np.random.default_rng(1000 + i)
    family = FAMILIES[i % len(FAMILIES)]
    level = float(np.exp(rng.uniform(np.log(0.05), np.log(50.0))))
    return f"{family}-case{i:02d}-fp32", family, level, float(rng.uniform(0.003, 0.02)), i % 2 == 0


def nightly_history(
    history: History,
    *,
    nights: int,
    hosts: int = 4,
    cases: int = 70,
    seed: int = 0,
    upgrade_every: int = 180,
) -> int:
    """Append ``nights`` nights of a team's nightly to ``history``: each host once a night.

    The realistic shape of a long history, for timing what reads it: every case on every
    host, time with its CI and n, peak memory for half the cases, two main kernels, SM
    clock and power; host offsets of a few percent; every ``upgrade_every`` nights a new
    torch that steps a third of the cases by 3-8% (their memory too, now and then); a
    regressed, not accepted result on about one night in two hundred. Runs are appended through
    :meth:`History.append`, one transaction each, as a nightly appends them. Returns the
    number of runs appended.
    """
    rng = np.random.default_rng(seed)
    names = [f"GPU-{h:04x}{'0' * 28}" for h in range(1, hosts + 1)]
    offsets = rng.uniform(-0.03, 0.03, size=hosts)
    specs = [nightly_case(i) for i in range(cases)]
    start = NIGHTLY_END - timedelta(days=nights - 1)
    level = np.array([s[2] for s in specs])
    memory = np.array([float(2**20 * (1 + i)) for i in range(cases)])
    appended = 0
    for night in range(nights):
        era = night // upgrade_every
        if night and night % upgrade_every == 0:  # a torch upgrade: some cases step
            stepped = rng.random(cases) < 1 / 3
            level = level * np.where(stepped, 1 + rng.uniform(-0.08, 0.08, cases), 1.0)
            memory = memory * np.where(stepped & (rng.random(cases) < 0.3), 1.5, 1.0)
        for h, host in enumerate(names):
            run = RunRecord(
                id=f"night{night:05d}-{h}",
                time=start + timedelta(days=night, minutes=7 * h),
                host=host,
                device_class=CLASS,
                driver="580.95.05",
                cuda_runtime="12.8",
                cudnn="91002",
                torch=f"2.{10 + era}.0",
                commit=f"{night:08x}".ljust(40, "0"),
                flags={"allow_tf32": False},
                argv=("pytest", "benches", "-m", "nightly", "--gate"),
                profile="nightly",
            )
            results = []
            for i, (bench_id, family, _, noise, has_memory) in enumerate(specs):
                median = float(level[i] * (1 + offsets[h]) * (1 + noise * rng.standard_normal()))
                bad = rng.random() < 0.005
                verdict = Verdict.REGRESSED if bad else Verdict.UNCHANGED
                metrics = [synthetic_metric(median * (1.1 if bad else 1.0), 0.003)]
                if has_memory:
                    metrics.append(
                        MetricRecord("memory", memory[i], memory[i], memory[i], 1, (memory[i],))
                    )
                results.append(
                    ResultRecord(
                        bench_id,
                        family,
                        CLASS,
                        tuple(replace(m, verdict=verdict.value) for m in metrics),
                        sm_clock_mhz=1755.0 + 10 * rng.standard_normal(),
                        power_w=400.0 + 5 * rng.standard_normal(),
                        kernels=(
                            KernelShare(f"sm90_xmma_gemm_{i}", 0.6),
                            KernelShare(f"elementwise_{i}", 0.2),
                        ),
                        verdict=verdict.value,
                        accepted=accepted(verdict),
                    )
                )
            appended += history.append(run, results)
    return appended
