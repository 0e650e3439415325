"""A distributed rank's data stage alone, as the rank makes it, in host seconds (issue 48).

Loads each case's data as :func:`gpugauge.families.distributed.rank.rank_main` does
(ResNet-18's epochs through the seed's transforms, else a pool of synthetic batches, in
page-locked host memory), with ``--module FILE`` taking an older ``data.py`` in place of
today's. Run two at once to see what an A/B's two sides, launching together, pay:

    python3 docs/lab/data_stage.py resnet18-single-1gpu-b512-32px-cuda ... &
    python3 docs/lab/data_stage.py --module /tmp/old_data.py resnet18-single-1gpu-b512-32px-cuda

Each stage ends on a synchronized device: bookkeeping of a launch, not GPU work timed.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import time
from types import ModuleType

import torch

from gpugauge.families.distributed import data as today
from gpugauge.families.distributed.cases import cases
from gpugauge.launch.worker import RankContext


def data_module(path: str | None) -> ModuleType:
    """Today's data module, or the one in file ``path``."""
    if path is None:
        return today
    spec = importlib.util.spec_from_file_location("older_data", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("ids", nargs="+", help="distributed case ids of the seed profile")
    parser.add_argument("--module", default=None, help="an older data.py to time instead")
    args = parser.parse_args()
    data = data_module(args.module)
    ctx = RankContext(0, 0, 1, "cuda:0", "nccl")
    torch.ones(1, device=ctx.device)  # the CUDA context, as the launcher makes it first
    by_id = {c.id: c for c in cases("seed")}
    total = 0.0
    for case_id in args.ids:
        case = by_id[case_id]
        t0 = time.perf_counter()
        if case.model == "resnet18":
            loaded = data.cifar_epochs(case, ctx, pin=True)
        else:
            loaded = data.synthetic_pool(case, pin=True)
        torch.cuda.synchronize()
        seconds = time.perf_counter() - t0
        total += seconds
        print(json.dumps({"case": case_id, "data_s": round(seconds, 3)}), flush=True)
        del loaded
    said = {"module": args.module or "today", "threads": torch.get_num_threads()}
    print(json.dumps(said | {"all_s": round(total, 3)}))


if __name__ == "__main__":
    main()
