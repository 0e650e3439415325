"""``gpugauge env``: the environment fingerprint as JSON, optionally with the ceilings."""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def env_command(args: argparse.Namespace) -> int:
    """Print the fingerprint; NVML where it opens, else the reason it did not."""
    import torch

    from gpugauge.measure.ceilings import measure_ceilings
    from gpugauge.measure.environment import fingerprint
    from gpugauge.measure.nvml import Nvml, maybe_nvml

    with maybe_nvml() as nvml:
        ok = isinstance(nvml, Nvml)
        info = fingerprint(Path.cwd(), nvml if ok else None, None if ok else str(nvml))
    if args.ceilings:
        device = "cuda" if torch.cuda.is_available() else "cpu"
        info["ceilings"] = measure_ceilings(device).as_dict()
    print(json.dumps(info, indent=2, default=str))
    return 0


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Add ``env`` to ``gpugauge``'s subparsers."""
    env = sub.add_parser(
        "env",
        help="print the environment fingerprint (GPU, driver, CUDA, torch, ...) as JSON",
        description="Print this machine's environment fingerprint as JSON, as every saved "
        "run records it: Python and platform, CPU, torch and torchvision with their numerics "
        "flags, CUDA and cuDNN, the GPUs and driver (through NVML), and the git commit of "
        "the checkout. Exit status: 0.",
    )
    env.add_argument(
        "--ceilings",
        action="store_true",
        help="also measure the device's ceilings (copy bandwidth, matmul TFLOP/s per dtype; "
        "the GPU when one is visible, else the CPU)",
    )
    env.set_defaults(func=env_command)
