"""``python -m gpugauge.families.distributed.workload``: one series across nodes.

The family lives in :mod:`~gpugauge.families.distributed.cases` (what is measured),
:mod:`~gpugauge.families.distributed.rank` (in each torchrun rank) and
:mod:`~gpugauge.families.distributed.results` (launching and recording); this module is
the command line that runs one series by hand, on one node or several.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from gpugauge.families.distributed.cases import (
    OPTIMIZERS,
    cases,
)
from gpugauge.families.distributed.results import CALL, read_series, series_dir
from gpugauge.launch.torchrun import Launch, LaunchError, launch


def _cli_number(kind: type, low: float, what: str) -> Callable[[str], Any]:
    """An argparse type: a finite ``kind`` of at least ``low`` (argparse names the option)."""

    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except (ValueError, OverflowError):
            raise argparse.ArgumentTypeError(f"{text!r} is not {what}") from None
        if not math.isfinite(value) or value < low or (kind is float and value == low):
            raise argparse.ArgumentTypeError(f"{text!r} is not {what}")
        return value

    parse.__name__ = what
    return parse


def main(argv: Sequence[str] | None = None) -> int:
    """Run one series across nodes: the same command on every node, a shared ``--out``.

    Prints the torchrun command, runs it, and (on the node whose ``--out`` then holds
    every rank's file) prints each case's slowest-rank median step time. ``--device cpu``
    runs the gloo CPU cases (CI, and a rendezvous tried out on one machine).
    """
    import shlex

    at_least_1 = _cli_number(int, 1, "a whole number >= 1")
    parser = argparse.ArgumentParser(description=main.__doc__.splitlines()[0])
    parser.add_argument("--model", choices=sorted(OPTIMIZERS), required=True)
    parser.add_argument("--mode", choices=["ddp", "single"], default="ddp")
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument("--nproc-per-node", type=at_least_1, required=True)
    parser.add_argument("--nnodes", type=at_least_1, default=1)
    parser.add_argument(
        "--node-rank", type=_cli_number(int, 0, "a whole number >= 0"), default=None
    )
    parser.add_argument("--rdzv-endpoint", default=None, help="host:port of node 0")
    parser.add_argument("--batch", type=at_least_1, action="append", help="per-GPU batch (repeat)")
    parser.add_argument("--profile", choices=["smoke", "seed", "full"], default="seed")
    parser.add_argument("--out", type=Path, required=True, help="folder shared by every node")
    parser.add_argument(
        "--timeout-s", type=_cli_number(float, 0, "a number of seconds > 0"), default=3600.0
    )
    parser.add_argument("--print-only", action="store_true", help="print the command only")
    args = parser.parse_args(argv)
    if not str(args.out).strip() or str(args.out) == ".":
        parser.error("--out: name the folder shared by every node")
    if args.nnodes > 1 and not args.rdzv_endpoint:
        parser.error(f"--nnodes {args.nnodes} needs --rdzv-endpoint host:port (node 0's)")
    if args.node_rank is not None and args.node_rank >= args.nnodes:
        parser.error(f"--node-rank {args.node_rank}: must be below --nnodes {args.nnodes}")
    gpus = args.nproc_per_node * args.nnodes
    members = sorted(
        {
            replace(c, mode=args.mode, gpus=gpus)
            for c in cases(args.profile)
            if c.model == args.model
            and c.device == args.device
            and c.mode == "single"
            and (not args.batch or c.batch in args.batch)
        },
        key=lambda c: c.batch,
    )
    if not members:
        parser.error(f"no {args.model} cases in profile {args.profile} for {args.batch}")
    folder = series_dir(args.out, members[0])
    spec = {"device": args.device, "cases": [c.as_dict() for c in members], "out": str(folder)}
    job = Launch(CALL, spec, args.nproc_per_node, args.nnodes, args.rdzv_endpoint, args.node_rank)
    print(shlex.join(job.command(folder)), flush=True)
    if args.print_only:
        return 0
    try:
        ranks = launch(job, folder, timeout_s=args.timeout_s)
    except LaunchError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    for cid, r in read_series(members, [x.extra for x in ranks]).items():
        print(f"{cid}: {r.skipped or f'median step {r.timing.summary.median:.3f} ms'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
