import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from gpugauge.regress.baselines import (
    BaselineError,
    BaselineStore,
    Entry,
    atomic_write_json,
    combine_runs,
    kernel_shares,
    parse_baseline,
)
from gpugauge.regress.gate import Gate, allowed_change, compare, short_kernel, wide_spreads
from gpugauge.regress.tolerances import Tolerance, ToleranceError, Tolerances, load_tolerances
from gpugauge.results.metrics import METRICS
from gpugauge.results.verdicts import Verdict, verdict_of

ROOT = Path(__file__).resolve().parents[1]


def entry(samples, peak=None, energy=None, bid="b", family="f", dev="gpu-x", **values) -> Entry:
    readings = {"time": tuple(float(x) for x in samples)} if samples is not None else {}
    if peak is not None:
        readings["memory"] = (float(peak),)
    if energy is not None:
        readings["energy"] = (float(energy),)
    readings |= {k: (float(v),) for k, v in values.items()}
    return Entry(bid, family, dev, readings)


def test_a_verdict_needs_the_whole_interval_beyond_the_tolerance() -> None:
    assert verdict_of(1.04, 1.06, 0.03) is Verdict.REGRESSED
    assert verdict_of(1.02, 1.06, 0.03) is Verdict.INCONCLUSIVE
    assert verdict_of(0.99, 1.01, 0.03) is Verdict.UNCHANGED
    assert verdict_of(0.90, 0.95, 0.03) is Verdict.IMPROVED
    assert verdict_of(0.95, 0.99, 0.03) is Verdict.INCONCLUSIVE


def test_synthetic_power_of_the_gate() -> None:
    """1% CV, 20 rounds a side, default tolerance: a 5% slowdown is caught in >= 95% of
    200 trials; an A/A comparison is called a regression in <= 1%."""
    rng = np.random.default_rng(7)
    tol = Tolerance()

    def sample(median: float) -> np.ndarray:
        return median * (1 + 0.01 * rng.standard_normal(20))

    caught = sum(
        compare(entry(sample(105.0)), entry(sample(100.0)), tol).verdict is Verdict.REGRESSED
        for _ in range(200)
    )
    false = sum(
        compare(entry(sample(100.0)), entry(sample(100.0)), tol).verdict is Verdict.REGRESSED
        for _ in range(200)
    )
    assert caught / 200 >= 0.95
    assert false / 200 <= 0.01


def test_memory_and_energy_are_judged_on_the_value() -> None:
    base = entry([10.0] * 5, peak=1000 * 2**20, energy=5.0)
    r = compare(entry([10.0] * 5, peak=1100 * 2**20, energy=5.2), base, Tolerance())
    assert r.check("memory").verdict is Verdict.REGRESSED
    assert r.check("energy").verdict is Verdict.UNCHANGED
    assert r.verdict is Verdict.REGRESSED
    assert "memory 1.100x" in r.message()
    tiny = compare(entry([10.0] * 5, peak=2**20), entry([10.0] * 5, peak=0), Tolerance())
    assert tiny.check("memory").verdict is Verdict.UNCHANGED  # allocator slack


def test_a_peak_two_hosts_recorded_apart_is_judged_from_their_range(tmp_path: Path) -> None:
    # two hosts' cuDNN took workspaces of two sizes for one step (an H200 night read
    # ResNet-18's bf16 eager step at 1.010x a baseline that kept one host's peak)
    mib = 2**20
    runs = [[entry([10.0] * 5, peak=300 * mib)], [entry([10.0] * 5, peak=303 * mib)]]
    [combined] = combine_runs(runs)
    store = BaselineStore(tmp_path)
    store.write([combined], {})
    [base] = store.load("gpu-x", "f").values()  # the file keeps each run's reading
    assert base.run_medians["memory"] == (300 * mib, 303 * mib)

    def verdict(peak_mib: float) -> Verdict:
        now = entry([10.0] * 5, peak=peak_mib * mib)
        return compare(now, base, Tolerance()).check("memory").verdict

    # inside the recorded range nothing changed; beyond it, the tolerance (1%) as before
    assert verdict(300) is verdict(301.5) is verdict(303) is Verdict.UNCHANGED
    assert verdict(305) is verdict(298) is Verdict.UNCHANGED
    assert verdict(303 * 1.015) is Verdict.REGRESSED
    assert verdict(300 * 0.98) is Verdict.IMPROVED
    # the history reads the class baseline the same way
    from gpugauge.history.host_checks import baseline_reference

    assert baseline_reference(base, "memory", 0.01, 301.5 * mib) == (301.5 * mib, 0.01, None)
    assert baseline_reference(base, "memory", 0.01, 310 * mib) == (303 * mib, 0.01, None)
    # an exact count recorded as 62 and 61 layers: no drop below the range, no room above
    counts = combine_runs([[entry(None, max_layers=62)], [entry(None, max_layers=61)]])
    for layers, said in ((60, Verdict.REGRESSED), (61, Verdict.UNCHANGED), (63, Verdict.IMPROVED)):
        now = entry(None, max_layers=layers)
        assert compare(now, counts[0], Tolerance()).check("max_layers").verdict is said


def test_a_value_no_class_judges_keeps_the_newest_and_never_refuses_a_baseline() -> None:
    # comm_fraction moved 0.012-0.074 between runs with nothing changed: a diagnostic
    a, b = entry([10.0], comm_fraction=0.012), entry([10.1], comm_fraction=0.074)
    [combined] = combine_runs([[a], [b]])
    assert combined.readings["comm_fraction"] == (0.074,)
    assert "comm_fraction" not in combined.run_medians
    apart = combine_runs([[entry([10.0], peak=100.0)], [entry([10.0], peak=150.0)]])
    assert wide_spreads(apart) == []  # a peak's runs are a range the gate accepts, not noise


def test_a_baseline_value_that_is_none_of_its_runs_is_refused(tmp_path: Path) -> None:
    [combined] = combine_runs([[entry([1.0], peak=300.0)], [entry([1.0], peak=310.0)]])
    BaselineStore(tmp_path).write([combined], {})
    path = tmp_path / "gpu-x" / "f.json"
    doc = json.loads(path.read_text())
    doc["benchmarks"]["b"]["memory"]["value"] = 305.0
    path.write_text(json.dumps(doc))
    with pytest.raises(BaselineError, match=r"memory.value 305 is none of its runs' readings"):
        BaselineStore(tmp_path).load("gpu-x", "f")


def test_gate_says_new_without_a_baseline(tmp_path: Path) -> None:
    gate = Gate(BaselineStore(tmp_path), Tolerances())
    r = gate.by_baseline(entry([1.0]))
    assert r.verdict is Verdict.NEW
    assert "no baseline for device class gpu-x" in r.note


def test_store_round_trip_merges_and_is_atomic(tmp_path: Path) -> None:
    store = BaselineStore(tmp_path)
    [p] = store.write([entry([1.0, 2.0], peak=5, energy=0.5, bid="a")], {"profile": "seed"})
    assert p == tmp_path / "gpu-x" / "f.json"
    store.write([entry([3.0], bid="b")], {})
    loaded = parse_baseline(p)
    assert set(loaded) == {"a", "b"}
    assert loaded["a"].readings == {"time": (1.0, 2.0), "memory": (5.0,), "energy": (0.5,)}
    assert json.loads(p.read_text())["schema_version"] == 2
    # no temporary and no lock file left over: the lock is on the folder itself
    assert sorted(q.name for q in p.parent.iterdir()) == ["f.json"]


def test_a_failed_write_keeps_the_old_file(tmp_path: Path) -> None:
    p = tmp_path / "b.json"
    atomic_write_json(p, {"ok": 1})
    with pytest.raises(TypeError):
        atomic_write_json(p, {"bad": object()})
    assert json.loads(p.read_text()) == {"ok": 1}
    assert [q.name for q in tmp_path.iterdir()] == ["b.json"]


GOOD = {
    "schema_version": 1,
    "device_class": "d",
    "family": "f",
    "benchmarks": {"x": {"time_ms": [1.0], "peak_bytes": 3, "energy_j_per_iter": None}},
}


GOOD2 = {"schema_version": 2, "device_class": "d", "family": "f", "benchmarks": {}}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{not json", "not valid JSON"),
        ("[]", "expected a JSON object"),
        (json.dumps({**GOOD, "schema_version": 99}), "schema_version 99"),
        (json.dumps({k: v for k, v in GOOD.items() if k != "family"}), "missing key 'family'"),
        (json.dumps({**GOOD, "benchmarks": {"x": {"time_ms": []}}}), "non-empty list"),
        (json.dumps({**GOOD2, "benchmarks": {"x": {"speed": {}}}}), "unknown metric"),
        (
            json.dumps({**GOOD2, "benchmarks": {"x": {"time": {"unit": "s", "samples": [1]}}}}),
            "time.unit is 's', not 'ms'",
        ),
        (
            json.dumps({**GOOD2, "benchmarks": {"x": {"max_layers": {"unit": "layers"}}}}),
            "max_layers.value must be a number",
        ),
        (
            json.dumps(
                {**GOOD2, "benchmarks": {"x": {"memory": {"unit": "bytes", "samples": [1]}}}}
            ),
            "unknown key(s) ['samples']",
        ),
        (json.dumps({**GOOD, "benchmarks": {"x": {"time_ms": ["1"]}}}), "time_ms[0] must be"),
        (
            json.dumps({**GOOD, "benchmarks": {"x": {"time_ms": [1], "peak_bytes": -1}}}),
            "peak_bytes must be",
        ),
        (
            json.dumps({**GOOD, "benchmarks": {"x": {"time_ms": [1], "mean": 2}}}),
            "unknown key(s) ['mean']",
        ),
    ],
)
def test_corrupt_baselines_are_clear_errors(tmp_path: Path, text: str, message: str) -> None:
    p = tmp_path / "f.json"
    p.write_text(text)
    with pytest.raises(BaselineError) as err:
        parse_baseline(p)
    assert str(p) in str(err.value)
    assert message in str(err.value)


def test_repository_tolerances_load_and_resolve() -> None:
    tol = load_tolerances(ROOT / "tolerances")
    assert tol.for_benchmark("vgg_swap", "vgg16-normal-train-fp32-b128-224px-cuda")["time"] == 0.015
    assert tol.for_benchmark("layers", "relu-fwd-fp32-seed-cuda")["time"] == 0.015
    assert tol.for_benchmark("layers", "relu-fwd-fp32-smoke-cpu")["time"] == 0.30
    assert tol.for_benchmark("layers", "relu-fwd-fp32-smoke-cpu")["memory"] == 0.01
    assert tol.for_benchmark("layer_fit", "x")["max_layers"] == 0.0  # the registry default


def test_longer_globs_win(tmp_path: Path) -> None:
    (tmp_path / "a.toml").write_text(
        '[benchmark."*"]\ntime = 0.1\n[benchmark."relu-*"]\ntime = 0.2\n'
    )
    tol = load_tolerances(tmp_path)
    assert tol.for_benchmark("f", "relu-fwd")["time"] == 0.2
    assert tol.for_benchmark("f", "conv-fwd")["time"] == 0.1


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[default\ntime = 1", "not valid TOML"),
        ("[default]\nspeed = 0.1", "unknown key 'speed' in [default]"),
        ("[default]\ntime = -0.1", "[default] time = -0.1"),
        ("[default]\ntime = 'x'", "[default] time = 'x'"),
        ("[family.layers]\nmemory = true", "[family.layers] memory = True"),
        ("[families.layers]\ntime = 0.1", "unknown table [families]"),
    ],
)
def test_malformed_tolerances_name_file_and_key(tmp_path: Path, text: str, message: str) -> None:
    (tmp_path / "t.toml").write_text(text)
    with pytest.raises(ToleranceError) as err:
        load_tolerances(tmp_path)
    assert "t.toml" in str(err.value)
    assert message in str(err.value)


def test_one_key_in_two_files_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "a.toml").write_text("[default]\ntime = 0.1\n")
    (tmp_path / "b.toml").write_text("[default]\ntime = 0.2\n")
    with pytest.raises(ToleranceError, match=r"also set in .*a\.toml"):
        load_tolerances(tmp_path)


def test_a_higher_is_better_metric_that_drops_regresses_and_one_that_rises_passes() -> None:
    base = entry(None, bid="fit", max_layers=61, busbw=300.0)
    tol = Tolerance()
    dropped = compare(entry(None, bid="fit", max_layers=60, busbw=300.0), base, tol)
    assert dropped.check("max_layers").verdict is Verdict.REGRESSED  # exact: tolerance 0
    assert dropped.verdict is Verdict.REGRESSED
    assert "max_layers 0.984x vs >= 1.000 allowed" in dropped.message()
    risen = compare(entry(None, bid="fit", max_layers=64, busbw=330.0), base, tol)
    assert risen.check("max_layers").verdict is Verdict.IMPROVED
    assert risen.check("busbw").verdict is Verdict.IMPROVED
    assert risen.verdict is not Verdict.REGRESSED
    slower_bus = compare(entry(None, bid="fit", max_layers=61, busbw=270.0), base, tol)
    assert slower_bus.check("busbw").verdict is Verdict.REGRESSED  # 10% below, 5% allowed
    assert slower_bus.check("busbw").allowed == ">= 0.950"


def test_a_per_host_metric_is_not_judged_against_a_baseline() -> None:
    """Run 72: one build's eager MLP step 18.9% busy on one H100, 7.7% on the next host."""
    base = entry([1.24] * 5, gpu_busy=0.189)
    r = compare(entry([0.875] * 5, gpu_busy=0.077), base, Tolerance())
    assert r.check("gpu_busy") is None
    assert r.check("time") is not None
    assert r.verdict is Verdict.IMPROVED
    # two runs of one host (gpugauge report --against): judged
    same = compare(entry([1.24] * 5, gpu_busy=0.077), base, Tolerance(), same_host=True)
    assert same.check("gpu_busy").verdict is Verdict.REGRESSED


def test_a_diagnostic_metric_is_shown_but_never_judged() -> None:
    """Run 75: ResNet-18's DDP step, nothing changed, traced comm share 0.016 then 0.074."""
    traced = {"comm_fraction": 0.016, "exposed_comm_fraction": 0.003, "busbw_utilization": 0.42}
    later = {"comm_fraction": 0.074, "exposed_comm_fraction": 0.032, "busbw_utilization": 0.09}
    base = entry([26.78] * 5, busbw=244.8, **traced)
    r = compare(entry([26.73] * 5, busbw=247.2, **later), base, Tolerance(), same_host=True)
    assert [c.metric for c in r.checks] == ["time", "busbw"]
    assert r.verdict is Verdict.UNCHANGED
    assert [m.name for m in METRICS.values() if not m.judged] == list(traced)


def test_a_result_without_time_is_judged_on_what_it_holds() -> None:
    r = compare(entry(None, max_layers=61), entry([1.0, 2.0], max_layers=61), Tolerance())
    assert [c.metric for c in r.checks] == ["max_layers"]
    nothing = compare(entry(None, busbw=1.0), entry([1.0]), Tolerance())
    assert nothing.verdict is Verdict.NEW
    assert "no metric in common" in nothing.note


def test_committed_baselines_read_with_runs_and_kernels() -> None:
    for path in sorted((ROOT / "baselines").glob("*/*.json")):
        entries = parse_baseline(path)
        assert entries
        for e in entries.values():
            if "time" not in e.readings:  # a search's count (layer_fit's max_layers)
                assert e.readings, e.id
                continue
            assert len(e.readings["time"]) >= 10
            assert len(e.run_medians.get("time", ())) >= 2  # recorded from several runs
            # each GPU case names what it ran; the distributed family's torchrun ranks keep
            # their kernel tables as artifacts, not as a round's kernel shares
            if e.id.endswith("-cuda") and e.family != "distributed":
                assert e.kernels, e.id


def test_v1_and_v2_files_of_the_same_numbers_judge_alike(tmp_path: Path) -> None:
    v1 = {
        **GOOD,
        "benchmarks": {
            "x": {"time_ms": [1.0, 1.1], "peak_bytes": 3 * 2**20, "run_medians_ms": [1.0, 1.05]}
        },
    }
    (tmp_path / "v1.json").write_text(json.dumps(v1))
    old = parse_baseline(tmp_path / "v1.json")["x"]
    store = BaselineStore(tmp_path / "store")
    [p] = store.write([old], {})
    new = parse_baseline(p)["x"]
    assert new == old
    assert new.run_spread("time") == pytest.approx(0.05)


def test_the_time_tolerance_is_a_floor_widened_by_the_recorded_runs() -> None:
    """max(floor, 2 x spread) from two or more runs; twice the floor from one."""
    two = Entry("b", "f", "d", {"time": (1.0,)}, run_medians={"time": (100.0, 104.0)})
    assert allowed_change(0.015, two, "time") == pytest.approx(0.08)
    steady = Entry("b", "f", "d", {"time": (1.0,)}, run_medians={"time": (100.0, 100.2)})
    assert allowed_change(0.015, steady, "time") == 0.015
    assert allowed_change(0.015, entry([1.0]), "time") == 0.03
    # a 3% slowdown of a steady case is caught; of a case whose runs differ 4%, it is not
    rng = np.random.default_rng(5)
    slow = entry(103 * (1 + 0.002 * rng.standard_normal(20)))
    base = 100 * (1 + 0.002 * rng.standard_normal(20))
    tol = Tolerance()
    caught = compare(slow, replace(steady, readings={"time": tuple(base)}), tol)
    assert caught.verdict is Verdict.REGRESSED
    assert compare(slow, replace(two, readings={"time": tuple(base)}), tol).verdict in (
        Verdict.UNCHANGED,
        Verdict.INCONCLUSIVE,
    )


CONV = "sm80_xmma_fprop_implicit_gemm_indexed_tf32f32_tf32f32_f32_nhwckrsc_nchw(int)"
ADD = "void at::native::elementwise_kernel<128, 2, CUDAFunctor_add<float> >(int, float)"
LAYOUT = "void cudnn::engines_precompiled::nchwToNhwcKernel<float>(cudnn::nchw2nhwc_params)"
# run 46's tf32 seed conv on an H200: the bias add, the conv, the layout transform, a memset
RECORDED = [
    {"name": ADD, "calls": 1, "us": 5089.0},
    {"name": CONV, "calls": 1, "us": 4040.0},
    {"name": LAYOUT, "calls": 1, "us": 565.0},
    {"name": "Memset (Device)", "calls": 1, "us": 46.0},
]


def test_kernel_shares_are_of_the_recorded_rounds_time() -> None:
    shares = kernel_shares(RECORDED)
    assert [k.name for k in shares] == [ADD, CONV, LAYOUT, "Memset (Device)"]
    assert sum(k.share for k in shares) == pytest.approx(1.0)
    assert shares[1].share == pytest.approx(4040 / 9740)
    assert kernel_shares(None) == kernel_shares([]) == ()
    assert kernel_shares([{"name": "k", "calls": 1, "us": 0.0}]) == ()
    # rows that carry their share of the whole round keep it (the listed rows sum under 1)
    listed = kernel_shares(
        [{"name": "a", "us": 3.0, "share": 0.3}, {"name": "b", "us": 1.0, "share": 0.1}]
    )
    assert [(k.name, k.share) for k in listed] == [("a", 0.3), ("b", 0.1)]


@pytest.mark.parametrize(
    "recorded",
    [[3], [{"us": 1.0}], [{"name": "k", "us": None}], [{"name": "k", "us": -1.0}], ["k"]],
)
def test_malformed_recorded_kernels_give_no_kernels_not_a_crash(recorded: list) -> None:
    assert kernel_shares(recorded) == ()


def test_short_kernel_names_drop_the_argument_list_only() -> None:
    pool = "at::native::(anonymous namespace)::max_pool_backward_nchw<float, int>"
    assert short_kernel(f"void {pool}(float const*, int)") == pool
    nvjet = "nvjet_sm90_hsh_128x64_64x8_1x2_h_bz_bias_TNT"
    assert short_kernel(nvjet) == nvjet
    assert len(short_kernel("k" * 200)) == 80


def test_the_gate_names_main_kernels_that_differ_from_the_baseline(tmp_path: Path) -> None:
    base = replace(entry([9.44] * 20), kernels=kernel_shares(RECORDED))
    store = BaselineStore(tmp_path)
    [p] = store.write([base], {})
    assert parse_baseline(p)["b"].kernels == base.kernels  # stored and read back
    other = "sm80_xmma_fprop_implicit_gemm_tf32f32_tf32f32_f32_nhwckrsc_nchw(int)"
    plan = [dict(RECORDED[0]), {"name": other, "calls": 1, "us": 4380.0}, *RECORDED[2:]]
    slower = replace(entry([9.78] * 20), kernels=kernel_shares(plan))
    r = Gate(store, Tolerances()).by_baseline(slower)
    assert r.verdict is Verdict.REGRESSED
    said = "main kernels differ from the baseline's: now runs sm80_xmma_fprop_implicit_gemm_tf32"
    assert said in r.note
    # one part of a note, so that joining notes, which keeps each part once, keeps it whole
    assert " and no longer sm80_xmma_fprop_implicit_gemm_indexed" in r.note
    assert r.note in r.message()
    assert "time 1.036x" in r.message()
    # the same kernels at other shares, or a side that recorded none: nothing to say
    again = replace(entry([9.44] * 20), kernels=kernel_shares([*RECORDED[1::-1], *RECORDED[2:]]))
    assert compare(again, base, Tolerance()).note == ""
    assert compare(entry([9.44] * 20), base, Tolerance()).note == ""


def test_two_kernels_trading_places_at_the_listing_cut_say_nothing() -> None:
    """H100 run 51: a VGG step's 8th-longest kernel, 7.0% of the round, was another
    kernel of 7.0% in the baseline; neither side listed the other's."""
    head = [{"name": f"k{i}", "calls": 1, "us": 100.0} for i in range(7)]
    base = replace(entry([1.0]), kernels=kernel_shares([*head, {"name": "a", "us": 70.0}]))
    cur = replace(entry([1.0]), kernels=kernel_shares([*head, {"name": "b", "us": 70.0}]))
    assert compare(cur, base, Tolerance()).note == ""
    # a kernel well above the other side's cut is a change
    cur = replace(entry([1.0]), kernels=kernel_shares([*head, {"name": "b", "us": 300.0}]))
    assert "now runs b" in compare(cur, base, Tolerance()).note


@pytest.mark.parametrize(
    "kernels",
    [
        [3],
        ["name"],
        [{"name": "k"}],
        [{"name": "", "share": 0.1}],
        [{"name": "k", "share": 2}],
        [{"name": "k", "share": 0.1}, {"name": "k", "share": 0.2}],
        [{"name": "a", "share": 0.7}, {"name": "b", "share": 0.7}],
    ],
)
def test_a_baseline_with_bad_kernels_is_a_clear_error(tmp_path: Path, kernels: list) -> None:
    p = tmp_path / "f.json"
    time = {"unit": "ms", "samples": [1.0]}
    p.write_text(json.dumps({**GOOD2, "benchmarks": {"x": {"time": time, "kernels": kernels}}}))
    with pytest.raises(BaselineError, match=r"benchmarks\['x'\].kernels"):
        parse_baseline(p)


@pytest.mark.parametrize("samples", [[5e-324] * 3, [1e-320, 1e-320], [1e300, 1e300]])
def test_subnormal_or_huge_samples_are_refused_where_read(tmp_path: Path, samples) -> None:
    """Issue 26: samples of 5e-324 made every ratio infinite: "inconclusive inf× [nan, nan]",
    and the test passed. The baseline reader and the run reader refuse them, naming the file."""
    from gpugauge.results.runs import RunError, load_run

    from .fakes import result, run_json

    p = tmp_path / "f.json"
    p.write_text(
        json.dumps(
            {
                "schema_version": 2,
                "device_class": "gpu-x",
                "family": "f",
                "benchmarks": {"b": {"time": {"unit": "ms", "samples": samples}}},
            }
        )
    )
    with pytest.raises(BaselineError, match=rf"{p}: .*samples\[0\] must be a positive number"):
        parse_baseline(p)
    run = run_json([result("a")])
    run["benchmarks"][0]["extra_info"]["timing"]["device_ms"] = samples
    saved = tmp_path / "run.json"
    saved.write_text(json.dumps(run))
    with pytest.raises(RunError, match=rf"{saved}: .*metric 'time' has"):
        load_run(saved)


def test_the_readings_a_reader_accepts_give_finite_verdicts() -> None:
    """At both ends of the accepted range, every ratio and interval is a finite number."""
    tiny, huge = entry([1e-100] * 8, energy=1e-100), entry([1e100] * 8, energy=1e100)
    for current, base in ((tiny, huge), (huge, tiny)):
        result = compare(current, base, Tolerance())
        for check in result.checks:
            numbers = [v for v in vars(check).values() if isinstance(v, float)]
            assert numbers
            assert all(np.isfinite(numbers)), check


def test_an_unknown_family_table_names_the_file_and_the_table(tmp_path: Path) -> None:
    """Issue 26: a typo in [family.NAME] left that family on the defaults, unseen."""
    (tmp_path / "t.toml").write_text("[family.layers]\ntime = 0.1\n[family.layer]\ntime = 0.1\n")
    with pytest.raises(ToleranceError, match=r"t\.toml: unknown family in table \[family\.layer\]"):
        load_tolerances(tmp_path)
    assert load_tolerances(tmp_path, families=("layers", "layer")).families["layer"]["time"] == 0.1


def test_overruled_keeps_a_closer_reference_and_says_what_it_replaced() -> None:
    from gpugauge.judging.judge import overruled
    from gpugauge.results.verdicts import Basis, GateResult, MetricCheck

    def check(ratio: float, verdict: Verdict, basis: Basis, tol: float) -> MetricCheck:
        return MetricCheck("time", 2.0, 2.0 * ratio, ratio, ratio, ratio, tol, verdict, basis)

    cls = check(1.03, Verdict.UNCHANGED, Basis.CLASS_BASELINE, 0.065)
    ab = check(1.03, Verdict.REGRESSED, Basis.SAME_GPU_AB, 0.01)
    plain = GateResult("b", "f", "gpu-x", (cls,), "", {"time": "new host: class baseline"})
    by_ab = overruled(plain, ab, "by an A/B")
    assert by_ab.verdict is Verdict.REGRESSED
    assert by_ab.note == "by an A/B; was " + cls.describe()
    assert by_ab.references == {"time": "by an A/B"}  # not the class reference's reason
    # a reference of lower precedence changes nothing, its note included
    assert overruled(by_ab, check(1.0, Verdict.UNCHANGED, Basis.HOST_HISTORY, 0.02), "x") == by_ab
    # a check of a metric the result lacked is added
    mem = MetricCheck("memory", 1.0, 1.0, 1.0, 1.0, 1.0, 0.0, Verdict.UNCHANGED)
    assert overruled(plain, mem).check("memory") == mem
    # a newer look of the same basis replaces the earlier one's whole note, though it has
    # several parts (confirm's "decided by ...; its host paces this step")
    first = overruled(plain, ab, "decided against aaaa; host-paced")
    again = overruled(first, ab, "decided against bbbb")
    assert again.note == "decided against bbbb; was " + cls.describe()


@pytest.mark.parametrize("profile", ["smoke", "seed"])
def test_a_gpu_run_off_the_sustained_clock_is_refused_as_a_baseline(
    tmp_path: Path, profile: str
) -> None:
    """A smoke run reads a GPU's boost clock: as a reference it would flag every night."""
    from gpugauge.regress.baselines import BaselineError, entries_of_benchmark_json
    from gpugauge.results.measurement import SavedSpec
    from tests.fakes import device_timed, result, run_json

    cpu = result("a-cpu")
    spec = SavedSpec("demo", "b-cuda", "cuda", ("cuda",), {"name": "b-cuda", "device": "cuda"})
    gpu = device_timed(replace(result("b-cuda"), spec=spec, device_class="nvidia-h200"))
    burst = replace(gpu.timing.policy, regime="burst", idle_s=2.0)
    runs = {
        "cpu": [cpu],
        "gpu": [cpu, gpu],
        "burst": [cpu, replace(gpu, timing=replace(gpu.timing, policy=burst))],
    }
    for name, results in runs.items():
        data = run_json(results) | {"gpugauge": {"options": {"profile": profile}}}
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(data))
        refused = name == "burst" or (name == "gpu" and profile == "smoke")
        if refused:
            with pytest.raises(BaselineError, match=r"'b-cuda'.*seed or full"):
                entries_of_benchmark_json(path)
        else:
            assert {e.id for e in entries_of_benchmark_json(path)} == {r.id for r in results}
