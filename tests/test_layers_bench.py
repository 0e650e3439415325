"""The layers family's formulas and cases, checked on the CPU."""

import pytest
from torch.utils.flop_counter import FlopCounterMode

from gpugauge.families.layers.workload import LayerCase, cases, make_round
from gpugauge.measure.ceilings import Ceilings
from gpugauge.measure.memory import ExpectedMemory
from gpugauge.measure.roofline import Work, roofline
from gpugauge.models.layers import LAYERS


def small(layer: str, mode: str, dtype: str = "fp32") -> LayerCase:
    return LayerCase(layer, mode, dtype, "smoke", "cpu")


@pytest.mark.parametrize("layer", ["conv", "linear"])
@pytest.mark.parametrize("mode", ["fwd", "fwdbwd"])
def test_flop_formula_matches_torch_flop_counter(layer: str, mode: str) -> None:
    case = small(layer, mode)
    fn, setup = make_round(case)
    if setup:
        setup()
    with FlopCounterMode(display=False) as counter:
        fn()
    assert case.work().flops == counter.get_total_flops()


def test_bytes_of_relu_and_linear() -> None:
    n = 8 * 3 * 64 * 64
    assert small("relu", "fwd").work().bytes == 2 * n * 4
    assert small("relu", "fwdbwd").work().bytes == 5 * n * 4
    m, k, o = 8, 25088, 4096
    fwd = (m * k + k * o + o + m * o) * 2
    assert small("linear", "fwd", "bf16").work().bytes == fwd


def test_maxpool_counts_indices_where_they_are_kept() -> None:
    cpu_fwd = LayerCase("maxpool", "fwd", "fp32", "smoke", "cpu").expected_memory().parts
    gpu_fwd = LayerCase("maxpool", "fwd", "fp32", "smoke", "cuda").expected_memory().parts
    out = 8 * 3 * 32 * 32
    assert cpu_fwd == {"output": out * 4}
    assert gpu_fwd == {"output": out * 4, "indices": out * 8}


def test_expected_memory_of_a_training_linear() -> None:
    parts = small("linear", "fwdbwd").expected_memory().parts
    assert parts == {
        "output": 8 * 4096 * 4,
        "grad_input": 8 * 25088 * 4,
        "grad_weight": 25088 * 4096 * 4,
        "grad_bias": 4096 * 4,
    }


def test_memory_check_verdicts() -> None:
    exp = ExpectedMemory({"output": 100 * 2**20}, "cuDNN workspace")
    assert exp.check(102 * 2**20)["verdict"] == "within 5%"
    assert exp.check(300 * 2**20)["verdict"].endswith("over: cuDNN workspace")
    assert "unexplained" in exp.check(50 * 2**20)["verdict"]
    assert "unexplained" in ExpectedMemory({"x": 100 * 2**20}).check(300 * 2**20)["verdict"]
    assert ExpectedMemory({}).check(2**20)["verdict"] == "within 5%"  # allocator slack
    assert "not comparable" in exp.check(None)["verdict"]


def test_roofline_of_a_memory_bound_op() -> None:
    c = Ceilings("cuda", copy_gbps=4000.0, copy_bytes=0, matmul_tflops={"fp32": 50.0})
    r = roofline(Work(flops=1e6, bytes=4e9, dtype="fp32"), median_ms=1.25, ceilings=c)
    assert r.bound == "memory"
    assert r.achieved_gbps == pytest.approx(3200.0)
    assert r.attainable_ms == pytest.approx(1.0)
    assert r.share == pytest.approx(0.8)
    assert r.as_dict()["share_of_bandwidth"] == pytest.approx(0.8)


def test_roofline_falls_back_to_fp32_rate() -> None:
    c = Ceilings("cpu", copy_gbps=20.0, copy_bytes=0, matmul_tflops={"fp32": 0.2})
    r = roofline(Work(flops=2e12, bytes=1.0, dtype="bf16"), median_ms=20_000, ceilings=c)
    assert (r.peak_tflops, r.bound, r.share) == (0.2, "compute", pytest.approx(0.5))


@pytest.mark.parametrize("mode", ["fwd", "fwdbwd"])
def test_inplace_relu_rounds_repeat(mode: str) -> None:
    fn, setup = make_round(small("relu", mode))
    for _ in range(3):
        if setup:
            setup()
        fn()


def test_ids_and_profiles() -> None:
    seed = [c for c in cases("seed") if c.device == "cuda"]
    assert "conv-fwd-bf16-seed-cuda" in {c.id for c in seed}
    assert {c.shape for c in seed if c.layer != "linear"} == {(256, 3, 224, 224)}
    assert {c.shape for c in seed if c.layer == "linear"} == {(256, 25088)}
    assert not [c for c in seed if c.layer == "relu" and c.dtype == "tf32"]
    for profile in ("smoke", "seed", "full"):
        ids = [c.id for c in cases(profile)]
        assert len(ids) == len(set(ids))
    assert set(LAYERS) == {"relu", "maxpool", "conv", "linear"}
