"""Stored baselines: one JSON file per device class and family, samples included.

``baselines/<device-class>/<family>.json`` holds, per benchmark id, every timed round
(ms), the peak memory (bytes) and the energy per iteration (J), and, where the run
recorded a round's kernels (``--gauge-record-kernels``), each kernel's share of that round's
device time: a gate note then says when a result ran other main kernels than its baseline
(another cuDNN or cuBLAS algorithm) rather than leaving a change of speed unexplained.
Files are parsed as JSON only and validated (:mod:`gpugauge.regress.baseline_file`: the
format and its reader); a bad file is a :class:`BaselineError` naming it. A write is
checked before it happens by the reader that will read it back, on the very text to be
written: what that reader would refuse is never written, so a bad entry cannot make a
device class's later gates fail. Files go
only inside the store's folder: a device class or family that is empty, holds a path
separator or ``..``, or resolves outside the folder is refused. Writes go to a temporary
file renamed over the old one, so a failed run never leaves a half-written baseline, and
each file's read-merge-write runs under a lock, so two runs that update the same family at
once both keep their entries.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gpugauge.measure.environment import SCHEMA_VERSION
from gpugauge.regress.baseline_file import (
    BaselineError,
    Entry,
    KernelShare,
    checked_text,
    entry_problem,
    kernel_shares,
    parse_baseline,
    read_baseline,
)
from gpugauge.results.files import (
    atomic_write_json,  # noqa: F401 (tests import it here)
    atomic_write_text,
    folder_locked,
    name_problem,
)
from gpugauge.results.measurement import Measurement, injected, on_gpu
from gpugauge.results.metrics import METRICS, Kind
from gpugauge.results.runs import load_run


def entry_of(m: Measurement) -> Entry:
    """The storable numbers of a measurement: its metric readings and kernel shares."""
    kernels = kernel_shares(m.extra.get("kernels"))
    return Entry(m.id, m.spec.family, m.device_class, m.readings(), kernels=kernels)


def with_host(e: Entry, host: str) -> Entry:
    """A one-run entry with the host it ran on beside each samples metric."""
    hosts = {k: (host,) for k in e.readings if METRICS[k].kind is Kind.SAMPLES}
    return replace(e, run_hosts=hosts)


def entries_of_benchmark_json(path: Path, accept_regressed: bool = False) -> list[Entry]:
    """Entries of a gpugauge run saved by pytest-benchmark (json or autosave).

    A result that could not be stored as a baseline (one with no metric) is a
    BaselineError naming the run and the result, before anything is written. So is a
    run whose gate failed a result as regressed, unless ``accept_regressed`` (a slowdown
    meant by the build: its run becomes the reference on purpose).
    """
    run = load_run(path)
    if run.refused:  # a baseline is recorded from whole runs: a reference must not lack one
        raise BaselineError(f"{run.refused[0]}; record baselines from runs read whole")
    early = run.outcome.ended_early() if run.outcome is not None else None
    if early:
        raise BaselineError(f"{path}: {early}; record baselines from whole runs")
    slowed = [m.id for m in run.measurements if injected(m)]
    if slowed:
        raise BaselineError(
            f"{path}: {len(slowed)} result(s) have work injected on purpose (gpugauge "
            f"check's slowdown), e.g. {slowed[0]!r}: they measure the injection, not the "
            "build; record baselines from runs without it"
        )
    unsettled = [m.id for m in run.measurements if _off_sustained_clock(m, run.profile)]
    if unsettled:
        raise BaselineError(
            f"{path}: {len(unsettled)} GPU result(s) were not timed at the sustained clock "
            f"(profile {run.profile}; a smoke run does not wait for the clock to settle, a burst "
            f"run times its boost), e.g. {unsettled[0]!r}: as references they would flag every "
            "later night; record baselines from --gauge-profile seed or full runs"
        )
    regressed = run.regressed
    if regressed and not accept_regressed:  # the plugin writes none after a failure
        raise BaselineError(
            f"{path}: its gate failed {len(regressed)} result(s) as regressed, e.g. "
            f"{regressed[0]!r}: as a baseline it would pass that slowdown on every later "
            "night; record baselines from runs whose gate passed, or pass "
            "--accept-regressed where the build meant the slowdown"
        )
    for rid in regressed:
        print(f"gpugauge baseline: {path}: {rid} regressed; its time is the reference now")
    host = run.host or ""
    entries = [with_host(entry_of(m), host) for m in run.measurements]
    for e in entries:
        problem = entry_problem(e)
        if problem:
            raise BaselineError(f"{path}: {e.id!r} cannot be a baseline: {problem}")
    return entries


def _off_sustained_clock(m: Measurement, profile: str | None) -> bool:
    """Whether a GPU result was timed outside the sustained regime that references hold."""
    if not on_gpu([m]) or m.timing is None:
        return False
    return profile == "smoke" or m.timing.regime != "sustained"


def combine_runs(
    runs: list[list[Entry]], stored: Mapping[tuple[str, str, str], Entry] | None = None
) -> list[Entry]:
    """One entry per benchmark from several runs given oldest first.

    A samples metric keeps the samples of its *central* run, the one whose median lies
    nearest the middle of the recorded runs' range (the newest among equals), and every
    run's median, so that the gate measures a new run from the middle of the run-to-run
    noise it allows, not from one edge of it. A judged value metric (a peak, an energy
    window) keeps its central run's reading and every run's, the range the gate accepts:
    two hosts' cuDNN can take workspaces of two sizes, and a baseline that kept one would
    call the other a regression. One the class never judges (a diagnostic, a per-host
    share) keeps the newest run's. The kernels are those of the central run of time (none
    if it did not record them), so that they belong to the rounds kept.

    ``stored``: committed entries by (device class, family, id) that the runs are added to
    (``gpugauge baseline --add``, a run from another host or lease): each counts as the runs
    it was recorded from, its central run's samples and every run's median, oldest first;
    the new runs' medians follow.
    """
    seen: dict[tuple[str, str, str], list[Entry]] = {}
    for run in runs:
        for e in run:
            seen.setdefault((e.device_class, e.family, e.id), []).append(e)
    stored = stored or {}
    out = []
    for key, entries in seen.items():
        prior = stored.get(key)
        out.append(_combined(entries if prior is None else [prior, *entries], prior))
    return out


def _run_hosts(entries: list[Entry], name: str, prior: Entry | None) -> tuple[str, ...]:
    """Each recorded run's host, in :func:`_central`'s order ("" where unknown)."""

    def one(e: Entry) -> str:
        hosts = e.run_hosts.get(name, ())
        return hosts[0] if len(hosts) == 1 else ""

    stored = _stored_runs(prior, name)
    if stored:
        kept = prior.run_hosts.get(name, ()) if prior is not None else ()
        old = kept if len(kept) == len(stored) else ("",) * len(stored)
        return (*old, *(one(e) for e in entries[1:]))
    return tuple(one(e) for e in entries)


def _central(
    entries: list[Entry], name: str, prior: Entry | None = None
) -> tuple[Entry, tuple[float, ...]]:
    """The entry whose median of ``name`` is nearest the middle of all medians; the medians.

    ``prior``: a stored entry, ``entries[0]``, whose runs but the central one kept no
    samples: their medians count in the range, in their stored order, but cannot be the
    centre. The medians come back oldest first.
    """
    medians = tuple(statistics.median(e.readings[name]) for e in entries)
    stored = _stored_runs(prior, name)
    every = stored + medians[1:] if stored else medians
    middle = (min(every) + max(every)) / 2
    gaps = [abs(m - middle) for m in medians]
    nearest = min(gaps)
    # the newest of those nearest, equal up to rounding: with two runs, the newest
    best = max(
        i
        for i, g in enumerate(gaps)
        if math.isclose(g, nearest, rel_tol=1e-9, abs_tol=1e-12 * max(every))
    )
    return entries[best], every


def _stored_runs(prior: Entry | None, name: str) -> tuple[float, ...]:
    """A stored entry's run medians (oldest first); () for none or a one-run entry.

    Its samples are its central run's, so their median must be one of them: a file whose
    samples and run medians disagree (edited by hand, or stale) is a BaselineError rather
    than a silently wrong range.
    """
    if prior is None or name not in prior.readings:
        return ()
    medians = tuple(prior.run_medians.get(name, ()))
    own = statistics.median(prior.readings[name])
    if medians and not any(math.isclose(m, own, rel_tol=1e-9) for m in medians):
        raise BaselineError(
            f"{prior.device_class}/{prior.family} {prior.id!r}: the median of its {name} "
            f"samples ({own:g}) is none of its run medians {list(medians)}; record it anew"
        )
    return medians


def _combined(entries: list[Entry], prior: Entry | None = None) -> Entry:
    newest = entries[-1]
    readings: dict[str, tuple[float, ...]] = {}
    run_medians: dict[str, tuple[float, ...]] = {}
    run_hosts: dict[str, tuple[str, ...]] = {}
    kernels: tuple[KernelShare, ...] = ()  # the time reference's own, or none
    for name in METRICS:
        holding = [e for e in entries if name in e.readings]
        if not holding:
            continue
        m = METRICS[name]
        if m.kind is not Kind.SAMPLES and (not m.judged or m.per_host):
            readings[name] = holding[-1].readings[name]  # no class judges it: the newest
            continue
        stored = prior if holding[0] is prior else None
        central, medians = _central(holding, name, stored)
        readings[name] = central.readings[name]
        if len(medians) > 1:
            run_medians[name] = medians
        if m.kind is not Kind.SAMPLES:
            continue
        hosts = _run_hosts(holding, name, stored)
        if any(hosts) and len(hosts) == len(medians):
            run_hosts[name] = hosts
        if name == "time":
            kernels = central.kernels
    return replace(
        newest, readings=readings, run_medians=run_medians, kernels=kernels, run_hosts=run_hosts
    )


UNNAMED_RUNS = "(earlier runs, not named)"


def _provenance(listed: list[str], meta: dict[str, Any], keeps_old: bool) -> dict[str, Any]:
    """``recorded_from`` for a write: the new runs, after the old list where that still holds.

    A write that replaces every entry with new runs alone says where those came from; one
    that keeps old entries, or old runs inside its entries (``--add``), keeps the file's old
    list (``listed``) in front (:data:`UNNAMED_RUNS` where the file named none), so no
    entry loses its provenance.
    """
    new = [str(x) for x in meta.get("recorded_from", [])]
    old = (listed or [UNNAMED_RUNS]) if keeps_old else []
    both = old + [x for x in new if x not in old]
    return {"recorded_from": both} if both else {}


class BaselineStore:
    """The ``baselines/`` folder: ``<device-class>/<family>.json``."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._cache: dict[tuple[str, str], dict[str, Entry]] = {}

    def path(self, device_cls: str, family: str) -> Path:
        """Where one device class's baseline of one family lives; always inside the root.

        A device class or family that is not a plain name, or a place that resolves outside
        the root (a link), is a BaselineError.
        """
        for what, name in (("device class", device_cls), ("family", family)):
            problem = name_problem(name)
            if problem:
                raise BaselineError(f"baseline of {what} {name!r}: the name {problem}")
        p = self.root / device_cls / f"{family}.json"
        root = self.root.resolve()
        if not p.resolve().is_relative_to(root):
            raise BaselineError(f"{p}: resolves to {p.resolve()}, outside the baselines {root}")
        return p

    def load(self, device_cls: str, family: str) -> dict[str, Entry] | None:
        """The baseline entries, or None where none was recorded for this device class."""
        key = (device_cls, family)
        if key not in self._cache:
            p = self.path(device_cls, family)
            if not p.exists():
                return None
            self._cache[key] = parse_baseline(p, key)
        return self._cache[key]

    def validate_all(self) -> int:
        """Parse every baseline file (raises BaselineError on the first bad one)."""
        files = sorted(self.root.glob("*/*.json"))
        for p in files:
            parse_baseline(p, (p.parent.name, p.stem))
        return len(files)

    def write(
        self, entries: Iterable[Entry], meta: dict[str, Any], added: bool = False
    ) -> list[Path]:
        """Merge entries into their files (others in the file are kept).

        ``added``: the entries hold the stored runs too (:func:`combine_runs` with
        ``stored``), so the file's ``recorded_from`` is kept and the new runs appended.

        Per file, the read of the old entries, the merge and the atomic write happen under
        one lock (on the device class's folder: :func:`folder_locked`), so concurrent
        writers of the same family never lose each other's entries.
        A root that exists but is not a directory is a BaselineError, before any write;
        so is a file its reader would refuse (:func:`checked_text`), before it is written.
        """
        if self.root.exists() and not self.root.is_dir():
            raise BaselineError(f"baselines folder {self.root}: not a directory")
        groups: dict[tuple[str, str], list[Entry]] = {}
        for e in entries:
            groups.setdefault((e.device_class, e.family), []).append(e)
        written = []
        for (dev, fam), group in sorted(groups.items()):
            p = self.path(dev, fam)
            with folder_locked(p.parent):
                exists = p.exists()
                old, listed = read_baseline(p, (dev, fam)) if exists else ({}, [])
                merged = {**old, **{e.id: e for e in group}}
                keeps_old = exists and (added or bool(set(old) - {e.id for e in group}))
                doc = {
                    "schema_version": SCHEMA_VERSION,
                    "device_class": dev,
                    "family": fam,
                    "written": datetime.now(UTC).isoformat(timespec="seconds"),
                    **meta,
                    **_provenance(listed, meta, keeps_old),
                    "benchmarks": {k: merged[k].as_dict() for k in sorted(merged)},
                }
                atomic_write_text(p, checked_text(doc, p, (dev, fam)))
            self._cache.pop((dev, fam), None)
            written.append(p)
        return written
