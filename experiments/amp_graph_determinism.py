"""Why the graphed fp32 steps of VGG-16 and ResNet-18 fail their check: capture, or eager steps.

Question (issue 24): on H100s (2026-11-25, docs/lab/gpu-runs.md runs 56-57) the graphed fp32
steps of VGG-16 and ResNet-18 moved the parameters 5.8% (TF32 on) or 2.2-3.0% (TF32 off)
away from the eager steps' displacement after 6 steps, while every bf16 step matched
bitwise (``experiments/amp_graph_tf32.py``). TF32 off shrinks each rounding ten-thousandfold
but the gap only by half: the gap does not scale with rounding. Two readings:

- the capture is wrong (a kernel missing, doubled or reading a stale buffer); or
- the eager step itself is not bitwise repeatable (cuDNN weight gradients that sum with
  atomics, or other algorithms chosen under capture), and a few steps of training grow any
  last-bit difference into percents: a ReLU whose input sits near zero, or a max-pool window
  with two near-equal inputs, sends a whole gradient elsewhere when one bit changes.

So each case runs (a) eager against eager, the same seed twice; (b) the suite's check,
graphed against eager (:func:`~gpugauge.families.amp.graphed.check_capture`), after 1 and
after 3 replays; each with cuDNN's default algorithm choice and with
``torch.backends.cudnn.deterministic``. The second reading predicts that (a)
shows the same gap as (b) by default, and that both vanish with deterministic algorithms.

Answer (run 67, H100, 2026-11-26): the second. By default eager against eager differed by
5.62% (VGG-16) and 5.76% (ResNet-18), graphed against eager by 6.08% and 5.84%; with
deterministic algorithms every comparison of every model was 0, bitwise. Since then the
suite's check runs deterministic (:func:`~gpugauge.families.amp.graphed.check_graphed`).

Run on one GPU from the checkout::

    python -m experiments.amp_graph_determinism [--json FILE]
"""

from __future__ import annotations

import argparse
import gc
import json
from dataclasses import replace
from pathlib import Path

import torch

from gpugauge.families.amp.graphed import (
    GraphCheck,
    capture,
    check_capture,
    compare_displacements,
    deterministic_cudnn,
)
from gpugauge.families.amp.workload import AmpCase, Trainer, cases, image_batch

MODELS = ("vgg16", "resnet18", "alexnet", "lenet")  # the two that fail, two that pass
STEPS = 6  # the check's: 3 warm-up steps and 3 replays


def eager_twice(case: AmpCase, steps: int) -> GraphCheck:
    """Two eager runs of ``steps`` steps from the same seed, compared as the check compares."""
    params, names, init = [], [], []
    for _ in range(2):
        trainer = Trainer(case.eager)
        x, y = trainer.to_device(*image_batch(case.input_shape, case.defn.num_classes))
        names = [n for n, _ in trainer.model.named_parameters()]
        init = [p.detach().clone() for p in trainer.model.parameters()]
        for _ in range(steps):
            trainer.step(x, y)
        params.append([p.detach().clone() for p in trainer.model.parameters()])
        del trainer, x, y
    return compare_displacements(names, init, params[0], params[1], case.precision, steps, 0)


def free() -> None:
    """Give the last case's memory back before the next one."""
    gc.collect()
    torch.cuda.synchronize()
    torch.cuda.empty_cache()


def main() -> None:
    """Print one line per (case, cuDNN mode, comparison); optionally write them as JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, help="write the rows here too")
    args = parser.parse_args()
    picked = [
        c
        for c in cases("seed")
        if isinstance(c, AmpCase) and c.device == "cuda" and c.model in MODELS
        if c.precision == "fp32" and not c.channels_last and not c.graphs
    ]
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}", flush=True)
    rows = []
    for case in picked:
        for deterministic in (False, True):
            mode = "deterministic" if deterministic else "default"
            with deterministic_cudnn(deterministic):
                checks = {"eager vs eager": eager_twice(case, STEPS)}
                free()
                for replays in (1, 3):
                    check = check_capture(replace(case, graphs=True), capture, replays)
                    checks[f"graphed vs eager, {replays} replayed"] = check
                    free()
            for what, check in checks.items():
                rows.append({"case": case.id, "cudnn": mode, "what": what, **check.as_dict()})
                print(
                    f"{case.id:34} {mode:13} {what:27} {check.steps} steps: rel_diff "
                    f"{check.rel_diff:.3g} (worst {check.worst} {check.worst_rel_diff:.3g})",
                    flush=True,
                )
    if args.json is not None:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
