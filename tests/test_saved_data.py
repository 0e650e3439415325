"""What the suite promises about saved data (docs/saved-data.md): one test per promise."""

from __future__ import annotations

import json
import os
import stat
import threading
import time
import tomllib
from pathlib import Path

import pytest

from gpugauge.__main__ import main
from gpugauge.measure.memory import Memory
from gpugauge.measure.roofline import Roofline, Work
from gpugauge.regress import baselines
from gpugauge.regress.baselines import BaselineStore, entry_of, parse_baseline
from gpugauge.report.tables import comparison_table, roofline_table
from gpugauge.results.files import atomic_write_text
from gpugauge.results.measurement import Comparison
from gpugauge.runtime.gauge import GaugeSession, plain_params
from gpugauge.runtime.options import resolve

from .fakes import CLASS, first_report, result, save_baselines, save_run
from .test_options import DEFAULTS
from .test_plugin import BENCH

ROOT = Path(__file__).resolve().parents[1]
FAST = ["--gauge-rounds", "3", "--gauge-warmup", "0", "-p", "no:cacheprovider"]


def snapshot(*folders: Path) -> dict[str, bytes]:
    """Every file under ``folders`` with its bytes: equal snapshots, nothing was written."""
    return {
        str(p): p.read_bytes()
        for folder in folders
        if folder.exists()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


@pytest.fixture
def demo(gauge_pytester: pytest.Pytester) -> pytest.Pytester:
    gauge_pytester.makepyfile(test_demo=BENCH)
    return gauge_pytester


# 1. a run that did not measure properly never writes baselines; a disabled gate says so


def test_update_baselines_under_benchmark_disable_is_refused(demo: pytest.Pytester) -> None:
    base = demo.path / "baselines"
    save_baselines(base, [result("slow", 4.0), result("fast", 2.0)])
    before = snapshot(base)
    r = demo.runpytest(
        *FAST, "--gauge-update-baselines", "--benchmark-disable", f"--gauge-baselines-dir={base}"
    )
    assert r.ret == pytest.ExitCode.USAGE_ERROR
    r.stderr.fnmatch_lines(["*--gauge-update-baselines with --benchmark-disable*never writes*"])
    assert snapshot(base) == before


def test_unmeasured_results_never_become_baselines(tmp_path: Path) -> None:
    options = resolve({**DEFAULTS, "baselines_dir": tmp_path}.__getitem__, False, tmp_path)
    session = GaugeSession(options, tmp_path, note=lambda _: None)
    session.measurements.append(result("a"))
    session.unmeasured.add("a")  # what Gauge.record does under --benchmark-disable
    session.write_baselines(passed=True)
    assert list(tmp_path.iterdir()) == []
    assert "baselines NOT written: 1 result not measured" in session.messages[0]


def test_benchmark_disable_says_nothing_was_gated_or_measured(demo: pytest.Pytester) -> None:
    base = demo.path / "baselines"
    save_baselines(base, [result("slow", 4.0), result("fast", 2.0)])
    r = demo.runpytest(
        *FAST, "--gauge-gate", "--benchmark-disable", f"--gauge-baselines-dir={base}"
    )
    assert r.ret == pytest.ExitCode.OK
    r.stdout.fnmatch_lines(
        [
            "gate: NOTHING GATED: --benchmark-disable ran each benchmark once, untimed",
            "slow*not measured (--benchmark-disable)*",
            "demo*slow*fast*not measured (--benchmark-disable)*",
        ]
    )
    assert "x [" not in r.stdout.str()  # no speedup or CI from one cold round


# 2. concurrent writers of one family file keep every entry


def test_concurrent_baseline_writes_keep_every_entry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    [path] = save_baselines(tmp_path, [result("x")])
    parse = baselines.parse_baseline

    def slow_parse(*args: object) -> object:
        out = parse(*args)
        time.sleep(0.2)  # widen the read-merge-write window: unlocked writers lose entries
        return out

    monkeypatch.setattr(baselines, "parse_baseline", slow_parse)
    writers = [
        threading.Thread(target=save_baselines, args=(tmp_path, [result(bid)]))
        for bid in ("a", "b", "c")
    ]
    for w in writers:
        w.start()
    for w in writers:
        w.join()
    assert set(parse(path)) == {"x", "a", "b", "c"}


# 3. a path typo cannot turn the gate off; nothing compared is loud; nightly can require


@pytest.mark.slow
def test_gated_run_with_no_baseline_is_loud(demo: pytest.Pytester) -> None:
    empty = demo.mkdir("baselines")
    r = demo.runpytest(*FAST, "--gauge-gate", f"--gauge-baselines-dir={empty}")
    assert r.ret == pytest.ExitCode.OK
    r.stdout.fnmatch_lines(["gate: NOTHING COMPARED: none of the 2 results had a baseline*"])


@pytest.mark.slow
def test_require_baselines_fails_results_without_one(demo: pytest.Pytester) -> None:
    base = demo.path / "baselines"
    save_baselines(base, [result("slow", 4.0)])  # 'fast' has none
    tols = demo.mkdir("tolerances")
    (tols / "t.toml").write_text("[default]\ntime = 9\n")
    args = [f"--gauge-baselines-dir={base}", f"--gauge-tolerances-dir={tols}"]
    r = demo.runpytest(*FAST, "--gauge-gate", "--gauge-require-baselines", *args)
    r.assert_outcomes(passed=1, failed=1, skipped=1)
    r.stdout.fnmatch_lines(
        ["*gpugauge gate: fast: new: not in *demo.json (--gauge-require-baselines)"]
    )


def test_baseline_file_in_the_wrong_class_folder_is_refused(tmp_path: Path) -> None:
    [path] = save_baselines(tmp_path, [result("a")])
    moved = tmp_path / "nvidia-h200" / "demo.json"
    moved.parent.mkdir()
    path.rename(moved)
    with pytest.raises(baselines.BaselineError, match=r"its place says nvidia-h200/demo\.json"):
        BaselineStore(tmp_path).validate_all()


# 4. never compared across device classes, and a report that compared nothing says so


def test_report_against_a_run_of_another_device_class(tmp_path: Path) -> None:
    current = save_run(tmp_path / "cur.json", [result("a"), result("b")])
    other = save_run(tmp_path / "gpu.json", [result("a", device_class="nvidia-h200")])
    out = tmp_path / "rep"
    args = ["report", "--current", str(current), "--against", str(other), "--out", str(out)]
    assert main([*args, "--storage", str(tmp_path / "none")]) == 0
    md = (out / "report.md").read_text()
    assert "verdicts: NOTHING COMPARED: no result of this run had a counterpart" in md
    row = next(line for line in md.splitlines() if line.startswith("| a "))
    assert f"not compared: gpu.json measured it on nvidia-h200, this run on {CLASS}" in row


# 5. pytest-benchmark options: honoured or refused; the stored options say what was done


@pytest.mark.slow
def test_stored_options_are_what_gpugauge_did(demo: pytest.Pytester) -> None:
    out = demo.path / "out.json"
    r = demo.runpytest(*FAST, f"--benchmark-json={out}")
    assert r.ret == pytest.ExitCode.OK
    bench = json.loads(out.read_text())["benchmarks"][0]
    from gpugauge.measure.clocks import RunQueueClock

    # a CPU round on one thread leaves out the time it waited for a core, where Linux counts it
    timer = "perf_counter-runqueue" if RunQueueClock.available() else "perf_counter"
    assert bench["options"] == {
        "timer": timer,
        "rounds": 3,
        "min_rounds": 5,
        "max_rounds": 10_000,
        "max_time": 2.0,
        "target_ci": 0.05,
        "regime": "sustained",
        "min_time": 0.0,
        "warmup": 0,
        "warmup_time": bench["extra_info"]["timing"]["warmup_s"],
        "flush_l2": False,
        "disable_gc": False,
        "stop_reason": bench["extra_info"]["timing"]["stop_reason"],
        "measured_by": "gpugauge",
    }
    assert bench["group"] == "demo"


# 6. output that does not mislead


def test_cpu_comparison_claims_no_memory_saved() -> None:
    rss = (Memory(device="cpu", peak_rss_growth_bytes=11 * 2**20),)
    none = (Memory(device="cpu", peak_rss_growth_bytes=0),)
    c = Comparison("vgg", result("n", 2.0, memory=rss), result("s", 1.9, memory=none), "n", "s")
    assert c.memory_saved_bytes is None
    row = comparison_table([c]).splitlines()[-1]
    assert row.split()[-2:] == ["-", "-"]
    assert "MiB" not in row


def test_roofline_above_the_ceiling_is_marked_cache_resident() -> None:
    from dataclasses import replace

    fast = Roofline(Work(flops=1e9, bytes=1e9, dtype="fp32"), 1.0, 0.5, 500.0)
    assert fast.share > 1
    text = roofline_table([replace(result("relu-fwd-fp32-smoke-cpu", 1.0), roofline=fast)])
    row = next(line for line in text.splitlines() if line.startswith("relu"))
    assert f"{fast.share:.0%} (cache)" in row
    assert "(cache): faster than the measured ceiling" in text


# 7. the report shows the current run


def test_first_report_shows_the_runs_own_numbers(tmp_path: Path) -> None:
    vgg = {"arch": "vgg16", "mode": "infer", "dtype": "fp32", "batch": 2, "device": "cpu"}
    a, b = (
        result(v, ms, family="vgg_swap", params={**vgg, "variant": v})
        for v, ms in (("normal", 2.0), ("swapped", 1.5))
    )
    current = save_run(tmp_path / "cur.json", [a, b])  # the comparison is derived
    md = first_report(tmp_path, current)
    verdict = next(
        line for line in md.splitlines() if line.startswith("| normal ") and "new" in line
    )
    assert "| 2.007 " in verdict  # the current median, with no baseline to compare it to
    assert "## Results of this run" in md
    assert "| vgg16 infer fp32 b2 cpu | normal 2.007 ms | swapped 1.505 ms | 1.333x" in md
    assert "verdicts: NOTHING COMPARED" in md


# 8. pytest-benchmark integration: groups, JSON params, histogram extra

SPEC_BENCH = """
import time
from dataclasses import asdict, dataclass
import pytest

@dataclass(frozen=True)
class Case:
    mode: str
    variant: str
    device: str = "cpu"
    family = "demo"
    @property
    def id(self): return f"{self.variant}-{self.mode}"
    @property
    def group(self): return f"{self.mode}-cpu"
    def as_dict(self): return asdict(self)

CASES = [Case(m, v) for m in ("infer", "train") for v in ("normal", "swapped")]

@pytest.mark.cpu
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_case(gauge, case):
    gauge.measure(case, lambda: time.sleep(0.001))
"""


@pytest.mark.slow
def test_groups_and_params_reach_pytest_benchmark(gauge_pytester: pytest.Pytester) -> None:
    gauge_pytester.makepyfile(test_cases=SPEC_BENCH)
    out = gauge_pytester.path / "out.json"
    r = gauge_pytester.runpytest(
        *FAST, f"--benchmark-json={out}", "--benchmark-group-by=param:mode"
    )
    assert r.ret == pytest.ExitCode.OK
    r.stdout.fnmatch_lines(
        ["*benchmark 'mode=infer': 2 tests*", "*benchmark 'mode=train': 2 tests*"]
    )
    benches = {b["param"]: b for b in json.loads(out.read_text())["benchmarks"]}
    assert benches["swapped-train"]["group"] == "train-cpu"
    assert benches["swapped-train"]["params"] == {
        "case": "swapped-train",
        "mode": "train",
        "variant": "swapped",
        "device": "cpu",
    }
    assert "UNSERIALIZABLE" not in out.read_text()


def test_plain_params_keeps_json_values_and_reprs_the_rest() -> None:
    assert plain_params({"n": 3, "f": 0.5, "obj": object}) == {
        "n": 3,
        "f": 0.5,
        "obj": repr(object),
    }
    assert plain_params(None) is None


def test_vgg_swap_group_puts_normal_beside_swapped() -> None:
    from gpugauge.families.vgg_swap.workload import cases

    groups: dict[str, set[str]] = {}
    for c in cases("seed"):
        groups.setdefault(c.group, set()).add(c.variant)
    assert "vgg16-infer-fp32-b128-224px-cuda" in groups
    assert all(v == {"normal", "swapped"} for v in groups.values())


def test_histogram_extra_is_declared() -> None:
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert meta["optional-dependencies"]["histogram"] == ["pytest-benchmark[histogram]>=4,<6"]


# 9. file modes follow the umask


@pytest.mark.parametrize(("umask", "mode"), [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_saved_files_follow_the_umask(tmp_path: Path, umask: int, mode: int) -> None:
    old = os.umask(umask)
    try:
        [base] = save_baselines(tmp_path / "b", [result("a")])
        run = save_run(tmp_path / "run.json", [result("a")])
        out = tmp_path / "rep"
        main(["report", "--current", str(run), "--out", str(out), "--storage", str(tmp_path)])
        atomic_write_text(tmp_path / "t.txt", "x")
    finally:
        os.umask(old)
    written = [base, tmp_path / "t.txt", *out.iterdir()]
    assert len(written) >= 4
    assert {p.name: stat.S_IMODE(p.stat().st_mode) for p in written} == {
        p.name: mode for p in written
    }


def test_a_rewrite_keeps_the_files_mode(tmp_path: Path) -> None:
    p = tmp_path / "t.txt"
    p.write_text("old")
    p.chmod(0o640)
    atomic_write_text(p, "new")
    assert (p.read_text(), stat.S_IMODE(p.stat().st_mode)) == ("new", 0o640)


def test_baselines_round_trip_through_the_store(tmp_path: Path) -> None:
    [p] = save_baselines(tmp_path, [result("a", 3.0)])
    assert p == tmp_path / CLASS / "demo.json"
    assert parse_baseline(p)["a"].readings == entry_of(result("a", 3.0)).readings


@pytest.mark.parametrize(
    ("fingerprint", "host"),
    [
        ({"host": "node7", "gpus": [{"uuid": "GPU-1"}]}, "node7"),
        ({"gpus": [{"uuid": "GPU-ebd78965"}, {"uuid": "GPU-2"}]}, "GPU-ebd78965"),
        ({"gpus": []}, None),
        ({}, None),
    ],
)
def test_a_saved_run_names_its_host(fingerprint: dict, host: str | None) -> None:
    """What `report --against` asks before it judges a per-host metric, and import uses."""
    from gpugauge.results.runs import SavedRun

    assert SavedRun(Path("run.json"), "run", [], fingerprint).host == host


# --- a run's outcome, read back ----------------------------------------------------------------


def test_a_run_outcome_reads_back_and_says_how_it_ended() -> None:
    from gpugauge.results.outcome import RunOutcome, Skip, skip_reason, test_id

    whole = RunOutcome(
        3, 3, (Skip("a-cuda", "needs a CUDA GPU"), Skip("b-cuda", "needs a CUDA GPU"))
    )
    assert whole.complete
    assert whole.ended_early() is None
    assert whole.skip_lines() == ["2 tests skipped: needs a CUDA GPU"]
    assert RunOutcome.from_dict(json.loads(json.dumps(whole.as_dict()))) == whole
    cut = RunOutcome(5, 2, stopped="stopping after 1 failures")
    assert not cut.complete
    assert cut.ended_early() == (
        "the run was stopped early (stopping after 1 failures) after 2 of 5 selected tests: "
        "its results are a part of the run"
    )
    assert test_id("benches/test_x.py::test_vgg[vgg16-b2-cpu]") == "vgg16-b2-cpu"
    assert test_id("benches/test_x.py::Test::test_plain") == "test_plain"
    assert skip_reason(("x.py", 3, "Skipped: no GPU")) == "no GPU"


@pytest.mark.parametrize(
    "bad",
    [
        [],
        {"selected": -1, "finished": 0},
        {"selected": 1, "finished": True},
        {"selected": 1, "finished": 1, "skipped": [{"test": 1, "why": "x"}]},
        {"selected": 1, "finished": 1, "interrupted": 3},
    ],
)
def test_a_bad_outcome_in_a_saved_run_is_named(bad: object, tmp_path: Path) -> None:
    from gpugauge.results.outcome import RunOutcome
    from gpugauge.results.runs import RunError, load_run

    with pytest.raises(ValueError, match="outcome"):
        RunOutcome.from_dict(bad)
    path = save_run(tmp_path / "run.json", [result("a")])
    data = json.loads(path.read_text())
    data.setdefault("gpugauge", {})["outcome"] = bad
    path.write_text(json.dumps(data))
    with pytest.raises(RunError, match="outcome"):
        load_run(path)


def test_a_baseline_keeps_the_host_of_each_run_it_was_recorded_from(tmp_path: Path) -> None:
    from gpugauge.regress.baseline_file import BaselineError, Entry, parse_baseline
    from gpugauge.regress.baselines import BaselineStore, combine_runs, with_host

    def run(host: str, ms: float) -> list[Entry]:
        e = Entry("c", "fam", "gpu-x", {"time": (ms, ms * 1.001, ms * 0.999)})
        return [with_host(e, host)]

    (two,) = combine_runs([run("gpu-a", 10.0), run("gpu-b", 10.1)])
    assert two.run_hosts["time"] == ("gpu-a", "gpu-b")
    assert two.hosts("time") == 2
    store = BaselineStore(tmp_path)
    (path,) = store.write([two], {})
    again = parse_baseline(path)["c"]
    assert again.run_hosts == two.run_hosts
    # --add of a third host's run keeps the stored runs' hosts in front
    (three,) = combine_runs([run("gpu-c", 10.05)], stored={("gpu-x", "fam", "c"): again})
    assert three.run_hosts["time"] == ("gpu-a", "gpu-b", "gpu-c")
    assert three.hosts("time") == 3
    # an entry stored before hosts were kept has unknown hosts, never a guess
    old = Entry("c", "fam", "gpu-x", two.readings, two.run_medians)
    (mixed,) = combine_runs([run("gpu-c", 10.05)], stored={("gpu-x", "fam", "c"): old})
    assert mixed.run_hosts["time"] == ("", "", "gpu-c")
    assert mixed.hosts("time") is None
    data = json.loads(path.read_text())
    data["benchmarks"]["c"]["time"]["run_hosts"] = ["gpu-a"]
    path.write_text(json.dumps(data))
    with pytest.raises(BaselineError, match="names 1 hosts for 2 runs"):
        parse_baseline(path)
