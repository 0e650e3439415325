"""Why a graphed fp32 VGG-16 or ResNet-18 step differs from the eager one.

Question (issue 24): on an H100 (2026-11-25, docs/lab/gpu-runs.md run 56) the graphed fp32 steps
of VGG-16 and ResNet-18 moved the parameters 5.8% away from the eager steps' displacement
after 6 steps, while every bf16 step and the fp32 MLP, LeNet and AlexNet steps matched
bitwise or to 1e-6. fp32 convolutions run in TF32 by default (cuDNN's ``allow_tf32``):
does the difference go with TF32 (another cuDNN algorithm under capture, rounded
differently, then amplified by training), or does it stay with TF32 off (a fault of the
capture)? Each case's check runs twice with the default flags and twice with TF32 off.

Run on one GPU from the checkout::

    python -m experiments.amp_graph_tf32
"""

from __future__ import annotations

from dataclasses import replace

from gpugauge.families.amp.graphed import check_graphed
from gpugauge.families.amp.workload import cases, tf32_flags


def main() -> None:
    """Print each check's relative difference under each TF32 mode."""
    wanted = {"vgg16", "resnet18", "alexnet"}
    picked = [
        c
        for c in cases("seed")
        if getattr(c, "graphs", False) and c.precision == "fp32" and c.model in wanted
    ]
    for case in picked:
        for mode in ("default", "default", "off", "off"):
            with tf32_flags(mode):
                _, check = check_graphed(replace(case))
            print(
                f"{case.id} tf32={mode}: rel_diff {check.rel_diff:.3g} "
                f"(worst {check.worst} {check.worst_rel_diff:.3g}; tolerance {check.tolerance:g})",
                flush=True,
            )


if __name__ == "__main__":
    main()
