"""What a layer_fit block's training step costs at GPipe's micro-batch sizes (one GPU).

Question (issue 10): a pipeline splits the seed's batch of 16 into micro-batches; does a
block's step shrink in proportion, or does splitting cost more in total? Answer
(docs/lab/gpu-runs.md, run 27, an H200, block costs timed as a stack of 8; docs/lab/experiments.md,
"microbatch_costs"): a conv block at batch 8, 4, 2 cost 1.16x, 1.35x and 2.08x of batch
16's in total, a head linear 1.57x, 2.88x and 5.65x: small micro-batches waste the GPU,
and with 4 parts the head's linears make each part dear (docs/layer_fit.md, "Small
micro-batches waste the GPU").

Run from the checkout on one GPU:

    python -m experiments.microbatch_costs

A conv block's and a head linear's training step at batch 16 split in 1, 2, 4 and 8
parts (the family's :func:`measure_costs`, seed method); "x parts / full" is what a step
split in that many parts costs against the whole batch's.
"""

from __future__ import annotations

import argparse


def main() -> None:
    """Time the block costs at each micro-batch size and print the table."""
    import torch

    from gpugauge.families.layer_fit.costs import measure_costs
    from gpugauge.families.layer_fit.memory_model import MemoryModel
    from gpugauge.report.tables import render

    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()
    model = MemoryModel()
    rows, full = [], None
    for parts in (1, 2, 4, 8):
        costs = measure_costs(model, "cuda:0", batch=model.batch // parts)
        full = full or costs
        rows.append(
            [
                str(model.batch // parts),
                f"{costs.conv:.4g}",
                f"{parts * costs.conv / full.conv:.2f}x",
                f"{costs.linear:.4g}",
                f"{parts * costs.linear / full.linear:.2f}x",
            ]
        )
    name = f"{torch.cuda.get_device_name()} (torch {torch.__version__})"
    headers = ["batch", "conv block ms", "x parts / full", "linear ms", "x parts / full"]
    print(render(headers, rows, f"layer_fit block costs per micro-batch on {name}"))


if __name__ == "__main__":
    main()
