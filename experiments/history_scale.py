"""Time the results history's readers on a team's years of nights (issue 38, "Scale").

Builds synthetic nightly histories (:func:`gpugauge.history.synthetic.nightly_history`:
4 hosts x 70 cases, one run per host a night) through the real store, then times, each
in a fresh process pinned to one CPU core (``taskset -c 0``):

- ``gpugauge history changes`` (every case's change points, what changed);
- ``gpugauge report --history`` of a saved run of the 70 cases;
- the nightly's own judging: ``Tracker.by_history`` of the 70 cases against the history;
- ``gpugauge history export --csv``, with the process's peak memory (maxrss).

Usage: ``python -m experiments.history_scale FOLDER [RUNS ...]`` (default runs: 30 366
1095 4400); a history already built in FOLDER is reused. Prints one Markdown row per size.

Answer (2026-11-27, the shared 2-core machine, one core): at 4,400 runs ``history
changes`` 1.3 s of CPU, the report 5.8 s (5.9 s wall; flat from 366 runs on, half of it
drawing the four trend figures), judging 2.0 s, and export 31.5 s in 66 MiB; at first,
``changes`` ran past 600 s and export took 1.4 GB. The numbers before and after are in
docs/history.md, "Scale".
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

HOSTS, CASES = 4, 70
ONE_CORE = ["taskset", "-c", "0"]


def build(path: Path, runs: int) -> None:
    """The history of ``runs`` runs (``runs / 4`` nights, rounded up) at ``path``."""
    from gpugauge.history.store import History
    from gpugauge.history.synthetic import nightly_history

    if path.exists():
        return
    tmp = path.with_suffix(".building")
    for leftover in path.parent.glob(tmp.name + "*"):
        leftover.unlink()
    with History.open(tmp) as h:
        nightly_history(h, nights=-(-runs // HOSTS), hosts=HOSTS, cases=CASES)
    tmp.rename(path)


def current_run(folder: Path) -> Path:
    """A saved pytest-benchmark run of the 70 cases, as the plugin saves one."""
    from gpugauge.history.synthetic import CLASS, nightly_case
    from gpugauge.measure.timing import Timing
    from gpugauge.results.measurement import Measurement, SavedSpec

    path = folder / "current.json"
    benches = []
    for i in range(CASES):
        bench_id, family, level, _, _ = nightly_case(i)
        rounds = tuple(level * (1 + 0.001 * k) for k in range(20))
        timing = Timing(rounds, rounds, "cuda_event", 1, 0.0, "fixed rounds", False)
        spec = SavedSpec(family, bench_id, "cuda", ("cuda",), {"name": bench_id})
        m = Measurement(spec, timing=timing, device_class=CLASS)
        benches.append({"name": f"test[{bench_id}]", "param": bench_id, "extra_info": m.as_dict()})
    data = {
        "machine_info": {"gpugauge": {"gpus": [], "cpu": "synthetic", "torch": "2.16.0"}},
        "datetime": "2026-11-01T03:00:00",
        "benchmarks": benches,
    }
    path.write_text(json.dumps(data))
    return path


def judge_all(target: str, current: str) -> None:
    """What a gated nightly does per case: the host history's check of each of the run's results."""
    from gpugauge.judging.tracking import Tracker
    from gpugauge.regress.baselines import BaselineStore
    from gpugauge.regress.gate import Gate
    from gpugauge.regress.tolerances import Tolerances
    from gpugauge.results.runs import load_run

    run = load_run(Path(current))
    tracker = Tracker(target, "nightly", _host="GPU-0001" + "0" * 28)
    gate = Gate(BaselineStore(Path(target).parent / "no-baselines"), Tolerances())
    t0 = time.perf_counter()
    for m in run.measurements:
        tracker.by_history(m, gate)
    print(f"judged {len(run.measurements)} in {time.perf_counter() - t0:.2f} s")
    tracker.close()


def measure(argv: list[str]) -> None:
    """Run ``argv`` on one core; print its CPU and wall seconds and peak memory (MiB).

    CPU time (user + system) is the fair number on a machine that others share: the wall
    time of a process pinned to a core also counts the time others held that core.
    """
    t0 = time.perf_counter()
    done = subprocess.run([*ONE_CORE, *argv], capture_output=True, text=True, check=False)
    wall = time.perf_counter() - t0
    if done.returncode != 0:
        raise SystemExit(f"{argv}: exit {done.returncode}: {done.stderr[-2000:]}")
    use = resource.getrusage(resource.RUSAGE_CHILDREN)
    print(use.ru_utime + use.ru_stime, wall, use.ru_maxrss / 1024)


def timed(argv: list[str]) -> str:
    """'CPU s (wall s)' of a command on one core, in a fresh process; also its peak MiB."""
    out = subprocess.run(
        [sys.executable, __file__, "--measure", *argv], capture_output=True, text=True, check=True
    ).stdout.split()
    return f"{float(out[0]):.1f} s ({float(out[1]):.1f} s wall), {float(out[2]):.0f} MiB"


def main(folder: Path, sizes: list[int]) -> None:
    """Build each size, time each reader, print a Markdown table."""
    folder.mkdir(parents=True, exist_ok=True)
    current = current_run(folder)
    py = [sys.executable, "-m", "gpugauge"]
    print("| runs | `history changes` | `report --history` | judging (70 cases) | `export` |")
    print("| --- | --- | --- | --- | --- |")
    for runs in sizes:
        path = folder / f"h{runs}.sqlite"
        t0 = time.perf_counter()
        build(path, runs)
        built = time.perf_counter() - t0
        changes = timed([*py, "history", "changes", "--history", str(path)])
        out = ["--out", str(folder / "rep"), "--storage", str(folder / "none")]
        report = timed([*py, "report", "--current", str(current), "--history", str(path), *out])
        judge = timed([sys.executable, __file__, "--judge", str(path), str(current)])
        csv = str(folder / f"h{runs}.csv")
        export = timed([*py, "history", "export", "--csv", csv, "--history", str(path)])
        print(
            f"| {runs:,} | {changes} | {report} | {judge} | {export} |   (built in {built:.0f} s)",
            flush=True,
        )


if __name__ == "__main__":
    if sys.argv[1:2] == ["--judge"]:
        judge_all(sys.argv[2], sys.argv[3])
    elif sys.argv[1:2] == ["--measure"]:
        measure(sys.argv[2:])
    elif sys.argv[1:2] == ["--build"]:
        build(Path(sys.argv[2]), int(sys.argv[3]))
    else:
        cli = argparse.ArgumentParser(
            prog="python -m experiments.history_scale",
            description="Time the results history's readers on synthetic nightly histories.",
        )
        cli.add_argument("folder", type=Path, help="where the histories are built (or reused)")
        cli.add_argument(
            "runs", type=int, nargs="*", default=[30, 366, 1095, 4400], help="history sizes, runs"
        )
        args = cli.parse_args()
        main(args.folder, args.runs)
