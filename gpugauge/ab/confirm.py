"""``gpugauge confirm RUN.json``: a gated run's results, decided by A/Bs on this GPU.

A host the history knows too few runs of is judged against the class baseline, allowed
the host-to-host spread on top of the baseline's own allowance: 6.5% on an H100 whose
history is empty, so a 3% slowdown passes; a known host's history allows three times its
run-to-run spread. A same-GPU A/B sees 1% on any host. So ``confirm`` A/Bs on this GPU
every GPU-busy result of 0.1 ms or more, every night, whatever its ratio; every other
result that passed above ``1 + floor``; and one whose time alone *regressed* against its
class on a new host (this host's speed, perhaps, not the code's). The base build is
the commit that recorded the class baseline (the last commit that wrote
``baselines/<class>/<family>.json``), and the verdict of that A/B is the one that counts:
a case it finds slower fails the job, and a regression it clears passes.

Within a time budget the regressed results go first (the job's status hangs on them),
then the device-paced ones (a round of 1 ms or more, and a GPU-busy share of at least 80%
where the case reads one): their ratio is the GPU's work, where a 0.04 ms ReLU's is as much
its launch path's. Within each, the cheapest A/B goes first, by the test's own seconds in
the gated run, so that the budget confirms as many as it can: on an H200 one layer_fit
split cost as much as nine VGG-16 steps (docs/lab/ab-evidence.md). The rest follow, the most
milliseconds lost per round first.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpugauge.ab.sides import SideError, git
from gpugauge.ab.verdict import MIN_EFFECT
from gpugauge.judging.judge import regressed_on_new_host
from gpugauge.measure.busy import HOST_BOUND_BELOW
from gpugauge.measure.clocks import CudaEventClock
from gpugauge.results.files import read_json
from gpugauge.results.measurement import Measurement
from gpugauge.results.runs import load_run
from gpugauge.results.verdicts import Basis, GateResult, Verdict

# A round this long is the GPU's work: a launch's ~10 us is under 1% of it.
DEVICE_PACED_MS = 1.0
# A GPU-timed round this long, the GPU busy, is worth an A/B every night, whatever its
# ratio: a 3% slowdown on a host 3% faster than its class reads 1.00x against it, and a
# host's history allows three times its spread. Shorter timed rounds are their launch path's as
# much as the GPU's.
GPU_BUSY_MS = 0.1


@dataclass(frozen=True)
class Borderline:
    """A passed result worth an A/B: its id, test node id, family, class and time ratio.

    ``ms`` is its median timed round (ms; 0 where not saved); ``busy`` its GPU-busy share, where
    the case reads one; ``test_s`` its test's wall seconds in the gated run, where saved:
    roughly what an A/B of it costs (both sides set it up; each skips its extras).
    """

    id: str
    nodeid: str
    family: str
    device_class: str
    ratio: float
    ms: float = 0.0
    busy: float | None = None
    test_s: float | None = None
    regressed: bool = False  # against its class on a new host: fails unless an A/B clears it

    @property
    def lost_ms(self) -> float:
        """The time a round lost against its reference, ms."""
        return self.ms * (1 - 1 / self.ratio)

    @property
    def device_paced(self) -> bool:
        """Whether its ratio is the GPU's work: 1 ms timed rounds or more, the GPU busy."""
        busy_ok = self.busy is None or self.busy >= HOST_BOUND_BELOW
        return self.ms >= DEVICE_PACED_MS and busy_ok


def borderline(path: Path, floor: float = MIN_EFFECT) -> list[Borderline]:
    """The results of a gated run a same-GPU A/B should decide.

    Each GPU-busy result of :data:`GPU_BUSY_MS` or more that passed, whatever its ratio
    (a class allows a new host the host-to-host spread, a host's history
    three times its run-to-run spread, and an A/B 1%); each other result that passed above
    ``1 + floor`` (a step its host paces too: an A/B of it says "need more samples" where
    its blocks scatter, and slower where they do not); and each that regressed against a
    class baseline on a new host in its time alone
    (:func:`~gpugauge.judging.judge.regressed_on_new_host`: the class cannot tell this
    host's speed from the code's). A result decided by an A/B already is left
    out (a second ``confirm`` of a run A/Bs nothing again); so is one that regressed
    otherwise (it fails, whatever an A/B says), one with no committed baseline to A/B
    against, or one with no time check.
    """
    run = load_run(path)
    data = read_json(path)
    nodeids, seconds = result_nodeids(data), _test_seconds(data)
    out = []
    for m in run.measurements:
        raw = run.verdicts.get(m.id)
        result = None if raw is None else GateResult.from_dict(raw, m.spec.family, m.device_class)
        check = None if result is None else result.check("time")
        if result is None or check is None:
            continue
        regressed = result.verdict is Verdict.REGRESSED
        if regressed and not regressed_on_new_host(result):
            continue
        if check.basis is Basis.SAME_GPU_AB:
            continue  # decided by an A/B already: a second confirm of a run A/Bs nothing again
        if check.basis is Basis.CLASS_HISTORY:
            continue  # no committed baseline: no commit to A/B against
        busy = m.values.get("gpu_busy")
        if (check.ratio > 1 + floor or _gpu_busy(m, busy)) and m.id in nodeids:
            node = nodeids[m.id]
            out.append(
                Borderline(
                    m.id,
                    node,
                    m.spec.family,
                    m.device_class,
                    check.ratio,
                    check.current,
                    busy,
                    seconds.get(node),
                    regressed,
                )
            )
    return out


def _gpu_busy(m: Measurement, busy: float | None) -> bool:
    """Whether ``m``'s timed rounds are the GPU's work: device-timed, long enough, the GPU busy."""
    timing = m.timing
    if timing is None or timing.clock != CudaEventClock.name or not timing.device_ms:
        return False
    ms = statistics.median(timing.device_ms)
    return ms >= GPU_BUSY_MS and (busy is None or busy >= HOST_BOUND_BELOW)


def _test_seconds(data: dict[str, Any]) -> dict[str, float]:
    """Each test's wall seconds in the run, by node id (none where an older gpugauge saved it)."""
    saved = (data.get("gpugauge") or {}).get("test_seconds") or {}
    return {str(k): float(v) for k, v in saved.items()}  # load_run checked them


def result_nodeids(data: dict[str, Any]) -> dict[str, str]:
    """Each result's test node id, from pytest-benchmark's ``fullname``, by result id.

    The node id is what an A/B's case is, whatever the result's id: a spec's id for a
    family's case, the whole node id for ``gauge(fn)``.
    """
    out = {}
    for bench in data.get("benchmarks", []):
        info = bench.get("extra_info") or {}
        if isinstance(info, dict) and info.get("id") and bench.get("fullname"):
            out[str(info["id"])] = str(bench["fullname"])
    return out


def reference_commit(repo: Path, baselines: Path, device_class: str, family: str) -> str:
    """The commit that last wrote a class baseline: the build that recorded its numbers."""
    deepened(repo)
    target = baselines / device_class / f"{family}.json"
    try:  # git reads a relative path from the checkout's top (git -C)
        (target if target.is_absolute() else repo / target).resolve().relative_to(repo.resolve())
    except ValueError:
        raise SideError(
            f"{target}: outside the checkout {repo}, so no commit of it wrote it: confirm "
            "A/Bs against the commit that recorded a baseline, so --baselines-dir must be "
            "a folder of this checkout, committed"
        ) from None
    found = git(repo, "log", "-1", "--format=%H", "--", str(target))
    if not found:
        raise SideError(f"{target}: no commit wrote it (not a committed baseline)")
    return found


def deepened(repo: Path) -> None:
    """Fetch the whole history into a shallow checkout (an ephemeral runner's default).

    The commit that recorded a baseline is further back than a shallow clone reaches;
    SideError where the fetch fails (no remote, no network).
    """
    if git(repo, "rev-parse", "--is-shallow-repository") != "true":
        return
    print("gpugauge confirm: the checkout is shallow; fetching its history", flush=True)
    try:
        git(repo, "fetch", "--quiet", "--unshallow")
        why = "no remote to fetch it from"  # git fetches nothing and says nothing
    except SideError as err:
        why = str(err)
    # still shallow, its oldest commit would seem to have written every baseline
    if git(repo, "rev-parse", "--is-shallow-repository") == "true":
        raise SideError(
            "the checkout is shallow and its history could not be fetched, so the commit "
            "that recorded the baselines is not in it (check out with full history, e.g. "
            f"actions/checkout's fetch-depth: 0): {why}"
        )


def by_reference(
    repo: Path, baselines: Path, cases: Iterable[Borderline]
) -> dict[str, list[Borderline]]:
    """The borderline cases grouped by the commit their class baseline came from.

    ``baselines`` as the command line gives it: relative to this process's folder, which
    may lie below ``repo``'s top (git reads a relative path from the top).
    """
    groups: dict[str, list[Borderline]] = {}
    folder = baselines.resolve()
    for c in cases:
        groups.setdefault(reference_commit(repo, folder, c.device_class, c.family), []).append(c)
    return groups


def in_order(groups: dict[str, list[Borderline]]) -> list[tuple[str, list[Borderline]]]:
    """The A/Bs to run: tier by tier (:func:`first`), each tier reference by reference.

    A reference's cases of consecutive tiers make one A/B (a tier starts with the reference
    the last one ended with); a second reference's regressed result is A/B'd before the
    first reference's device-paced ones, at the cost of a start for each switch.
    """
    out: list[tuple[str, list[Borderline]]] = []
    for tier in sorted({first(c)[0] for group in groups.values() for c in group}):
        here = {
            r: sorted((c for c in g if first(c)[0] == tier), key=first) for r, g in groups.items()
        }
        last = out[-1][0] if out else None
        # each reference by its cheapest case of this tier: an earlier tier's cheap case
        # must not put a dear one before another reference's cheap one
        for ref in sorted(
            (r for r in here if here[r]), key=lambda r: (r != last, first(here[r][0]), r)
        ):
            if out and out[-1][0] == ref:
                out[-1][1].extend(here[ref])
            else:
                out.append((ref, here[ref]))
    return out


def first(c: Borderline) -> tuple[int, float, float, float]:
    """Sort key: regressed results, then device-paced ones, each the cheapest test first.

    A regressed result fails the job unless its A/B clears it; a result whose cost was not
    saved comes after those whose cost was; the other results follow; ties go to the most
    milliseconds lost, then the ratio.
    """
    tier = 0 if c.regressed else 1 if c.device_paced else 2
    cost = c.test_s if tier < 2 and c.test_s is not None else float("inf")
    return (tier, cost, -c.lost_ms, -c.ratio)
