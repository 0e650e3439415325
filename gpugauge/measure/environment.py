"""The environment fingerprint saved with every result: what produced these numbers.

Also names the *device class* (``nvidia-h100-80gb-hbm3``, ``cpu-x86_64``), the key under
which baselines are stored: results are never compared across device classes.
"""

from __future__ import annotations

import importlib.metadata
import os
import platform
import re
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from gpugauge.measure.nvml import Nvml

SCHEMA_VERSION = 2  # of every saved result, baseline and fingerprint; 1 is still read


def slug(text: str) -> str:
    """Lower-case, dash-separated: 'NVIDIA H100 80GB HBM3' -> 'nvidia-h100-80gb-hbm3'."""
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def device_class(device: str | Sequence[str]) -> str:
    """Baseline key of one torch device string ('cuda', 'cuda:1', 'cpu') or of several.

    Several devices (a split model, one per rank) say how many: ``2x-nvidia-h200``; one
    device keeps the plain name, so single-GPU baselines keep their key.
    """
    import torch

    devices = [device] if isinstance(device, str) else list(device)
    if not devices:
        raise ValueError("device_class needs at least one device")
    names = set()
    for d in devices:
        dev = torch.device(d)
        if dev.type == "cuda":
            names.add(slug(torch.cuda.get_device_name(dev)))
        else:
            names.add(slug(f"cpu-{platform.machine()}"))
    base = "+".join(sorted(names))
    return base if len(devices) == 1 else f"{len(devices)}x-{base}"


def cpu_model() -> str:
    """The CPU's model name (from /proc/cpuinfo on Linux)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.processor() or platform.machine()
    match = re.search(r"^model name\s*:\s*(.+)$", text, re.MULTILINE)
    return match.group(1).strip() if match else platform.machine()


COMMIT_ENV = "GPUGAUGE_GIT_COMMIT"


def git_commit(root: Path) -> dict[str, Any]:
    """The suite's commit and whether the tree had changes; nulls with a reason outside git.

    ``$GPUGAUGE_GIT_COMMIT``, where set, names the commit instead: a build farm that
    copies the tree knows what it copied, and a copy may carry a stale ``.git`` (the GPU
    machines' copies answered an older commit than the tree held, 2026-11-25).
    """
    given = os.environ.get(COMMIT_ENV, "").strip()
    if given:
        return {"commit": given, "dirty": None, "reason": f"from ${COMMIT_ENV}"}

    def git(*args: str) -> str:
        out = subprocess.run(
            ["git", *args], cwd=root, capture_output=True, text=True, timeout=10, check=True
        )
        return out.stdout.strip()

    try:
        return {"commit": git("rev-parse", "HEAD"), "dirty": bool(git("status", "--porcelain"))}
    except (OSError, subprocess.SubprocessError) as err:
        reason = f"not a git checkout: {type(err).__name__}"
        return {"commit": None, "dirty": None, "reason": reason}


def torch_flags() -> dict[str, Any]:
    """Numerics flags that change what a benchmark measures."""
    import torch

    return {
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
        "cuda_matmul_allow_tf32": torch.backends.cuda.matmul.allow_tf32,
        "cudnn_allow_tf32": torch.backends.cudnn.allow_tf32,
        "cudnn_benchmark": torch.backends.cudnn.benchmark,
        "cudnn_deterministic": torch.backends.cudnn.deterministic,
        "num_threads": torch.get_num_threads(),
    }


def apply_torch_flags(flags: dict[str, Any]) -> None:
    """Set this process's numerics flags to ``flags``, as :func:`torch_flags` read them.

    For a fresh process that must choose the kernels its parent would.
    """
    import torch

    torch.set_float32_matmul_precision(flags["float32_matmul_precision"])
    torch.backends.cuda.matmul.allow_tf32 = flags["cuda_matmul_allow_tf32"]
    torch.backends.cudnn.allow_tf32 = flags["cudnn_allow_tf32"]
    torch.backends.cudnn.benchmark = flags["cudnn_benchmark"]
    torch.backends.cudnn.deterministic = flags["cudnn_deterministic"]
    torch.set_num_threads(flags["num_threads"])


def host_name(first_gpu_uuid: str | None, node: str | None) -> str | None:
    """The host a run belongs to: its first GPU's NVML UUID, else the machine's name.

    The one rule for a session appending to the history (``history.capture.host_id``, from
    NVML and ``platform.node()`` now) and a saved run read back (``SavedRun.host``, from
    its fingerprint's GPUs and pytest-benchmark's ``machine_info['node']``), so that an
    imported run is filed under the host its live append was. None: neither is known.
    """
    return first_gpu_uuid or node or None


def fingerprint(root: Path, nvml: Nvml | None, nvml_reason: str | None = None) -> dict[str, Any]:
    """Everything about the software and hardware settings that a number depends on.

    Taken once, at session start, before any test changes a numerics flag: the TF32 and
    cuDNN flags here are the run's defaults, not one test's context.
    """
    import torch

    try:  # its metadata, not an import: torchvision's pulls in torch._dynamo, seconds
        tv: str | None = importlib.metadata.version("torchvision")
    except importlib.metadata.PackageNotFoundError:
        tv = None
    info: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpu": cpu_model(),
        "cpu_count": os.cpu_count(),
        "torch": torch.__version__,
        "torchvision": tv,
        "cuda_runtime": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        "flags": torch_flags(),
        "git": git_commit(root),
        "gpus": [],
        "gpu_count": torch.cuda.device_count() if torch.cuda.is_available() else 0,
        "driver": None,
        "nvml": None if nvml is not None else nvml_reason,
    }
    if info["gpu_count"]:
        info["driver"] = nvml.driver_version() if nvml else None
        for i in range(info["gpu_count"]):
            props = torch.cuda.get_device_properties(i)
            gpu: dict[str, Any] = {
                "index": i,
                "name": props.name,
                "device_class": slug(props.name),
                "capability": f"{props.major}.{props.minor}",
                "multiprocessors": props.multi_processor_count,
                "memory_bytes": props.total_memory,
                "l2_bytes": getattr(props, "L2_cache_size", None),
            }
            if nvml is not None:
                # settings only: live clocks, power and temperature are in each result's
                # gpu_before/gpu_after, so identical runs have identical fingerprints
                dev = nvml.device(i)
                gpu.update(
                    uuid=dev.uuid(),  # the history's host (host_name): fixed, not a reading
                    max_sm_clock_mhz=dev.max_sm_clock_mhz(),
                    power_limit_w=dev.power_limit_w(),
                )
            info["gpus"].append(gpu)
    return info
