"""Command line: ``python -m gpugauge env`` prints the fingerprint and measured ceilings."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from gpugauge.ceilings import measure_ceilings
from gpugauge.environment import fingerprint
from gpugauge.nvml import Nvml, maybe_nvml


def _env(args: argparse.Namespace) -> int:
    import torch

    with maybe_nvml() as nvml:
        ok = isinstance(nvml, Nvml)
        info = fingerprint(Path.cwd(), nvml if ok else None, None if ok else str(nvml))
    if args.ceilings:
        device = "cuda" if torch.cuda.is_available() else "cpu"
        info["ceilings"] = measure_ceilings(device).as_dict()
    print(json.dumps(info, indent=2, default=str))
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m gpugauge`` and the ``gpugauge`` script."""
    parser = argparse.ArgumentParser(prog="gpugauge", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    env = sub.add_parser("env", help="print the environment fingerprint as JSON")
    env.add_argument("--ceilings", action="store_true", help="also measure device ceilings")
    env.set_defaults(func=_env)
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    raise SystemExit(main())
