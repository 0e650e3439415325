"""gpugauge: a pytest-based GPU benchmark suite for PyTorch.

The harness measures with CUDA events (or ``perf_counter_ns`` on a CPU), keeps every
sample, and records memory, NVML energy, device ceilings and an environment fingerprint
beside them, through pytest-benchmark's fixture and storage.

Extension points: all that a project implements or calls (docs/benchmarks.md shows them at work).

- ``gpugauge.runtime.gauge.Gauge``: the ``gauge`` fixture; ``gauge(fn, *args)``,
  ``measure``, ``record``, ``phase``, ``artifact_path`` and ``compare``.
- ``gpugauge.plugin.parametrize_cases``: a bench file's cases as pytest parameters.
- ``gpugauge.results.measurement.Spec``: what a case is (its id, family and device).
- ``gpugauge.results.measurement.Measurement``: a result built elsewhere, for ``record``.
- ``gpugauge.measure.timing.measure``: the one timing primitive, for rounds timed elsewhere.
- ``gpugauge.family.record.Family``: a family's record, declared by one entry point of
  the ``gpugauge.families`` group.
- ``gpugauge.family.record.Chart``: one figure of the report.
- ``gpugauge.runtime.markers.DEVICE_MARKERS``: the markers a test may carry.
- ``gpugauge.measure.timing.RoundClock``: a clock for ``timing.measure``'s rounds.
"""

__version__ = "0.1.0"
