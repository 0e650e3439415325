"""torchrun launching on the CPU (gloo, two processes): results, a crash, a hang."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpugauge.launch.torchrun import LOG_DIR, Launch, LaunchError, launch, slowest_rank_rounds
from gpugauge.launch.torchrun import processes_mentioning as _processes_mentioning
from gpugauge.measure.timing import Timing

CALL = "tests.ranks_toy:run_rank"

RECORDING_BENCH = """
import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from gpugauge.launch.torchrun import Launch, launch, slowest_rank_rounds
from gpugauge.results.measurement import Measurement

@dataclass(frozen=True)
class DdpSpec:
    ranks: int
    family = "demo_ddp"
    device = "cpu"
    @property
    def devices(self): return ("cpu",) * self.ranks
    @property
    def id(self): return f"toy-ddp-{self.ranks}rank-cpu"
    def as_dict(self): return {"ranks": self.ranks, "device": "cpu"}

@pytest.mark.cpu
def test_ddp(gauge, tmp_path_factory):
    spec = DdpSpec(2)
    out = Path(OUT)
    job = Launch("tests.ranks_toy:run_rank",
                 {"device": "cpu", "rounds": 6, "slow_rank": 1, "sleep_s": 0.02}, 2)
    ranks = launch(job, out, timeout_s=120, note=gauge.session.note)
    timing = slowest_rank_rounds([r.timing for r in ranks])
    gauge.record(Measurement(spec, timing=timing, extra={"rank_medians_ms": [
        r.timing.summary.median for r in ranks]}))
"""


@pytest.mark.slow
def test_two_gloo_ranks_record_one_result_of_the_slowest_rank(
    gauge_pytester: pytest.Pytester,
) -> None:
    out = gauge_pytester.path / "ranks"
    gauge_pytester.makepyfile(test_ddp=f"OUT = {str(out)!r}\n" + RECORDING_BENCH)
    saved = gauge_pytester.path / "run.json"
    result = gauge_pytester.runpytest_subprocess(f"--benchmark-json={saved}")
    result.assert_outcomes(passed=1)
    [bench] = json.loads(saved.read_text())["benchmarks"]
    rank_rounds = [
        json.loads((out / f"rank{r}.json").read_text())["timing"]["device_ms"] for r in (0, 1)
    ]
    slowest = [max(a, b) for a, b in zip(*rank_rounds, strict=True)]
    assert bench["extra_info"]["timing"]["device_ms"] == pytest.approx(slowest)
    assert bench["stats"]["data"] == pytest.approx([ms / 1e3 for ms in slowest])
    assert min(rank_rounds[1]) >= 20  # rank 1 slept 20 ms a step
    assert bench["extra_info"]["device_class"].startswith("2x-cpu-")
    assert not _processes_mentioning(str(out))


@pytest.mark.slow
def test_a_crashed_rank_is_named_and_nothing_is_left(tmp_path: Path) -> None:
    job = Launch(CALL, {"device": "cpu", "rounds": 3, "crash_rank": 1}, 2)
    out, tmp = tmp_path / "out", tmp_path / "tmp"
    tmp.mkdir()
    with pytest.raises(LaunchError, match=r"rank 1 failed: RuntimeError: planned crash on rank 1"):
        launch(job, out, timeout_s=120, note=lambda _: None, env={"TMPDIR": str(tmp)})
    assert not _processes_mentioning(str(out))
    # torch's logs stay with the launch's files, none in the temporary folder
    assert not list(tmp.iterdir())
    assert any((out / LOG_DIR).rglob("*"))


@pytest.mark.slow
def test_a_rank_whose_teardown_would_abort_ends_with_its_result(tmp_path: Path) -> None:
    # gloo's or the profiler's native threads can abort a rank at interpreter exit, after
    # its result is saved (seen once in CI: SIGABRT, rank 0, both results written)
    job = Launch(CALL, {"device": "cpu", "rounds": 3, "abort_at_exit_rank": 0}, 2)
    ranks = launch(job, tmp_path, timeout_s=120, note=lambda _: None)
    assert [r.rank for r in ranks] == [0, 1]
    assert "SIGABRT" not in (tmp_path / "torchrun.log").read_text()
    assert not _processes_mentioning(str(tmp_path))


@pytest.mark.slow
def test_a_hung_rank_is_named_and_every_worker_is_stopped(tmp_path: Path) -> None:
    job = Launch(CALL, {"device": "cpu", "rounds": 3, "hang_rank": 1}, 2)
    with pytest.raises(LaunchError, match=r"rank 1 did not finish within 12 s") as err:
        launch(job, tmp_path, timeout_s=12, note=lambda _: None)
    assert "timed out; every worker was stopped" in str(err.value)
    assert not _processes_mentioning(str(tmp_path))


def _timing(ms: list[float]) -> Timing:
    return Timing(tuple(ms), tuple(ms), "perf_counter", 0, 0.0, "fixed", False)


def test_slowest_rank_rounds_takes_each_rounds_maximum() -> None:
    merged = slowest_rank_rounds([_timing([1.0, 5.0, 1.0]), _timing([2.0, 2.0, 2.0])])
    assert merged.device_ms == (2.0, 5.0, 2.0)
    assert "slowest of 2 ranks" in merged.stop_reason
    with pytest.raises(ValueError, match="different numbers of rounds"):
        slowest_rank_rounds([_timing([1.0]), _timing([1.0, 2.0])])


def test_several_nodes_need_a_rendezvous() -> None:
    cmd = Launch(CALL, {}, 8, nnodes=2, rdzv_endpoint="node0:29500", node_rank=1).command(
        Path("/o")
    )
    assert "--nnodes=2" in cmd
    assert "--rdzv-endpoint=node0:29500" in cmd
    assert "--node-rank=1" in cmd
    with pytest.raises(ValueError, match="rendezvous endpoint"):
        Launch(CALL, {}, 8, nnodes=2).command(Path("/o"))


def test_a_launch_that_failed_after_every_rank_saved_says_so(tmp_path: Path) -> None:
    from gpugauge.launch.torchrun import _collect

    for r in (0, 1):
        (tmp_path / f"rank{r}.json").write_text(json.dumps({"rank": r}))
    log = tmp_path / "torchrun.log"
    log.write_text("exitcode  : -6 (pid: 17413)\n")
    said = r"every rank saved its result, then a rank ended abnormally \(torchrun exit 1\)"
    with pytest.raises(LaunchError, match=said):
        _collect(Launch(CALL, {}, 2), tmp_path, log, 1, None)
