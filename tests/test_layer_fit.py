"""layer_fit: the model, the memory model, the search, OOM handling and the split, on a CPU."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
import torch
from torch import nn

from gpugauge.families.layer_fit import cut_fit
from gpugauge.families.layer_fit.backends import (
    SIM_UNMODELLED_BYTES,
    SimAllocator,
    SimulatedBackend,
)
from gpugauge.families.layer_fit.budget import SEED_BUDGET, GiB, MiB, budgets, parse_budget
from gpugauge.families.layer_fit.cases import FitCase, SplitCase, cases, split_cases
from gpugauge.families.layer_fit.costs import BlockCosts
from gpugauge.families.layer_fit.graphed import GraphedSplit, capture_stage
from gpugauge.families.layer_fit.memory_model import MemoryModel, allocator_bytes
from gpugauge.families.layer_fit.pipe import held_parts
from gpugauge.families.layer_fit.plan import SplitError, plan_split
from gpugauge.families.layer_fit.probe import MemoryNotReleased, Probe, probe
from gpugauge.families.layer_fit.runner import SplitRunner
from gpugauge.families.layer_fit.search import (
    probe_bound,
    run_search,
    search_case,
    search_frontier,
    seconds_line,
)
from gpugauge.families.layer_fit.tables import probe_table
from gpugauge.families.layer_fit.verify import check_pipeline
from gpugauge.launch.fresh import in_fresh_process
from gpugauge.measure.environment import torch_flags
from gpugauge.models.stacked import HEAD_WIDTH, blocks, stacked
from gpugauge.results.measurement import in_nightly

SEED = MemoryModel()
A = allocator_bytes(16 * 64 * 112 * 112 * 4)  # one conv activation: 49 MiB -> 50 MiB segment


def n_params(module: torch.nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


# ----------------------------------------------------------------------------- model


def test_the_nightly_gates_the_graphed_naive_and_1f1b2_splits_and_the_single_gpu_cases() -> None:
    gpu_splits = [c for c in split_cases("seed") if c.device == "cuda"]
    assert [c.id for c in gpu_splits if not c.nightly and c.graphs] == [
        "split-gpipe2-c138-m62-11gib-expseg-graphs-cuda",
        "split-gpipe4-c138-m62-11gib-expseg-graphs-cuda",
        "split-1f1b4-c138-m62-11gib-expseg-graphs-cuda",
    ]
    assert [c.id for c in gpu_splits if c.nightly] == [
        "split-naive-c138-m62-11gib-expseg-graphs-cuda",
        "split-1f1b2-c138-m62-11gib-expseg-graphs-cuda",
        "split-single-m62-11gib-cuda",
    ]
    assert all(in_nightly(c) for c in cases("seed"))  # the searches: the single-GPU job's


def test_parameter_counts_are_pinned() -> None:
    with torch.device("meta"):
        assert n_params(stacked(1, 1)) == 36_928 + 65_000
        w = HEAD_WIDTH
        expected = 61 * 36_928 + (64 * w + w) + 60 * (w * w + w) + (w * 1000 + 1000)
        assert n_params(stacked(61, 62)) == expected == 670_532_648


def test_model_runs_and_keeps_the_shape() -> None:
    net = stacked(3, 3, width=32)
    out = net(torch.randn(2, 64, 8, 8))
    assert out.shape == (2, 1000)
    assert [type(b[0]).__name__ for b in blocks(2, 2, width=8)] == [
        "Conv2d",
        "Conv2d",
        "AdaptiveAvgPool2d",
        "Linear",
    ]


def test_blocks_take_one_device_per_block() -> None:
    with pytest.raises(ValueError, match="3 devices given for 4 blocks"):
        blocks(2, 2, device=["cpu"] * 3)
    with pytest.raises(ValueError, match="at least one linear"):
        stacked(2, 0)


# ---------------------------------------------------------------------- memory model


def test_allocator_rounding() -> None:
    assert allocator_bytes(1) == 512
    assert allocator_bytes(147_456) == 147_456
    assert allocator_bytes(11 * MiB + 1) == 12 * MiB
    assert 50 * MiB == A
    # 1-10 MiB: a share of a 20 MiB segment (three batch-2 activations of 6.125 MiB fit one)
    assert allocator_bytes(MiB) == MiB
    assert allocator_bytes(6 * MiB + 128 * 1024) == -(-20 * MiB // 3 // 512) * 512
    assert allocator_bytes(2 * MiB) == 2 * MiB  # ten to a segment
    assert allocator_bytes(7 * MiB) == 10 * MiB  # two to a segment, 6 MiB left over


def test_train_terms_by_hand() -> None:
    n, m = 61, 62
    t = SEED.predict(n, m, "train")
    conv_p = n * (147_456 + 512)
    w = HEAD_WIDTH
    head_p = (
        allocator_bytes(64 * w * 4)
        + allocator_bytes(w * 4)
        + 60 * (allocator_bytes(w * w * 4) + allocator_bytes(w * 4))
        + allocator_bytes(w * 1000 * 4)
        + allocator_bytes(4000)
    )
    assert t.params == conv_p + head_p
    assert t.optimizer == t.params  # one momentum buffer per parameter
    assert t.grads == head_p  # at the top of the backward pass only the head's exist
    # input + N ReLU outputs + 2 gradients in flight; the rest is small head activations
    assert (n + 3) * A <= t.activations < (n + 3) * A + 16 * MiB
    assert t.peak_at == "backward"
    assert t.total == sum(b for _, b in SEED.plan(n, m, "train"))


def test_infer_holds_two_outputs_and_the_input() -> None:
    t = SEED.predict(100, 62, "infer")
    assert t.grads == t.optimizer == 0
    assert 3 * A <= t.activations < 3 * A + MiB
    assert SEED.predict(1, 62, "infer").activations < 3 * A


def test_seed_table_is_reproduced_in_training_not_in_inference() -> None:
    budget = parse_budget(SEED_BUDGET)
    assert budget == 11 * GiB
    # the seed: 61 conv + 62 fc fit, 62 + 61 fit, 62 + 62 did not (needs > 17 MiB workspace)
    with_ws = MemoryModel(workspace_bytes=32 * MiB)
    assert with_ws.frontier(62, budget, "train", 4096) == 61
    assert with_ws.frontier(61, budget, "train", 4096) >= 62
    assert SEED.frontier(62, budget, "train", 4096) == 62
    # in inference the conv stack costs only its parameters: tens of thousands fit
    assert SEED.frontier(62, budget, "infer", 10**6) > 50_000


def test_stages_add_up_to_about_the_whole() -> None:
    n, m = 138, 62
    whole = SEED.predict(n, m, "train")
    s0 = SEED.stage(n, m, 0, 80, "train")
    s1 = SEED.stage(n, m, 80, n + m, "train")
    assert s0.params + s1.params == whole.params
    # the receiving device holds its own copy of the cut activation and 2 in flight
    assert s0.activations + s1.activations == whole.activations + 3 * A
    with pytest.raises(ValueError, match="not inside"):
        SEED.stage(n, m, 10, 10, "train")


def test_micro_batches_shrink_only_the_gradients_in_flight() -> None:
    one = SEED.stage(138, 62, 0, 80, "train", 1)
    four = SEED.stage(138, 62, 0, 80, "train", 4)
    quarter = allocator_bytes(4 * 64 * 112 * 112 * 4)
    assert one.activations - four.activations == 2 * A - 2 * quarter + 80 * (A - 4 * quarter)


def test_one_f_one_b_holds_two_parts_then_one() -> None:
    n, m, k = 138, 62, 8
    part = allocator_bytes(2 * 64 * 112 * 112 * 4)
    gpipe = [SEED.stage(n, m, 0, 80, "train", k), SEED.stage(n, m, 80, n + m, "train", k)]
    held = held_parts("1f1b", k)
    assert held == (2, 1)
    ofob = [SEED.stage(n, m, 0, 80, "train", k, 2), SEED.stage(n, m, 80, n + m, "train", k, 1)]
    assert gpipe[0].activations - ofob[0].activations == (k - 2) * 80 * part
    # device 1 also keeps the input of the part sent ahead (2 received, not 8), and the
    # head's small outputs of one part instead of eight
    convs = (k - 1) * 58 * part + (k - 2) * part
    assert 0 < gpipe[1].activations - ofob[1].activations - convs < 16 * MiB
    assert held_parts("gpipe", 4) == (4, 4)
    with pytest.raises(ValueError, match="holds 1 to 8"):
        SEED.stage(n, m, 0, 80, "train", k, 9)


def test_one_f_one_b_lets_the_cut_move_toward_time_balance() -> None:
    budget = float(11 * GiB)
    costs = BlockCosts(conv=1.0, linear=0.1, source="test")
    gpipe = plan_split(SEED, 138, 62, (budget, budget), costs, 8, schedule="gpipe")
    ofob = plan_split(SEED, 138, 62, (budget, budget), costs, 8, schedule="1f1b")
    assert ofob.chosen.time_share() < gpipe.chosen.time_share()
    assert ofob.chosen.layers[0][0] < gpipe.chosen.layers[0][0]
    assert all(b <= budget * 0.98 for b in ofob.chosen.bytes)


def test_budget_parsing_is_strict() -> None:
    assert parse_budget("device") is None
    assert parse_budget("512MiB") == 512 * MiB
    for bad in ("11", "GiB", "-1GiB", "eleven GiB", "0GiB"):
        with pytest.raises(ValueError, match="budget"):
            parse_budget(bad)


# --------------------------------------------------------------------------- search


def threshold_probe(limit: int, m: int = 1) -> tuple[list[int], object]:
    tried: list[int] = []

    def try_n(n: int) -> Probe:
        tried.append(n)
        return Probe(n, m, n <= limit, 0, 0, None, 0.0, 0)

    return tried, try_n


@pytest.mark.parametrize("limit", [0, 1, 2, 3, 61, 64, 65, 221, 1000, 4095, 4096])
@pytest.mark.parametrize("start", [1, 50, 62, 3000])
def test_search_finds_every_frontier_within_the_bound(limit: int, start: int) -> None:
    tried, try_n = threshold_probe(limit)
    result = search_frontier(try_n, 4096, start)
    assert result.max_n == limit
    assert result.censored == (limit == 4096)
    assert len(tried) == len(set(tried)), "a size was probed twice"
    if start == 1 or abs(start - limit) <= limit:
        assert len(tried) <= probe_bound(limit), tried


def test_search_from_one_is_exponential_then_binary() -> None:
    tried, try_n = threshold_probe(61)
    search_frontier(try_n, 4096, 1)
    assert tried[:7] == [1, 2, 4, 8, 16, 32, 64]
    assert len(tried) == 12 <= probe_bound(61) == 16


def test_search_from_a_close_guess_takes_few_probes() -> None:
    tried, try_n = threshold_probe(61)
    search_frontier(try_n, 4096, 62)
    assert tried == [62, 61]


def test_search_rejects_a_bad_cap() -> None:
    with pytest.raises(ValueError, match="cap"):
        search_frontier(lambda n: Probe(n, 1, True, 0, 0, None, 0, 0), 0)


# ----------------------------------------------------------------- OOM and release


def test_simulated_allocator_fails_like_cuda_and_frees_on_collection() -> None:
    sim = SimAllocator(100)
    a = sim.alloc(60, "a")
    with pytest.raises(torch.OutOfMemoryError, match="simulated allocator: out of memory"):
        sim.alloc(50, "b")
    assert sim.allocated == 60
    del a
    assert sim.allocated == 0
    assert sim.peak_allocated == 60


def test_probe_survives_oom_and_memory_is_back_at_start() -> None:
    backend = SimulatedBackend(SEED, "train", 11 * GiB)
    keep = backend.allocator.alloc(3 * MiB, "held by the caller")  # a nonzero start
    fit = probe(backend, 10, 62, 0)
    oom = probe(backend, 500, 62, 0)
    assert fit.fits
    assert not oom.fits
    assert "out of memory" in (oom.error or "")
    assert oom.peak_allocated_bytes <= 11 * GiB - 3 * MiB
    assert fit.peak_allocated_bytes == SEED.predict(10, 62, "train").total + SIM_UNMODELLED_BYTES
    assert backend.allocated() == 3 * MiB
    del keep


class LeakingBackend(SimulatedBackend):
    """A run that stashes a block where the probe cannot free it."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.stash: list[object] = []

    def run(self, n: int, m: int) -> float | None:
        self.stash.append(self.allocator.alloc(MiB, "leaked"))
        return super().run(n, m)


def test_probe_refuses_memory_left_behind() -> None:
    backend = LeakingBackend(SEED, "train", 11 * GiB)
    with pytest.raises(MemoryNotReleased, match="left 1048576 bytes allocated"):
        probe(backend, 10, 62, 0)


class CyclicBackend(SimulatedBackend):
    """A run whose blocks sit in a reference cycle: only the garbage collector frees them."""

    def run(self, n: int, m: int) -> float | None:
        a: list[object] = [self.allocator.alloc(MiB, "cyclic")]
        a.append(a)
        return None


def test_probe_collects_reference_cycles() -> None:
    backend = CyclicBackend(SEED, "train", GiB)
    assert probe(backend, 1, 1, 0).fits
    assert backend.allocated() == 0


def test_probe_lets_other_errors_through() -> None:
    class Broken(SimulatedBackend):
        def run(self, n: int, m: int) -> float | None:
            raise RuntimeError("CUDA error: an illegal memory access was encountered")

    with pytest.raises(RuntimeError, match="illegal memory access"):
        probe(Broken(SEED, "train", GiB), 1, 1, 0)


@pytest.mark.parametrize("m", [1, 62])
def test_simulated_search_lands_on_the_simulated_frontier(m: int) -> None:
    case = FitCase("train", m, SEED_BUDGET, "cpu", 4096)
    backend = SimulatedBackend(case.memory_model, "train", 11 * GiB)
    result = run_search(case, backend)
    truth = SEED.frontier(m, 11 * GiB - SIM_UNMODELLED_BYTES, "train", 4096)
    assert result["max_n"] == truth
    assert result["predicted_max_n"] > truth  # the model does not know the unmodelled bytes
    assert result["within_bound"]
    assert backend.allocated() == 0
    table = probe_table(case, result)
    assert "num_of_conv  num_of_fc  out_of_memory?" in table
    assert "(emulated)" in table


def test_cases_have_unique_ids_and_the_seed_heads() -> None:
    for profile in ("smoke", "seed", "full"):
        ids = [c.id for c in cases(profile)] + [c.id for c in split_cases(profile)]
        assert len(ids) == len(set(ids)), profile
    seed = [c for c in cases("seed") if c.device == "cuda"]
    assert {c.fc for c in seed if c.mode == "train" and c.budget == SEED_BUDGET} >= {61, 62}
    # the nightly keeps the budgeted searches; the whole device is the full profile's
    assert not any(c.budget == "device" for c in seed)
    assert any(c.budget == "device" for c in cases("full") if c.device == "cuda")
    assert FitCase("train", 62, SEED_BUDGET, "cpu", 4096).id == "fit-train-m62-11gib-sim-cpu"
    with pytest.raises(ValueError, match="simulated search needs a budget"):
        FitCase("train", 62, "device", "cpu", 4096)
    free = [c for c in split_cases("full") if c.budget == "device"]
    assert {c.schedule for c in free} == {"naive", "gpipe", "1f1b"}
    assert "split-gpipe2-c138-m62-device-cuda" in {c.id for c in free}
    assert not any(c.budget == "device" for c in split_cases("seed"))
    # the single-GPU case fills cuda:0 to its cap: it runs after the cases that share it
    for profile in ("smoke", "seed", "full"):
        assert [c.schedule for c in split_cases(profile)][-1] == "single", profile


# ---------------------------------------------------------------------------- split


def test_seed_split_is_limited_by_the_head_device() -> None:
    budget = float(11 * GiB)
    costs = BlockCosts(conv=1.0, linear=0.1, source="test")
    plan = plan_split(SEED, 138, 62, (budget, budget), costs)
    # balancing time would put half the convs with the whole head: too much for one device
    assert plan.by_time.layers[0][0] >= 69
    assert plan.by_time.bytes[1] > budget
    chosen = plan.chosen
    assert all(b <= budget * (1 - plan.margin) for b in chosen.bytes)
    c0 = chosen.layers[0][0]
    assert 75 <= c0 <= 90, chosen.layers  # the seed put 84 on GPU0
    assert plan.limiting == 1
    assert plan.by_memory.memory_share((budget, budget)) <= chosen.memory_share((budget, budget))


def test_split_that_fits_nowhere_is_an_error() -> None:
    with pytest.raises(SplitError, match="fits no cut"):
        plan_split(SEED, 400, 62, (float(GiB), float(GiB)), BlockCosts(1, 1, "test"))


@pytest.mark.parametrize("threads", [False, True], ids=["inline", "threads"])
@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
def test_pipelined_gradients_equal_the_naive_split(schedule: str, threads: bool) -> None:
    model = MemoryModel(batch=4, image=8, width=32)
    check = check_pipeline(model, 3, 3, 2, ("cpu", "cpu"), schedule, 4, threads)
    assert check["max_grad_rel_diff"] < 1e-5
    assert check["parameters"] == 2 * 6
    assert check["schedule"] == schedule
    # and they are not equal by accident: a step with a part missing differs
    runner = SplitRunner(model, 3, 3, 2, ("cpu", "cpu"))
    runner.x, runner.y = runner.x[:3], runner.y[:3]
    runner.schedule(schedule, 3)()
    fewer = runner.gradients()
    whole = SplitRunner(model, 3, 3, 2, ("cpu", "cpu"))
    whole.naive()()
    pairs = zip(whole.gradients(), fewer, strict=True)
    assert max(float((a - b).norm() / a.norm()) for a, b in pairs) > 1e-3


def test_split_runner_cuts_where_asked() -> None:
    runner = SplitRunner(MemoryModel(batch=2, image=8, width=16), 3, 2, 4, ("cpu", "cpu"))
    assert len(runner.stages[0]) == 4
    assert len(runner.stages[1]) == 1
    loss = runner.naive()()
    assert math.isfinite(float(loss.detach()))  # type: ignore[attr-defined]
    part0, part1 = runner.stage_steps()
    part0()
    part1()
    with pytest.raises(ValueError, match="schedules are"):
        runner.schedule("pipedream", 2)


def test_split_case_ids_and_devices() -> None:
    case = SplitCase("gpipe", 138, 62, 4)
    assert case.id == "split-gpipe4-c138-m62-11gib-cuda"
    assert case.devices == ("cuda:0", "cuda:1")
    assert SplitCase("single", 0, 62).devices == ("cuda:0",)
    with pytest.raises(ValueError, match="micro_batches"):
        SplitCase("naive", 138, 62, 4)
    with pytest.raises(ValueError, match="does not split"):
        SplitCase("gpipe", 138, 62, 3)
    assert SplitCase("1f1b", 138, 62, 8).id == "split-1f1b8-c138-m62-11gib-cuda"
    with pytest.raises(ValueError, match="micro_batches > 1"):
        SplitCase("1f1b", 138, 62)
    with pytest.raises(ValueError, match="schedules are"):
        SplitCase("pipedream", 138, 62, 2)
    grown = SplitCase("1f1b", 138, 62, 2, allocator="expandable")
    assert grown.id == "split-1f1b2-c138-m62-11gib-expseg-cuda"
    with pytest.raises(ValueError, match="allocators are"):
        SplitCase("naive", 138, 62, allocator="cudaMallocAsync")


def test_seed_split_compares_schedules_under_one_allocator() -> None:
    seed = [c for c in split_cases("seed") if c.schedule != "single"]
    grown = [c for c in seed if c.allocator == "expandable"]
    assert {c.schedule for c in grown} == {"naive", "gpipe", "1f1b"}
    assert [c.schedule for c in seed if c.allocator == "default"] == ["naive"]
    assert split_cases("seed")[-1].schedule == "single"


def test_graphed_cases_are_named_and_need_two_cuda_devices() -> None:
    case = SplitCase("1f1b", 138, 62, 2, allocator="expandable", graphs=True)
    assert case.id == "split-1f1b2-c138-m62-11gib-expseg-graphs-cuda"
    with pytest.raises(ValueError, match="two CUDA devices"):
        SplitCase("single", 0, 62, graphs=True)
    with pytest.raises(ValueError, match="two CUDA devices"):
        SplitCase("naive", 4, 3, budget="64MiB", device="cpu", graphs=True)
    graphed = [c for c in split_cases("seed") if c.graphs]
    # each graphed schedule has its graphed naive split to be compared with (same budget,
    # allocator, head): the bench finds it by replacing the schedule
    assert {c.schedule for c in graphed} == {"naive", "gpipe", "1f1b"}
    assert {(c.budget, c.allocator, c.fc) for c in graphed} == {(SEED_BUDGET, "expandable", 62)}


def test_graphed_split_refuses_one_device_and_the_cpu() -> None:
    stages = (nn.Linear(4, 4), nn.Linear(4, 2))
    opt = torch.optim.SGD([p for s in stages for p in s.parameters()], lr=0.1)
    x, y = torch.randn(2, 4), torch.tensor([0, 1])
    loss = nn.CrossEntropyLoss()
    with pytest.raises(ValueError, match="two devices"):
        GraphedSplit(stages, x, y, loss, opt, 1, (1, 1))
    with pytest.raises(ValueError, match="CUDA tensors"):
        capture_stage(stages[0], [x])
    elsewhere = torch.tensor([0, 1, 0, 1, 0, 1], device="meta")  # another device, no capture
    with pytest.raises(ValueError, match="equal parts"):  # 6 rows do not split in 4
        GraphedSplit(stages, torch.randn(6, 4), elsewhere, loss, opt, 4, (4, 4))
    with pytest.raises(ValueError, match="slots"):  # more slots than micro-batches
        GraphedSplit(stages, torch.randn(6, 4), elsewhere, loss, opt, 2, (3, 1))


def test_budgets_refuse_an_unknown_allocator() -> None:
    with pytest.raises(ValueError, match="allocators are"), budgets(("cpu",), None, "pooled"):
        pass


# ---------------------------------------------------------------------------- chart


def test_frontier_chart_draws_measured_and_predicted(tmp_path: Path) -> None:
    from gpugauge.families.layer_fit import FAMILY
    from gpugauge.families.layer_fit.charts import Frontier
    from gpugauge.report.data import ReportData
    from gpugauge.results.measurement import Measurement
    from gpugauge.results.runs import SavedRun

    results = []
    for m in (1, 62):
        case = FitCase("train", m, SEED_BUDGET, "cpu", 4096)
        search = run_search(case, SimulatedBackend(case.memory_model, "train", 11 * GiB))
        results.append(
            Measurement(case, values={"max_layers": search["max_n"]}, extra={"search": search})
        )
    data = ReportData(SavedRun(tmp_path / "run.json", "run", results), "-", [], [])
    chart = Frontier()
    assert any(isinstance(c, Frontier) for c in FAMILY.charts)
    assert chart.applies(data)
    fig = chart.draw(data)
    lines = fig.axes[0].get_lines()
    assert [list(line.get_xdata()) for line in lines] == [[1, 62], [1, 62]]
    assert list(lines[0].get_ydata()) == [r.values["max_layers"] for r in results]
    assert not chart.applies(ReportData(SavedRun(tmp_path / "x", "x", []), "-", [], []))


class _FragmentingRunner:
    """A SplitRunner stand-in: its second step runs out of memory above N=5 on one device,
    and on two whenever device 1 holds more than 7 blocks."""

    def __init__(self, model, n, m, cut, devices, graphs=False) -> None:
        self.n, self.m, self.cut, self.calls = n, m, cut, 0

    def schedule(self, name, micro_batches):
        def step() -> None:
            self.calls += 1
            too_big = self.n > 5 if self.cut == self.n + self.m else self.n + self.m - self.cut > 7
            if too_big and self.calls > 1:
                raise torch.OutOfMemoryError("CUDA out of memory (fragmented)")

        return step


@pytest.mark.slow
def test_fitted_runner_checks_the_steady_state_and_sheds_blocks_on_one_device(monkeypatch):
    monkeypatch.setattr(cut_fit, "SplitRunner", _FragmentingRunner)
    tiny = dict(batch=4, image=32, width=64, device="cpu")
    single, naive = SplitCase("single", 0, 3, **tiny), SplitCase("naive", 20, 3, **tiny)
    # one device: the search's N = 7 fitted one step; the timed rounds would not
    runner, _, attempts = cut_fit.fitted_runner(single, 7, 10, 0)
    assert [a["conv"] for a in attempts] == [7, 6, 5]
    assert [a["fits"] for a in attempts] == [False, False, True]
    assert attempts[-1]["cut"] == 8
    assert runner.n == 5
    # a split moves the cut toward device 0 by 2, 4, 8, ... blocks from the planned cut
    _, _, attempts = cut_fit.fitted_runner(naive, 20, 4, 0)
    assert [a["cut"] for a in attempts] == [4, 6, 8, 12, 20]  # device 1: 19, 17, 15, 11, 3
    assert [a["fits"] for a in attempts] == [False] * 4 + [True]
    # the last try is the end of the range, then it gives up with every attempt named
    with pytest.raises(SplitError, match="no cut fitted after 3 attempts") as err:
        cut_fit.fitted_runner(naive, 20, 4, 1)
    assert "'cut': 1," in str(err.value)  # 4, 2, 1 (clamped), then nowhere left
    with pytest.raises(SplitError, match="no cut fitted after 2 attempts"):
        cut_fit.fitted_runner(naive, 20, 4, 0, tries=2)


def test_settle_runs_until_reserved_memory_stops_growing(monkeypatch):
    reserved = iter([10, 20, 30, 40, 40, 40, 40, 40])
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda device: next(reserved))
    calls = []
    # reserved memory grew for 4 steps, then stayed flat for 2
    assert cut_fit.settle(lambda: calls.append(1), ("cuda:0",)) == 6
    assert len(calls) == 6
    assert cut_fit.settle(lambda: None, ("cpu",)) == 3


@pytest.mark.slow
def test_block_costs_are_measured_at_a_micro_batch(monkeypatch):
    import gpugauge.families.layer_fit.costs as block_costs

    shapes = []
    real = block_costs.measure

    def spy(step, policy, clock):
        shapes.append(step.__defaults__[1].shape)  # the step's input
        return real(step, policy, clock)

    monkeypatch.setattr(block_costs, "measure", spy)
    costs = block_costs.measure_costs(MemoryModel(16, 8, 64), "cpu", batch=2)
    assert costs.conv > 0
    assert costs.linear > 0
    assert [s[0] for s in shapes] == [2, 2]  # conv input and linear input at batch 2


# ------------------------------------------------------------------- pipeline evidence


def _kernel(device: int, start: float, dur: float) -> dict:
    args = {"device": device}
    return {"ph": "X", "cat": "kernel", "name": "k", "ts": start, "dur": dur, "args": args}


def test_device_overlap_measures_how_long_both_devices_work_together() -> None:
    from gpugauge.measure.kernels import TraceError, device_overlap, parse_events

    # device 0 busy 0-40 µs, device 1 busy 30-50 and 60-80 µs: together 30-40 only
    acts = parse_events(
        [_kernel(0, 0, 25), _kernel(0, 20, 20), _kernel(1, 30, 20), _kernel(1, 60, 20)]
    )
    o = device_overlap(acts, steps=2)
    assert o.devices == (0, 1)
    assert o.busy_ms == pytest.approx((40 / 2e3, 40 / 2e3))
    assert o.together_ms == pytest.approx(10 / 2e3)
    assert o.step_ms == pytest.approx(80 / 2e3)
    assert o.as_dict()["utilisation"] == pytest.approx([0.5, 0.5])
    assert o.queued_ms == (None, None)  # no launch records in this trace
    assert o.top_kernels == ((("k", pytest.approx(45 / 2e3)),), (("k", pytest.approx(40 / 2e3)),))
    # with launch records: device 0's kernels waited 5 µs in its queue, device 1's 0
    launch = {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "dur": 1}
    events = [
        {**_kernel(0, 10, 5), "args": {"device": 0, "correlation": 1}},
        {**launch, "ts": 5, "args": {"correlation": 1}},
        {**_kernel(1, 30, 5), "args": {"device": 1, "correlation": 2}},
        {**launch, "ts": 30, "args": {"correlation": 2}},
    ]
    assert device_overlap(parse_events(events), steps=1).queued_ms == pytest.approx((0.005, 0.0))
    assert device_overlap(parse_events([_kernel(0, 0, 10)]), steps=1).together_ms is None
    with pytest.raises(TraceError, match="no device activity"):
        device_overlap(parse_events([]), steps=1)
    with pytest.raises(ValueError, match="steps"):
        device_overlap(acts, steps=0)


def test_send_and_receive_are_plain_copies_off_cuda() -> None:
    from gpugauge.families.layer_fit.pipe import CopyStreams, receive, send

    x = torch.randn(3, requires_grad=True)
    y = receive(send(x * 2, "cpu", CopyStreams()), CopyStreams())
    y.sum().backward()
    assert torch.equal(x.grad, torch.full((3,), 2.0))


def test_plan_predicts_the_step_by_the_bubble_model() -> None:
    budget = float(100 * GiB)
    costs = BlockCosts(conv=1.0, linear=0.0, source="test")  # per micro-batch
    naive = plan_split(SEED, 10, 1, (budget, budget), costs)
    assert naive.predicted_step == pytest.approx(10.0)  # one stage after the other
    gpipe = plan_split(SEED, 10, 1, (budget, budget), costs, 4, schedule="gpipe")
    assert gpipe.chosen.cost == (5.0, 5.0)
    assert gpipe.predicted_step == pytest.approx(5 * 5.0)  # balanced: m + 1 slots
    assert gpipe.as_dict()["predicted_step"] == gpipe.predicted_step


@pytest.mark.slow
def test_a_search_in_its_own_process_finds_what_one_in_this_process_finds() -> None:
    case = FitCase("train", 62, SEED_BUDGET, "cpu", 4096)
    here = search_case(case)
    there = search_case(case, isolate=True)  # a child process, as on a GPU
    assert there["max_n"] == here["max_n"]

    def path(result: dict) -> list[tuple[int, bool]]:
        return [(p["n"], p["fits"]) for p in result["probes"]]

    assert path(there) == path(here)
    # where its time went: the child's own start is what the whole call adds to its parts
    assert "process start" in seconds_line(there)
    assert "process start" not in seconds_line(here)
    took = there["seconds"]
    inside = took["cuda_start"] + took["backend"] + took["search"]
    assert 0 < inside < took["whole"]
    assert took["search"] >= sum(p["wall_s"] for p in there["probes"])


@pytest.mark.slow
def test_a_cut_is_fitted_in_processes_of_their_own() -> None:
    case = SplitCase("gpipe", 3, 2, 2, "device", "cpu", batch=2, image=8, width=16)
    attempts = cut_fit.fit_cut(case, 3, 3, 0)
    assert attempts == [
        {"conv": 3, "cut": 3, "fits": True, "steps": 3, "ooms": [], "where": "child"}
    ]


def test_fit_attempts_moves_the_cut_after_each_miss() -> None:
    seen = []

    def attempt(n: int, cut: int) -> dict:
        seen.append(cut)
        return {"fits": cut >= 9, "error": None if cut >= 9 else "cuDNN plans fell back"}

    attempts = cut_fit.fit_attempts(20, 3, 3, 0, attempt)
    assert seen == [3, 5, 7, 11]
    assert attempts[-1] == {"conv": 20, "cut": 11, "fits": True, "error": None}


def test_a_fresh_process_starts_with_this_ones_kernel_settings() -> None:
    saved = torch.backends.cudnn.deterministic, torch.backends.cuda.matmul.allow_tf32
    try:
        torch.backends.cudnn.deterministic = not saved[0]
        torch.backends.cuda.matmul.allow_tf32 = not saved[1]
        here = torch_flags()
        assert in_fresh_process("the settings", torch_flags) == here
    finally:
        torch.backends.cudnn.deterministic, torch.backends.cuda.matmul.allow_tf32 = saved


_TOUCHED: list[int] = []


def _touch_and_count() -> tuple[int, int, int]:
    """In a child: mark this module's list, and say how many marks it holds and who we are."""
    import os

    _TOUCHED.append(1)
    return len(_TOUCHED), os.getpid(), os.getppid()


def test_each_fresh_process_starts_from_nothing_the_last_one_did() -> None:
    """Issue 48: children forked from one server (torch imported once), none sharing state."""
    import os

    first = in_fresh_process("one", _touch_and_count)
    second = in_fresh_process("two", _touch_and_count)
    assert first[0] == second[0] == 1  # the second child saw nothing of the first's work
    assert first[1] != second[1]  # two processes
    assert os.getpid() not in (first[1], second[1])
    assert first[2] == second[2] != os.getpid()  # both forked by the fork server
    assert _TOUCHED == []


def test_bubble_model_takes_the_slower_stage_of_an_unbalanced_cut() -> None:
    budget = float(100 * GiB)
    costs = BlockCosts(conv=1.0, linear=0.0, source="test")
    plan = plan_split(SEED, 9, 1, (budget, budget), costs, 2, schedule="gpipe")
    slow, fast = max(plan.chosen.cost), min(plan.chosen.cost)
    assert slow > fast  # 9 blocks do not halve
    assert plan.predicted_step == pytest.approx(2 * slow + fast)  # m slots, one of fill


SINGLE_SEARCH_BENCH = """
from benches.test_layer_fit import _largest_single
from gpugauge.families.layer_fit.cases import SplitCase
from gpugauge.families.layer_fit.search import search_case
from gpugauge.results.measurement import Measurement

CASE = SplitCase("single", 0, 62, device="cpu", profile="smoke")

def test_a_search(gauge):
    if not RECORD:
        return
    found = search_case(CASE.fit_case)
    gauge.record(Measurement(CASE.fit_case, values={"max_layers": found["max_n"] - 1},
                             extra={"search": {**found, "max_n": found["max_n"] - 1}}))

def test_single(gauge):
    result, source = _largest_single(CASE, gauge)
    print(f"ANSWER {result['max_n']} FROM {source}")
"""


@pytest.mark.slow
def test_the_single_split_reads_its_search_answer_as_its_build_kept_it(
    gauge_pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).resolve().parents[1]))
    memo = gauge_pytester.path / "memo"

    def answer(record: bool) -> str:
        gauge_pytester.makepyfile(test_single=f"RECORD = {record}\n" + SINGLE_SEARCH_BENCH)
        run = gauge_pytester.runpytest_subprocess(f"--gauge-setup-memo={memo}", "-s")
        run.assert_outcomes(passed=2)
        (line,) = re.findall(r"ANSWER \d+ FROM [a-z ]+", "\n".join(run.outlines))
        return line

    first = answer(record=False)
    assert first.endswith("FROM searched here")
    assert answer(record=False) == first.replace("searched here", "an earlier process")
    # this run's own search test wins over the kept answer, and replaces it
    n = int(first.split()[1])
    assert answer(record=True) == f"ANSWER {n - 1} FROM this run"
    assert answer(record=False) == f"ANSWER {n - 1} FROM an earlier process"


def _lazy_imports_and_frozen() -> tuple[bool, int]:
    """In a child: torch's lazy imports are there, and how many objects collections skip."""
    import gc
    import sys

    from gpugauge.launch.heap import LAZY_IMPORTS

    return all(name in sys.modules for name in LAZY_IMPORTS), gc.get_freeze_count()


def test_a_fresh_process_has_torchs_lazy_imports_done_and_frozen() -> None:
    """A child need not import torch._dynamo at its first training step (seconds on 2.11)."""
    imported, frozen = in_fresh_process("the heap", _lazy_imports_and_frozen)
    assert imported
    assert frozen > 1000  # the server's imports: the child's collections skip them
