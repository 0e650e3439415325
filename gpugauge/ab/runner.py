"""One round of an A/B: both sides' pytest at once, one of them on the GPU at a time.

Each side is ``python -m pytest -p _gpugauge_ab_worker ARGS`` in its own checkout and
process group (:mod:`gpugauge.ab.worker`). The coordinator here holds a local socket to
both and runs the tests in lock-step: for a test both sides have, first one side runs its
setup up to its timing call and waits, then the other; then blocks alternate, base first in
one pair and head first in the next (the first side alternates from test to test too), until
the paired test decides (:class:`~gpugauge.ab.verdict.Schedule`); then each side in turn
finishes its test. Every pair counts, whatever its blocks' SM clocks: each pair keeps
them, and alternating the order cancels what the order does to them. A test
only one side has, or one whose timing calls the other side does not make, runs on that
side alone with the GPU to itself.

On Ctrl-C or SIGTERM (under :func:`~gpugauge.check.runs.sigterm_as_interrupt`) both sides'
process groups are stopped, their partial files removed, and the interrupt raised; the
sides also die with the coordinator if it is killed outright (``PR_SET_PDEATHSIG``).
"""

from __future__ import annotations

import contextlib
import re
import subprocess
import threading
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from gpugauge.ab.claims import Claims
from gpugauge.ab.config import ABConfig, forget_earlier
from gpugauge.ab.launch import (
    KERNELS,
    LAUNCH_EACH,
    SIDE_SETTINGS,
    SILENT_GRACE_S,
    ABError,
    Note,
    Side,
    SideSilent,
    connect,
    exchange,
    finish,
    listening,
    start_side,
    stop,
)
from gpugauge.ab.pairs import Block, Pair
from gpugauge.ab.render import eta_s, progress_line
from gpugauge.ab.result import (
    PHASES,
    UNTIMED_SKIPPED,
    ABReport,
    CaseAB,
    other_side,
)
from gpugauge.ab.sides import Checkout, SideError
from gpugauge.check.runs import log_tail
from gpugauge.core.phrasing import plural


class _Failed(Exception):
    """A side's timed rounds raised in a block (its test fails, as it would alone)."""


class BlockFailed(Exception):
    """A side's block failed: which side, which sides had started, the pairs before it."""

    def __init__(self, side: str, started: dict[str, bool], pairs: tuple[Pair, ...]) -> None:
        super().__init__(side)
        self.side, self.started, self.pairs = side, started, pairs


def case_id(nodeid: str) -> str:
    """A test's case id as its result names it.

    The parameter id (the spec id), else the node id, which ``gauge(fn)`` names a result by.
    """
    if nodeid.endswith("]") and "[" in nodeid:
        return nodeid[nodeid.index("[") + 1 : -1]
    return nodeid


class Coordinator:
    """Runs one A/B over two checkouts; :meth:`run` returns its report."""

    def __init__(
        self,
        cfg: ABConfig,
        sides: dict[str, Checkout],
        note: Note = print,
        cwd: Path | None = None,
        claims: Claims | None = None,
    ) -> None:
        self.cfg = cfg
        self.checkouts = sides
        self.note = note
        self.cwd = cwd  # relative place in each checkout to run from (None: its root)
        # the A/B spread over a host's GPUs: the tests this GPU takes (round 1), and the stop
        self.claims = claims
        self._flip = not cfg.base_starts  # True: head's block first in the next test
        self._cases: list[CaseAB] = []  # the cases finished so far, in order
        self._untimed: set[str] = set()  # node ids either side marks untimed
        self._launched: set[str] = set()  # node ids either side marks launched
        self._ready_at: float | None = None  # monotonic: both sides at their first test

    def settings(
        self, role: str, as_is: bool = False
    ) -> tuple[tuple[tuple[str, ...], object], ...]:
        """The options the side running build ``role`` takes, by dest.

        The profile where one was asked for, and the build's setup memo (its answers kept
        for its later rounds). A later round records no kernels: a case keeps its first
        round's (a profiled round per side and test, for what the first round said
        already). A side run ``as_is`` (a gated run) takes the profile, the memo and
        ``--gauge-launch-each`` alone.
        """
        out = (LAUNCH_EACH,) if as_is else SIDE_SETTINGS
        if self.cfg.round > 1:
            out = tuple((dests, False if KERNELS in dests else v) for dests, v in out)
        if self.cfg.profile is not None:
            out = (*out, (("profile", "gauge_profile"), self.cfg.profile))
        if self.cfg.memo is not None:
            out = (*out, (("gauge_setup_memo",), str((self.cfg.memo / role).absolute())))
        return out

    @property
    def _stopping(self) -> threading.Event | None:
        return None if self.claims is None else self.claims.stop

    def _takes(self, nodeid: str) -> bool:
        """Whether this GPU runs ``nodeid``: always, but where another GPU took it first."""
        return self.claims is None or self.claims.take(nodeid, str(self.cfg.gpu))

    def _role(self, name: str) -> str:
        """The build that the process in ``name``'s place runs."""
        return other_side(name) if self.cfg.exchanged else name

    # ----- the lock-step
    def run(self) -> ABReport:
        """Run both sides to their ends; the report of every case."""
        self.cfg.out.mkdir(parents=True, exist_ok=True)
        t0 = time.monotonic()
        sides: dict[str, Side] = {}
        with listening() as (listener, channel):
            try:
                for name in ("base", "head") if self.cfg.base_starts else ("head", "base"):
                    role = self._role(name)
                    args = (*self.cfg.pytest_args, *self.cfg.side_args.get(role, ()))
                    as_is = self.cfg.head_as_is and role == "head"
                    sides[name] = start_side(
                        name,
                        self.checkouts[role],
                        args,
                        self.cfg.out,
                        channel,
                        self.settings(role, as_is),
                        self.cwd,
                        self.note,
                        role=role,
                        as_is=as_is,
                        gpu=self.cfg.gpu,
                        follows=role == "base",
                    )
                    sides[name].stopping = self._stopping
                connect(listener, sides, self._stopping)
                ends = self.cfg.budget.ends
                for s in sides.values():  # a gated run runs every test, however late
                    late = ends is None or self._as_is(s)
                    s.silent_after = None if late else ends + SILENT_GRACE_S
                self._cases = []
                silent: tuple[str, ...] = ()
                done: float | None = None  # monotonic: the last test done
                try:
                    cases = self._lockstep(sides["base"], sides["head"], t0)
                    done = time.monotonic()
                    for s in sides.values():
                        finish(s)
                except SideSilent as err:  # the verdicts it has stand; the rest is a problem
                    stop(sides)
                    cases, silent = self._cases, (str(err),)
            except BaseException:
                stop(sides)
                raise
        by_build = {s.build: s for s in sides.values()}
        problems = (
            silent
            + tuple(
                f"{s.build}'s pytest ended with exit status {s.proc.returncode} (log: {s.log})"
                for s in sides.values()
                if s.proc.returncode not in (0, 1)
            )
            + tuple(
                f"{c.id} failed on {side} (log: {by_build[side].log})"
                for c in cases
                for side, outcome in sorted(c.status.items())
                if outcome == "failed"
            )
            # the build compared stopped timing a case: a silent pass would hide it
            + tuple(
                f"{c.id}: head made no timing call to pair with base's (log: "
                f"{by_build['head'].log})"
                for c in cases
                if c.timed_alone == "base"
            )
        )
        from gpugauge.ab.kernels import device_of, saved_run, with_kernels

        base_run, head_run = saved_run(by_build["base"].json), saved_run(by_build["head"].json)
        cases = with_kernels(cases, base_run, head_run)
        now = time.monotonic()
        ready = self._ready_at
        return ABReport(
            by_build["base"].info(),
            by_build["head"].info(),
            tuple(cases),
            device_of(head_run, base_run),
            now - t0,
            self.cfg.schedule,
            problems,
            start_s=0.0 if ready is None else ready - t0,
            end_s=0.0 if done is None else now - done,
            gpus=self.cfg.gpus,
        )

    def _lockstep(self, base: Side, head: Side, started: float) -> list[CaseAB]:
        collected = self._collected(base, head)
        ids = {name: m.get("ids", []) for name, m in collected.items()}
        self._untimed = {i for m in collected.values() for i in m.get("untimed", [])}
        self._launched = launched_ids(collected)
        total = len(set(ids["base"]) | set(ids["head"]))
        where = "this device" if self.cfg.gpu is None else f"GPU {self.cfg.gpu}"
        self.note(
            f"  {plural(total, 'test')} collected; pairing blocks on {where} "
            f"({ready_line(collected, {'base': base, 'head': head})})"
        )
        if self._sharing:
            self.claims.collected(total)
        cases = self._cases  # kept on the coordinator: a side gone silent ends the loop
        mb, mh = base.recv(), head.recv()
        self._ready_at = time.monotonic()  # both at their first test (or done)
        if self.cfg.round == 1:
            self._started(total, {base.name: mb, head.name: mh}, (base, head))
        while not (mb["op"] == "bye" and mh["op"] == "bye"):
            t0 = time.monotonic()
            if mb["op"] == "test" and mh["op"] == "test" and mb["id"] == mh["id"]:
                if not self._takes(mb["id"]):
                    mb, mh = self._passed(base, mb["id"]), self._passed(head, mh["id"])
                    continue
                case = self._paired(base, head, mb["id"])
                mb, mh = base.expect("test", "bye"), head.expect("test", "bye")
            else:
                alone = self._alone_first(base, head, mb, mh, ids)
                nodeid = (mb if alone is base else mh)["id"]
                taken = self._takes(nodeid)
                if taken:
                    status = {alone.name: self._alone(alone, nodeid)}
                    case = CaseAB(case_id(nodeid), nodeid, only=alone.name, calls=0, status=status)
                    after = alone.expect("test", "bye")
                else:
                    after = self._passed(alone, nodeid)
                if alone is base:
                    mb = after
                else:
                    mh = after
                if not taken:
                    continue
            if self.cfg.exchanged:
                case = case.exchanged()
            cases.append(replace(case, wall_s=time.monotonic() - t0))
            self._save_so_far(base, head, cases, started)
            self._progress(cases, total, started)
        return cases

    def _started(
        self, total: int, first: dict[str, dict[str, Any]], sides: tuple[Side, ...]
    ) -> None:
        """Round 1 has tests to run: the earlier A/B's records in --out go. Else bad input.

        A selection of no test (pytest's exit status 5), or one pytest refused (4: an
        unknown marker in -m), ran nothing on either side: SideError, and ``--out`` keeps
        the earlier A/B's records (its sides' logs are this run's, and say why).
        """
        ended = [m.get("exitstatus") for m in first.values() if m["op"] == "bye"]
        if not total or (len(ended) == len(first) and {4, 5} & set(ended)):
            for s in sides:  # pytest says why after its last hook: its log, once it ended
                with contextlib.suppress(subprocess.TimeoutExpired):
                    s.proc.wait(timeout=30)
            last = [(log_tail(s.log).strip().splitlines() or ["?"])[-1] for s in sides]
            said = (re.sub(r" in [0-9.]+s$", "", x.strip("= ")).rstrip(".") for x in last)
            why = "; ".join(dict.fromkeys(said))  # "152 deselected", once
            raise SideError(
                "the selection matched no test pytest could run on either side ("
                f"{' '.join(self.cfg.pytest_args) or 'no arguments'}): pytest said "
                f"'{why}'. --out keeps the earlier A/B's records"
            )
        forget_earlier(self.cfg.out)
        if self.cfg.gpu is not None:  # one GPU's folder of a spread A/B's --out
            forget_earlier(self.cfg.out.parent)

    @staticmethod
    def _collected(base: Side, head: Side) -> dict[str, dict[str, Any]]:
        """Each side's ``collected`` message, by name.

        Head's build's side first: the other may ask for its selection before it says its
        own (:func:`~gpugauge.ab.worker.follow`).
        """
        lead, other = (head, base) if head.build == "head" else (base, head)
        collected = {lead.name: lead.expect("collected", "bye")}
        said = other.expect("selection", "collected", "bye")
        if said["op"] == "selection":
            other.send({"op": "selection", "ids": collected[lead.name].get("ids", [])})
            said = other.expect("collected", "bye")
        collected[other.name] = said
        return collected

    @property
    def _sharing(self) -> bool:
        """Whether this round shares its tests with other GPUs' (round 1 of a spread A/B)."""
        return self.claims is not None and self.cfg.round == 1

    def _passed(self, side: Side, nodeid: str) -> dict[str, Any]:
        """Skip a test another GPU took; the side's next message ('test' or 'bye')."""
        side.send({"op": "skip", "reason": f"{nodeid} runs on another GPU"})
        side.expect("done")
        return side.expect("test", "bye")

    def _progress(self, cases: list[CaseAB], total: int, started: float) -> None:
        """One line for the test just done: its verdict, and the time left."""
        done = len(cases)
        if self._sharing:  # every GPU's tests: they share one selection
            done, total = self.claims.done, self.claims.total
        rounds_after = self.cfg.schedule.rounds - self.cfg.round
        eta = eta_s(time.monotonic() - started, done, total, rounds_after)
        line = progress_line(cases[-1], self.cfg.round, self.cfg.picked)
        self.note(f"  [{done}/{total}] {line}{eta}")

    def _save_so_far(self, base: Side, head: Side, cases: list[CaseAB], t0: float) -> None:
        """``ab.json`` with every case finished so far (``complete`` false), after each one.

        An A/B stopped or broken at any point keeps the pairs it paid for, even one that
        fails at its very end; the end rewrites it whole.
        """
        base, head = (head, base) if self.cfg.exchanged else (base, head)
        so_far = ABReport(
            base.info(),
            head.info(),
            tuple(cases),
            "",  # named at the end, from the sides' saved runs
            time.monotonic() - t0,
            self.cfg.schedule,
            complete=False,
            gpus=self.cfg.gpus,
        )
        so_far.save(self.cfg.out)
        if self._sharing:
            self.claims.finished(str(self.cfg.gpu), so_far)

    @staticmethod
    def _alone_first(
        base: Side, head: Side, mb: dict[str, Any], mh: dict[str, Any], ids: dict[str, list[str]]
    ) -> Side:
        """Which side runs its next test alone: the one whose test the other lacks."""
        if mb["op"] == "test" and (mh["op"] == "bye" or mb["id"] not in ids["head"]):
            return base
        if mh["op"] == "test" and (mb["op"] == "bye" or mh["id"] not in ids["base"]):
            return head
        return base if mb["op"] == "test" else head  # both have it, in another order

    def _as_is(self, side: Side) -> bool:
        """Whether ``side`` is a gated run (:attr:`ABConfig.head_as_is`): no budget skips it."""
        return self.cfg.head_as_is and side.build == "head"

    def _skipped(self, side: Side, nodeid: str) -> str:
        """Why ``side`` skips ``nodeid`` ('' where it runs it).

        A gated run runs every test. Another side skips a test marked untimed on either
        side (a side from before the marker runs it unmarked), and one past the budget.
        """
        if self._as_is(side):
            return ""
        if nodeid in self._untimed:
            return UNTIMED_SKIPPED
        return self.cfg.budget.why_not(nodeid)

    def _alone(self, side: Side, nodeid: str) -> str:
        """Run one test of one side with the GPU to itself, every timing call as usual."""
        skipped = self._skipped(side, nodeid)
        side.send({"op": "skip", "reason": skipped} if skipped else {"op": "go"})
        while (m := side.expect("measure", "done"))["op"] == "measure":
            side.send({"op": "solo"})
        return str(m.get("outcome", "?"))

    def _paired(self, base: Side, head: Side, nodeid: str) -> CaseAB:
        first, second = (head, base) if self._flip else (base, head)
        self._flip = not self._flip
        said: dict[str, dict[str, Any]] = {}
        phases = dict.fromkeys(PHASES, 0.0)
        skipped = False  # a side was told to skip the test: the other times it alone
        # a launched test's launches start and end on both sides at once; a gated run's work
        # after its timed rounds (its profiled steps) has the GPU to itself
        together = nodeid in self._launched and not (self._as_is(base) or self._as_is(head))

        def setup_order(s: Side) -> dict[str, Any]:
            # each side runs the test, even where the first made no timing call: a build
            # that stopped (or started) timing it must show, whichever side goes first
            nonlocal skipped
            if why := self._skipped(s, nodeid):
                skipped = True
                return {"op": "skip", "reason": why}
            return {"op": "go"}

        t0 = time.monotonic()
        exchange(said, (first, second), setup_order, together)
        phases["setup"] += time.monotonic() - t0
        at = lambda name: said[name]["op"]  # noqa: E731
        sides = {"base": base, "head": head}
        pairs: tuple[Pair, ...] = ()
        calls = 0
        timed_alone = ""  # the side whose timing call the other never made
        while True:
            t0 = time.monotonic()
            if at("base") == at("head") == "measure":
                try:
                    pairs = self._blocks(base, head, base_starts=first is base)
                except BlockFailed as failed:
                    # the failed side's test fails as it would alone; the other side ends
                    # its call (or times it alone, if it had no block yet) and goes on
                    pairs = failed.pairs
                    said[failed.side] = sides[failed.side].expect("measure", "done")
                    other = sides[other_side(failed.side)]
                    other.send({"op": "end" if failed.started[other.name] else "solo"})
                    said[other.name] = other.expect("measure", "done")
                    continue
                phases["blocks"] += time.monotonic() - t0
                t0 = time.monotonic()
                calls += 1
                exchange(said, (first, second), lambda _: {"op": "end"}, together)
                phases["after"] += time.monotonic() - t0
            elif "measure" in (at("base"), at("head")):
                s = base if at("base") == "measure" else head
                ran = said[other_side(s.name)].get("outcome") == "passed"
                if ran and not pairs and not skipped:  # the other side ran, made no such call
                    timed_alone = s.name  # (not one that failed or skipped before it)
                s.send({"op": "solo"})
                said[s.name] = s.expect("measure", "done")
                phases["alone"] += time.monotonic() - t0
            else:
                break
        status = {name: str(m.get("outcome", "?")) for name, m in said.items()}
        return CaseAB(
            case_id(nodeid),
            nodeid,
            pairs,
            calls,
            status=status,
            schedule=self.cfg.schedule,
            phases=phases,
            timed_alone=timed_alone if not calls else "",
        )

    def _block(
        self, side: Side, first: bool, first_warm_s: float, rounds: int | None = None
    ) -> Block:
        """One block of one side; _Failed if the side's timed rounds raised.

        ``first_warm_s``: the least warm-up of the side's first block of the call;
        ``rounds``: the timed rounds of a later block (None: as many as fill ``block_s``).
        """
        order = {
            "op": "block",
            "block_s": self.cfg.block_s,
            "rewarm_s": self.cfg.rewarm_s,
            "first_warm_s": first_warm_s,
            "min_rounds": self.cfg.min_rounds,
            "first": first,
        }
        side.send(order if rounds is None else order | {"rounds": rounds})
        said = side.expect("block_done", "block_failed")
        if said["op"] == "block_failed":
            self.note(f"  {side.build}: its timed rounds failed: {said.get('error', '?')}")
            raise _Failed
        return Block.from_dict(said)

    def _blocks(self, base: Side, head: Side, base_starts: bool) -> tuple[Pair, ...]:
        """Pairs of blocks, order alternating, until the schedule has its answer.

        The test's first block warms up for at least ``first_warm_s``: both sides' setups
        left the GPU idle. The other side's first block comes right after it, on a GPU that
        has just run the same work: it warms up as later blocks do, for ``rewarm_s``, and
        until its own batches settle (its process's first timed rounds of the work). After each
        pair both sides' next blocks time one count of rounds (:func:`block_rounds`).
        """
        pairs: list[Pair] = []
        started = {"base": False, "head": False}
        rounds: int | None = None  # the next block's rounds, both sides alike
        while more := self.cfg.schedule.more([p.log_ratio for p in pairs]):
            for _ in range(more):
                base_first = (len(pairs) % 2 == 0) == base_starts
                got = {}
                for s in (base, head) if base_first else (head, base):
                    warm = self.cfg.rewarm_s if any(started.values()) else self.cfg.first_warm_s
                    try:
                        got[s.name] = self._block(s, not started[s.name], warm, rounds)
                    except _Failed:
                        raise BlockFailed(s.name, dict(started), tuple(pairs)) from None
                    started[s.name] = True
                # counted whatever its clocks: the short steps whose clocks wander at the
                # power limit hardly follow them (docs/lab/ab-evidence.md), and a round
                # stopped for them left a 6% slowdown undecided
                pairs.append(Pair(got["base"], got["head"], base_first))
                rounds = block_rounds(pairs[-1], self.cfg.block_s, self.cfg.min_rounds)
        return tuple(pairs)


def launched_ids(collected: dict[str, dict[str, Any]]) -> set[str]:
    """The tests whose launches both sides may start and end at once, from their ``collected``.

    Those either side marks launched, none where a side injects a slowdown: a rank sizes
    the slowdown from a probe in its setup, which must have the GPU to itself.
    """
    if any(m.get("injects") for m in collected.values()):
        return set()
    return {i for m in collected.values() for i in m.get("launched", [])}


GROWTH = 4  # the most a block's timed-round count grows from one pair to the next


def block_rounds(last: Pair, block_s: float, least: int) -> int | None:
    """The timed rounds of the next block of both sides: ``block_s`` at the slower side's pace.

    A block timed "for ``block_s``" adds rounds in doubling batches and overshoots: on an
    H200 night 1,036 blocks timed a median 0.206 s for 0.15 s asked. A count of rounds
    from the last pair's wall seconds a round ends each block near ``block_s``, and gives
    both sides the same rounds. The first pair's small batches overstate that pace (its
    count's blocks took a median 0.116 s on an H200), so each pair sets the next one's.
    A block's pace is its timed seconds a round (its whole call's, from a side too old to
    say them), at least its median round. The count grows at most fourfold a pair: a
    block that misreports its seconds cannot order one that runs for minutes. None where a
    block said neither.
    """
    paces = []
    for b in (last.base, last.head):
        seconds = b.timed_s or b.wall_s
        if seconds and b.rounds:
            paces.append(max(seconds / b.rounds, b.median_ms / 1e3))
    if len(paces) < 2:
        return None
    most = GROWTH * max(last.base.rounds, last.head.rounds)
    return max(least, min(round(block_s / max(paces)), most))


def ready_line(collected: dict[str, dict[str, Any]], sides: dict[str, Side]) -> str:
    """'ready: base 6.1 s, head 7.4 s after their start; CUDA started in 2.1 s, 2.3 s'.

    The start-up an A/B pays each round: Python, pytest, torch and the side's plugins, to
    each side's collected tests; then CUDA and its libraries. The base side is
    ready after head's: it waits for head's selection before it starts CUDA.
    """
    took, cuda = {}, {}
    for name, side in sides.items():
        at, cuda_s = collected[name].get("at"), collected[name].get("cuda_s")
        if isinstance(at, int | float):
            took[side.build] = max(at - side.started, 0.0)
        if isinstance(cuda_s, int | float):
            cuda[side.build] = cuda_s
    said = [f"{build} {took[build]:.1f} s" for build in ("base", "head") if build in took]
    line = "ready: " + ", ".join(said) + " after their start" if said else "ready"
    if cuda:
        line += "; CUDA started in " + ", ".join(f"{s:.1f} s" for _, s in sorted(cuda.items()))
    return line


__all__: Sequence[str] = ("ABError", "Coordinator")
