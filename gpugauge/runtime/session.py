"""The state of one pytest run: :class:`GaugeSession`, kept in ``config.stash``.

It holds the resolved options and the run's resources, each opened or measured once and
lazily (NVML, the environment fingerprint, each device's ceilings, the artifact folder),
and every result and comparison so far; at the end it renders the tables and writes
baselines. The plugin creates it when gpugauge starts in a run (:mod:`gpugauge.runtime.startup`)
and closes it in ``unconfigure``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gpugauge.core.phrasing import Note, plural
from gpugauge.family.registry import comparisons_of, registry
from gpugauge.judging.first_nights import FirstNights
from gpugauge.judging.judge import Judge
from gpugauge.judging.tracking import Tracker
from gpugauge.measure.ceilings import Ceilings, measure_ceilings
from gpugauge.measure.environment import fingerprint
from gpugauge.measure.nvml import Nvml, NvmlDevice, NvmlUnavailable
from gpugauge.measure.threads import CpuThreads, cores, cpu_threads, load_average, load_warning
from gpugauge.measure.wall import WallLedger
from gpugauge.regress.baselines import BaselineStore, entry_of
from gpugauge.regress.gate import Gate
from gpugauge.report.noise import run_gate_table
from gpugauge.report.tables import (
    comparison_table,
    results_table,
    roofline_table,
    run_label,
)
from gpugauge.results.measurement import Comparison, Measurement, Spec, injected, on_gpu
from gpugauge.results.outcome import RunOutcome
from gpugauge.results.verdicts import GateResult
from gpugauge.runtime.options import Options


@dataclass
class GaugeSession:
    """State of one pytest run; created when gpugauge starts in it, closed in ``unconfigure``.

    ``foreign_note`` says which pytest-benchmark timing options were given: they drive
    pytest-benchmark's own loop (tests that take ``benchmark``), not gauge tests, so the
    first gauge result adds it to ``messages`` once.
    """

    options: Options
    root: Path
    note: Note = print
    measurements: list[Measurement] = field(default_factory=list)
    adhoc_comparisons: list[Comparison] = field(default_factory=list)  # gauge.compare's
    judge: Judge | None = None  # with --gauge-gate: decides each result's verdict
    gate_results: list[GateResult] = field(default_factory=list)
    messages: list[str] = field(default_factory=list)
    unmeasured: set[str] = field(default_factory=set)  # ids run once under --benchmark-disable
    foreign_note: str | None = None
    tracker: Tracker | None = None  # the results history; None with --gauge-no-history
    first_nights: FirstNights | None = None  # --gauge-first-nights N; the judge's too
    # each test's wall seconds (setup, call, teardown) by node id: what `gpugauge confirm`'s
    # A/B of it will roughly cost, saved in the run's JSON
    test_seconds: dict[str, float] = field(default_factory=dict)
    wall: WallLedger = field(default_factory=WallLedger)  # those seconds by phase
    # each recorded result's id and the node id of the test that recorded it: an id keys the
    # run file's row and verdict, the baseline and the history, so it has one test
    recorded_by: dict[str, str] = field(default_factory=dict)
    # the run's course so far (selected, finished, skipped, ended early), saved with it
    course: RunOutcome = field(default_factory=lambda: RunOutcome(0, 0))
    printed: bool = False  # the gpugauge section is on the terminal already
    # CPU cases' intra-op threads (one unless OMP_NUM_THREADS pins more), and the highest
    # load average seen around their timing: at the core count, the run warns
    cpu_threads: CpuThreads = field(default_factory=cpu_threads)
    peak_load: float | None = None
    _nvml: Nvml | NvmlUnavailable | None = None
    _fingerprint: dict[str, Any] | None = None
    _ceilings: dict[str, Ceilings] = field(default_factory=dict)
    _artifact_run: Path | None = None

    @property
    def gate(self) -> Gate | None:
        """The class baselines' gate, the judge's first reference; None without --gauge-gate."""
        return None if self.judge is None else self.judge.gate

    @property
    def nvml(self) -> Nvml | None:
        """Open NVML on first use; None where it is unavailable (see ``nvml_reason``)."""
        if self._nvml is None:
            try:
                self._nvml = Nvml().__enter__()
            except NvmlUnavailable as err:
                self._nvml = err
        return self._nvml if isinstance(self._nvml, Nvml) else None

    @property
    def nvml_reason(self) -> str | None:
        """Why NVML is unavailable, or None."""
        return str(self._nvml) if self.nvml is None else None

    def nvml_device(self, device: str) -> NvmlDevice | None:
        """The NVML handle behind a torch CUDA device string, or None."""
        import torch

        dev = torch.device(device)
        if dev.type != "cuda" or self.nvml is None:
            return None
        return self.nvml.device(dev.index if dev.index is not None else 0)

    def fingerprint(self) -> dict[str, Any]:
        """The environment fingerprint, taken once per run."""
        if self._fingerprint is None:
            self._fingerprint = fingerprint(self.root, self.nvml, self.nvml_reason)
        return self._fingerprint

    def ceilings(self, device: str) -> Ceilings:
        """The device's measured ceilings, measured on first request."""
        if device not in self._ceilings:
            self.note(f"measuring {device} ceilings (copy bandwidth, matmul per dtype) ...")
            c = self._ceilings[device] = measure_ceilings(device)
            rates = ", ".join(f"{k} {v:.3g}" for k, v in c.matmul_tflops.items())  # a CPU's 0.04
            self.note(f"{device}: copy {c.copy_gbps:.0f} GB/s; matmul TFLOP/s {rates}")
        return self._ceilings[device]

    def sample_load(self) -> None:
        """Keep the highest one-minute load average seen around CPU cases' timing."""
        now = load_average()
        if now is not None:
            self.peak_load = now if self.peak_load is None else max(self.peak_load, now)

    def load_lines(self) -> list[str]:
        """The warning where the load average reached the core count during CPU cases."""
        line = load_warning(self.peak_load, cores())
        return [line] if line else []

    def all_ceilings(self) -> dict[str, dict[str, Any]]:
        """Every ceiling measured so far, for the saved JSON."""
        return {k: v.as_dict() for k, v in self._ceilings.items()}

    @property
    def comparisons(self) -> list[Comparison]:
        """Each family's comparisons among the results present, then gauge.compare's.

        Derived, so they do not depend on the order in which the tests ran.
        """
        return comparisons_of(self.measurements) + self.adhoc_comparisons

    @property
    def on_gpu(self) -> bool:
        """Whether any result of this run was measured on a CUDA device."""
        return on_gpu(self.measurements)

    @property
    def label(self) -> str:
        """What this run's numbers are: device-timed, or a CPU run (a smoke check)."""
        return run_label(self.measurements, smoke=self.options.profile == "smoke")

    def efficiency(self, wall_s: float) -> list[str]:
        """The run's last lines: where its wall time went, then its efficiency.

        The wall ledger's (:meth:`~gpugauge.measure.wall.WallLedger.lines`) over this run's
        tests: setups, profiled rounds, energy windows, the tests' own code and pytest's.
        """
        return self.wall.lines(wall_s, self.test_seconds)

    def tables(self) -> dict[str, str]:
        """The end-of-run tables, by name: printed, and saved in the JSON."""
        ms, skip = self.measurements, self.unmeasured
        smoke = self.options.profile == "smoke"
        out = {"results": results_table(ms, unmeasured=skip, smoke=smoke)} if ms else {}
        if any(m.roofline for m in ms if m.id not in skip):
            out["roofline"] = roofline_table([m for m in ms if m.id not in skip])
        for family in registry().values():
            mine = [m for m in ms if m.spec.family == family.name and m.id not in skip]
            if mine:
                out.update(family.tables(mine))
        comparisons = self.comparisons
        if comparisons:
            out["comparisons"] = comparison_table(comparisons, unmeasured=skip)
        if self.gate is not None and self.measurements:
            out["gate"] = run_gate_table(self.gate_results, ms, self.missing_from_run())
        return out

    def missing_from_run(self) -> list[str]:
        """Baseline entries of the families that ran, which this run did not measure."""
        if self.gate is None:
            return []
        seen = {(m.device_class, m.spec.family, m.id) for m in self.measurements}
        out = []
        for dev, fam in sorted({(d, f) for d, f, _ in seen}):
            ids = {i for d, f, i in seen if (d, f) == (dev, fam)}
            out += [f"{dev}/{fam}: {i}" for i in self.gate.missing(dev, fam, ids)]
        return out

    def gate_notes(self) -> list[str]:
        """Lines that say loudly when a gated run compared nothing, and why."""
        if self.gate is None or not self.measurements:
            return []
        if self.unmeasured:
            return ["gate: NOTHING GATED: --benchmark-disable ran each benchmark once, untimed"]
        if self.gate_results and not any(r.checks for r in self.gate_results):
            hint = (
                ""
                if self.options.require_baselines
                else " (--gauge-require-baselines fails the run)"
            )
            return [
                f"gate: NOTHING COMPARED: none of the {len(self.gate_results)} results had a "
                f"baseline of its device class in {self.options.baselines_dir}{hint}"
            ]
        return []

    def write_baselines(self, passed: bool) -> None:
        """Store this run's results as baselines (only a run in which every test passed).

        A run that did not measure properly (results taken under --benchmark-disable) never
        writes: one cold round would become the reference every later run is judged by.
        """
        if not passed:
            self.messages.append("baselines NOT written: the run had failures or errors")
            return
        if self.unmeasured:
            self.messages.append(
                f"baselines NOT written: {plural(len(self.unmeasured), 'result')} not measured "
                f"(--benchmark-disable runs each benchmark once, untimed)"
            )
            return
        if not self.measurements:
            self.messages.append("baselines NOT written: nothing was measured")
            return
        slowed = [m for m in self.measurements if injected(m)]
        if slowed:  # a baseline of the injection would pass any slowdown up to it
            self.messages.append(
                f"baselines NOT written: {plural(len(slowed), 'result')} "
                f"{'has' if len(slowed) == 1 else 'have'} injected work (gpugauge check's "
                "slowdown): they measure the injection, not the build"
            )
            return
        fp = self.fingerprint()
        meta = {
            "recorded_with": {
                k: fp.get(k) for k in ("torch", "cuda_runtime", "cudnn", "driver", "git", "python")
            },
            "profile": self.options.profile,
            # where the entries came from, kept in front of later --add runs
            "recorded_from": [
                f"pytest --gauge-update-baselines, {datetime.now(UTC):%Y-%m-%dT%H:%M}Z"
            ],
        }
        for path in BaselineStore(self.options.baselines_dir).write(
            map(entry_of, self.measurements), meta
        ):
            self.messages.append(f"baseline written: {path}")

    def find(self, spec: Spec) -> Measurement | None:
        """The measurement of ``spec`` in this run, if it ran."""
        return next((m for m in self.measurements if m.spec == spec), None)

    @property
    def artifact_run_dir(self) -> Path:
        """The run's artifact folder, ``<artifacts-dir>/<UTC time>-<pid>``, made on first use."""
        if self._artifact_run is None:
            stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
            self._artifact_run = self.options.artifacts_dir / f"{stamp}-{os.getpid()}"
        return self._artifact_run

    def append_history(self) -> None:
        """Append this run's results to the history (once, at the end); never raises.

        A history that cannot take the run (a full disk, a read-only file, a lost server)
        is one line in the gpugauge section; the backend has rolled the run back, so the
        history keeps its earlier runs whole. The exit status stays the tests' own: the
        results were measured and judged, and a saved run can be added later.
        """
        if self.tracker is None or self.unmeasured:
            return
        early = self.course.ended_early()
        if early and self.measurements:
            self.messages.append(
                f"history NOT appended: {early}; a night's history keeps whole runs (add "
                "this one if you want it: python -m gpugauge history import RUN.json)"
            )
            return
        classes = [m.device_class for m in self.measurements]
        gpu = [c for c in classes if not c.startswith("cpu")]
        try:
            said = self.tracker.append(self.fingerprint(), (gpu or classes or ["-"])[0])
        except (OSError, ValueError) as err:  # HistoryError is a ValueError
            said = (
                f"history NOT appended: {err}; its earlier runs are intact (a saved run "
                "can be added later: python -m gpugauge history import RUN.json)"
            )
        if said:
            self.messages.append(said)

    def close(self) -> None:
        """Shut NVML down; close the history."""
        if self.tracker is not None:
            self.tracker.close()
        if isinstance(self._nvml, Nvml):
            self._nvml.__exit__(None, None, None)
        self._nvml = None
