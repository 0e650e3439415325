"""One flat row per metric of a result: the columns of ``history export`` and ``to_frame``."""

from __future__ import annotations

import json
from typing import Any

from gpugauge.history.records import Point, time_text

COLUMNS = (
    "time_utc",
    "run_id",
    "host",
    "device_class",
    "bench_id",
    "family",
    "attempt",
    "metric",
    "median",
    "ci_low",
    "ci_high",
    "n",
    "run_medians",
    "sm_clock_mhz",
    "power_w",
    "verdict",
    "reference",
    "accepted",
    "torch",
    "driver",
    "cuda_runtime",
    "cudnn",
    "commit",
    "profile",
    "kernels",
)


def flat_row(p: Point) -> dict[str, Any]:
    """The :data:`COLUMNS` of one point; lists as JSON text."""
    return {
        "time_utc": time_text(p.run.time),
        "run_id": p.run.id,
        "host": p.run.host,
        "device_class": p.result.device_class,
        "bench_id": p.result.bench_id,
        "family": p.result.family,
        "attempt": p.result.attempt,
        "metric": p.metric.metric,
        "median": p.metric.median,
        "ci_low": p.metric.ci_low,
        "ci_high": p.metric.ci_high,
        "n": p.metric.n,
        "run_medians": json.dumps(list(p.metric.run_medians)),
        "sm_clock_mhz": p.result.sm_clock_mhz,
        "power_w": p.result.power_w,
        "verdict": p.metric.verdict or p.result.verdict,
        "reference": p.metric.reference,
        "accepted": p.result.accepted,
        "torch": p.run.torch,
        "driver": p.run.driver,
        "cuda_runtime": p.run.cuda_runtime,
        "cudnn": p.run.cudnn,
        "commit": p.run.commit,
        "profile": p.run.profile,
        "kernels": json.dumps([{"name": k.name, "share": k.share} for k in p.result.kernels]),
    }
