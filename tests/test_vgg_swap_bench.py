"""The vgg_swap bench's own logic at CPU sizes."""

import pytest

from gpugauge.families.vgg_swap.workload import SwapCase, cases, check_swap_equivalence, make_step


def small(**kw: object) -> SwapCase:
    base = dict(
        arch="vgg11",
        batch_norm=False,
        variant="normal",
        mode="train",
        dtype="fp32",
        batch=2,
        image=32,
        num_classes=10,
        device="cpu",
        profile="smoke",
    )
    return SwapCase(**{**base, **kw})


@pytest.mark.parametrize("bn", [False, True])
@pytest.mark.slow
def test_equivalence_check_passes_for_the_real_swap(bn: bool) -> None:
    check = check_swap_equivalence(small(batch_norm=bn))
    assert check["outputs_identical"]
    assert check["max_grad_rel_diff"] < 1e-5


@pytest.mark.parametrize("mode", ["infer", "train"])
@pytest.mark.slow
def test_steps_run(mode: str) -> None:
    step = make_step(small(mode=mode, variant="swapped"))
    out = step()
    assert out is not None


def test_seed_profile_has_the_seed_shape() -> None:
    gpu = [c for c in cases("seed") if c.device == "cuda"]
    assert {(c.arch, c.batch, c.image, c.num_classes) for c in gpu} == {("vgg16", 128, 224, 1000)}
    assert {c.dtype for c in gpu} == {"fp32", "bf16"}
    assert len({c.id for c in cases("full")}) == len(cases("full"))


@pytest.mark.slow
def test_a_training_step_times_the_same_numbers_at_every_round() -> None:
    """At lr 0.01 the fixed batch drove VGG-16 to NaN by step 24 (a review, 2026-12-06).

    At lr 0 every step runs SGD's kernels on the same weights: the loss stays finite and
    where it started (but for dropout), and the momentum buffers are written, as in a step
    that moves them.
    """
    import math

    import torch

    step = make_step(small(arch="vgg16"))
    losses = [float(step().detach()) for _ in range(30)]
    assert all(math.isfinite(x) for x in losses), losses
    assert max(losses) < 1.2 * min(losses), losses  # dropout's masks move it, no more
    opt = next(
        c.cell_contents for c in step.__closure__ if isinstance(c.cell_contents, torch.optim.SGD)
    )
    assert all("momentum_buffer" in s for s in opt.state.values())
