"""Where a run's wall time goes: host seconds by phase of each test (issue 48).

A measurement should cost its timed work. The run's last lines say what the rest went to:
each measurement's phases outside its timed rounds (the garbage collection and setup
before them, the ceilings, idle power, the memory round, the energy window, the profiled
round, and the time around the rounds: syncs, setups and L2 flushes between them), the
test's own code around its measurements (model builds, correctness checks, searches), and
the time outside any test (start-up, collection, the closing tables). These are host
seconds of phases that each end on a synchronized device: bookkeeping of the run, not a
measurement of GPU work.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field

from gpugauge.core.phrasing import efficiency

AROUND = "around rounds"  # a whole timing call: its timed rounds, its warm-up, the rest
PROFILED = "profiled round"  # a round (or a launch's steps) under the profiler
# the phases a measurement times, in the order a run's summary names them
MEASUREMENT_PHASES = (
    AROUND,
    "before rounds",
    PROFILED,
    "memory round",
    "energy",
    "idle power",
    "ceilings",
)
TIMED = "timed rounds"  # Timing.timed_s, summed by the caller
WARMUP = "warm-up"  # Timing.warmup_s
OWN_CODE = "tests' own code"  # a test's wall less its measurements' phases
OUTSIDE = "outside tests"  # the run's wall less its tests'


@dataclass
class WallLedger:
    """Host seconds by test node id and phase; the session keeps one per run.

    ``current`` is the node id of the test running now (set by the plugin around each
    test), so that a measurement's phases are charged to the test that took it.
    """

    seconds: dict[str, dict[str, float]] = field(default_factory=lambda: defaultdict(dict))
    current: str = ""
    # seconds charged by the phases open inside each open phase, innermost last
    _inner: list[float] = field(default_factory=list, repr=False)

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Charge the block's host seconds to ``name`` of the current test.

        A phase opened inside another (a family's "search" around a measurement's
        "before rounds") takes its seconds out of the outer one: each second is charged once.
        """
        t0 = time.monotonic()
        self._inner.append(0.0)
        try:
            yield
        finally:
            elapsed = time.monotonic() - t0
            inner = self._inner.pop()
            if self._inner:
                self._inner[-1] += elapsed
            mine = self.seconds[self.current]
            mine[name] = mine.get(name, 0.0) + max(0.0, elapsed - inner)

    def charge(self, name: str, seconds: float) -> None:
        """Add seconds counted elsewhere (a result's timed rounds) to the current test."""
        mine = self.seconds[self.current]
        mine[name] = mine.get(name, 0.0) + seconds

    def breakdown(self, wall_s: float, test_seconds: Mapping[str, float]) -> dict[str, float]:
        """The run's seconds by phase, its own code and outside tests included; sums to wall.

        A measurement's "around rounds" phase is its whole timing call: its timed rounds and
        warm-up (charged with :meth:`charge`) are taken out of it here.
        """
        return self._total(wall_s, test_seconds, self.by_tests(test_seconds))

    def by_tests(self, test_seconds: Mapping[str, float]) -> dict[str, dict[str, float]]:
        """Each test's seconds by phase (:meth:`by_test`), by node id."""
        return {n: self.by_test(n, t) for n, t in test_seconds.items()}

    @staticmethod
    def _total(
        wall_s: float, test_seconds: Mapping[str, float], tests: Mapping[str, Mapping[str, float]]
    ) -> dict[str, float]:
        total: dict[str, float] = defaultdict(float)
        for phases in tests.values():
            for name, s in phases.items():
                total[name] += s
        total[OUTSIDE] = max(0.0, wall_s - sum(test_seconds.values()))
        return dict(total)

    def by_test(self, nodeid: str, test_s: float) -> dict[str, float]:
        """One test's seconds by phase; its own code is what its phases leave of its wall."""
        out = {TIMED: 0.0, WARMUP: 0.0, **dict.fromkeys(MEASUREMENT_PHASES, 0.0)}
        for name, s in self.seconds.get(nodeid, {}).items():
            out[name] = out.get(name, 0.0) + s
        out[AROUND] = max(0.0, out[AROUND] - out[TIMED] - out[WARMUP])
        out[OWN_CODE] = max(0.0, test_s - sum(out.values()))
        return out

    def lines(self, wall_s: float, test_seconds: Mapping[str, float], top: int = 3) -> list[str]:
        """The run's closing lines on its wall time: by phase, the costliest tests, efficiency.

        'wall time: timed rounds 146 s, warm-up 20 s, tests' own code 120 s, ...' (phases of
        half a second or more, largest first), then the tests whose wall is least their timed
        work, then 'efficiency: timed rounds 146 s and warm-up 20 s of 458 s (36%)': every
        timed round counts, a first measurement that was measured again too.
        """
        tests = self.by_tests(test_seconds)
        total = self._total(wall_s, test_seconds, tests)
        shown = sorted((s, n) for n, s in total.items() if s >= 0.5 or n in (TIMED, WARMUP))
        parts = ", ".join(f"{n} {s:.0f} s" for s, n in reversed(shown))
        out = [f"wall time: {parts}"]
        overhead = {n: test_seconds[n] - p[TIMED] - p[WARMUP] for n, p in tests.items()}
        worst = sorted(overhead.items(), key=lambda kv: -kv[1])[:top]
        if worst and worst[0][1] >= 1.0:
            named = ", ".join(
                f"{_short(n)} {s:.0f} s ({_largest(tests[n])})" for n, s in worst if s >= 1.0
            )
            out.append(f"most outside their timed work: {named}")
        out.append(efficiency(total[TIMED], total[WARMUP], wall_s))
        return out

    def as_dict(self, wall_s: float, test_seconds: Mapping[str, float]) -> dict[str, object]:
        """For the run's JSON: seconds by phase for the run and for each test."""
        tests = self.by_tests(test_seconds)
        return {
            "run": {k: round(v, 3) for k, v in self._total(wall_s, test_seconds, tests).items()},
            "tests": {
                n: {k: round(v, 3) for k, v in phases.items() if v} for n, phases in tests.items()
            },
        }


def _largest(phases: Mapping[str, float]) -> str:
    """A test's costliest phase outside its timed work: 'search 13 s'."""
    name, s = max(
        ((n, s) for n, s in phases.items() if n not in (TIMED, WARMUP)), key=lambda kv: kv[1]
    )
    return f"{'own code' if name == OWN_CODE else name} {s:.0f} s"


def _short(nodeid: str) -> str:
    """A node id without its file: 'test_vgg_swap[vgg16-...]'."""
    return nodeid.rsplit("::", 1)[-1]
