"""Whether a verdict's change may be noise: hedged only within a few times the noise.

A CPU case whose work doubled read 3.16x and failed, yet said "REGRESSED (noisy) ... the
change may be noise". A result with an :func:`~gpugauge.report.tables.uncertainty` (noisy
or host-timed rounds) is hedged only where its change is within :data:`NOISE_MULTIPLE`
times its run-to-run noise; one rule for the failing test, the gate table and the report.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence

from gpugauge.report.tables import gate_table, uncertain_ids, uncertainty, unsampled_ids
from gpugauge.results.measurement import Measurement
from gpugauge.results.verdicts import Basis, GateResult, MetricCheck

# A change is hedged as "may be noise" only within this many times the run-to-run noise: a
# CPU case whose work doubled (3.16x) is a regression, however noisy the host that timed it.
NOISE_MULTIPLE = 3.0
# Host-timed rounds move from run to run by more than a within-run CI or CV shows:
# unchanged code on a shared CPU read 0.671x against its previous run (issue 38). Their
# run-to-run noise is taken as at least this.
HOST_TIMED_NOISE = 0.15


def within_noise(check: MetricCheck | None, cv: float | None = None, host: bool = False) -> bool:
    """Whether a time change is within :data:`NOISE_MULTIPLE` times the run-to-run noise.

    The noise is the largest of half the change the reference allows (the gate allows
    twice the spread of the baseline's runs, or twice the floor), the result's own CV, and
    for ``host``-timed rounds :data:`HOST_TIMED_NOISE`; the change and the noise are
    compared as log-ratios, so that a slowdown and a speed-up of one size count alike. No
    time check (another metric decided): True. A check a same-GPU A/B decided: False, its
    paired interval counts the noise already (a slower case read 1.25x [1.24, 1.26] was
    called "may be noise" by its gated run's CV).
    """
    if check is not None and check.basis is Basis.SAME_GPU_AB:
        return False
    if check is None or check.ratio <= 0:
        return True
    noise = max(check.tolerance / 2, cv or 0.0, HOST_TIMED_NOISE if host else 0.0)
    return abs(math.log(check.ratio)) <= NOISE_MULTIPLE * math.log1p(noise)


def hedged_ids(
    results: Sequence[GateResult],
    uncertain: Collection[str],
    measurements: Sequence[Measurement] = (),
) -> frozenset[str]:
    """Ids of the results whose verdict may be noise: uncertain, and a change within noise.

    ``uncertain`` holds the ids noisy or host-timed on either side (:func:`uncertain_ids`);
    ``measurements`` the current results, whose CV counts in the noise.
    """
    timed = {m.id: m.timing for m in measurements if m.timing is not None}
    return frozenset(
        r.id
        for r in results
        if r.id in uncertain
        and within_noise(
            r.check("time"),
            timed[r.id].summary.cv if r.id in timed else None,
            r.id in timed and timed[r.id].host_timed,
        )
    )


def hedge(m: Measurement, result: GateResult | None) -> str | None:
    """Why this result's verdict may be noise, or None: an :func:`uncertainty` that applies."""
    why = uncertainty(m)
    if why is None or result is None or m.timing is None:
        return why
    t = m.timing
    return why if within_noise(result.check("time"), t.summary.cv, t.host_timed) else None


def run_gate_table(
    results: Sequence[GateResult], measurements: Sequence[Measurement], missing: Sequence[str] = ()
) -> str:
    """A run's gate table, its results hedged by :func:`hedged_ids`.

    The gated run saves it, and ``confirm`` draws it again once A/Bs have decided some
    results: drawn with every uncertain id as noisy, it had called an A/B's slowdown and
    a 3.16x regression "(noisy)" (a review, 2026-12-07).
    """
    hedged = hedged_ids(results, uncertain_ids(measurements), measurements)
    return gate_table(results, missing, hedged, unsampled_ids(measurements))
