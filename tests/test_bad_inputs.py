"""Every input path, fed bad data: a one-line error naming it, a non-zero exit, no traceback,
and nothing written or overwritten (issue 9). Generated: one case per malformed file or bad
option value, through the pytest plugin and both commands (``gpugauge report``/``baseline``).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from gpugauge.__main__ import main

from .fakes import CLASS, result, run_json, save_baselines, save_run
from .test_saved_data import snapshot

DIR = object()  # a directory where a file is expected

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
    "set-twice": "[family.demo]\ntime = 0.2\n",  # the good file sets it too
    "directory": DIR,
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
}


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    """A workspace with good baselines, tolerances, a saved run and a previous report."""
    save_baselines(tmp_path / "baselines", [result("a")])
    (tmp_path / "tolerances").mkdir()
    (tmp_path / "tolerances" / "t.toml").write_text("[family.demo]\ntime = 0.3\n")
    save_run(tmp_path / "good.json", [result("a")])
    (tmp_path / "reports").mkdir()
    (tmp_path / "reports" / "report.md").write_text("previous report\n")
    (tmp_path / "a-file").write_text("not a folder\n")
    (tmp_path / "runs").mkdir()
    return tmp_path


def place(path: Path, content: Any) -> Path:
    """Put ``content`` (text, bytes, or DIR) at ``path``, replacing what was there."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists() and not path.is_dir():
        path.unlink()
    if content is DIR:
        path.mkdir()
        (path / "inside.txt").write_text("x")
    elif isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    return path


def assert_refused(code: int | None, out: str, err: str, named: str) -> None:
    """Non-zero exit, no traceback, and exactly one line of the error output names ``named``."""
    assert code not in (0, None), (out, err)
    assert "Traceback" not in out + err
    naming = [line for line in err.splitlines() if named in line]
    assert len(naming) == 1, err


def run_cli(argv: list[str], capsys: pytest.CaptureFixture) -> tuple[int, str, str]:
    try:
        code = main(argv)
    except SystemExit as stop:  # argparse's own refusals
        code = int(stop.code or 0)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def cli_refuses(ws: Path, argv: list[str], named: str, capsys: pytest.CaptureFixture) -> None:
    before = snapshot(ws / "baselines", ws / "reports", ws / "tolerances")
    code, out, err = run_cli(argv, capsys)
    assert_refused(code, out, err, named)
    assert snapshot(ws / "baselines", ws / "reports", ws / "tolerances") == before


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
    cli_refuses(ws, report(ws, "--current", good), str(bad), capsys)
    cli_refuses(ws, baseline_cmd(ws, good), str(bad), capsys)


@pytest.mark.parametrize("content", BAD_TOLERANCES.values(), ids=BAD_TOLERANCES)
def test_bad_tolerance_file_cli(ws: Path, content: Any, capsys: pytest.CaptureFixture) -> None:
    bad = place(ws / "tolerances" / "u.toml", content)
    argv = report(
        ws, "--current", str(ws / "good.json"), "--tolerances-dir", str(ws / "tolerances")
    )
    cli_refuses(ws, argv, str(bad), capsys)


@pytest.mark.parametrize("content", BAD_RUNS.values(), ids=BAD_RUNS)
def test_bad_run_file_cli(ws: Path, content: Any, capsys: pytest.CaptureFixture) -> None:
    bad = place(ws / "bad.json", content)
    cli_refuses(ws, report(ws, "--current", str(bad)), str(bad), capsys)
    cli_refuses(
        ws, report(ws, "--current", str(ws / "good.json"), "--against", str(bad)), str(bad), capsys
    )
    cli_refuses(ws, baseline_cmd(ws, str(ws / "good.json"), str(bad)), str(bad), capsys)


# --- bad option values through both commands

CLI_OPTIONS: dict[str, tuple[list[str], str]] = {
    "report-out-a-file": (["--out", "{ws}/a-file"], "--out"),
    "report-name-a-path": (["--name", "../x"], "--name"),
    "report-name-empty": (["--name", ""], "--name"),
    "report-current-missing": (["--current", "{ws}/missing.json"], "missing.json"),
    "report-against-missing": (["--against", "{ws}/missing.json"], "missing.json"),
    "report-baselines-missing": (["--baselines-dir", "{ws}/missing"], "--baselines-dir"),
    "report-baselines-a-file": (["--baselines-dir", "{ws}/a-file"], "--baselines-dir"),
    "report-tolerances-missing": (["--tolerances-dir", "{ws}/missing"], "--tolerances-dir"),
    "report-tolerances-a-file": (["--tolerances-dir", "{ws}/a-file"], "--tolerances-dir"),
    "report-storage-a-file": (["--storage", "{ws}/a-file"], "--storage"),
    "report-storage-empty": (["--storage", "{ws}/runs"], "no saved runs"),
    "report-unknown-option": (["--bogus"], "--bogus"),
}

BASELINE_OPTIONS: dict[str, tuple[list[str], str]] = {
    "baseline-run-missing": (["{ws}/missing.json"], "missing.json"),
    "baseline-dir-a-file": (["--baselines-dir", "{ws}/a-file", "{ws}/good.json"], "a-file"),
    "baseline-no-runs": ([], "required: runs"),
    "baseline-unknown-option": (["--bogus", "{ws}/good.json"], "--bogus"),
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
    (root / "tolerances" / "t.toml").write_text("[family.demo]\ntime = 0.3\n")
    (root / "a-file").write_text("not a folder\n")
    gauge_pytester.makepyfile(test_never="def test_never():\n    raise AssertionError('ran')\n")
    return gauge_pytester


def plugin_refuses(pt: pytest.Pytester, args: list[str], named: str) -> None:
    root = pt.path
    before = snapshot(root / "baselines", root / "tolerances")
    r = pt.runpytest("-p", "no:cacheprovider", *args)
    assert r.ret == pytest.ExitCode.USAGE_ERROR, r.stdout.str()
    assert_refused(r.ret, r.stdout.str(), r.stderr.str(), named)
    assert snapshot(root / "baselines", root / "tolerances") == before
    assert not (root / ".benchmarks").exists()
    assert not (root / "artifacts").exists()


@pytest.mark.parametrize("content", BAD_BASELINES.values(), ids=BAD_BASELINES)
def test_bad_baseline_file_plugin(plugin_ws: pytest.Pytester, content: Any) -> None:
    bad = place(plugin_ws.path / "baselines" / CLASS / "demo.json", content)
    plugin_refuses(
        plugin_ws, ["--gate", f"--baselines-dir={plugin_ws.path / 'baselines'}"], str(bad)
    )


@pytest.mark.parametrize("content", BAD_TOLERANCES.values(), ids=BAD_TOLERANCES)
def test_bad_tolerance_file_plugin(plugin_ws: pytest.Pytester, content: Any) -> None:
    bad = place(plugin_ws.path / "tolerances" / "u.toml", content)
    args = ["--gate", f"--baselines-dir={plugin_ws.path / 'baselines'}"]
    plugin_refuses(
        plugin_ws, [*args, f"--tolerances-dir={plugin_ws.path / 'tolerances'}"], str(bad)
    )


PLUGIN_OPTIONS: dict[str, tuple[list[str], str]] = {
    "rounds-zero": (["--rounds", "0"], "--rounds"),
    "rounds-text": (["--rounds", "x"], "--rounds"),
    "min-rounds-zero": (["--min-rounds", "0"], "--min-rounds"),
    "warmup-negative": (["--warmup", "-1"], "--warmup"),
    "warmup-time-negative": (["--warmup-time", "-1"], "--warmup-time"),
    "target-ci-zero": (["--target-ci", "0"], "--target-ci"),
    "target-ci-one": (["--target-ci", "1.5"], "--target-ci"),
    "time-budget-zero": (["--time-budget", "0"], "--time-budget"),
    "energy-window-short": (["--energy-window", "0.5"], "--energy-window"),
    "energy-window-negative": (["--energy-window", "-1"], "--energy-window"),
    "idle-time-negative": (["--idle-time", "-1"], "--idle-time"),
    "profile-unknown": (["--profile", "huge"], "--profile"),
    "device-unknown": (["--device", "tpu"], "--device"),
    "gate-baselines-missing": (["--gate", "--baselines-dir={root}/missing"], "--baselines-dir"),
    "gate-baselines-a-file": (["--gate", "--baselines-dir={root}/a-file"], "--baselines-dir"),
    "tolerances-missing": (["--gate", "--tolerances-dir={root}/missing"], "--tolerances-dir"),
    "tolerances-a-file": (["--tolerances-dir={root}/a-file"], "--tolerances-dir"),
    "update-into-a-file": (["--update-baselines", "--baselines-dir={root}/a-file"], "a-file"),
    "artifacts-a-file": (["--artifacts-dir={root}/a-file"], "--artifacts-dir"),
    "require-without-gate": (["--require-baselines"], "--require-baselines"),
    "update-disabled": (["--update-baselines", "--benchmark-disable"], "--benchmark-disable"),
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
}


@pytest.mark.parametrize(("args", "named"), PLUGIN_OPTIONS.values(), ids=PLUGIN_OPTIONS)
def test_bad_plugin_option(
    plugin_ws: pytest.Pytester, args: list[str], named: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "pygal", None)  # the histogram extra, not installed
    plugin_refuses(plugin_ws, [a.format(root=plugin_ws.path) for a in args], named)


def test_cases_are_many() -> None:
    files = len(BAD_BASELINES) + len(BAD_TOLERANCES) + len(BAD_RUNS)
    assert files >= 30
    assert len(PLUGIN_OPTIONS) + len(CLI_OPTIONS) + len(BASELINE_OPTIONS) >= 40
