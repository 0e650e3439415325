"""The benchmark-facing API: ``gauge(fn, *args)``, ``gauge.measure``, ``gauge.record``.

A test takes the ``gauge`` fixture, a :class:`Gauge`. ``gauge(fn, *args, **kwargs)`` is
pytest-benchmark's call form: the result's spec is made from the test (:class:`CallSpec`).
``gauge.measure(spec, fn)`` measures a callable under a spec of the benchmark's own (the
pipeline in :mod:`gpugauge.runtime.pipeline`), and ``gauge.record`` takes a result built
anywhere (a torchrun worker's timing, a search). Either way the result is handed to
pytest-benchmark's fixture (:mod:`gpugauge.runtime.benchmark_bridge`), so its storage and
compare work on device time, and to the gate. One test records one result: its pytest id
is the result's id. The run's state is a :class:`~gpugauge.runtime.session.GaugeSession`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

from gpugauge.core.phrasing import Note
from gpugauge.family.entries import family_names
from gpugauge.judging.judge import Action, Decision
from gpugauge.measure.memory import ExpectedMemory
from gpugauge.measure.paired import PairedReference
from gpugauge.measure.roofline import Work
from gpugauge.measure.timing import TimingPolicy
from gpugauge.measure.wall import TIMED, WARMUP
from gpugauge.report.noise import hedge
from gpugauge.report.tables import one_line
from gpugauge.results.measurement import Comparison, Measurement, Spec
from gpugauge.results.verdicts import GateResult, Verdict
from gpugauge.runtime.benchmark_bridge import fill_benchmark_fixture, plain_params, stored_options
from gpugauge.runtime.options import Options
from gpugauge.runtime.pipeline import l2_flusher, measure_case
from gpugauge.runtime.session import GaugeSession
from gpugauge.runtime.setup_memo import SetupMemo

# what other modules import from here
__all__ = [
    "CUSTOM_FAMILY",
    "CallSpec",
    "Gauge",
    "GaugeError",
    "GaugeSession",
    "Note",
    "l2_flusher",
    "plain_params",
    "stored_options",
]

CUSTOM_FAMILY = "custom"  # the family of a spec made from a test with no family marker


class GaugeError(RuntimeError):
    """A benchmark used the gauge in a way that would lose or mislabel a result."""


@dataclass(frozen=True)
class CallSpec:
    """The spec that ``gauge(fn, ...)`` and ``gauge.measure("id", fn)`` make for a test.

    ``id`` is the test's node id (or the id given); ``family`` the test's family marker, or
    ``"custom"`` (the baseline file ``baselines/<device-class>/custom.json``); ``device``
    where the arguments' tensors live, else the run's device; ``devices`` every device,
    when the tensors are on several.
    """

    id: str
    family: str = CUSTOM_FAMILY
    device: str = "cpu"
    devices: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        """Plain dict for JSON."""
        out: dict[str, Any] = {"device": self.device}
        if self.devices:
            out["devices"] = list(self.devices)
        return out


_SPEC_NEEDS = {
    "id": "an `id` (a property or field): the result's pytest-benchmark row and baseline key",
    "family": 'a `family` (e.g. `family: ClassVar[str] = "mine"`): names the baseline file',
    "as_dict": "an `as_dict()` method returning its parameters as a dict",
}


def check_spec(spec: object, where: str) -> None:
    """Refuse a spec that lacks what a result needs, naming what is missing (GaugeError)."""
    what = type(spec).__name__
    for name, hint in _SPEC_NEEDS.items():
        value = getattr(spec, name, None)
        if value is None or (name != "as_dict" and not (isinstance(value, str) and value)):
            raise GaugeError(
                f"{where}: the spec {what} has no {name!r}; give it {hint}, or call "
                f"gauge(fn, *args) to have a spec made from the test"
            )
    if not getattr(spec, "devices", None) and not isinstance(getattr(spec, "device", None), str):
        raise GaugeError(
            f"{where}: the spec {what} has no 'device'; give it `device` ('cpu' or 'cuda'), "
            f"or `devices`, a tuple of device strings"
        )


def _tensor_devices(values: Iterable[object], depth: int = 0) -> list[str]:
    """Devices of the torch tensors (and modules' parameters) among ``values``, in order.

    Containers are looked into one level deep: ``gauge(fn, [x, y])`` finds x and y.
    """
    import torch

    found: list[str] = []
    for v in values:
        if isinstance(v, torch.Tensor):
            found.append(str(v.device))
        elif isinstance(v, torch.nn.Module):
            found += [str(p.device) for p in list(v.parameters())[:1]]
        elif depth < 1 and isinstance(v, list | tuple):
            found += _tensor_devices(v, depth + 1)
        elif depth < 1 and isinstance(v, Mapping):
            found += _tensor_devices(v.values(), depth + 1)
    return list(dict.fromkeys(found))


class Gauge:
    """Per-test measuring API; wraps the pytest-benchmark fixture it records into.

    One test records one result: the pytest-benchmark row, the pytest id and the baseline
    key are all that result's id, so a second ``record`` (or ``measure``) in the same test
    is refused with :class:`GaugeError` rather than stored under the first one's name.
    ``node`` is the test's pytest item: ``gauge(fn)`` makes its spec from it. The gauge
    records and acts: the session's judge decides each verdict.
    """

    def __init__(self, session: GaugeSession, benchmark: Any, node: Any = None) -> None:
        self.session = session
        self._benchmark = benchmark
        self._node = node
        self._recorded: Measurement | None = None
        self._again: Callable[[], Measurement] | None = None
        self._started = time.perf_counter()

    @property
    def options(self) -> Options:
        """The run's resolved options."""
        return self.session.options

    def finish(self) -> None:
        """End of the test: a test that recorded nothing has its own error or skip to show.

        pytest-benchmark warns "Benchmark fixture was not used at all" for it, which names
        a fixture a gauge test never touches; its fixture is told that this one was let go.
        """
        if self._recorded is None:
            self._benchmark.skipped = True

    def __call__(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Measure ``fn(*args, **kwargs)`` as this test's result; return what ``fn`` returns.

        pytest-benchmark's call form. The spec is made from the test (:meth:`call_spec`);
        the rounds are timed as :meth:`measure` times them (CUDA events on a GPU). ``fn``'s
        result comes from one more call after the measurement, untimed, so that no round's
        output is held while the next round runs (it would count in the peak memory):
        ``fn`` runs once more than the rounds, which matters for a callable with state.
        Every keyword goes to ``fn``; for the measuring options, use :meth:`measure`.
        """
        spec = self.call_spec(_tensor_devices([fn, *args, *kwargs.values()]))
        self.measure(spec, lambda: fn(*args, **kwargs))
        return fn(*args, **kwargs)

    def call_spec(self, devices: list[str] | tuple[str, ...] = (), id: str = "") -> CallSpec:
        """The spec of this test: its node id, its family marker, the given devices.

        With no devices given, the run's device: cuda where the run covers it, else cpu.
        """
        node_id = getattr(self._node, "nodeid", "") or "gauge"
        family = CUSTOM_FAMILY
        if self._node is not None:
            names = family_names()
            family = next(
                (m.name for m in self._node.iter_markers() if m.name in names), CUSTOM_FAMILY
            )
        if not devices:
            devices = ("cuda",) if "cuda" in self.options.devices else ("cpu",)
        several = tuple(devices) if len(devices) > 1 else ()
        return CallSpec(id or node_id, family, devices[0], several)

    def _policy(self, flush_l2: bool) -> TimingPolicy:
        policy = self.options.policy
        if flush_l2 and not policy.flush_l2:
            policy = replace(policy, flush_l2=True)
        if self._benchmark_disabled:
            policy = replace(policy, warmup_rounds=0, warmup_s=0, rounds=1)
        return policy

    def measure(
        self,
        spec: Spec | str,
        fn: Callable[[], object],
        *,
        setup: Callable[[], object] | None = None,
        work: Work | None = None,
        expected_memory: ExpectedMemory | None = None,
        flush_l2: bool = False,
        energy: bool = True,
        values: Mapping[str, float] | None = None,
        artifacts: Mapping[str, Path | str] | None = None,
        extra: dict[str, Any] | None = None,
        reference: PairedReference | None = None,
    ) -> Measurement:
        """Time ``fn``, then its memory and energy; record and return the measurement.

        ``spec`` says what is measured (see :class:`~gpugauge.results.measurement.Spec`);
        a string is taken as the id of a spec made from the test (its family marker, the
        run's device). ``fn`` is one complete round (one inference, one training step); on
        a spec with several devices a round ends when every device has finished it.
        ``setup`` runs before every round outside the timing and memory windows (fresh
        inputs, grads set to None); the energy window runs it too. ``work`` adds a
        roofline, ``expected_memory`` a check of the peak, ``flush_l2`` a cold L2 for every
        round, ``values`` further metrics by registry name, ``artifacts`` files the result
        owns (see :meth:`artifact_path`). ``reference`` names the result this one is
        compared with: where rounds are host-timed, the two are also timed in alternating
        blocks, and the comparison's speedup comes from those pairs. The samples go to
        pytest-benchmark's fixture, everything else into ``extra_info``.
        """
        if isinstance(spec, str):
            spec = self.call_spec(id=spec)
        check_spec(spec, "gauge.measure")
        self._check_not_recorded(spec)
        self._check_id_free(spec)

        def once() -> Measurement:
            return measure_case(
                self.session,
                spec,
                fn,
                self._policy(flush_l2),
                measured=not self._benchmark_disabled,
                setup=setup,
                work=work,
                expected_memory=expected_memory,
                energy=energy,
                values=values,
                artifacts=artifacts,
                extra=extra,
                reference=reference,
            )

        if reference is not None and setup is not None:
            raise GaugeError(f"{spec.id}: a reference pairs whole rounds; drop setup")
        self._again = once  # a regressed result is measured again before its test fails
        return self._record(once(), charged=True)

    def record(self, m: Measurement, *, charged: bool = False) -> Measurement:
        """Record a result built anywhere: gate it, store it, and return it.

        ``m`` may come from :meth:`measure`, from a worker process
        (``Measurement(spec, timing=Timing.from_dict(...))``) or from a search with no
        timing at all (``Measurement(spec, values={"max_layers": 61})``). Its rounds, if
        any, become pytest-benchmark's stats; everything else goes into ``extra_info``.
        The judge decides its verdict (:meth:`~gpugauge.judging.judge.Judge.decide`), and a
        regression fails the calling test. A regressed result that is measured again is that
        second measurement from then on: it is what is stored, shown and returned, the first
        kept in its ``earlier``. ``charged``: its timed rounds and warm-up are on the run's
        wall ledger already (a launch charged its ranks' phases to the test that made it).
        """
        return self._record(m, charged=charged)

    def _record(self, m: Measurement, charged: bool) -> Measurement:
        """:meth:`record`; ``charged``: its rounds are on the run's wall ledger already.

        A result timed elsewhere (a worker process) has its timed rounds and warm-up
        charged to this test here, so that the run's efficiency line counts them.
        """
        check_spec(m.spec, "gauge.record")
        self._check_not_recorded(m.spec)
        self._check_id_free(m.spec)
        missing = [f"{k}={v}" for k, v in m.artifacts.items() if not Path(v).exists()]
        if missing:
            raise GaugeError(f"{m.id}: artifact file(s) not written: {', '.join(missing)}")
        if not charged and m.timing is not None:
            self.session.wall.charge(TIMED, m.timing.timed_s)
            self.session.wall.charge(WARMUP, m.timing.warmup_s)
        self._recorded = m
        if self._benchmark_disabled:
            self.session.unmeasured.add(m.id)
        self.session.note(f"{m.id}: {one_line(m)}")
        decision = None
        try:
            decision = self._decide(m)
        finally:  # also when judging or measuring again failed: the first is stored
            if decision is not None:
                m = decision.measurement
            self._store(m, None if decision is None else decision.result)
        if decision is not None:
            self._act(decision)
        return m

    def _store(self, m: Measurement, result: GateResult | None) -> None:
        """Hand the result (and its verdict) to pytest-benchmark and to the session."""
        self._recorded = m
        if self._benchmark is not None:
            fill_benchmark_fixture(self._benchmark, m, self._started)
            if result is not None:
                self._benchmark.extra_info["gate"] = result.as_dict()
        self.session.measurements.append(m)
        self.session.recorded_by.setdefault(m.id, self._node_id)
        foreign = self.session.foreign_note
        if foreign and foreign not in self.session.messages:
            self.session.messages.append(foreign)

    def phase(self, name: str) -> AbstractContextManager[None]:
        """Charge the block's wall seconds to ``name`` in the run's wall-time lines.

        For a test's own work around its measurement ("search", "profiler tables"): the
        run's closing lines and its JSON (``gpugauge.wall_s``) then name it, where it would
        otherwise be part of "tests' own code".
        """
        return self.session.wall.phase(name)

    def kept(
        self, spec: Spec, name: str, work_out: Callable[[], Any], fresh: bool = False
    ) -> tuple[Any, bool]:
        """A setup answer of this result: an earlier process's, or ``work_out()``, kept.

        For answers that depend only on the build and the device (how many layers fit),
        which every round of an A/B would otherwise work out again: see
        :mod:`gpugauge.runtime.setup_memo`. The second item says whether it was kept
        from an earlier process; the answer must be plain JSON. ``fresh``: this process
        has its own answer, which replaces a kept one.
        """
        folder = self.options.setup_memo
        if folder is None:
            return SetupMemo().kept(spec.id, name, work_out)
        provenance = {"environment": self.session.fingerprint(), "spec": spec.as_dict()}
        return SetupMemo(folder, provenance).kept(spec.id, name, work_out, fresh)

    def artifact_path(self, spec: Spec, name: str) -> Path:
        """Where this result's file ``name`` goes: ``<run folder>/<spec id>/<name>``.

        The folder is made; write the file, then pass ``artifacts={"label": path}`` to
        :meth:`measure`, or put it in the Measurement given to :meth:`record`.
        """
        if not name or "/" in name or name in (".", ".."):
            raise GaugeError(f"artifact name {name!r} must be a plain file name")
        folder = self.session.artifact_run_dir / spec.id
        folder.mkdir(parents=True, exist_ok=True)
        return folder / name

    def _check_not_recorded(self, spec: Spec) -> None:
        if self._recorded is not None:
            raise GaugeError(
                f"this test already recorded {self._recorded.id!r}; it cannot also record "
                f"{spec.id!r}: one test records one result (its pytest id, pytest-benchmark "
                f"row and baseline key). Parametrize the test with one case per result."
            )

    @property
    def _node_id(self) -> str:
        return getattr(self._node, "nodeid", "") or ""

    def _check_id_free(self, spec: Spec) -> None:
        """GaugeError where another test of this run recorded a result with this id.

        The id is the result's pytest-benchmark row, its verdict's key in the run file, its
        baseline key and its history key: a second test's result under it would silently
        take the first one's baseline and verdict. (The same test again, as a rerun
        plugin does, may record it.)
        """
        owner = self.session.recorded_by.get(spec.id)
        if owner is not None and owner != self._node_id:
            raise GaugeError(
                f"{spec.id!r} was recorded already in this run, by {owner or 'another test'}: "
                "a result's id is its row, baseline key and history key, so two tests "
                "cannot share one. Give each case an id of its own."
            )

    def _decide(self, m: Measurement) -> Decision | None:
        """The judge's decision on the result; None without ``--gauge-gate``.

        The history keeps every measurement judged (a regression's second too), and a run
        without a gate keeps its results unjudged. A run that measures nothing keeps nothing.
        """
        if self._benchmark_disabled:
            return None
        judge, tracker = self.session.judge, self.session.tracker
        if judge is None:
            if tracker is not None:
                tracker.keep([(m, None)])
            return None
        again = None if self._again is None else self._announced(m, self._again)
        decision = judge.decide(m, again)
        if tracker is not None:
            tracker.keep(list(decision.attempts))
        self.session.gate_results.append(decision.result)
        return decision

    def _announced(
        self, m: Measurement, again: Callable[[], Measurement]
    ) -> Callable[[], Measurement]:
        """``again``, the judge's way to measure ``m`` again, saying so on the terminal."""

        def measured() -> Measurement:
            self.session.note(f"{m.id}: regressed; measuring again ...")
            second = again()
            self.session.note(f"{m.id}: measured again: {one_line(second)}")
            return second

        return measured

    def _act(self, decision: Decision) -> None:
        """Fail the test, or say why it passes, as the judge decided.

        A failing regression says why its change may be noise where that applies
        (:func:`~gpugauge.report.noise.hedge`: noisy or host-timed rounds, and a change within
        a few times the noise).
        """
        if decision.action is Action.FAIL:
            noise = None
            if decision.result.verdict is Verdict.REGRESSED:
                noise = hedge(decision.measurement, decision.result)
            maybe = f" ({noise}: the change may be noise)" if noise else ""
            pytest.fail(f"gpugauge gate: {decision.said}{maybe}", pytrace=False)
        if decision.said:
            self.session.note(decision.said)

    @property
    def _benchmark_disabled(self) -> bool:
        return self._benchmark is not None and self._benchmark.disabled

    def compare(
        self,
        baseline: Measurement,
        candidate: Measurement,
        *,
        title: str,
        labels: tuple[str, str] = ("baseline", "candidate"),
    ) -> Comparison:
        """Compare two timed results a benchmark holds; shown in the run's comparison table.

        A family's own comparisons are derived from the results present at the end
        (:attr:`Family.comparisons`); this is for a benchmark that has both sides in hand.
        """
        c = Comparison(title, baseline, candidate, *labels)
        self.session.adhoc_comparisons.append(c)
        return c
