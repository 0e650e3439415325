"""From the suite's results to history records: a session's run, each result, a saved run.

The plugin builds one :class:`~gpugauge.history.records.RunRecord` per session with
:func:`run_record` (the fingerprint it already takes, and :func:`host_id`), one
:class:`~gpugauge.history.records.ResultRecord` per measurement with :func:`result_record`
(its verdict from the history-aware judgement or the plain gate), and appends them all at
once. :func:`saved_records` does the same for a run saved by pytest-benchmark, with a run
id derived from the file's content, so importing it twice adds nothing.
"""

from __future__ import annotations

import platform
import statistics
import uuid
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gpugauge.history.host_checks import CaseJudgement, accepted
from gpugauge.history.records import HistoryError, MetricRecord, ResultRecord, RunRecord
from gpugauge.history.store import History
from gpugauge.measure.environment import host_name
from gpugauge.measure.nvml import Nvml, maybe_nvml
from gpugauge.measure.stats import summarize
from gpugauge.regress.baselines import kernel_shares
from gpugauge.results.measurement import Measurement, injected
from gpugauge.results.metrics import METRICS, Kind
from gpugauge.results.runs import SavedRun, load_run, say_refused
from gpugauge.results.verdicts import GateResult


def new_run_id() -> str:
    """A fresh run id (32 hex digits)."""
    return uuid.uuid4().hex


def gpu_uuid(index: int = 0) -> str | None:
    """NVML's UUID ('GPU-8f2c…') of torch's CUDA device ``index``; None without one.

    Read as the fingerprint reads it (:meth:`Nvml.device`, matched by torch's UUID since
    CUDA_VISIBLE_DEVICES may reorder NVML's indices), so a saved run names the same GPU.
    """
    try:
        import pynvml
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available() or index >= torch.cuda.device_count():
        return None
    with maybe_nvml() as nvml:
        if not isinstance(nvml, Nvml):
            return None
        try:
            return nvml.device(index).uuid()
        except pynvml.NVMLError:
            return None


def host_id(gpu_index: int | None = 0) -> str:
    """The host a live run is judged and filed as: :func:`host_name` of this machine now."""
    found = gpu_uuid(gpu_index) if gpu_index is not None else None
    return host_name(found, platform.node()) or "unknown-host"


def _text(value: Any) -> str | None:
    return None if value is None else str(value)


def run_record(
    fingerprint: Mapping[str, Any],
    *,
    host: str,
    device_class: str,
    run_id: str | None = None,
    time: datetime | None = None,
    argv: Sequence[str] = (),
    profile: str | None = None,
    source: str = "pytest",
) -> RunRecord:
    """A session as a run: the fingerprint's fields (:func:`fingerprint`), host, argv."""
    git = fingerprint.get("git") or {}
    return RunRecord(
        id=run_id or new_run_id(),
        time=time or datetime.now(UTC),
        host=host,
        device_class=device_class,
        driver=_text(fingerprint.get("driver")),
        cuda_runtime=_text(fingerprint.get("cuda_runtime")),
        cudnn=_text(fingerprint.get("cudnn")),
        torch=_text(fingerprint.get("torch")),
        commit=_text(git.get("commit")) if isinstance(git, dict) else None,
        flags=dict(fingerprint.get("flags") or {}),
        argv=tuple(str(a) for a in argv),
        profile=profile,
        source=source,
    )


def _conditions(m: Measurement) -> tuple[float | None, float | None]:
    """The SM clock (MHz, median over the timed batches) and power (W) a result ran at."""
    clock = m.timing.clocks()["sm_median_mhz"] if m.timing is not None else None
    if m.energy:
        power: float | None = sum(e.avg_power_w for e in m.energy)
    else:
        watts = [b.power_w for b in (m.timing.batches if m.timing else ()) if b.power_w]
        power = statistics.median(watts) if watts else None
    return clock, power


def _ci(m: Measurement, name: str, readings: Sequence[float]) -> tuple[float, float]:
    """The 95% CI of a samples metric's median."""
    summary = m.summary if name == "time" else summarize(readings)
    return summary.ci_low, summary.ci_high


def metric_records(
    m: Measurement,
    verdicts: Mapping[str, str] | None = None,
    references: Mapping[str, str] | None = None,
    earlier: Mapping[str, Sequence[float]] | None = None,
) -> tuple[MetricRecord, ...]:
    """Every metric of a measurement: median and CI (samples) or the value (n = 1).

    ``earlier`` gives, per metric, the medians of earlier measurements of the same case
    in this run (a regressed first attempt): they are kept in ``run_medians``.
    """
    verdicts, references, earlier = verdicts or {}, references or {}, earlier or {}
    out = []
    for name, readings in m.readings().items():
        if METRICS[name].kind is Kind.SAMPLES:
            median = statistics.median(readings)
            # time's rounds are summarized once by the timing (cached); the judge and the
            # record of a result both read that instead of bootstrapping again
            low, high = _ci(m, name, readings)
            n = len(readings)
        else:
            median = low = high = readings[0]
            n = 1
        out.append(
            MetricRecord(
                metric=name,
                median=median,
                ci_low=low,
                ci_high=high,
                n=n,
                run_medians=(*earlier.get(name, ()), median),
                verdict=verdicts.get(name),
                reference=references.get(name, ""),
            )
        )
    return tuple(out)


def result_record(
    m: Measurement,
    judged: CaseJudgement | GateResult | None = None,
    *,
    attempt: int = 1,
    earlier: Mapping[str, Sequence[float]] | None = None,
) -> ResultRecord:
    """A measurement as a result, with the verdict of the history or of the plain gate.

    Accepted (a later reference) unless the verdict is regressed or inconclusive, or there
    is none (an ungated run: kept, and no reference until ``history accept``).
    """
    verdicts: dict[str, str] = {}
    references: dict[str, str] = {}
    verdict, note = None, ""
    if isinstance(judged, CaseJudgement):
        verdicts, references = judged.verdicts(), judged.references()
        verdict, note = judged.verdict.value, judged.gate.note
    elif isinstance(judged, GateResult):
        verdicts = {c.metric: c.verdict.value for c in judged.checks}
        references = {
            c.metric: judged.references.get(c.metric, "class baseline (no history)")
            for c in judged.checks
        }
        verdict, note = judged.verdict.value, judged.note
    clock, power = _conditions(m)
    return ResultRecord(
        bench_id=m.id,
        family=m.spec.family,
        device_class=m.device_class,
        metrics=metric_records(m, verdicts, references, earlier),
        sm_clock_mhz=clock,
        power_w=power,
        kernels=kernel_shares(m.extra.get("kernels")),
        verdict=verdict,
        accepted=accepted(verdict),
        attempt=attempt,
        note=note,
    )


def _saved_verdict(saved: Any) -> tuple[str | None, dict[str, str], str]:
    """A saved gate result's verdict, its per-metric verdicts and note (all optional)."""
    if not isinstance(saved, dict):
        return None, {}, ""
    checks = saved.get("checks") if isinstance(saved.get("checks"), list) else []
    per_metric = {
        c["metric"]: c["verdict"]
        for c in checks
        if isinstance(c, dict) and isinstance(c.get("metric"), str) and c.get("verdict")
    }
    verdict = saved.get("verdict") if isinstance(saved.get("verdict"), str) else None
    return verdict, per_metric, str(saved.get("note") or "")


def saved_run_id(saved: SavedRun) -> str:
    """The id a saved run gets: the one the plugin stored with it, else its content's digest.

    From the content, not the bytes: a copy of the run written again is the same run.
    """
    return saved.run_id or "import-" + saved.digest[:24]


def saved_records(path: Path, host: str | None = None) -> tuple[RunRecord, list[ResultRecord]]:
    """A run saved by pytest-benchmark as history records, read and checked; nothing written.

    The host is ``host``, else the run's own (:attr:`SavedRun.host`: its first GPU's UUID,
    else its machine's name, by the rule a live append follows), else 'unknown-host'.
    Verdicts saved with the results come along. RunError or HistoryError naming the file.
    """
    saved = load_run(path)  # RunError (a ValueError) naming the file and the field
    say_refused(saved, "gpugauge history")  # the run's readable results are its record
    host = host or saved.host or "unknown-host"
    classes = Counter(m.device_class for m in saved.measurements)
    run = run_record(
        saved.fingerprint,
        host=str(host),
        device_class=classes.most_common(1)[0][0],
        run_id=saved_run_id(saved),
        time=saved.time or datetime.fromtimestamp(path.stat().st_mtime, UTC),
        argv=saved.argv,
        profile=saved.profile,
        source=f"import {path.name}",
    )
    results = []
    stored_verdicts = getattr(saved, "verdicts", {}) or {}
    for m in saved.measurements:
        if injected(m):
            continue
        verdict, per_metric, note = _saved_verdict(stored_verdicts.get(m.id))
        results.append(
            replace(
                result_record(m),
                metrics=metric_records(m, per_metric),
                verdict=verdict,
                accepted=accepted(verdict),
                note=note,
            )
        )
    if not results:
        raise HistoryError(
            f"{path}: every result has work injected on purpose (gpugauge check's "
            "slowdown): nothing of it may join the history"
        )
    return run, results


def import_run(history: History, path: Path, host: str | None = None) -> tuple[str, bool]:
    """Append a run saved by pytest-benchmark; (its run id, whether anything was added)."""
    run, results = saved_records(path, host)
    return run.id, history.append(run, results)
