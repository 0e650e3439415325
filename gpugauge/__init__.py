"""gpugauge: a pytest-based GPU benchmark suite for PyTorch.

The harness measures with CUDA events (or ``perf_counter_ns`` on a CPU), keeps every
sample, and records memory, NVML energy, device ceilings and an environment fingerprint
beside them, through pytest-benchmark's fixture and storage.
"""

__version__ = "0.1.0"
