"""Every input path, fed bad data: a one-line error naming it, a non-zero exit, no traceback,
and nothing written or overwritten (issue 9). Generated: one case per malformed file or bad
option value, through the pytest plugin and both commands (``gpugauge report``/``baseline``).

Issue 26 adds classes: files the suite would write but could not read back (a baseline from
a result with no metric), paths that leave their folder (``../`` in a family or device
class), a run counted twice, numbers that are not finite or out of range, empty paths,
FIFOs and dangling links where files are read, subnormal readings, destinations that cannot
be written (checked before measuring), and writes interrupted by a full disk or a signal.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from gpugauge.__main__ import main
from gpugauge.regress.baselines import BaselineError, BaselineStore, Entry

from .fakes import CLASS, SPEC_SOURCE, result, run_json, save_baselines, save_run
from .test_plugin import BENCH
from .test_saved_data import snapshot

ROOT = Path(__file__).resolve().parents[1]
DIR = object()  # a directory where a file is expected
FIFO = object()  # a named pipe where a file is expected: reading it would block
NOT_REGULAR = "not a regular file"

GOOD_RESULT = run_json([result("a")])["benchmarks"][0]["extra_info"]


def _bench(**change: Any) -> str:
    """A saved run whose one gpugauge result has ``change`` applied (None deletes a key)."""
    info = {**GOOD_RESULT, "timing": dict(GOOD_RESULT["timing"])}
    for key, value in change.items():
        where = info["timing"] if key in info["timing"] and key != "policy" else info
        if value is None:
            del where[key]
        else:
            where[key] = value
    return json.dumps({"benchmarks": [{"name": "t", "extra_info": info}]})


def _baseline(benchmarks: Any = None, **top: Any) -> str:
    sample = {"time": {"unit": "ms", "samples": [1.0, 1.1]}}
    data = {"schema_version": 2, "device_class": CLASS, "family": "demo"}
    data["benchmarks"] = {"a": sample} if benchmarks is None else benchmarks
    data.update(top)
    return json.dumps(data)


def _time(samples: Any, **more: Any) -> dict[str, Any]:
    return {"a": {"time": {"unit": "ms", "samples": samples, **more}}}


def _gate(check: Any = None, **change: Any) -> dict[str, Any]:
    """Result a's stored verdict, with its time check (``check`` given) or fields changed."""
    time = {"metric": "time", "baseline": 2.0, "current": 2.0, "ratio": 1.0, "ci_low": 1.0}
    time |= {"ci_high": 1.0, "tolerance": 0.05, "verdict": "unchanged"}
    gate = {"id": "a", "verdict": "unchanged", "note": "", "checks": [time | (check or {})]}
    return gate | change


def _run(**top: Any) -> str:
    """The good saved run with top-level keys replaced."""
    return json.dumps({**run_json([result("a")]), **top})


def _kernels(*rows: tuple[str, float]) -> list[dict[str, Any]]:
    """Recorded kernel rows (name, share of the round), 5 us each."""
    return [{"name": n, "calls": 1, "us": 5.0, "share": share} for n, share in rows]


BAD_BASELINES: dict[str, Any] = {
    "not-json": "{oops",
    "not-utf8": b"\xff\xfe\x00",
    "empty-file": "",
    "null": "null",
    "top-is-a-list": "[]",
    "schema-99": _baseline(schema_version=99),
    "schema-missing": json.dumps({"device_class": CLASS, "family": "demo", "benchmarks": {}}),
    "no-device-class": json.dumps({"schema_version": 2, "family": "demo", "benchmarks": {}}),
    "family-not-a-string": _baseline(family=3),
    "other-device-class": _baseline(device_class="nvidia-h200"),
    "benchmarks-a-list": _baseline(benchmarks=[]),
    "entry-not-an-object": _baseline(benchmarks={"a": 3}),
    "entry-without-metrics": _baseline(benchmarks={"a": {}}),
    "unknown-metric": _baseline(benchmarks={"a": {"speed": {"unit": "x", "value": 1}}}),
    "metric-not-an-object": _baseline(benchmarks={"a": {"time": [1.0]}}),
    "wrong-unit": _baseline(benchmarks={"a": {"time": {"unit": "s", "samples": [1.0]}}}),
    "unknown-key": _baseline(benchmarks=_time([1.0], median=1.0)),
    "samples-empty": _baseline(benchmarks=_time([])),
    "samples-zero": _baseline(benchmarks=_time([0, 0, 0])),
    "samples-nan": _baseline(benchmarks=_time([1.0, float("nan")])),
    "samples-infinite": _baseline(benchmarks=_time([float("inf")])),
    "samples-negative": _baseline(benchmarks=_time([-1.0])),
    "samples-strings": _baseline(benchmarks=_time(["1.0"])),
    "samples-bool": _baseline(benchmarks=_time([True])),
    "run-medians-zero": _baseline(benchmarks=_time([1.0], run_medians=[0.0, 1.0])),
    "memory-no-value": _baseline(benchmarks={"a": {"memory": {"unit": "bytes"}}}),
    "memory-negative": _baseline(benchmarks={"a": {"memory": {"unit": "bytes", "value": -1}}}),
    "energy-nan": _baseline(benchmarks={"a": {"energy": {"unit": "J", "value": float("nan")}}}),
    "v1-unknown-key": _baseline(schema_version=1, benchmarks={"a": {"time_ms": [1], "x": 1}}),
    "v1-empty-times": _baseline(schema_version=1, benchmarks={"a": {"time_ms": []}}),
    "directory": DIR,
    # issue 26
    "samples-subnormal": _baseline(benchmarks=_time([5e-324, 5e-324])),
    "samples-huge": _baseline(benchmarks=_time([1e300])),
    "run-medians-subnormal": _baseline(benchmarks=_time([1.0], run_medians=[5e-324, 1.0])),
    "energy-subnormal": _baseline(benchmarks={"a": {"energy": {"unit": "J", "value": 5e-324}}}),
    "family-empty": _baseline(family=""),
    "family-a-path": _baseline(family="../demo"),
    "kernels-named-twice": _baseline(
        benchmarks={"a": {**_time([1.0])["a"], "kernels": _kernels(("k", 0.3), ("k", 0.3))}}
    ),
    "kernel-shares-over-1": _baseline(
        benchmarks={"a": {**_time([1.0])["a"], "kernels": _kernels(("k", 0.8), ("j", 0.7))}}
    ),
    "fifo": FIFO,
}

BAD_TOLERANCES: dict[str, Any] = {
    "not-toml": "[default\n",
    "not-utf8": b"\xff\xfe[default]",
    "negative": "[default]\ntime = -0.1\n",
    "string": "[default]\ntime = 'a'\n",
    "nan": "[default]\ntime = nan\n",
    "infinite": "[default]\ntime = inf\n",
    "too-large": "[default]\ntime = 10\n",
    "bool": "[default]\ntime = true\n",
    "unknown-key": "[default]\nspeed = 0.1\n",
    "unknown-table": "[bogus]\ntime = 0.1\n",
    "family-not-a-table": "family = 3\n",
    "default-not-a-table": "default = 3\n",
    "nested-table": "[family.x.y]\ntime = 0.1\n",
    "set-twice": "[family.layers]\ntime = 0.2\n",  # the good file sets it too
    # issue 26
    "unknown-family": "[family.typo]\ntime = 0.1\n",
}

# Entries of a tolerances folder that are no tolerance file (issue 38: an editor's lock
# file aborted every gated run): never read, each named once in a warning. By name: what.
SKIPPED_TOLERANCES: dict[str, Any] = {
    "d.toml": DIR,
    "f.toml": FIFO,
    ".#t.toml": "[default\n",  # an editor's lock file, here a regular one, and no TOML
    "t.toml~": "[default\n",  # a backup
    "#t.toml#": "[default\n",  # an auto-save
}

BAD_RUNS: dict[str, Any] = {
    "not-json": "{oops",
    "not-utf8": b"\xff\xfe\x00",
    "empty-file": "",
    "top-is-a-list": "[]",
    "benchmarks-an-object": json.dumps({"benchmarks": {}}),
    "no-benchmarks": json.dumps({"benchmarks": []}),
    "not-gpugauges": json.dumps({"benchmarks": [{"name": "t", "extra_info": {"x": 1}}]}),
    "benchmark-not-an-object": json.dumps({"benchmarks": [3]}),
    "samples-empty": _bench(device_ms=[]),
    "samples-nan": _bench(device_ms=[1.0, float("nan")]),
    "samples-zero": _bench(device_ms=[0.0, 0.0]),
    "samples-negative": _bench(device_ms=[-1.0]),
    "samples-strings": _bench(device_ms=["x"]),
    "no-family": _bench(family=None),
    "no-device-class": _bench(device_class=None),
    "timing-a-number": _bench(timing=3),
    "memory-a-number": _bench(memory=3),
    "unknown-value-metric": _bench(values={"bogus": 1.0}),
    "value-nan": _bench(values={"speedup": float("nan")}),
    "value-string": _bench(values={"speedup": "fast"}),
    "roofline-malformed": _bench(roofline={"flops": 1}),
    "directory": DIR,
    # issue 26
    "id-a-dict": _bench(id={"x": 1}),
    "id-empty": _bench(id=""),
    "family-empty": _bench(family=""),
    "family-a-path": _bench(family="../../escape"),
    "device-class-a-path": _bench(device_class="../escape"),
    "device-class-absolute": _bench(device_class="/tmp/gpugauge-escape"),
    "memory-infinite": _bench(memory=[{"device": "cuda:0", "peak_allocated_bytes": float("inf")}]),
    "machine-info-a-list": _run(machine_info=[1]),
    "samples-subnormal": _bench(device_ms=[5e-324, 5e-324]),
    "samples-huge": _bench(device_ms=[1e300, 1e300]),
    "value-subnormal": _bench(values={"speedup": 5e-324}),
    "fifo": FIFO,
    # issue 38: fields that reached a reader as a traceback, or were taken as something else
    "gpugauge-a-list": _run(gpugauge=[1]),
    "gpugauge-a-string": _run(gpugauge="x"),
    "argv-an-int": _run(gpugauge={"argv": 5}),
    "argv-a-string": _run(gpugauge={"argv": "pytest -x"}),  # was stored a char at a time
    "gpus-a-dict": _run(machine_info={"gpugauge": {"gpus": {"name": "H100"}}}),
    "date-year-1": _run(datetime="0001-01-01T00:00:00"),
    "date-year-999": _run(datetime="0999-06-01T00:00:00"),
    "date-year-9999": _run(datetime="9999-12-31T00:00:00"),
    "date-year-2999": _run(datetime="2999-01-01T00:00:00"),
    "date-garbage": _run(datetime="last tuesday"),
    "date-a-number": _run(datetime=20261122),
    "id-lone-surrogate": _bench(id="relu\ud800"),
    "family-lone-surrogate": _bench(family="demo\udfff"),
    "key-lone-surrogate": _bench(extra={"\ud800": 1}),
    "device-cuda-abc": _bench(devices=["cuda:abc"]),
    "schema1-device-cuda-abc": _bench(
        gpugauge_schema=1, device_class=None, spec={"name": "a", "device": "cuda:abc"}
    ),
    "comparisons-a-number": _run(gpugauge={"comparisons": 5}),
    "comparisons-of-numbers": _run(gpugauge={"comparisons": [5]}),
    "artifacts-not-strings": _bench(artifacts={"trace": 5}),
    "artifacts-a-list": _bench(artifacts=["trace.json"]),
    "fingerprint-schema-minus-1": _run(machine_info={"gpugauge": {"schema_version": -1}}),
    "schema-minus-1": _bench(gpugauge_schema=-1),
    "schema-99": _bench(gpugauge_schema=99),
    "schema-a-string": _bench(gpugauge_schema="2"),
    "schema-true": _bench(gpugauge_schema=True),
    "samples-bool": _bench(device_ms=[True] * 8),
    "host-samples-bool": _bench(host_ms=[False] * 8),
    "batch-row-garbage-clock": _bench(batches=[{"rounds": 8, "sm_clock_mhz": "fast"}]),
    "batch-row-garbage-rounds": _bench(batches=[{"rounds": "all"}]),
    "values-bool": _bench(values={"speedup": True}),
    "history-run-id-empty": _run(gpugauge={"history_run_id": ""}),
    "options-a-list": _run(gpugauge={"options": [1]}),
    "test-seconds-negative": _run(gpugauge={"test_seconds": {"t.py::t": -1.0}}),
    "test-seconds-a-list": _run(gpugauge={"test_seconds": [1.0]}),
    # stored verdicts: a traceback in confirm (or a refusal only after its A/B) and report
    "gate-a-string": _bench(gate="regressed"),
    "gate-no-id": _bench(gate=_gate(id=None)),
    "gate-checks-a-number": _bench(gate=_gate(checks=5)),
    "gate-check-a-string": _bench(gate=_gate(checks=["time"])),
    "gate-check-no-ratio": _bench(gate=_gate({"ratio": None})),
    "gate-ratio-a-string": _bench(gate=_gate({"ratio": "big"})),
    "gate-metric-unknown": _bench(gate=_gate({"metric": "bogus"})),
    "gate-verdict-unknown": _bench(gate=_gate({"verdict": "meh"})),
    "gate-basis-unknown": _bench(gate=_gate({"basis": "gut feeling"})),
    "gate-references-a-string": _bench(gate=_gate(references="host history")),
    "deep-array": "[" * 100_000 + "]" * 100_000,
    "deep-object": '{"a":' * 100_000 + "1" + "}" * 100_000,
}

# Saved runs the baseline command must either refuse (one line naming the run, nothing
# written) or store as a file its reader reads back: never a baseline that fails later.
RUNS_TO_BASELINES: dict[str, tuple[str, bool]] = {  # content, refused
    "no-metrics": (_bench(timing=None), True),
    "kernels-named-twice": (_bench(extra={"kernels": _kernels(("k", 0.3), ("k", 0.3))}), False),
    "kernel-shares-over-1": (_bench(extra={"kernels": _kernels(("k", 0.8), ("j", 0.7))}), False),
    "family-empty": (_bench(family=""), True),
    "device-class-a-path": (_bench(device_class="../../escape"), True),
}


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    """A workspace with good baselines, tolerances, a saved run and a previous report."""
    save_baselines(tmp_path / "baselines", [result("a")])
    (tmp_path / "tolerances").mkdir()
    (tmp_path / "tolerances" / "t.toml").write_text("[family.layers]\ntime = 0.3\n")
    save_run(tmp_path / "good.json", [result("a")])
    (tmp_path / "reports").mkdir()
    (tmp_path / "reports" / "report.md").write_text("previous report\n")
    (tmp_path / "a-file").write_text("not a folder\n")
    (tmp_path / "runs").mkdir()
    shutil.copy(tmp_path / "good.json", tmp_path / "copy.json")
    return tmp_path


@pytest.fixture(autouse=True)
def unblock_fifos(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """After 20 s, feed EOF to any reader blocked on a FIFO under the tests' temporary folder.

    A reader that opens a FIFO blocks until a writer comes: without this, a test of the
    refusal would hang where it should fail. The refusal itself never opens one.
    """
    done = threading.Event()

    def feed() -> None:
        if done.wait(20):
            return
        while not done.is_set():
            for fifo in tmp_path_factory.getbasetemp().rglob("*"):
                with contextlib.suppress(OSError):
                    if fifo.is_fifo():
                        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
            time.sleep(0.1)

    thread = threading.Thread(target=feed, daemon=True)
    thread.start()
    yield
    done.set()
    thread.join()


def place(path: Path, content: Any) -> Path:
    """Put ``content`` (text, bytes, DIR or FIFO) at ``path``, replacing what was there."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists() and not path.is_dir():
        path.unlink()
    if content is DIR:
        path.mkdir()
        (path / "inside.txt").write_text("x")
    elif content is FIFO:
        os.mkfifo(path)
    elif isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    return path


def assert_refused(code: int | None, out: str, err: str, named: str, says: str = "") -> None:
    """Non-zero exit, no traceback, and exactly one line of the error output names ``named``
    (and says ``says``)."""
    assert code not in (0, None), (out, err)
    assert "Traceback" not in out + err
    naming = [line for line in err.splitlines() if named in line]
    assert len(naming) == 1, err
    assert says in naming[0], err


def run_cli(argv: list[str], capsys: pytest.CaptureFixture) -> tuple[int, str, str]:
    try:
        code = main(argv)
    except SystemExit as stop:  # argparse's own refusals
        code = int(stop.code or 0)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def cli_refuses(
    ws: Path, argv: list[str], named: str, capsys: pytest.CaptureFixture, says: str = ""
) -> None:
    """Refused as :func:`assert_refused` says, and nothing under ``ws`` (or /tmp) written."""
    before = snapshot(ws), sorted(Path("/tmp").glob("gpugauge-escape*"))
    code, out, err = run_cli(argv, capsys)
    assert_refused(code, out, err, named, says)
    assert (snapshot(ws), sorted(Path("/tmp").glob("gpugauge-escape*"))) == before


def says(content: Any) -> str:
    """What the refusal of ``content`` must say beyond naming the file."""
    return NOT_REGULAR if content is FIFO else ""


def report(ws: Path, *args: str) -> list[str]:
    common = ["--out", str(ws / "reports"), "--storage", str(ws / "runs")]
    return ["report", *common, "--baselines-dir", str(ws / "baselines"), *args]


def baseline_cmd(ws: Path, *args: str) -> list[str]:
    return ["baseline", "--baselines-dir", str(ws / "baselines"), *args]


# --- malformed files through both commands


@pytest.mark.parametrize("content", BAD_BASELINES.values(), ids=BAD_BASELINES)
def test_bad_baseline_file_cli(ws: Path, content: Any, capsys: pytest.CaptureFixture) -> None:
    bad = place(ws / "baselines" / CLASS / "demo.json", content)
    good = str(ws / "good.json")
    cli_refuses(ws, report(ws, "--current", good), str(bad), capsys, says(content))
    cli_refuses(ws, baseline_cmd(ws, good), str(bad), capsys, says(content))


@pytest.mark.parametrize("content", BAD_TOLERANCES.values(), ids=BAD_TOLERANCES)
def test_bad_tolerance_file_cli(ws: Path, content: Any, capsys: pytest.CaptureFixture) -> None:
    bad = place(ws / "tolerances" / "u.toml", content)
    argv = report(
        ws, "--current", str(ws / "good.json"), "--tolerances-dir", str(ws / "tolerances")
    )
    cli_refuses(ws, argv, str(bad), capsys, says(content))


@pytest.mark.parametrize("content", BAD_RUNS.values(), ids=BAD_RUNS)
def test_bad_run_file_cli(ws: Path, content: Any, capsys: pytest.CaptureFixture) -> None:
    bad = place(ws / "bad.json", content)
    why = says(content)
    cli_refuses(ws, report(ws, "--current", str(bad)), str(bad), capsys, why)
    against = report(ws, "--current", str(ws / "good.json"), "--against", str(bad))
    cli_refuses(ws, against, str(bad), capsys, why)
    cli_refuses(ws, baseline_cmd(ws, str(ws / "good.json"), str(bad)), str(bad), capsys, why)
    # the history's import reads through the same reader: nothing created or added
    into = ["history", "import", str(ws / "good.json"), str(bad), "--history", str(ws / "h.db")]
    cli_refuses(ws, into, str(bad), capsys, why)
    cli_refuses(ws, ["confirm", str(bad), "--out", str(ws / "ab")], str(bad), capsys, why)


def test_an_id_held_twice_is_read_once_and_the_second_named(
    ws: Path, capsys: pytest.CaptureFixture
) -> None:
    """Issue 49: the report reads the rest of a run and names what it left out; a baseline,
    recorded from runs read whole, refuses it."""
    twice = place(ws / "twice.json", _run(benchmarks=run_json([result("a")])["benchmarks"] * 2))
    code, _, err = run_cli(report(ws, "--current", str(twice)), capsys)
    assert code == 0, err
    assert f"{twice}: benchmarks[1]: 'a' on {CLASS} is held twice" in err
    cli_refuses(ws, baseline_cmd(ws, str(twice)), str(twice), capsys, "held twice")


def test_one_run_given_twice_in_other_formatting_is_refused(
    ws: Path, capsys: pytest.CaptureFixture
) -> None:
    """A run counts once in a baseline's spread, however its file was written (issue 38)."""
    again = ws / "again.json"
    again.write_text(json.dumps(json.loads((ws / "good.json").read_text()), indent=2))
    cli_refuses(ws, baseline_cmd(ws, str(ws / "good.json"), str(again)), str(again), capsys)


@pytest.mark.parametrize(("content", "refused"), RUNS_TO_BASELINES.values(), ids=RUNS_TO_BASELINES)
def test_a_baseline_is_written_only_if_it_reads_back(
    ws: Path, content: str, refused: bool, capsys: pytest.CaptureFixture
) -> None:
    run = place(ws / "run.json", content)
    if refused:
        cli_refuses(ws, baseline_cmd(ws, str(run)), str(run), capsys)
        return
    code, _, err = run_cli(baseline_cmd(ws, str(run)), capsys)
    assert code == 0, err
    assert BaselineStore(ws / "baselines").validate_all() >= 1
    # the device class's gate and report still work, its good entries included
    code, _, err = run_cli(report(ws, "--current", str(ws / "good.json")), capsys)
    assert code == 0, err


def test_baselines_are_written_inside_their_folder_only(tmp_path: Path) -> None:
    store = BaselineStore(tmp_path / "baselines")
    samples = {"time": (1.0, 1.1)}
    for dev, fam in [(CLASS, "../x"), ("..", "demo"), ("/tmp", "demo"), (CLASS, ""), ("", "d")]:
        with pytest.raises(BaselineError, match="name"):
            store.write([Entry("a", fam, dev, samples)], {})
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "baselines").mkdir()
    (tmp_path / "baselines" / CLASS).symlink_to(tmp_path / "elsewhere")
    with pytest.raises(BaselineError, match="outside the baselines"):
        store.write([Entry("a", "demo", CLASS, samples)], {})
    assert [p.name for p in tmp_path.rglob("*") if p.is_file()] == []


@pytest.mark.parametrize("entry", ["dangling-link", "fifo"])
def test_storage_entries_that_are_not_runs(
    ws: Path, entry: str, capsys: pytest.CaptureFixture
) -> None:
    """A dangling ``*.json`` link in --storage is skipped with a note; a FIFO is refused."""
    save_run(ws / "runs" / "0001_run.json", [result("a")])
    odd = ws / "runs" / "0002_odd.json"
    if entry == "fifo":
        place(odd, FIFO)
        cli_refuses(ws, report(ws), str(odd), capsys, NOT_REGULAR)
        return
    odd.symlink_to(ws / "gone.json")
    for argv in (report(ws), report(ws, "--current", str(ws / "good.json"))):
        code, _, err = run_cli(argv, capsys)
        assert code == 0, err
        assert [line for line in err.splitlines() if str(odd) in line] == [
            f"gpugauge report: --storage: skipped {odd}, a link to nowhere ({ws / 'gone.json'})"
        ]


def test_a_storage_folder_that_is_not_there_is_named_in_the_report(
    ws: Path, capsys: pytest.CaptureFixture
) -> None:
    """A --storage typo gave a report with no trends and no word of why; it is still no
    error (a run may name its storage before its first autosave), but it is said."""
    missing = ws / "runz"
    argv = [*report(ws, "--current", str(ws / "good.json")), "--storage", str(missing)]
    code, _, err = run_cli(argv, capsys)
    assert code == 0, err
    said = f"--storage {missing}: no such folder, so no saved runs and no trends"
    assert f"gpugauge report: {said}" in err.splitlines()
    assert said in (ws / "reports" / "report.md").read_text()
    assert not missing.exists()


# --- bad option values through both commands

CLI_OPTIONS: dict[str, tuple[list[str], str]] = {
    "report-out-a-file": (["--out", "{ws}/a-file"], "--out"),
    "report-name-a-path": (["--name", "../x"], "--name"),
    "report-name-empty": (["--name", ""], "--name"),
    "report-name-blank": (["--name", " "], "--name"),
    "report-current-missing": (["--current", "{ws}/missing.json"], "--current"),
    "report-against-missing": (["--against", "{ws}/missing.json"], "--against"),
    "report-against-a-folder": (["--against", "{ws}/runs"], "--against"),
    # an error about a path names the option it came from
    "report-out-under-a-file": (["--out", "{ws}/a-file/sub"], "--out"),
    "report-out-cannot-be-made": (["--out", "/proc/nope"], "--out /proc/nope"),
    "report-baselines-missing": (["--baselines-dir", "{ws}/missing"], "--baselines-dir"),
    "report-baselines-a-file": (["--baselines-dir", "{ws}/a-file"], "--baselines-dir"),
    "report-tolerances-missing": (["--tolerances-dir", "{ws}/missing"], "--tolerances-dir"),
    "report-tolerances-a-file": (["--tolerances-dir", "{ws}/a-file"], "--tolerances-dir"),
    "report-storage-a-file": (["--storage", "{ws}/a-file"], "--storage"),
    "report-storage-empty": (["--storage", "{ws}/runs"], "no saved runs"),
    "report-unknown-option": (["--bogus"], "--bogus"),
    # issue 26: an empty path would mean the current folder
    "report-out-empty-path": (["--out", ""], "argument --out: an empty path"),
    "report-storage-empty-path": (["--storage", ""], "argument --storage: an empty path"),
    "report-baselines-empty-path": (
        ["--baselines-dir", ""],
        "argument --baselines-dir: an empty path",
    ),
    "report-tolerances-empty-path": (
        ["--tolerances-dir", ""],
        "argument --tolerances-dir: an empty path",
    ),
    "report-current-empty-path": (["--current", ""], "argument --current: an empty path"),
}

BASELINE_OPTIONS: dict[str, tuple[list[str], str]] = {
    "baseline-run-missing": (["{ws}/missing.json"], "missing.json"),
    "baseline-dir-a-file": (["--baselines-dir", "{ws}/a-file", "{ws}/good.json"], "a-file"),
    "baseline-dir-cannot-be-made": (
        ["--baselines-dir", "/proc/nope", "{ws}/good.json"],
        "--baselines-dir /proc/nope",
    ),
    "baseline-no-runs": ([], "give saved runs"),
    # a new class's first runs, from the history
    "baseline-from-history-and-runs": (
        ["--from-history", "cpu-x", "{ws}/good.json"],
        "--from-history takes no saved runs",
    ),
    "baseline-from-history-add": (["--from-history", "cpu-x", "--add"], "takes no --add"),
    "baseline-runs-without-history": (["--runs", "3", "{ws}/good.json"], "--runs applies"),
    # options that only the other way of recording reads: ignored, each had done nothing
    "baseline-history-without-from-history": (
        ["--history", "{ws}/h.sqlite", "{ws}/good.json"],
        "--history applies to --from-history",
    ),
    "baseline-from-history-accept-regressed": (
        ["--from-history", "cpu-x", "--accept-regressed"],
        "--accept-regressed applies to saved runs",
    ),
    "baseline-runs-one": (["--from-history", "cpu-x", "--runs", "1"], "argument --runs"),
    "baseline-history-empty": (
        ["--from-history", "cpu-x", "--history", ""],
        "argument --history: ''",
    ),
    "baseline-history-missing": (
        ["--from-history", "cpu-x", "--history", "{ws}/none.sqlite"],
        "none.sqlite",
    ),
    "baseline-unknown-option": (["--bogus", "{ws}/good.json"], "--bogus"),
    # issue 26: a run counts once; an empty path would mean the current folder
    "baseline-same-run-twice": (["{ws}/good.json", "{ws}/good.json"], "is given twice"),
    "baseline-a-copy-of-a-run": (["{ws}/good.json", "{ws}/copy.json"], "copy.json"),
    "baseline-dir-empty-path": (
        ["--baselines-dir", "", "{ws}/good.json"],
        "argument --baselines-dir: an empty path",
    ),
    "baseline-run-empty-path": (["{ws}/good.json", ""], "argument runs"),
}


@pytest.mark.parametrize(("args", "named"), CLI_OPTIONS.values(), ids=CLI_OPTIONS)
def test_bad_report_option(
    ws: Path, args: list[str], named: str, capsys: pytest.CaptureFixture
) -> None:
    current = [] if "--current" in args or "--storage" in args else ["--current", f"{ws}/good.json"]
    argv = ["report", "--out", str(ws / "reports"), "--storage", str(ws / "runs"), *current]
    argv += [a.format(ws=ws) for a in args]
    cli_refuses(ws, argv, named, capsys)


@pytest.mark.parametrize(("args", "named"), BASELINE_OPTIONS.values(), ids=BASELINE_OPTIONS)
def test_bad_baseline_option(
    ws: Path, args: list[str], named: str, capsys: pytest.CaptureFixture
) -> None:
    argv = ["baseline", *(a.format(ws=ws) for a in args)]
    if "--baselines-dir" not in args:
        argv += ["--baselines-dir", str(ws / "baselines")]
    cli_refuses(ws, argv, named, capsys)


# --- the pytest plugin: malformed baselines and tolerances, every bad option value


@pytest.fixture
def plugin_ws(gauge_pytester: pytest.Pytester) -> pytest.Pytester:
    """A pytester dir with good baselines and tolerances, and a test that must not run."""
    root = gauge_pytester.path
    save_baselines(root / "baselines", [result("a")])
    (root / "tolerances").mkdir()
    (root / "tolerances" / "t.toml").write_text("[family.layers]\ntime = 0.3\n")
    (root / "a-file").write_text("not a folder\n")
    # a gauge test: pytest-benchmark's destinations are checked only in a run that uses
    # gpugauge (an unrelated run's are pytest-benchmark's own business)
    gauge_pytester.makepyfile(
        test_never="def test_never(gauge):\n    raise AssertionError('ran')\n"
    )
    return gauge_pytester


def plugin_refuses(pt: pytest.Pytester, args: list[str], named: str, says: str = "") -> None:
    root = pt.path
    before = snapshot(root / "baselines", root / "tolerances")
    # a refusal once collected (pytest-benchmark's destinations) still ends the session, and
    # pytest-benchmark warns that it saved nothing: a warning, which this suite makes an error
    quiet = ["-W", "ignore:Not saving anything:pytest_benchmark.logger.PytestBenchmarkWarning"]
    r = pt.runpytest("-p", "no:cacheprovider", *quiet, *args)
    assert r.ret == pytest.ExitCode.USAGE_ERROR, r.stdout.str()
    assert_refused(r.ret, r.stdout.str(), r.stderr.str(), named, says)
    assert snapshot(root / "baselines", root / "tolerances") == before
    # nothing saved (pytest-benchmark makes its empty storage folder in any session it ends)
    assert not [p for p in (root / ".benchmarks").rglob("*") if p.is_file()]
    assert not (root / "artifacts").exists()


@pytest.mark.parametrize("content", BAD_BASELINES.values(), ids=BAD_BASELINES)
def test_bad_baseline_file_plugin(plugin_ws: pytest.Pytester, content: Any) -> None:
    bad = place(plugin_ws.path / "baselines" / CLASS / "demo.json", content)
    plugin_refuses(
        plugin_ws,
        ["--gauge-gate", f"--gauge-baselines-dir={plugin_ws.path / 'baselines'}"],
        str(bad),
        says(content),
    )


@pytest.mark.parametrize("content", BAD_TOLERANCES.values(), ids=BAD_TOLERANCES)
def test_bad_tolerance_file_plugin(plugin_ws: pytest.Pytester, content: Any) -> None:
    bad = place(plugin_ws.path / "tolerances" / "u.toml", content)
    args = ["--gauge-gate", f"--gauge-baselines-dir={plugin_ws.path / 'baselines'}"]
    plugin_refuses(
        plugin_ws,
        [*args, f"--gauge-tolerances-dir={plugin_ws.path / 'tolerances'}"],
        str(bad),
        says(content),
    )


PLUGIN_OPTIONS: dict[str, tuple[list[str], str]] = {
    "rounds-zero": (["--gauge-rounds", "0"], "--gauge-rounds"),
    "rounds-text": (["--gauge-rounds", "x"], "--gauge-rounds"),
    "min-rounds-zero": (["--gauge-min-rounds", "0"], "--gauge-min-rounds"),
    "warmup-negative": (["--gauge-warmup", "-1"], "--gauge-warmup"),
    "warmup-time-negative": (["--gauge-warmup-time", "-1"], "--gauge-warmup-time"),
    "target-ci-zero": (["--gauge-target-ci", "0"], "--gauge-target-ci"),
    "target-ci-one": (["--gauge-target-ci", "1.5"], "--gauge-target-ci"),
    "max-time-zero": (["--gauge-max-time", "0"], "--gauge-max-time"),
    "energy-window-short": (["--gauge-energy-window", "0.5"], "--gauge-energy-window"),
    "energy-window-negative": (["--gauge-energy-window", "-1"], "--gauge-energy-window"),
    "idle-time-negative": (["--gauge-idle-time", "-1"], "--gauge-idle-time"),
    "profile-unknown": (["--gauge-profile", "huge"], "--gauge-profile"),
    "device-unknown": (["--gauge-device", "tpu"], "--gauge-device"),
    "gate-baselines-missing": (
        ["--gauge-gate", "--gauge-baselines-dir={root}/missing"],
        "--gauge-baselines-dir",
    ),
    "gate-baselines-a-file": (
        ["--gauge-gate", "--gauge-baselines-dir={root}/a-file"],
        "--gauge-baselines-dir",
    ),
    "tolerances-missing": (
        ["--gauge-gate", "--gauge-tolerances-dir={root}/missing"],
        "--gauge-tolerances-dir",
    ),
    "tolerances-a-file": (["--gauge-tolerances-dir={root}/a-file"], "--gauge-tolerances-dir"),
    "update-into-a-file": (
        ["--gauge-update-baselines", "--gauge-baselines-dir={root}/a-file"],
        "a-file",
    ),
    "artifacts-a-file": (["--gauge-artifacts-dir={root}/a-file"], "--gauge-artifacts-dir"),
    "require-without-gate": (["--gauge-require-baselines"], "--gauge-require-baselines"),
    # a new class's first nights: counted in the history, judged by the gate
    "first-nights-one": (["--gauge-gate", "--gauge-first-nights", "1"], "--gauge-first-nights"),
    "first-nights-six": (["--gauge-gate", "--gauge-first-nights", "6"], "--gauge-first-nights"),
    "first-nights-without-gate": (["--gauge-first-nights", "3"], "--gauge-first-nights 3"),
    "first-nights-without-history": (
        ["--gauge-gate", "--gauge-first-nights", "3", "--gauge-no-history"],
        "--gauge-no-history",
    ),
    # issue 48's option sweep (2026-12-06): each was accepted, and one of the two did nothing
    "rounds-and-target-ci": (
        ["--gauge-rounds", "3", "--gauge-target-ci", "0.001"],
        "--gauge-target-ci would have no effect",
    ),
    "rounds-and-max-time": (
        ["--gauge-rounds", "3", "--gauge-max-time", "100"],
        "--gauge-max-time would have no effect",
    ),
    "max-time-under-min-time": (
        ["--gauge-min-time", "5", "--gauge-max-time", "0.5"],
        "--gauge-max-time 0.5 ends a case's rounds before its least time (--gauge-min-time 5)",
    ),
    # the max time nobody gave is the profile's, and is named so (a review, 2026-12-07)
    "min-time-over-the-profile-s-max-time": (
        ["--gauge-profile", "smoke", "--gauge-min-time", "5"],
        "the smoke profile's --gauge-max-time 2 ends a case's rounds before its least time",
    ),
    "confirm-new-host-without-history": (
        ["--gauge-gate", "--gauge-confirm-new-host", "--gauge-no-history"],
        "--gauge-no-history turns the history off",
    ),
    "no-remeasure-without-gate": (["--gauge-no-remeasure"], "--gauge-no-remeasure applies"),
    "update-disabled": (["--gauge-update-baselines", "--benchmark-disable"], "--benchmark-disable"),
    # pytest-benchmark's own options keep working for `benchmark` tests (test_plugin.py);
    # a bad value of one is still refused before anything runs, by pytest-benchmark itself
    "bench-min-rounds": (["--benchmark-min-rounds=0"], "--benchmark-min-rounds"),
    "bench-max-time": (["--benchmark-max-time=x"], "--benchmark-max-time"),
    "bench-min-time": (["--benchmark-min-time=x"], "--benchmark-min-time"),
    "bench-precision": (["--benchmark-precision=2"], "--benchmark-precision"),
    "bench-confidence": (["--benchmark-confidence=1.5"], "--benchmark-confidence"),
    "bench-calibration": (["--benchmark-calibration-precision=x"], "--benchmark-calibration"),
    "bench-warmup": (["--benchmark-warmup=maybe"], "--benchmark-warmup"),
    "bench-warmup-iterations": (["--benchmark-warmup-iterations=x"], "--benchmark-warmup-it"),
    "bench-sort": (["--benchmark-sort=nonsense"], "--benchmark-sort"),
    "bench-compare-fail": (["--benchmark-compare-fail=nonsense"], "--benchmark-compare-fail"),
    "bench-columns": (["--benchmark-columns=nonsense"], "--benchmark-columns"),
    "bench-cprofile": (["--benchmark-cprofile=nonsense"], "--benchmark-cprofile"),
    "bench-histogram": (["--benchmark-histogram"], "--benchmark-histogram"),
    # issue 26: every number finite and in range, named
    "min-time-infinite": (["--gauge-min-time", "inf"], "--gauge-min-time"),
    "min-time-nan": (["--gauge-min-time", "nan"], "--gauge-min-time"),
    "max-time-huge": (["--gauge-max-time", "1e308"], "--gauge-max-time"),
    "rounds-1e23": (["--gauge-rounds", "1e23"], "--gauge-rounds"),
    "rounds-huge": (["--gauge-rounds", "100000000000000000000000"], "--gauge-rounds"),
    "min-rounds-huge": (["--gauge-min-rounds", "99999999999"], "--gauge-min-rounds"),
    "warmup-huge": (["--gauge-warmup", "99999999999"], "--gauge-warmup"),
    "warmup-time-infinite": (["--gauge-warmup-time", "inf"], "--gauge-warmup-time"),
    "target-ci-nan": (["--gauge-target-ci", "nan"], "--gauge-target-ci"),
    "energy-window-nan": (["--gauge-energy-window", "nan"], "--gauge-energy-window"),
    "energy-window-infinite": (["--gauge-energy-window", "inf"], "--gauge-energy-window"),
    "idle-time-infinite": (["--gauge-idle-time", "inf"], "--gauge-idle-time"),
    "idle-time-nan": (["--gauge-idle-time", "nan"], "--gauge-idle-time"),
    "stop-after-nan": (["--gauge-stop-after", "nan"], "--gauge-stop-after"),
    "stop-after-infinite": (["--gauge-stop-after", "inf"], "--gauge-stop-after"),
    # empty paths would mean the current folder
    "baselines-dir-empty-path": (
        ["--gauge-baselines-dir", ""],
        "argument --gauge-baselines-dir: an empty path",
    ),
    "tolerances-dir-empty-path": (
        ["--gauge-tolerances-dir", ""],
        "argument --gauge-tolerances-dir: an empty path",
    ),
    "artifacts-dir-empty-path": (["--gauge-artifacts-dir", ""], "--gauge-artifacts-dir"),
    # destinations checked before measuring
    "artifacts-under-a-file": (
        ["--gauge-artifacts-dir={root}/a-file/run"],
        "--gauge-artifacts-dir",
    ),
    "update-under-a-file": (
        ["--gauge-update-baselines", "--gauge-baselines-dir={root}/a-file/b"],
        "--gauge-update-baselines",
    ),
    "benchmark-json-a-dir": (["--benchmark-json={root}"], "--benchmark-json"),
    "benchmark-json-under-a-file": (["--benchmark-json={root}/a-file/x.json"], "--benchmark-json"),
    "benchmark-storage-under-a-file": (
        ["--benchmark-autosave", "--benchmark-storage={root}/a-file/s"],
        "--benchmark-storage",
    ),
}
if not torch.cuda.is_available():
    PLUGIN_OPTIONS["device-all-without-cuda"] = (["--gauge-device", "all"], "--gauge-device all")


@pytest.mark.parametrize(("args", "named"), PLUGIN_OPTIONS.values(), ids=PLUGIN_OPTIONS)
def test_bad_plugin_option(
    plugin_ws: pytest.Pytester, args: list[str], named: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "pygal", None)  # the histogram extra, not installed
    plugin_refuses(plugin_ws, [a.format(root=plugin_ws.path) for a in args], named)


def _junk_tolerances(folder: Path) -> list[str]:
    """Put every entry of SKIPPED_TOLERANCES and a dangling lock link in ``folder``."""
    for name, content in SKIPPED_TOLERANCES.items():
        place(folder / name, content)
    (folder / ".#default.toml").symlink_to("root@host.12345:1700000000")  # as emacs makes
    return [*SKIPPED_TOLERANCES, ".#default.toml"]


def _named(line: str) -> list[str]:
    """The entries a 'tolerances: not read in DIR: a (why); b (why)' line names."""
    listed = line.split("not read in ", 1)[1].split(": ", 1)[1]
    return [part.split(" (", 1)[0] for part in listed.split("); ")]


def test_editor_files_in_tolerances_are_named_once_and_not_read_by_report(
    ws: Path, capsys: pytest.CaptureFixture
) -> None:
    """Issue 38: a lock file ('.#default.toml', a link to nowhere) aborted every gated run
    and report. Only regular *.toml files are read; the others are named in one line."""
    names = _junk_tolerances(ws / "tolerances")
    argv = report(
        ws, "--current", str(ws / "good.json"), "--tolerances-dir", str(ws / "tolerances")
    )
    code, _, err = run_cli(argv, capsys)
    assert code == 0, err
    [line] = [ln for ln in err.splitlines() if "not read" in ln]
    assert sorted(_named(line)) == sorted(names)  # the real t.toml is not among them
    md = (ws / "reports" / "report.md").read_text()
    assert md.count(".#default.toml (a link to nowhere") == 1


def test_editor_files_in_tolerances_do_not_stop_a_gated_run(
    gauge_pytester: pytest.Pytester,
) -> None:
    """The same in a gated pytest run: the tests run, judged by the real tolerance file,
    and the gpugauge section names what was not read, once."""
    root = gauge_pytester.path
    save_baselines(root / "baselines", [result("a")])
    (root / "tolerances").mkdir()
    (root / "tolerances" / "t.toml").write_text("[default]\ntime = 0.9\n")
    names = _junk_tolerances(root / "tolerances")
    gauge_pytester.makepyfile(
        test_a=SPEC_SOURCE + "\ndef test_a(gauge):\n    gauge.measure(Spec('a'), lambda: 1)\n"
    )
    r = gauge_pytester.runpytest(
        "-p",
        "no:cacheprovider",
        "--gauge-gate",
        "--gauge-baselines-dir=baselines",
        "--gauge-tolerances-dir=tolerances",
        "--gauge-rounds",
        "3",
        "--gauge-no-history",
    )
    assert r.ret == pytest.ExitCode.OK, r.stdout.str()
    said = [ln for ln in r.stdout.lines if "tolerances: not read" in ln]
    assert len(said) == 1, r.stdout.str()
    assert sorted(_named(said[0])) == sorted(names)
    r.stdout.fnmatch_lines(["*allowed*"])


def test_cases_are_many() -> None:
    files = len(BAD_BASELINES) + len(BAD_TOLERANCES) + len(BAD_RUNS)
    assert files >= 30
    assert len(PLUGIN_OPTIONS) + len(CLI_OPTIONS) + len(BASELINE_OPTIONS) >= 40


# --- issue 26: destinations checked before measuring, and the real reason said


def test_update_baselines_into_a_read_only_folder_is_refused_up_front(
    plugin_ws: pytest.Pytester,
) -> None:
    ro = plugin_ws.path / "read-only"
    ro.mkdir()
    with read_only(ro):
        plugin_refuses(
            plugin_ws, ["--gauge-update-baselines", f"--gauge-baselines-dir={ro}"], str(ro)
        )


@contextlib.contextmanager
def read_only(path: Path) -> Iterator[None]:
    """``path`` (a folder or a file) unwritable even for root (immutable), else by its mode."""
    if os.geteuid() == 0:
        if shutil.which("chattr") is None:
            pytest.skip("running as root without chattr: nothing is read-only here")
        done = subprocess.run(["chattr", "+i", str(path)], capture_output=True, check=False)
        if done.returncode != 0:
            pytest.skip(f"chattr +i failed here: {done.stderr.decode().strip()}")
        try:
            yield
        finally:
            subprocess.run(["chattr", "-i", str(path)], check=True)
    else:
        folder = path.is_dir()
        path.chmod(0o555 if folder else 0o444)
        try:
            yield
        finally:
            path.chmod(0o755 if folder else 0o644)


def test_warmup_time_above_the_profiles_cap_is_accepted() -> None:
    from gpugauge.runtime.options import resolve

    from .test_options import DEFAULTS

    options = resolve({**DEFAULTS, "profile": "seed", "warmup_time": 6.0}.__getitem__, False)
    assert options.policy.warmup_s == 6.0
    assert options.policy.max_warmup_s >= 6.0


@pytest.mark.slow
def test_stop_after_with_update_baselines_says_the_run_was_cut_short(
    gauge_pytester: pytest.Pytester,
) -> None:
    gauge_pytester.makepyfile(test_demo=BENCH)
    base = gauge_pytester.path / "baselines"
    r = gauge_pytester.runpytest(
        "--gauge-rounds", "3", "--gauge-warmup", "0", "-p", "no:cacheprovider",
        "--gauge-stop-after", "0.001",
        "--gauge-update-baselines", f"--gauge-baselines-dir={base}",
    )  # fmt: skip
    out = r.stdout.str()
    assert "baselines NOT written: the run was cut short (--gauge-stop-after 0.001 s passed" in out
    assert "failures or errors" not in out
    assert not base.exists()


# --- issue 26: writes interrupted by a full disk or a signal leave the old files whole


def _python(script: str, *, fsize: int | None = None) -> subprocess.CompletedProcess:
    """Run ``script`` in a fresh interpreter; ``fsize`` caps the bytes of a file it writes
    (RLIMIT_FSIZE: a write past it fails with EFBIG, as on a full disk)."""

    def limit() -> None:
        import resource

        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        # a shell's background job ignores SIGINT, and Python then keeps ignoring it
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        if fsize is not None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))

    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONDONTWRITEBYTECODE": "1"}
    return subprocess.run(
        [sys.executable, "-c", script],
        preexec_fn=limit,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_a_report_on_a_full_disk_keeps_the_previous_set(ws: Path, capsys) -> None:
    out = ws / "reports"
    argv = report(ws, "--current", str(ws / "good.json"))
    assert run_cli(argv, capsys)[0] == 0
    written = {p.name: p.stat().st_size for p in out.iterdir() if p.name.startswith("report")}
    html = written.pop("report.html")
    assert max(written.values()) < html  # the page embeds every chart
    before = snapshot(ws)
    cap = (max(written.values()) + html) // 2  # every file fits but the page
    done = _python(
        f"from gpugauge.__main__ import main\nraise SystemExit(main({argv!r}))", fsize=cap
    )
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines() == [
        f"gpugauge report: {out / 'report.html'}: File too large"
    ]
    assert snapshot(ws) == before  # md and png old too, and no temporary file left


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_during_a_baseline_write_leaves_no_partial_file(
    ws: Path, sig: signal.Signals
) -> None:
    """The signal arrives while the new baseline is being written (at its fsync)."""
    before = snapshot(ws)
    argv = baseline_cmd(ws, str(ws / "good.json"))
    script = (
        "import os, signal\n"
        "real = os.fsync\n"
        "def fsync(fd):\n"
        f"    os.kill(os.getpid(), {int(sig)})\n"
        "    real(fd)\n"
        "os.fsync = fsync\n"
        "from gpugauge.__main__ import main\n"
        f"raise SystemExit(main({argv!r}))\n"
    )
    done = _python(script)
    assert done.returncode == 130, (done.returncode, done.stderr)
    assert done.stderr.strip().splitlines() == [
        f"gpugauge baseline: stopped by {sig.name}; no file was left half-written"
    ]
    assert snapshot(ws) == before
    assert not list(ws.rglob("*.tmp"))


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_while_the_command_line_imports_ends_it_in_one_line(sig: signal.Signals) -> None:
    """A stop in the command line's first half second (its imports): 130 and one line, as
    later, not a traceback or a process killed by its signal."""
    script = (
        "import os, runpy, signal, sys\n"
        "class Stop:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'gpugauge.cli':\n"
        f"            os.kill(os.getpid(), {int(sig)})\n"
        "        return None\n"
        "sys.meta_path.insert(0, Stop())\n"
        "sys.argv = ['gpugauge', 'env']\n"
        "runpy.run_module('gpugauge', run_name='__main__')\n"
    )
    done = _python(script)
    assert done.returncode == 130, (done.returncode, done.stderr)
    assert done.stderr.strip().splitlines() == [f"gpugauge: stopped by {sig.name}"]
    assert not done.stdout


# --- issue 26: pytest-benchmark's own files


@pytest.mark.slow
def test_benchmark_json_on_a_full_disk_keeps_the_previous_file(tmp_path: Path) -> None:
    (tmp_path / "conftest.py").write_text('pytest_plugins = ["gpugauge.plugin"]\n')
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    cpu: c\n    gpu: g\n")
    (tmp_path / "test_demo.py").write_text(BENCH)
    previous = tmp_path / "run.json"
    previous.write_text(json.dumps({"benchmarks": [], "pad": "x" * 200}) + "\n")
    old = previous.read_bytes()
    pytest_argv = ["-q", "-p", "no:cacheprovider", "--gauge-rounds", "3", "--gauge-warmup", "0"]
    pytest_argv += [f"--benchmark-json={previous}", str(tmp_path)]
    if importlib.util.find_spec(
        "gpugauge.judging.tracking"
    ):  # the results history: not this test's
        pytest_argv.append("--gauge-no-history")
    script = (
        f"import os, sys, pytest\nos.chdir({str(tmp_path)!r})\n"
        f"raise SystemExit(pytest.main({pytest_argv!r}))\n"
    )
    done = _python(script, fsize=len(old) + 1000)  # the new JSON is far larger
    assert previous.read_bytes() == old
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []
    assert done.returncode == pytest.ExitCode.TESTS_FAILED, done.stdout[-2000:]
    assert "INTERNALERROR" not in done.stdout + done.stderr
    said = [line for line in done.stdout.splitlines() if f"--benchmark-json {previous}" in line]
    assert said == [
        f"[gpugauge] --benchmark-json {previous}: not written (File too large); "
        "the previous file is kept"
    ]


@pytest.mark.slow
@pytest.mark.parametrize("where", ["json", "autosave"])
def test_a_sigterm_while_pytest_saves_its_run_leaves_no_temporary_file(
    tmp_path: Path, where: str
) -> None:
    """A CI job's timeout sends SIGTERM as pytest-benchmark saves the run (here at the
    fsync of the staged file): the staged file is removed, the previous one kept whole."""
    (tmp_path / "conftest.py").write_text('pytest_plugins = ["gpugauge.plugin"]\n')
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    cpu: c\n    gpu: g\n")
    (tmp_path / "test_demo.py").write_text(BENCH)
    previous = tmp_path / "run.json"
    previous.write_text(json.dumps({"benchmarks": [], "previous": True}) + "\n")
    old = previous.read_bytes()
    pytest_argv = ["-q", "-p", "no:cacheprovider", "--gauge-rounds", "3", "--gauge-warmup", "0"]
    pytest_argv += ["--gauge-no-history", str(tmp_path)]
    if where == "json":
        pytest_argv.append(f"--benchmark-json={previous}")
    else:
        pytest_argv += ["--benchmark-autosave", f"--benchmark-storage={tmp_path / 'runs'}"]
    script = (
        "import os, signal, pytest\n"
        "real = os.fsync\n"
        "def fsync(fd):\n"
        "    os.kill(os.getpid(), signal.SIGTERM)\n"
        "    real(fd)\n"
        "os.fsync = fsync\n"
        f"os.chdir({str(tmp_path)!r})\n"
        f"raise SystemExit(pytest.main({pytest_argv!r}))\n"
    )
    done = _python(script)
    assert done.returncode != 0, done.stdout[-2000:]
    assert previous.read_bytes() == old
    assert [p.name for p in tmp_path.rglob("*") if p.name.endswith(".tmp")] == []
    assert [p.name for p in tmp_path.rglob("*.json")] == ["run.json"]


def test_concurrent_saves_into_one_storage_lose_no_run(tmp_path: Path) -> None:
    """Six saves of one name at once (pytest-benchmark lost a run in 9 of 10 such trials)."""
    from types import SimpleNamespace

    from pytest_benchmark.storage.file import FileStorage

    from gpugauge.results.benchmark_storage import BenchmarkFiles

    quiet = SimpleNamespace(info=lambda *a, **k: None, warning=lambda *a, **k: None)
    for trial in range(3):
        storage = FileStorage(tmp_path / str(trial), quiet, "machine")
        bs = SimpleNamespace(storage=storage, json=None, save_json=lambda _: None, logger=quiet)
        files = BenchmarkFiles(SimpleNamespace(_benchmarksession=bs))
        files.pytest_sessionstart(None)
        barrier = threading.Barrier(6)

        def save(i: int, storage: Any = storage, barrier: Any = barrier) -> None:
            barrier.wait()
            storage.save({"run": i, "pad": "x" * 200_000}, "tag")

        threads = [threading.Thread(target=save, args=(i,)) for i in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        saved = sorted((tmp_path / str(trial) / "machine").glob("*.json"))
        assert [p.name for p in saved] == [f"{n:04}_tag.json" for n in range(1, 7)]
        assert sorted(json.loads(p.read_text())["run"] for p in saved) == list(range(6))
        assert not files.failures


def test_an_autosave_takes_the_next_free_number_even_if_another_writer_took_it(
    tmp_path: Path,
) -> None:
    """A name taken between the look and the write (a writer without the lock) is skipped."""
    from gpugauge.results.files import atomic_write_new

    taken = tmp_path / "0001_tag.json"
    taken.write_text("another run\n")
    names = (tmp_path / f"{n:04}_tag.json" for n in range(1, 10))
    assert atomic_write_new(b"{}", names) == tmp_path / "0002_tag.json"
    assert taken.read_text() == "another run\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["0001_tag.json", "0002_tag.json"]


# --- issue 26: the distributed family's command line (python -m ...distributed.workload)

WORKLOAD = ["--model", "resnet18", "--device", "cpu", "--out", "{ws}/dist", "--print-only"]
WORKLOAD_OPTIONS: dict[str, tuple[list[str], str]] = {
    "nproc-zero": (["--nproc-per-node", "0"], "argument --nproc-per-node: '0'"),
    "nproc-negative": (["--nproc-per-node", "-2"], "argument --nproc-per-node: '-2'"),
    "nnodes-zero": (["--nproc-per-node", "2", "--nnodes", "0"], "argument --nnodes: '0'"),
    "nnodes-without-rendezvous": (["--nproc-per-node", "2", "--nnodes", "2"], "--nnodes 2 needs"),
    "node-rank-too-high": (
        ["--nproc-per-node", "1", "--nnodes", "2", "--rdzv-endpoint", "h:1", "--node-rank", "2"],
        "--node-rank 2: must be below",
    ),
    "timeout-nan": (["--nproc-per-node", "2", "--timeout-s", "nan"], "argument --timeout-s"),
    "batch-zero": (["--nproc-per-node", "2", "--batch", "0"], "argument --batch: '0'"),
}


@pytest.mark.parametrize(("args", "named"), WORKLOAD_OPTIONS.values(), ids=WORKLOAD_OPTIONS)
def test_bad_distributed_command_line(
    ws: Path, args: list[str], named: str, capsys: pytest.CaptureFixture
) -> None:
    from gpugauge.families.distributed.workload import main as workload_main

    argv = [a.format(ws=ws) for a in [*WORKLOAD, *args]]
    with pytest.raises(SystemExit) as stop:
        workload_main(argv)
    captured = capsys.readouterr()
    assert_refused(int(stop.value.code or 0), captured.out, captured.err, named)
    assert not (ws / "dist").exists()


def test_the_readmes_two_node_command_prints_its_torchrun_lines(
    ws: Path, capsys: pytest.CaptureFixture
) -> None:
    from gpugauge.families.distributed.workload import main as workload_main

    for node in (0, 1):
        argv = [a.format(ws=ws) for a in WORKLOAD]
        argv += ["--nproc-per-node", "2", "--nnodes", "2", "--node-rank", str(node)]
        assert workload_main([*argv, "--rdzv-endpoint", "127.0.0.1:29500"]) == 0
        out = capsys.readouterr().out
        assert "--nnodes=2 --rdzv-backend=c10d --rdzv-endpoint=127.0.0.1:29500" in out
        assert f"--node-rank={node}" in out
    assert not (ws / "dist").exists()


def _gated_run(path: Path, run_id: str | None = None) -> Path:
    """A gated run whose result a passed 3% slower against its class: one for confirm."""
    data = run_json([result("a")])
    bench = data["benchmarks"][0]
    bench["fullname"] = "test_demo.py::test_a"
    reason = "new host (0 of 5 runs): class baseline, host spread 5.0%"
    borderline = {"ratio": 1.03, "current": 2.06, "ci_low": 1.03, "ci_high": 1.03}
    bench["extra_info"]["gate"] = _gate(borderline, references={"time": reason})
    if run_id is not None:
        data["gpugauge"] = {"history_run_id": run_id}
    path.write_text(json.dumps(data))
    return path


def test_confirm_into_a_read_only_run_file_is_refused_before_any_ab(
    ws: Path, capsys: pytest.CaptureFixture
) -> None:
    run = _gated_run(ws / "gated.json")
    argv = ["confirm", str(run), "--out", str(ws / "ab")]
    for locked in (run, ws):  # the file itself, or the folder its replacement is staged in
        with read_only(locked):
            # a confirm that went on would look for the baseline's commit, and fail there
            cli_refuses(ws, argv, str(run), capsys, "could not be written into it")


def test_confirm_into_a_history_that_cannot_keep_the_abs_is_refused_before_any_ab(
    ws: Path, capsys: pytest.CaptureFixture
) -> None:
    from gpugauge.history.store import History

    from .test_history_store import result as history_result
    from .test_history_store import run as history_run

    run = _gated_run(ws / "gated.json", run_id="run-1")
    argv = ["confirm", str(run), "--out", str(ws / "ab"), "--history"]
    # a missing SQLite file is named and not created (cli_refuses: nothing under ws written)
    cli_refuses(ws, [*argv, str(ws / "typo.sqlite")], "typo.sqlite", capsys, "no such file")
    other = ws / "other.sqlite"
    with History.open(other) as h:
        h.append(history_run(2), [history_result("a", 1.0)])
    cli_refuses(ws, [*argv, str(other)], "other.sqlite", capsys, "holds no run 'run-1'")


def test_confirm_of_a_run_without_gate_verdicts_says_it_was_not_gated(
    ws: Path, capsys: pytest.CaptureFixture
) -> None:
    ungated = ws / "plain.json"
    ungated.write_text(json.dumps(run_json([result("a")])))
    argv = ["confirm", str(ungated), "--out", str(ws / "ab")]
    cli_refuses(ws, argv, str(ungated), capsys, "was run without --gauge-gate")


def test_confirm_refuses_what_it_would_run_without(ws: Path, capsys: pytest.CaptureFixture) -> None:
    """An option sweep (2026-12-06): ``-k`` without ``--measure`` was ignored, and confirm
    rewrote a result it had left out; ``--measure`` without the gate measured a night, then
    refused it."""
    run = _gated_run(ws / "gated.json")
    out = ["--out", str(ws / "ab")]
    for given, named in ((["-k", "test_a"], "-k"), (["-m", "nightly"], "-m")):
        cli_refuses(ws, ["confirm", str(run), *out, *given], named, capsys, "add --measure")
    gated = ["--gated-args=--gauge-gate"]
    cli_refuses(ws, ["confirm", str(run), *out, *gated], "--gated-args", capsys, "--measure")
    night = str(ws / "night.json")
    ungated = ["confirm", night, "--measure", *out, "--gated-args=--benchmark-autosave"]
    cli_refuses(ws, ungated, "--gauge-gate", capsys, "no --gauge-gate was given")


@pytest.mark.parametrize("option", ["--out", "--benches"])
def test_an_empty_path_is_refused_by_ab(
    ws: Path, capsys: pytest.CaptureFixture, option: str
) -> None:
    """``--out ""`` wrote ab.json and the sides' runs into the current folder; ``--benches ""``
    ran every test pytest found there."""
    cli_refuses(ws, ["ab", "HEAD", option, ""], f"argument {option}", capsys, "an empty path")


@pytest.mark.parametrize(
    ("given", "named"),
    [
        (["--", "--gauge-gate", "--gauge-energy-window", "3"], "window, --gauge-gate"),
        (["--head-args=--gauge-history=h.sqlite"], "--gauge-history"),
        (["--base-args", "--gauge-rounds 5"], "--gauge-rounds"),
        (["--", "--gauge-target-ci=0.001"], "--gauge-target-ci"),
    ],
)
def test_ab_refuses_options_its_sides_would_ignore(
    ws: Path, capsys: pytest.CaptureFixture, given: list[str], named: str
) -> None:
    """An A/B's sides run ungated, with no history or energy window, and each block decides
    its own rounds: such an option given to them did nothing, and the A/B said nothing."""
    cli_refuses(ws, ["ab", "HEAD", *given], named, capsys, "an A/B's sides run without")
    cli_refuses(ws, ["bisect", "HEAD~1", "HEAD", *given], named, capsys, "drop them")


def test_bisect_of_one_commit_named_twice_is_bad_input(
    ws: Path, capsys: pytest.CaptureFixture
) -> None:
    """``bisect HEAD HEAD`` exited 1 with a bisect.txt, as if a search had found nothing."""
    argv = ["bisect", "HEAD", "HEAD", "--out", str(ws / "bisect")]
    cli_refuses(ws, argv, "HEAD is HEAD", capsys, "no commit after GOOD")


def test_report_refuses_a_run_against_itself(ws: Path, capsys: pytest.CaptureFixture) -> None:
    """An option sweep (2026-12-06): it read '1 unchanged 1.000x' and exited 0."""
    run = ws / "run.json"
    run.write_text(json.dumps(run_json([result("a")])))
    itself = report(ws, "--current", str(run), "--against", str(run))
    cli_refuses(ws, itself, "--against", capsys, "is the run this report is of")


def test_no_command_takes_an_empty_path() -> None:
    """Every path argument of every command refuses "": it would mean the current folder.

    ``check gate --out ""`` ran its three pytest runs and wrote gate.json and its runs'
    folder into the working directory (a review, 2026-12-07): its ``--out`` was a plain
    ``Path``, as were a few others, where ``report``'s and ``ab``'s refused it.
    """
    import argparse

    from gpugauge.cli import build_parser
    from gpugauge.core.arguments import path_option

    def actions(parser: argparse.ArgumentParser, name: str) -> Iterator[tuple[str, Any]]:
        for a in parser._actions:
            if isinstance(a, argparse._SubParsersAction):
                for sub_name, sub in a.choices.items():
                    yield from actions(sub, f"{name} {sub_name}")
            else:
                yield name, a

    found = [(name, a) for name, a in actions(build_parser(), "gpugauge")]
    assert any(a.type is path_option for _, a in found)  # the walk reaches the commands
    plain = [
        f"{name} {'/'.join(a.option_strings) or a.dest}" for name, a in found if a.type is Path
    ]
    assert not plain, plain
