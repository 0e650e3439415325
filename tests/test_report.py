"""Reports and the baseline command, from saved runs made by a real (CPU) pytest run."""

import base64
import io
import json
import re
import shlex
import statistics
from dataclasses import replace
from pathlib import Path

import matplotlib.image
import numpy as np
import pytest

from gpugauge.__main__ import main
from gpugauge.regress.baselines import (
    UNNAMED_RUNS,
    BaselineError,
    BaselineStore,
    Entry,
    KernelShare,
    combine_runs,
    entries_of_benchmark_json,
    parse_baseline,
)
from gpugauge.regress.gate import compare
from gpugauge.regress.tolerances import Tolerance
from gpugauge.results.measurement import INJECTED_KEY
from gpugauge.results.verdicts import Verdict

from .test_plugin import BENCH


@pytest.fixture(scope="module")
def saved_runs(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """Two saved runs of the demo bench (the second slowed), through pytest-benchmark."""
    pytester_dir = tmp_path_factory.mktemp("runs")
    (pytester_dir / "conftest.py").write_text('pytest_plugins = ["gpugauge.plugin"]\n')
    (pytester_dir / "pytest.ini").write_text(
        "[pytest]\nmarkers =\n    gpu: g\n    cpu: c\n    multi_gpu: m\n"
    )
    (pytester_dir / "test_demo.py").write_text(BENCH)
    import subprocess
    import sys

    runs = []
    # 20 ms on rounds of 2 and 4 ms: a loaded 2-core CI host delays a sleep's wake-up by a
    # scheduler tick or more, and a 3 ms slowdown once read as no regression there
    for i, extra in enumerate(
        [[], ["-p", "gpugauge.check.slowdown", "--gauge-inject-slowdown-ms", "20"]]
    ):
        out = pytester_dir / f"run{i}.json"
        root = Path(__file__).resolve().parents[1]
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "pytest",
                "-q",
                "--gauge-rounds",
                "8",
                "--gauge-warmup",
                "1",
                f"--benchmark-json={out}",
                "-p",
                "no:cacheprovider",
                *extra,
                str(pytester_dir),
            ],
            cwd=pytester_dir,
            check=False,
            capture_output=True,
            env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"},
        )
        saved = json.loads(out.read_text() or "{}").get("benchmarks", []) if out.exists() else []
        assert len(saved) == 2, f"run {i}: exit {done.returncode}\n{done.stdout[-3000:]!r}"
        runs.append(out)
    return runs


@pytest.mark.slow
def test_report_of_two_saved_runs(saved_runs: list[Path], tmp_path: Path) -> None:
    base, slowed = saved_runs
    assert (
        main(
            [
                "report",
                "--current",
                str(slowed),
                "--against",
                str(base),
                "--storage",
                str(base.parent),
                "--out",
                str(tmp_path),
            ]
        )
        == 0
    )
    md = (tmp_path / "report.md").read_text()
    assert "verdicts: 2 regressed" in md
    row = next(line for line in md.splitlines() if line.startswith("| fast "))
    assert "REGRESSED" in row
    assert "![Time, current / baseline" in md
    # each Markdown table is padded: every row as wide as its header, so it reads as text
    tables = [t for t in md.split("\n\n") if t.startswith("|")]
    assert len(tables) == 3  # verdicts, results of this run, comparisons within it
    for table in tables:
        assert len({len(line) for line in table.splitlines()}) == 1
    assert "## Comparisons within this run" in md
    compared = next(line for line in md.splitlines() if line.startswith("| demo "))
    assert "slow" in compared
    assert "fast" in compared
    current = [line for line in md.splitlines() if line.startswith("| fast ") and "cpu-" in line]
    assert len(current) == 1  # the current run's own row, with its device class

    page = (tmp_path / "report.html").read_text()
    images = re.findall(r'src="data:image/png;base64,([^"]+)"', page)
    assert len(images) == 2  # ratio bars and history (no roofline in this run)
    for b64 in images:
        png = base64.b64decode(b64)
        assert png[:8] == b"\x89PNG\r\n\x1a\n"
        pixels = matplotlib.image.imread(io.BytesIO(png), format="png")
        assert pixels.shape[0] > 200
        assert pixels.shape[1] > 400
        assert float(np.std(pixels)) > 0.05  # drawn, not blank
    assert {p.name for p in tmp_path.iterdir()} >= {
        "report.md",
        "report.html",
        "report-ratio.png",
        "report-history.png",
    }


@pytest.mark.slow
def test_baseline_command_then_report_against_baselines(
    saved_runs: list[Path], tmp_path: Path
) -> None:
    base, slowed = saved_runs
    store = tmp_path / "baselines"
    assert main(["baseline", str(base), "--baselines-dir", str(store)]) == 0
    [written] = list(store.rglob("demo.json"))
    assert set(parse_baseline(written)) == {"slow", "fast"}
    out = tmp_path / "rep"
    assert (
        main(
            [
                "report",
                "--current",
                str(slowed),
                "--baselines-dir",
                str(store),
                "--storage",
                str(tmp_path / "none"),
                "--out",
                str(out),
            ]
        )
        == 0
    )
    assert "stored baselines in" in (out / "report.md").read_text()


def _without_injection(run: Path, tmp_path: Path) -> Path:
    """A copy of ``run`` as a slower host's run would read: no mark of injected work (a
    baseline refuses a run that has it)."""
    data = json.loads(run.read_text())
    for bench in data["benchmarks"]:
        bench["extra_info"].get("extra", {}).pop(INJECTED_KEY, None)
    out = tmp_path / "slower-host.json"
    out.write_text(json.dumps(data))
    return out


@pytest.mark.slow
def test_baseline_add_keeps_the_stored_runs_and_their_provenance(
    saved_runs: list[Path], tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """Another host's run added to a committed baseline: its allowance sees both hosts."""
    base, slowed = saved_runs[0], _without_injection(saved_runs[1], tmp_path)
    store = tmp_path / "baselines"
    assert main(["baseline", "--add", str(base), "--baselines-dir", str(store)]) == 2
    assert "no baseline of demo" in capsys.readouterr().err
    assert not list(store.rglob("*.json"))
    assert main(["baseline", str(base), "--baselines-dir", str(store)]) == 0
    [path] = list(store.rglob("demo.json"))
    first = parse_baseline(path)
    add = ["baseline", "--add", str(slowed), "--baselines-dir", str(store)]
    assert main(add) == 2  # 20 ms added: runs far apart are refused unless asked for
    assert "--allow-wide-spread" in capsys.readouterr().err
    assert parse_baseline(path) == first
    assert main([*add, "--allow-wide-spread"]) == 0
    said = capsys.readouterr()
    assert "baseline extended" in said.out
    assert "WARNING, stored anyway" in said.err
    added = parse_baseline(path)
    assert set(added) == set(first)
    for case, entry in added.items():
        medians = entry.run_medians["time"]
        assert len(medians) == 2
        assert medians[0] == pytest.approx(statistics.median(first[case].readings["time"]))
        assert entry.run_spread("time") > 0.5  # 20 ms added to rounds of a few ms
    listed = json.loads(path.read_text())["recorded_from"]
    assert [x.split(" (sha256 ")[0] for x in listed] == [str(base), str(slowed)]
    # a run already in the baseline, by name or by content, would count twice: refused
    copy = tmp_path / "copy.json"
    copy.write_bytes(slowed.read_bytes())
    # the same run written again (another indentation and key order): its content is the
    # same run, not its bytes (issue 38)
    rewritten = tmp_path / "rewritten.json"
    rewritten.write_text(json.dumps(json.loads(slowed.read_text()), indent=4, sort_keys=True))
    assert rewritten.read_bytes() != slowed.read_bytes()
    for again in (slowed, copy, rewritten):
        assert main(["baseline", "--add", str(again), "--baselines-dir", str(store)]) == 2
        assert "already in" in capsys.readouterr().err
    assert json.loads(path.read_text())["recorded_from"] == listed
    # new runs that replace every entry say only where they came from
    assert main(["baseline", str(slowed), "--baselines-dir", str(store)]) == 0
    assert json.loads(path.read_text())["recorded_from"] == listed[1:]


@pytest.mark.slow
def test_provenance_survives_writes_that_keep_old_entries(
    saved_runs: list[Path], tmp_path: Path
) -> None:
    base = saved_runs[0]
    store = BaselineStore(tmp_path / "b")
    [fast, slow] = sorted(entries_of_benchmark_json(base), key=lambda e: e.id)
    [path] = store.write([fast, slow], {})  # as a file written before recorded_from existed
    assert "recorded_from" not in json.loads(path.read_text())
    session = {"recorded_from": ["pytest --gauge-update-baselines, 2026-11-26T09:00Z"]}
    store.write([fast], session)  # one entry replaced: the other's origin is not named
    assert json.loads(path.read_text())["recorded_from"] == [
        UNNAMED_RUNS,
        *session["recorded_from"],
    ]
    store.write([fast, slow], session)  # every entry replaced
    assert json.loads(path.read_text())["recorded_from"] == session["recorded_from"]
    for bad in (None, "run0.json", [1]):
        doc = json.loads(path.read_text())
        doc["recorded_from"] = bad
        path.write_text(json.dumps(doc))
        with pytest.raises(BaselineError, match="recorded_from must be a list of strings"):
            parse_baseline(path)


def test_combine_runs_adds_runs_to_a_stored_entry() -> None:
    def e(ms: float) -> Entry:
        return Entry("b", "f", "d", {"time": (ms, ms, ms), "memory": (5.0,)})

    stored = Entry("b", "f", "d", {"time": (1.0,) * 3, "memory": (4.0,)}, {"time": (0.98, 1.0)})
    [wide] = combine_runs([[e(1.07)]], {("d", "f", "b"): stored})
    # the stored runs first; a value metric keeps each run's reading too
    assert wide.run_medians == {"time": (0.98, 1.0, 1.07), "memory": (4.0, 5.0)}
    assert wide.readings == {"time": (1.0,) * 3, "memory": (5.0,)}  # 1.0 is nearer the middle
    middle = Entry("b", "f", "d", {"time": (1.0,) * 3}, {"time": (1.0, 0.9, 1.1)})
    [kept] = combine_runs([[e(1.05)]], {("d", "f", "b"): middle})
    assert kept.run_medians == {"time": (1.0, 0.9, 1.1, 1.05)}  # the stored order, then the new
    stale = Entry("b", "f", "d", {"time": (2.0,) * 3}, {"time": (0.9, 1.0)})
    with pytest.raises(BaselineError, match="none of its run medians"):
        combine_runs([[e(1.05)]], {("d", "f", "b"): stale})
    edge = Entry("b", "f", "d", {"time": (1.0,) * 3}, {"time": (0.9, 1.0)})  # two runs: newest
    [moved] = combine_runs([[e(0.96)]], {("d", "f", "b"): edge})
    assert moved.readings["time"] == (0.96,) * 3  # nearest the middle, 0.95: the new run
    assert moved.run_medians == {"time": (0.9, 1.0, 0.96)}
    [other] = combine_runs([[e(1.07)]], {("d", "f", "c"): stored})  # not the same case
    assert other.run_medians == {}


def test_report_errors_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    bad = tmp_path / "x.json"
    bad.write_text(json.dumps({"benchmarks": {"a": 1}}))
    assert main(["report", "--current", str(bad), "--out", str(tmp_path)]) == 2
    assert "not a pytest-benchmark JSON" in capsys.readouterr().err
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"benchmarks": [{"name": "t", "extra_info": {}}]}))
    assert main(["report", "--current", str(other), "--out", str(tmp_path)]) == 2
    assert "no gpugauge results in it" in capsys.readouterr().err
    assert main(["report", "--storage", str(tmp_path / "empty"), "--out", str(tmp_path)]) == 2
    assert "no saved runs" in capsys.readouterr().err


def test_combine_runs_keeps_every_runs_median() -> None:
    def e(ms: float) -> Entry:
        return Entry("b", "f", "d", {"time": (ms, ms, ms), "memory": (5.0,)})

    [combined] = combine_runs([[e(1.0)], [e(1.1)], [e(1.04)]])
    assert combined.readings == {"time": (1.04, 1.04, 1.04), "memory": (5.0,)}
    assert combined.run_medians == {"time": (1.0, 1.1, 1.04), "memory": (5.0, 5.0, 5.0)}
    assert combined.run_spread("time") == pytest.approx(0.1)
    # the reference is the run nearest the middle of the range, not the newest (an edge)
    [centred] = combine_runs([[e(1.0)], [e(1.04)], [e(1.1)]])
    assert centred.readings["time"] == (1.04, 1.04, 1.04)


def test_combine_runs_keeps_energy_kernels_and_memory_from_where_they_are() -> None:
    readings = {"time": (2.0,), "memory": (5.0,), "energy": (3.0,)}
    full = Entry("b", "f", "d", readings, kernels=(KernelShare("k", 1.0),))
    quick = Entry("b", "f", "d", {"time": (1.0,), "memory": (6.0,)})
    [combined] = combine_runs([[full], [quick]])
    # two runs: both at the edge, the newest is the reference; energy only the full run had
    assert combined.readings == {"time": (1.0,), "memory": (6.0,), "energy": (3.0,)}
    assert combined.kernels == ()  # the rounds kept are the quick run's, which named none
    [combined] = combine_runs([[quick], [full]])
    assert combined.kernels == (KernelShare("k", 1.0),)


def test_two_runs_equally_far_from_the_middle_keep_the_newest_despite_rounding() -> None:
    # 0.3 and 0.1 are not equally far from 0.2 in binary floating point
    older = Entry("b", "f", "d", {"time": (0.3,)})
    newer = Entry("b", "f", "d", {"time": (0.1,)})
    [combined] = combine_runs([[older], [newer]])
    assert combined.readings["time"] == (0.1,)


def test_run_to_run_spread_widens_the_tolerance() -> None:
    rng = np.random.default_rng(3)

    def times(median: float) -> dict[str, tuple[float, ...]]:
        return {"time": tuple(median * (1 + 0.005 * rng.standard_normal(30)))}

    base = Entry("b", "f", "d", times(100), run_medians={"time": (100.0, 104.0)})
    tol = Tolerance().with_(time=0.03)  # runs 4% apart: 8% allowed
    assert compare(Entry("b", "f", "d", times(107)), base, tol).verdict is Verdict.UNCHANGED
    assert compare(Entry("b", "f", "d", times(110)), base, tol).verdict is Verdict.REGRESSED


def test_nightly_workflow_runs_the_gate_and_keeps_the_report() -> None:
    root = Path(__file__).resolve().parents[1]
    text = (root / ".github" / "workflows" / "nightly-gpu.yml").read_text()
    assert "runs-on: [self-hosted, gpu]" in text
    # every single-GPU family on the single-GPU runner, gated, as round 1's head side of a
    # same-GPU A/B
    single = (
        "python3 -m gpugauge confirm results/nightly.json --measure --out results/ab "
        '--deadline "$GPUGAUGE_DEADLINE" --profile seed -m "nightly and not multi_gpu and '
        'not distributed" --gated-args "--gauge-gate'
    )
    assert single in " ".join(text.replace("\\\n", " ").split())  # continued lines joined
    multi = 'benches --gauge-profile seed -m "nightly and (multi_gpu or distributed)" --gauge-gate'
    assert multi in text  # the multi-GPU cases the nightly gates, on the multi-GPU runner
    assert text.count("--gauge-gate --gauge-require-baselines") == 2
    assert "--gauge-gate --gauge-require-baselines" in text  # a result with no baseline fails
    assert (
        "--gauge-record-kernels --gauge-energy-window 0 --gauge-skip-diagnostics" in text
    )  # the budget
    assert "GPUGAUGE_HISTORY:" in text  # the history outlives the checkout
    assert "runs-on: [self-hosted, gpu, multi-gpu]" in text
    assert 'NCCL_NVLS_ENABLE: "0"' in text
    assert "python3 -m gpugauge report --current results/nightly.json" in text
    assert "actions/upload-artifact" in text
    # confirm's A/Bs end by 14 min 30 s into the job, counted from its start: before the
    # full-history checkout, which takes its own time
    deadline = 'echo "GPUGAUGE_DEADLINE=$(( $(date +%s) + 870 ))" >> "$GITHUB_ENV"'
    # a new host's class regression in time alone is left to confirm's A/B (single GPU)
    assert text.count("--gauge-confirm-new-host --gauge-record-kernels") == 1
    assert deadline in text
    assert text.index(deadline) < text.index("uses: actions/checkout@v4")
    assert '--deadline "$GPUGAUGE_DEADLINE"' in text
    assert "if: always()" in text  # the report is kept when the gate fails the run
    # every gpugauge command the workflows give parses (an option renamed breaks the night)
    from gpugauge.cli import build_parser

    for workflow in (root / ".github" / "workflows").glob("*.yml"):
        script = workflow.read_text().replace("\\\n", " ")  # continued lines joined
        for line in script.splitlines():
            if line.strip().startswith("#") or "python3 -m gpugauge " not in line:
                continue
            command = line.split("python3 -m gpugauge ", 1)[1]
            command = re.sub(r"\$\{?GPUGAUGE_DEADLINE\}?", "1800000000", command)  # set by the job
            words = shlex.split(command, comments=True)
            stop = [i for i, w in enumerate(words) if w in ("|", "&&", ";", "||", ">")]
            build_parser().parse_args(words[: stop[0] if stop else None])  # unknown: exits


def test_many_artifacts_share_one_cell_under_their_header() -> None:
    from gpugauge.report.cells import html_cell, markdown_table

    links = (("kernels_rank0_md", "a/k0.md"), ("trace_rank0", "a/t0.json.gz"))
    text = markdown_table(["benchmark", "artifacts"], [["x", links], ["y", "-"]])
    lines = text.splitlines()
    assert {line.count("|") for line in lines} == {3}  # every row: two cells, like the header
    assert "[kernels_rank0_md](a/k0.md), [trace_rank0](a/t0.json.gz)" in lines[2]
    assert html_cell(links).count("<a href=") == 2


# a report that explains itself (issue 25)


def _noisy(m):
    """``m`` as its stop rule leaves a result whose max time ran out before its CI met a
    target of ±0.1%."""
    from dataclasses import replace

    t = m.timing
    width = t.summary.ci_rel_halfwidth
    why = f"max time 10 s reached with CI ±{width:.2%} > target ±0.10%"
    policy = replace(t.policy, target_ci=0.001)
    return replace(m, timing=replace(t, noisy=True, stop_reason=why, policy=policy))


def _with_throughput(m, value: float):
    from dataclasses import replace

    return replace(m, values={"throughput": value})


def test_verdicts_name_their_metric_and_flag_noise(tmp_path: Path) -> None:
    """Device-timed results (a CPU's host-timed ones are all flagged: see below).

    A noisy result's change is hedged where it is within a few times its noise (a's 4%), not
    where it is far beyond (d's 2x).
    """
    from .fakes import device_timed, result, save_run

    def runs(*results):
        return [device_timed(m) for m in results]

    before = save_run(
        tmp_path / "before.json",
        runs(
            result("a", 2.0),
            _with_throughput(result("b", 2.0), 100.0),
            result("c", 2.0),
            result("d", 2.0),
        ),
    )
    after = save_run(
        tmp_path / "after.json",
        runs(
            _noisy(result("a", 1.92)),
            _with_throughput(result("b", 2.0), 50.0),
            result("c", 2.0),
            _noisy(result("d", 1.0)),
        ),
    )
    out = tmp_path / "rep"
    args = ["report", "--current", str(after), "--against", str(before), "--out", str(out)]
    assert main([*args, "--storage", str(tmp_path / "none")]) == 0
    md = (out / "report.md").read_text()
    rows: dict[str, str] = {}  # the verdict table's row: the first of each id
    for line in md.splitlines():
        if line.startswith("| "):
            rows.setdefault(line.split("|")[1].strip(), line)
    cells = {k: [c.strip() for c in v.split("|")[1:-1]] for k, v in rows.items()}
    assert cells["case"][1:3] == ["verdict", "decided by"]
    assert cells["a"][1:3] == ["improved (noisy)", "time (saved run)"]  # never plain improved
    assert cells["b"][1:3] == [
        "REGRESSED",
        "throughput (saved run)",
    ]  # time did not move; throughput did
    assert cells["c"][1:3] == ["unchanged", "time (saved run)"]
    assert cells["d"][1:3] == ["improved", "time (saved run)"]  # 2x: no noise of 1.5%
    assert "verdicts: 1 regressed, 2 improved, 1 unchanged (1 of the changes noisy)" in md
    results = next(line for line in md.splitlines() if line.startswith("| a ") and "cpu-" in line)
    assert any(c.strip().startswith("noisy: CI ±") for c in results.split("|"))  # with why
    assert "| CV " in md
    page = (out / "report.html").read_text()
    assert '<tr class="improved noisy">' in page
    assert '<tr class="regressed">' in page
    assert not re.search(r'<tr class="[^"]*\bms\b', page)  # never a cell's text as a class


def test_a_first_report_says_why_it_has_no_chart(tmp_path: Path) -> None:
    from .fakes import first_report, result, save_run

    current = save_run(tmp_path / "only.json", [result("a"), result("b")])
    md = first_report(tmp_path, current)
    out = tmp_path / "rep"  # where first_report wrote
    assert "## Charts not drawn" in md
    assert "no ratio chart: none of this run's 2 results had a counterpart" in md
    assert "no history chart: it needs 2 or more saved runs in --storage; found 0" in md
    assert "Charts not drawn" in (out / "report.html").read_text()
    assert not list(out.glob("*.png"))


def test_ratio_bars_go_logarithmic_past_ten_x(tmp_path: Path) -> None:
    import matplotlib.pyplot as plt

    from gpugauge.report.charts import RatioBars
    from gpugauge.report.data import ReportData
    from gpugauge.results.runs import SavedRun
    from gpugauge.results.verdicts import GateResult, MetricCheck

    def data(*ratios: float) -> ReportData:
        results = [
            GateResult(
                f"b{i}",
                "demo",
                "cpu",
                (MetricCheck("time", 1.0, r, r, r * 0.99, r * 1.01, 0.05, Verdict.UNCHANGED),),
            )
            for i, r in enumerate(ratios)
        ]
        return ReportData(SavedRun(tmp_path / "r.json", "now", []), "-", results, [])

    wide = RatioBars().draw(data(1.01, 0.98, 434.0))
    narrow = RatioBars().draw(data(1.01, 0.98, 1.3))
    try:
        assert wide.axes[0].get_xscale() == "log"
        assert narrow.axes[0].get_xscale() == "linear"
    finally:
        plt.close(wide)
        plt.close(narrow)


def test_comparisons_say_when_a_side_was_noisy() -> None:
    from gpugauge.report.tables import comparison_table
    from gpugauge.results.measurement import Comparison

    from .fakes import result

    c = Comparison("vgg", result("n", 2.0), _noisy(result("s", 1.0)), "normal", "swapped")
    row = comparison_table([c]).splitlines()[-1]
    assert row.endswith("noisy: swapped")


def _one_round(m):
    from dataclasses import replace

    ms = m.timing.device_ms[0]
    return replace(m, timing=replace(m.timing, device_ms=(ms,), host_ms=(ms,)))


def test_a_result_of_one_round_shows_no_interval_in_the_report(tmp_path: Path) -> None:
    from .fakes import result, save_run

    before = save_run(tmp_path / "before.json", [_one_round(result("ddp", 584.5))])
    after = save_run(tmp_path / "after.json", [_one_round(result("ddp", 584.5))])
    out = tmp_path / "rep"
    args = ["report", "--current", str(after), "--against", str(before), "--out", str(out)]
    assert main([*args, "--storage", str(tmp_path / "none")]) == 0
    md = (out / "report.md").read_text()
    assert "[584.5, 584.5]" not in md
    assert "584.5 (n=1: no interval)" in md  # the results table's median cell
    assert "1.000x (no interval)" in md  # the verdict's ratio
    row = next(line for line in md.splitlines() if line.startswith("| ddp ") and "cpu-" in line)
    cells = [c.strip() for c in row.split("|")[1:-1]]
    assert cells[3:6] == ["1", "-", "n=1: no interval"]  # n, no CV, flagged in the notes
    page = (out / "report.html").read_text()
    assert '<td class="no-interval">584.5 (n=1: no interval)</td>' in page


def test_html_marks_the_noisy_median_not_a_column_position(tmp_path: Path) -> None:
    from .fakes import result, save_run

    current = save_run(tmp_path / "now.json", [_noisy(result("a", 2.0)), result("b", 2.0)])
    out = tmp_path / "rep"
    args = ["report", "--current", str(current), "--out", str(out)]
    assert main([*args, "--storage", str(tmp_path / "none")]) == 0
    page = (out / "report.html").read_text()
    assert "nth-child" not in page  # no style by column position
    results = page.split("<h2>Results of this run</h2>")[1].split("</table>")[0]
    marked = re.findall(r'<td class="noisy">([^<]*)</td>', results)
    assert len(marked) == 1
    assert marked[0].startswith("2.00")  # the median, never the device class


def test_every_line_of_the_history_chart_is_told_apart(tmp_path: Path) -> None:
    import matplotlib.pyplot as plt
    from matplotlib.colors import to_hex

    from gpugauge.report.charts import HistoryChart
    from gpugauge.report.data import ReportData
    from gpugauge.results.runs import SavedRun

    from .fakes import result

    def run(r: int) -> SavedRun:
        cases = [result(f"c{i:02d}", 2.0 + r * i) for i in range(14)]
        return SavedRun(tmp_path / f"{r}.json", f"run{r}", cases)

    runs = [run(r) for r in range(3)]
    fig = HistoryChart().draw(ReportData(runs[-1], "-", [], runs))
    try:
        lines = [ln for ln in fig.axes[0].lines if not ln.get_label().startswith("_")]
        assert len(lines) == 12
        styles = {(to_hex(ln.get_color()), ln.get_marker(), ln.get_linestyle()) for ln in lines}
        assert len(styles) == len(lines)
    finally:
        plt.close(fig)


def _rounds(m, rounds: tuple[float, ...]):
    from dataclasses import replace

    return replace(m, timing=replace(m.timing, device_ms=rounds, host_ms=rounds))


def _tailed(median: float, n: int = 200) -> tuple[float, ...]:
    """A shared CPU's rounds: tight around ``median``, every 20th one 60x slower (CV 326%)."""
    return tuple(median * (60.0 if i % 20 == 7 else 1 + 0.001 * (i % 9)) for i in range(n))


def test_two_cpu_runs_of_unchanged_code_never_read_as_a_plain_change(tmp_path: Path) -> None:
    """Issue 38: two runs of unchanged code on a CPU, compared with report --against, said
    '2 improved' (0.671x [0.627, 0.710]); their rounds' CVs of 260-310% were not noisy. A
    CPU's host-timed rounds move from run to run by more than a within-run CI shows: every
    verdict they get says so, and so does the verdict line."""
    from .fakes import result, save_run

    before = save_run(tmp_path / "before.json", [result("a", 3.0), result("b", 3.0)])
    after = save_run(tmp_path / "after.json", [result("a", 2.013), result("b", 2.013)])
    out = tmp_path / "rep"
    args = ["report", "--current", str(after), "--against", str(before), "--out", str(out)]
    assert main([*args, "--storage", str(tmp_path / "none")]) == 0
    md = (out / "report.md").read_text()
    rows = [ln for ln in md.splitlines() if ln.startswith(("| a ", "| b ")) and "improved" in ln]
    assert len(rows) == 2
    assert all("improved (noisy)" in row for row in rows)  # never a plain 'improved'
    line = next(ln for ln in md.splitlines() if ln.startswith("- verdicts:"))
    assert "2 improved (every change noisy or host-timed" in line


def test_rounds_with_a_heavy_tail_are_noisy_though_their_median_is_tight() -> None:
    """Why a CV of 260-310% read as not noisy: the stop rule looks at the median's CI,
    which a heavy tail does not widen. The noise flag also reads the rounds' spread."""
    from gpugauge.measure.stats import summarize
    from gpugauge.report.tables import noisy_ids, notes_of, results_table

    from .fakes import result

    m = _rounds(result("tail", 2.0), _tailed(2.0))
    s = summarize(m.timing.device_ms)
    assert s.cv > 2.5
    assert s.ci_rel_halfwidth < 0.01  # the stop rule would be satisfied
    assert not m.timing.noisy
    assert noisy_ids([m]) == {"tail"}
    assert "noisy: CV 326%" in notes_of(m)
    row = results_table([m]).splitlines()[-1]
    assert "noisy" in row
    steady = result("steady", 2.0)
    assert noisy_ids([steady]) == frozenset()


def test_a_noisy_device_timed_result_is_flagged_in_every_comparison(tmp_path: Path) -> None:
    """The same rule for GPU-timed rounds: a heavy tail flags the verdict, the ratio chart's
    label, the within-run comparison and the verdict line; a steady GPU result is not."""

    from gpugauge.regress.tolerances import load_tolerances
    from gpugauge.report.charts import RatioBars
    from gpugauge.report.document import collect
    from gpugauge.report.tables import comparison_table
    from gpugauge.results.measurement import Comparison

    from .fakes import device_timed as gpu
    from .fakes import result, save_run

    before = save_run(tmp_path / "b.json", [gpu(result("t", 2.0)), gpu(result("s", 2.0))])
    noisy = gpu(_rounds(result("t", 1.0), _tailed(1.0)))
    after = save_run(tmp_path / "a.json", [noisy, gpu(result("s", 1.0))])
    data = collect(
        after,
        baseline_run=before,
        baselines=tmp_path,
        tolerances=load_tolerances(tmp_path / "none"),
        history=[],
    )
    assert data.noisy == {"t"}
    assert "(1 of the changes noisy)" in data.verdict_line
    import matplotlib.pyplot as plt

    fig = RatioBars().draw(data)
    try:
        labels = {t.get_text() for t in fig.axes[0].get_yticklabels()}
    finally:
        plt.close(fig)
    assert "t (noisy)" in labels
    assert "s" in labels
    c = Comparison("t vs s", gpu(result("s", 2.0)), noisy, "s", "t")
    assert comparison_table([c]).splitlines()[-1].endswith("noisy: t")


def test_a_result_stored_without_a_verdict_leaves_the_others_stored_verdicts(
    tmp_path: Path,
) -> None:
    """One result without a stored verdict (its gate raised) sent every other back to the
    class baselines: an A/B's "regressed" read "unchanged" (a review, 2026-12-06)."""
    import json

    from gpugauge.regress.tolerances import load_tolerances
    from gpugauge.report.document import collect

    from .fakes import result, run_json, save_baselines, time_gate

    save_baselines(tmp_path / "baselines", [result("a", 3.0), result("b", 3.0)])
    data = run_json([result("a", 3.06), result("b", 3.0)])
    gate = time_gate("a", 1.02, "regressed", "a same-GPU A/B said slower")
    data["benchmarks"][0]["extra_info"]["gate"] = gate  # b: stored without one
    run = tmp_path / "night.json"
    run.write_text(json.dumps(data))
    got = collect(
        run,
        baseline_run=None,
        baselines=tmp_path / "baselines",
        tolerances=load_tolerances(tmp_path / "none"),
        history=[],
    )
    verdicts = {r.id: r.verdict for r in got.results}
    assert verdicts == {"a": Verdict.REGRESSED, "b": Verdict.UNCHANGED}
    assert "as the run's own gate judged it" in got.against
    assert "1 result stored without a verdict judged here against" in got.against
    assert got.against.endswith(": b")


def test_a_baseline_of_runs_far_apart_is_refused_unless_asked_for(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """Issue 38: two runs whose medians lay 49% apart made a baseline that allowed about
    2x, saved without a word. Refused, naming the case, its spread and the override; with
    the override, stored with a warning per case; runs that agree are stored quietly."""
    from .fakes import result, save_run

    one = save_run(tmp_path / "one.json", [result("far", 2.0), result("near", 2.0)])
    two = save_run(tmp_path / "two.json", [result("far", 2.98), result("near", 2.04)])
    store = tmp_path / "baselines"
    args = ["baseline", str(one), str(two), "--baselines-dir", str(store)]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("gpugauge baseline: refused, nothing written")
    assert "'far': its 2 runs' time medians lie 49% apart (2.007 to 2.99 ms)" in err
    assert "the gate would allow 1.98x" in err
    assert "'near'" not in err
    assert "--allow-wide-spread" in err
    assert not list(store.rglob("*.json"))
    assert main([*args, "--allow-wide-spread"]) == 0
    said = capsys.readouterr()
    assert "baseline written" in said.out
    warned = [ln for ln in said.err.splitlines() if "WARNING" in ln]
    assert len(warned) == 1
    assert "'far'" in warned[0]
    quiet = ["baseline", str(one), str(tmp_path / "three.json"), "--baselines-dir", str(store)]
    save_run(tmp_path / "three.json", [result("far", 2.1), result("near", 2.04)])
    assert main(quiet) == 0
    assert capsys.readouterr().err == ""


def test_adding_a_run_that_widens_a_baseline_past_the_limit_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """The same for --add: a host 30% slower than the stored runs would widen the case."""
    from .fakes import result, save_run

    one = save_run(tmp_path / "one.json", [result("a", 2.0)])
    two = save_run(tmp_path / "two.json", [result("a", 2.02)])
    store = tmp_path / "baselines"
    assert main(["baseline", str(one), str(two), "--baselines-dir", str(store)]) == 0
    [path] = list(store.rglob("*.json"))
    before = path.read_bytes()
    slow = save_run(tmp_path / "slow.json", [result("a", 2.6)])
    assert main(["baseline", "--add", str(slow), "--baselines-dir", str(store)]) == 2
    assert "its 3 runs' time medians lie 30% apart" in capsys.readouterr().err
    assert path.read_bytes() == before


# run-file strings in the report: text, never structure or a script (issue 38, class 4)

HOSTILE_ID = "relu\n# Injected heading\n| forged | row |\n[click](javascript:alert(1)) <b>x</b>"


def _hostile_run(tmp_path: Path) -> Path:
    from dataclasses import replace

    from tests.fakes import result, save_run

    m = result(HOSTILE_ID)
    m = replace(m, artifacts={"trace": "javascript:alert(1)", "kernels\n# x": "a b/k(0).md"})
    return save_run(tmp_path / "hostile.json", [m, result("plain")])


def test_a_run_files_strings_cannot_inject_markdown(tmp_path: Path) -> None:
    from tests.fakes import first_report

    md = first_report(tmp_path, _hostile_run(tmp_path))
    lines = md.splitlines()
    assert [ln for ln in lines if ln.startswith("#")] == [
        ln for ln in lines if ln.startswith(("# gpugauge report", "## "))
    ]
    assert not any("Injected" in ln and not ln.startswith("|") for ln in lines)
    # every row of the results table has as many cells as its header
    table = lines[lines.index("## Results of this run") + 2 :]
    rows = [ln for ln in table[: table.index("")] if ln.startswith("|")]
    widths = {len(re.split(r"(?<!\\)\|", ln)) for ln in rows}
    assert len(widths) == 1, rows
    assert "](javascript" not in md
    assert "<b>" not in md
    assert r"relu\n# Injected heading\n\| forged \| row \|" in md  # shown, not acted on


def test_a_javascript_artifact_is_never_a_live_link(tmp_path: Path) -> None:
    from tests.fakes import first_report

    md = first_report(tmp_path, _hostile_run(tmp_path))
    page = (tmp_path / "rep" / "report.html").read_text()
    hrefs = re.findall(r'href="([^"]*)"', page) + re.findall(r"\]\(([^)]*)\)", md)
    assert hrefs
    for target in hrefs:
        assert ":" not in target.split("/")[0], target  # no scheme: a relative path
    assert "javascript%3Aalert%281%29" in page
    assert "a%20b/k%280%29.md" in md


def test_a_paired_comparison_says_so_in_the_report_not_its_sides_noise(tmp_path: Path) -> None:
    """The report's notes name the paired blocks, as the run's own table does.

    The pairs time both sides alike, so their spread is in the speedup's interval: a side
    noisy on its own is no hedge (a review found the report saying 'noisy: swapped' where
    the terminal said 'from 8 paired blocks').
    """
    import math
    from dataclasses import replace

    from gpugauge.report.document import ReportData, render_markdown
    from gpugauge.results.measurement import Comparison
    from gpugauge.results.runs import SavedRun

    from .fakes import result

    normal, swapped = result("normal", 2.0), _noisy(result("swapped", 1.0))
    logs = [math.log(1.05)] * 8
    paired = replace(swapped, extra={"paired": {"against": "normal", "log_ratios": logs}})
    saved = [
        Comparison("vgg paired", normal, paired, "normal", "swapped").as_dict(),
        Comparison("vgg alone", normal, swapped, "normal", "swapped").as_dict(),
    ]
    run = SavedRun(tmp_path / "r.json", "now", [normal, paired], adhoc_comparisons=saved)
    md = render_markdown(ReportData(run, "-", [], []), {}, tmp_path)
    rows = {line.split("|")[1].strip(): line for line in md.splitlines() if "| vgg " in line}
    assert rows["vgg paired"].rstrip(" |").endswith("from 8 paired blocks")
    assert rows["vgg alone"].rstrip(" |").endswith("noisy: swapped")


def test_a_verdict_an_a_b_decided_shows_the_a_b_s_own_times() -> None:
    """Its ratio is of its own blocks: the A/B's base beside the gated run's median read
    2.9 -> 3.09 ms next to "1.000x unchanged" (a review, 2026-12-07)."""
    from gpugauge.report.data import ReportData
    from gpugauge.report.document import _verdict_rows
    from gpugauge.results.runs import SavedRun
    from gpugauge.results.verdicts import Basis, GateResult, MetricCheck

    from .fakes import CLASS, result

    ab = MetricCheck("time", 2.9, 2.9003, 1.0001, 0.996, 1.004, 0.01, Verdict.UNCHANGED)
    checked = GateResult("a", "demo", CLASS, (replace(ab, basis=Basis.SAME_GPU_AB),))
    one = result("a", 3.09)  # the gated run's own time had one round: the A/B's has pairs
    one = replace(one, timing=replace(one.timing, device_ms=one.timing.device_ms[:1]))
    run = SavedRun(Path("run.json"), "run", [one])
    row = _verdict_rows(ReportData(run, "baselines", [checked], [])).rows[0]
    assert [str(x) for x in row[3:5]] == ["2.9", "2.9"]
    assert row[5].text == "1.000x [0.996, 1.004]"
    assert row[5].css == ""  # not flagged "no interval"
