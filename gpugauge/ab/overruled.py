"""Gated results overruled by a confirming A/B: written into the run file and its history.

``gpugauge confirm`` A/Bs a gated run's borderline results; the A/B's time check then
decides each of them (:func:`gpugauge.judging.judge.overruled`), and says so: the run file's
stored verdicts and its saved gate table are rewritten (atomically), and, where the run was
added to a results history, the history keeps the A/B with every pair, and the verdict it
gave becomes the stored result's (a slower result stops being a reference for later runs).
The report drawn from the file afterwards shows the same verdict as the job's exit status.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpugauge.ab.confirm import result_nodeids
from gpugauge.ab.result import ABReport, CaseAB
from gpugauge.history.records import ABRecord
from gpugauge.judging.judge import overruled
from gpugauge.measure.busy import host_bound_of
from gpugauge.report.noise import run_gate_table
from gpugauge.results.files import FileError, atomic_write_json, read_json, writable_problem
from gpugauge.results.runs import SavedRun, load_run
from gpugauge.results.verdicts import GateResult, Verdict

NOT_RUN = "in the baseline but not run: "  # the saved gate table's last line, kept as it was

# a cleared class regression of a host-paced step says why (undecided_host_paced)
HOST_PACED = (
    "its host paces this step, so on a new host its time follows the host's CPU as much as "
    "the code; the A/B's interval does not lie above 1"
)


@dataclass(frozen=True)
class Overruled:
    """One result overruled by an A/B (:func:`overruled`): its verdict now, and the A/B."""

    result: GateResult
    case: CaseAB
    base_commit: str


def check_rewritable(run: Path) -> None:
    """FileError naming ``run`` where its verdicts could not be written back.

    Asked before any A/B starts (one costs minutes of GPU time): the file must be one this
    process may write (not read-only, not immutable) in a folder where its replacement can
    be staged.
    """
    problem = _unwritable(run)
    if problem is not None:
        raise FileError(f"{run}: the A/Bs' verdicts could not be written into it: {problem}")


def _unwritable(path: Path) -> str | None:
    """Why the existing file ``path`` could not be changed in place or replaced, or None."""
    if not os.access(path, os.W_OK):
        return "read-only (no write permission, or an immutable file)"
    return writable_problem(path.parent)


def decided(
    run: Path, base_commit: str, report: ABReport, *, write: bool = True
) -> list[Overruled]:
    """Each A/B'd result of ``run`` with its verdict decided by its A/B; the file rewritten.

    A case the A/B could not decide (no interval: a side skipped or failed it) keeps the
    verdict it had. ``write=False`` only says what the verdicts are (:func:`write_verdicts`
    writes them, into the run and into its copies).
    """
    saved = load_run(run)
    nodeids = result_nodeids(read_json(run))
    cases = {c.nodeid: c for c in report.cases}
    out = []
    for m in saved.measurements:
        case = cases.get(nodeids.get(m.id, ""))
        if case is None or case.check is None or m.id not in saved.verdicts:
            continue
        before = GateResult.from_dict(saved.verdicts[m.id], m.spec.family, m.device_class)
        by_allowance = clears(before, case)
        by_host_pace = host_bound_of(m.extra) is True and undecided_host_paced(before, case)
        if not (by_allowance or by_host_pace):
            continue
        note = f"decided by a same-GPU A/B against {base_commit[:10]}"
        if not by_allowance:
            note += f"; {HOST_PACED}"
        out.append(Overruled(overruled(before, case.check, note), case, base_commit))
    if out and write:
        write_verdicts(run, out)
    return out


def clears(before: GateResult, case: CaseAB) -> bool:
    """Whether ``case``'s A/B may decide a result whose class verdict was ``before``.

    Always, but for a class regression: an A/B that could not decide clears it only where
    its CI over every round (the processes' spread counted) and each round's own CI lie
    under the class's allowance (two rounds that disagree say more than their mean), and a
    "faster" only where two rounds or more gave it (one pair of processes' own speed can
    read 2% faster); else it stands (but see :func:`undecided_host_paced`).
    """
    old, check = before.check("time"), case.check
    if before.verdict is not Verdict.REGRESSED or old is None or check is None:
        return True
    if check.verdict is Verdict.IMPROVED:
        return len(case.paired_rounds) >= 2
    if check.verdict is not Verdict.INCONCLUSIVE:
        return True
    allowed = 1 + old.tolerance
    own = [r.round_ratio for r in case.paired_rounds]
    rounds_rule_it_out = all(r is not None and r.ci_high < allowed for r in own)
    return check.ci_high < allowed and rounds_rule_it_out


def undecided_host_paced(before: GateResult, case: CaseAB) -> bool:
    """Whether a class regression of a host-paced step meets an A/B that saw no change in it.

    Asked of a step whose GPU is busy under 80% of its wall: it times the host's CPU as
    much as the code. On a new host its class baseline, recorded on another host, cannot
    tell the two apart: H200 hosts read the eager LeNet step from 0.54x to 1.17x its
    class. An A/B's intervals on such a step reach 10-60% either side in A/As, so they
    seldom lie under the class's allowance. The result is inconclusive rather than
    regressed where the undecided A/B ran two rounds or more, each of at least the
    schedule's first look (3 pairs), its 95% interval over every round does not lie above
    1, and no round's own 99.8% interval lies above 1 (a round that reads it slower on its
    own keeps the regression; one that reads it faster sees no slowdown). A change the A/B
    can see reads slower and stands. Inconclusive results are never references, so the
    host's history does not learn the step, and each night A/Bs it again. In synthetic
    A/Bs (1% between processes) an unchanged step passes 98-99% of those nights, none
    without the rule; a 10% slowdown fails 88% of them at 15% noise a pair, and 15% at
    50%. Replayed on an H200 A/A's pairs, it passes four of five such steps
    (docs/lab/ab-evidence.md).
    """
    check, rounds = case.check, case.paired_rounds
    if before.verdict is not Verdict.REGRESSED or check is None:
        return False
    if check.verdict is not Verdict.INCONCLUSIVE or len(rounds) < 2:
        return False
    if any(len(r.pairs) < case.schedule.min_pairs for r in rounds):
        return False
    pooled = case.same_ratio
    own = [r.round_ratio for r in rounds]
    return (
        pooled is not None
        and pooled.ci_low <= 1
        and all(r is not None and r.ci_low <= 1 for r in own)
    )


def still_regressed(run: Path) -> list[str]:
    """The ids of ``run``'s results whose stored verdict is regressed (after any A/B).

    A gated result the reader leaves out (:attr:`SavedRun.refused`: a reading or field it
    cannot read, a second copy of an id) counts too where its stored verdict says regressed
    or cannot be read: it failed its test, and confirm's exit status, the job's, must not
    pass it unseen.
    """
    saved = load_run(run)
    out = saved.regressed
    passed = {v.value for v in Verdict} - {Verdict.REGRESSED.value}
    for rid, said in saved.refused_verdicts.items():
        if said not in passed and rid not in out:
            out.append(rid)
    return out


def write_verdicts(path: Path, overruled_results: Sequence[Overruled]) -> None:
    """The decided verdicts written into the run file ``path`` and its saved gate table."""
    data = read_json(path)
    now = {s.result.id: s.result.as_dict() for s in overruled_results}
    for bench in data.get("benchmarks", []):
        info = bench.get("extra_info") or {}
        if str(info.get("id")) in now and isinstance(info.get("gate"), dict):
            info["gate"] = now[str(info["id"])]
    _retable(data, load_run(path))
    atomic_write_json(path, data)


def copies(run: Path, storage: Path, newest: int = 20) -> list[Path]:
    """pytest-benchmark's autosaved copies of ``run`` under ``storage`` (same history run id).

    A nightly saves its run twice (``--benchmark-json`` and ``--benchmark-autosave``); both
    must say what the A/B decided. Only the ``newest`` files are read.
    """
    own = (read_json(run).get("gpugauge") or {}).get("history_run_id")
    if not own or not storage.is_dir():
        return []
    found = sorted(storage.rglob("*.json"), key=lambda p: p.stat().st_mtime, reverse=True)
    out = []
    for path in found[:newest]:
        if path.resolve() == run.resolve():
            continue
        try:
            data = read_json(path)
        except (OSError, ValueError):
            continue  # not a run of ours: not a copy
        if isinstance(data, dict) and (data.get("gpugauge") or {}).get("history_run_id") == own:
            out.append(path)
    return out


def _retable(data: dict[str, Any], saved: SavedRun) -> None:
    """The run file's saved gate table, drawn again from the verdicts it now stores."""
    tables = (data.get("gpugauge") or {}).get("tables")
    if not isinstance(tables, dict) or "gate" not in tables:
        return
    gates = {}
    for bench in data.get("benchmarks", []):
        info = bench.get("extra_info") or {}
        if isinstance(info.get("gate"), dict):
            gates[str(info.get("id"))] = info["gate"]
    ms = [m for m in saved.measurements if m.id in gates]
    results = [GateResult.from_dict(gates[m.id], m.spec.family, m.device_class) for m in ms]
    old = str(tables["gate"])
    missing = old.split(NOT_RUN, 1)[1].strip().split(", ") if NOT_RUN in old else []
    tables["gate"] = run_gate_table(results, ms, missing)


def history_problem(target: str, run_id: str) -> str | None:
    """Why the A/Bs could not be kept with run ``run_id`` in the history ``target``, or None.

    Asked before any A/B, and again by :func:`kept`: a SQLite file that is missing is not
    created (an empty history cannot hold the run), and one this process may not write,
    or whose folder it may not write (SQLite's journal), is said so. Opening a history of
    an older schema upgrades it, as any writer does.
    """
    from gpugauge.history.records import HistoryError
    from gpugauge.history.store import History
    from gpugauge.history.targets import is_local, redact

    if is_local(target):
        path = Path(target)
        if not path.is_file():
            return f"history {target}: no such file"
        problem = _unwritable(path)
        if problem is not None:
            return f"history {target}: {problem}"
    try:
        with History.open(target) as history:
            if not history.has_run(run_id):
                return f"history {redact(target)}: holds no run {run_id!r}"
    except HistoryError as err:
        return str(err)
    return None


def kept(target: str, run_id: str, overruled_results: Sequence[Overruled]) -> int:
    """Keep each A/B, with its pairs and the verdict it gave, in the run's history.

    How many were kept; HistoryError where the history cannot be written or lacks the run
    (a missing SQLite file is not created: :func:`history_problem`).
    """
    from gpugauge.history.host_checks import accepted
    from gpugauge.history.records import HistoryError
    from gpugauge.history.store import History

    problem = history_problem(target, run_id)
    if problem is not None:
        raise HistoryError(problem)
    with History.open(target) as history:
        for s in overruled_results:
            check = s.case.check
            assert check is not None
            history.record_ab(
                ABRecord(
                    run_id,
                    s.result.id,
                    s.result.device_class,
                    s.base_commit,
                    check.verdict.value,
                    check.ratio,
                    check.ci_low,
                    check.ci_high,
                    check.tolerance,
                    tuple(
                        p.as_dict() | {"round": k}
                        for k, r in enumerate(s.case.rounds, 1)
                        for p in r.pairs
                    ),
                ),
                result_verdict=s.result.verdict.value,
                accepted=accepted(s.result.verdict),
                reference=f"{check.basis} against {s.base_commit[:10]}",
                note=s.result.note,
            )
    return len(overruled_results)
