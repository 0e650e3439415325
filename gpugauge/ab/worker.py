"""The A/B worker: a pytest plugin that lets ``gpugauge ab`` pace one side's rounds.

``gpugauge ab`` starts one pytest per side, each in its own checkout so that it imports its
own code, and loads this file into both as ``-p _gpugauge_ab_worker`` from a folder of its
own. It is standalone on purpose (stdlib and pytest only): a side may be a commit from
before this module existed. It relies on one interface of the side's gpugauge, the suite's
one timing primitive, ``gpugauge.measure.timing.measure(fn, policy, clock, **kw)`` with its
``TimingPolicy`` and ``Timing`` dataclasses, which it wraps when it is imported. A module
that imported the primitive by name before (a plugin the side's ``addopts`` loads with
``-p`` comes ahead of this one) gets the wrapped one too: else its calls would go unpaired.

Inert unless ``GPUGAUGE_AB_ADDRESS`` is set. Then, over a local socket, the coordinator
decides when this side may use the GPU:

* at collection, the side of the base build asks ``selection`` and keeps the tests
  the other build's side selected too: an older commit may lack a marker that the
  selection names, and the A/B would pair none of its tests;
* before each test, the worker asks ``test`` and waits for ``go``: one side at a time runs
  a test's setup and the work after its rounds, so the two never share the GPU (but for
  a test marked ``launched``, whose launches both sides may start and end at once); or for
  ``skip``, where the test has nothing to pair (it is marked untimed, or the other side's
  run made no timing call) or its budget is spent;
* at each call of the primitive that times a case's result (from ``gauge.measure``) it
  asks ``measure``; for each ``block`` it warms up (the first
  block in the case's own regime, later ones briefly: the other side just ran the same
  work) and times rounds for the block's time, then reports the block's median, SM clock
  and power; on ``end`` the call returns one ``Timing`` of every block's rounds, so the
  test and its saved result go on as usual; ``solo`` times the call as without an A/B (a
  call the other side does not make);
* after each test it frees the allocator's cache and says ``done``.

A test may time its case in processes it launches (torchrun ranks, which import this file
as their rank hook, ``GPUGAUGE_RANK_HOOK``): the side relays rank 0's asks
(:class:`Relay`), and rank 0 passes each order on to every rank of its launch
(:class:`RankChannel`), so that all of them time the same rounds.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import json
import os
import socket
import statistics
import sys
import threading
import time
from collections.abc import Callable
from multiprocessing import AuthenticationError
from multiprocessing.connection import Client, Connection, Listener
from typing import Any

import pytest

ADDRESS_ENV = "GPUGAUGE_AB_ADDRESS"
KEY_ENV = "GPUGAUGE_AB_KEY"
SIDE_ENV = "GPUGAUGE_AB_SIDE"
SETTINGS_ENV = "GPUGAUGE_AB_SETTINGS"  # JSON: pytest option dests and the values they take
# set (to 1) on a side that runs as its command line says, every test included: the gated
# run that is the head side of ``gpugauge confirm --measure``'s first round
AS_IS_ENV = "GPUGAUGE_AB_AS_IS"
# set (to 1) on the side that runs the base build: it also runs the tests the other
# build's side selected, which its own markers may leave out (a commit from before a
# marker that -m names)
FOLLOWS_ENV = "GPUGAUGE_AB_FOLLOWS"
# set by a side for the processes its tests launch: the side's relay (:class:`Relay`)
RANKS_ENV = "GPUGAUGE_AB_RANKS"
RELAY_QUIET_S = 30.0  # the most a test's end waits for its launch's rank 0 to hang up


class Channel:
    """The worker's end of the socket: ``ask`` sends a message and waits for the reply.

    ``outcomes`` keeps each test's outcome ('passed', 'failed', 'skipped: reason') for the
    ``done`` message, so that the A/B says why a case has no pairs.
    """

    counted = False  # whether every block must time counts of rounds only (ranks)

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.outcomes: dict[str, str] = {}

    def send(self, message: dict[str, Any]) -> None:
        """Send one message."""
        self.conn.send(message)

    def ask(self, message: dict[str, Any]) -> dict[str, Any]:
        """Send one message, then wait for the coordinator's answer."""
        self.conn.send(message)
        try:
            return self.conn.recv()
        except (EOFError, OSError):
            # the coordinator is gone (stopped or killed): end this side now
            os._exit(3)

    def stats(self, timing: Any) -> dict[str, Any]:
        """What the coordinator hears of a block this process timed."""
        return block_stats(timing)


class RankChannel(Channel):
    """A rank's end: rank 0 asks through its side's relay, and every rank gets the answer.

    The answers go to the launch's other ranks over a gloo group: a rank waiting for its
    order waits on the host, where a GPU collective's kernel would spin beside the other
    side's blocks. Every block is counts of rounds only (:func:`block_policy`): ranks that
    each stopped at their own time would leave one of them waiting in a collective.
    """

    counted = True

    def __init__(self, conn: Connection | None, group: Any, world: int) -> None:
        super().__init__(conn)  # type: ignore[arg-type]  (None on every rank but 0)
        self.group, self.world = group, world

    def send(self, message: dict[str, Any]) -> None:
        """Rank 0 sends; the others have nothing to say."""
        if self.conn is not None:
            self.conn.send(message)

    def ask(self, message: dict[str, Any]) -> dict[str, Any]:
        """Rank 0 asks the coordinator; every rank returns its answer."""
        answer = [super().ask(message) if self.conn is not None else None]
        if self.group is not None:
            import torch.distributed as dist

            dist.broadcast_object_list(answer, src=0, group=self.group)
        return answer[0]

    def stats(self, timing: Any) -> dict[str, Any]:
        """The block's median is the slowest rank's round by round, as the case's result."""
        own = block_stats(timing)
        if self.group is None:
            return own
        import torch.distributed as dist

        every: list[Any] = [None] * self.world
        dist.all_gather_object(every, list(timing.device_ms), group=self.group)
        slowest = [max(ranks) for ranks in zip(*every, strict=True)]
        return own | {"median_ms": statistics.median(slowest)}


class OwnClock:
    """Monotonic seconds that stop while :meth:`stopped`: a launch's own time.

    A launch's limit runs on it (the side's ``gpugauge.launch.torchrun.own_seconds``), and
    it stops while the launch's rank 0 waits for the coordinator: for the other side's
    setup and blocks. A rank that hangs on the other side then fails that side's launch
    only; this one's limit counts its own work, as without an A/B.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._stopped_at: float | None = None
        self._lost_s = 0.0  # seconds it stood still, so far

    def __call__(self) -> float:
        with self._lock:
            now = self._stopped_at if self._stopped_at is not None else time.monotonic()
            return now - self._lost_s

    @contextlib.contextmanager
    def stopped(self) -> Any:
        """Stand still for the ``with`` block."""
        with self._lock:
            self._stopped_at = time.monotonic()
        try:
            yield
        finally:
            with self._lock:
                self._lost_s += time.monotonic() - (self._stopped_at or 0.0)
                self._stopped_at = None


class Relay:
    """A side's socket for the processes its tests launch: rank 0's asks go on to the coordinator.

    One connection at a time: a test's launches run one after another. A rank that hangs
    up inside a block it was ordered (it crashed, or was stopped) is reported as a failed
    block, as a test's own rounds that raised would be. The relay's thread and the test's
    end (:meth:`wait_quiet`) take turns on the coordinator's socket (``lock``): an answer
    the relay waits for comes before the test's ``done``. ``clock`` stands still while
    an ask waits for its answer.
    """

    def __init__(self, channel: Channel, address: str, key: bytes) -> None:
        self.channel = channel
        self.clock = OwnClock()
        self.listener = Listener(address, family="AF_UNIX", authkey=key)
        self.lock = threading.Lock()  # held while one of them speaks to the coordinator
        self.conn: Connection | None = None  # the rank 0 connected now
        self.owed = False  # it owes the coordinator a block
        self.quiet = threading.Event()  # set while no rank is connected
        self.quiet.set()
        threading.Thread(target=self._serve, name="gpugauge-ab-relay", daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn = self.listener.accept()
            except (AuthenticationError, EOFError, ConnectionError):
                continue  # not one of this side's ranks, or one gone before its handshake
            except OSError:
                return  # closed
            with self.lock:
                self.conn, self.owed = conn, False
                self.quiet.clear()
            try:
                self._forward(conn)
            finally:
                with self.lock:
                    if self.conn is conn:  # not let go by the test's end already
                        self._let_go()
                conn.close()

    def _forward(self, conn: Connection) -> None:
        while True:
            try:
                message = conn.recv()
            except (EOFError, OSError):  # the rank hung up
                return
            with self.lock:
                if self.conn is not conn:  # the test ended without it
                    return
                if message.get("op") == "block_failed":
                    self.owed = False
                    self.channel.send(message)
                    continue
                with self.clock.stopped():
                    answer = self.channel.ask(message)
                self.owed = answer.get("op") == "block"
                try:
                    conn.send(answer)
                except OSError:  # the rank went before its answer
                    return

    def _let_go(self) -> None:
        """Report a block the rank owes, and stop serving it (``lock`` held)."""
        if self.owed:
            error = "a rank of its launch ended inside a block"
            self.channel.send({"op": "block_failed", "error": error})
        conn, self.conn, self.owed = self.conn, None, False
        if conn is not None:
            # wakes the relay's thread from its recv
            with contextlib.suppress(OSError), socket.socket(fileno=os.dup(conn.fileno())) as s:
                s.shutdown(socket.SHUT_RDWR)
        self.quiet.set()

    def wait_quiet(self) -> None:
        """Wait until the test's launches hung up, so their last word comes before ``done``.

        An answer the relay is waiting for is waited for however long it takes (the
        coordinator gives it once the other side has spoken); a rank still connected
        ``RELAY_QUIET_S`` after its test is let go, its owed block reported failed.
        """
        if self.quiet.wait(RELAY_QUIET_S):
            return
        with self.lock:
            if self.conn is not None:
                print("gpugauge ab: a launched rank 0 outlived its test", file=sys.stderr)
                self._let_go()


def _fields(obj: Any) -> set[str]:
    return {f.name for f in dataclasses.fields(obj)}


def _replace(obj: Any, **changes: Any) -> Any:
    """``dataclasses.replace`` with only the fields this side's version has."""
    have = _fields(obj)
    return dataclasses.replace(obj, **{k: v for k, v in changes.items() if k in have})


def block_policy(policy: Any, order: dict[str, Any], first: bool, counted: bool = False) -> Any:
    """The case's policy, made to time one block of about ``block_s`` seconds.

    The first block of a call warms up as the case's own policy says (its regime: its
    idle, its settling, its limit), but for at least ``first_warm_s`` only, where the order
    gives one: the GPU has just run the last test's blocks. Later blocks warm up for
    ``rewarm_s`` only, since the other side has just run the same work on this GPU, and
    time the order's ``rounds`` where it gives a count (both sides alike). A burst case
    keeps its idle before every block: that is its regime.

    ``counted``: ranks of one launch, which must all time the same rounds. No clock decides
    anything: the first block warms up the case's own warm-up rounds and times the order's
    least rounds, later ones warm up one round and time the order's count.
    """
    if counted:
        rounds = int(order["min_rounds"]) if first else int(order.get("rounds") or 0)
        changes = {"rounds": max(rounds, int(order["min_rounds"]), 1), "min_time_s": 0.0}
        changes |= {"warmup_s": 0.0, "settle": 0.0, "idle_s": 0.0}
        if not first:
            changes["warmup_rounds"] = 1
        return _replace(policy, **changes)
    block_s = float(order["block_s"])
    changes: dict[str, Any] = {}
    if first and "first_warm_s" in order:
        # the GPU ran the last test's blocks moments ago: settling says when it is warm
        # again, not the case's fixed minimum (1 s at --profile seed, twice per test)
        changes["warmup_s"] = min(float(order["first_warm_s"]), policy.warmup_s)
    changes |= {
        "rounds": None,
        "min_rounds": max(1, int(order["min_rounds"])),
        "min_time_s": block_s,
        "target_ci": 0.5,  # stop at the block's time, however wide its own CI
        "budget_s": max(4 * block_s, 1.0),
    }
    if not first and order.get("rounds"):
        # the coordinator's count for both sides, from the last pair's pace: a block timed
        # for block_s overshoots it by whole doubling batches
        changes["rounds"] = int(order["rounds"])
    if not first:
        rewarm = float(order["rewarm_s"])
        changes |= {"warmup_rounds": 1, "warmup_s": rewarm, "settle": 0.0}
        changes["max_warmup_s"] = rewarm
        if rewarm > 0:  # a warm-up batch (0.1 s) would run past a shorter re-warm
            changes["warmup_batch_s"] = rewarm
    return _replace(policy, **changes)


def block_stats(timing: Any) -> dict[str, Any]:
    """What the coordinator needs of one block: median ms, rounds, SM clock MHz, power W.

    Also the seconds of its timed batches and its warm-up, where this side's ``Timing``
    has them.
    """
    times = list(timing.device_ms)
    batches = getattr(timing, "batches", ()) or ()
    clocks = [b.sm_clock_mhz for b in batches if getattr(b, "sm_clock_mhz", None)]
    power = [b.power_w for b in batches if getattr(b, "power_w", None)]
    return {
        "median_ms": statistics.median(times),
        "rounds": len(times),
        "sm_clock_mhz": statistics.median(clocks) if clocks else None,
        "power_w": statistics.fmean(power) if power else None,
        "timed_s": getattr(timing, "timed_s", None),
        "warmup_s": getattr(timing, "warmup_s", None),
    }


def combined(blocks: list[Any]) -> Any:
    """One ``Timing`` of every block's rounds, as the test's result."""
    first = blocks[0]
    every: dict[str, Any] = {}
    for name in ("device_ms", "host_ms", "throttled", "batches"):
        if name in _fields(first):
            every[name] = tuple(x for b in blocks for x in getattr(b, name))
    for name in ("warmup_s", "timed_s"):  # seconds: every block's
        if name in _fields(first):
            every[name] = sum(getattr(b, name) for b in blocks)
    every["stop_reason"] = f"A/B: {len(blocks)} blocks, sides alternating"
    every["noisy"] = any(getattr(b, "noisy", False) for b in blocks)
    if "clock_events" in _fields(first):
        every["clock_events"] = tuple(sorted({r for b in blocks for r in b.clock_events}))
    return _replace(first, **every)


# The modules whose calls of the primitive time a case's own result (``gauge.measure``,
# and a rank's ``time_rank_case``); other calls (the session's ceilings, a family's cost
# probes, host-timed CPU references, a rank's all-reduce reference) run as they would
# without an A/B. Their names now, then the pipeline's name in commits before
# gpugauge.runtime (a side may be either). A side whose gpugauge has no such module pairs
# them all.
CASE_CALLERS = ("gpugauge.runtime.pipeline", "gpugauge.pipeline", "gpugauge.launch.case_timing")


def times_a_case() -> bool:
    """Whether this call of the primitive comes straight from ``gauge.measure``'s pipeline.

    The direct caller only: the pipeline also measures the session's ceilings, through
    another module, on its way to the case's rounds.
    """
    if not any(name in sys.modules for name in CASE_CALLERS):
        return True
    caller = sys._getframe(2)  # 0: here, 1: the wrapped primitive, 2: its caller
    return caller.f_globals.get("__name__") in CASE_CALLERS


def paced(original: Callable[..., Any], channel: Channel) -> Callable[..., Any]:
    """The timing primitive, with its rounds timed in the blocks the coordinator orders."""

    def measure(fn: Callable[[], object], policy: Any, clock: Any, **kw: Any) -> Any:
        if not times_a_case():
            return original(fn, policy, clock, **kw)
        order = channel.ask({"op": "measure"})
        if order["op"] == "solo":
            return original(fn, policy, clock, **kw)
        blocks: list[Any] = []
        while order["op"] == "block":
            t0 = time.perf_counter()
            try:
                block = block_policy(policy, order, not blocks, channel.counted)
                timing = original(fn, block, clock, **kw)
            except BaseException as err:
                # the test fails as it would without an A/B; the coordinator ends the pairs
                channel.send({"op": "block_failed", "error": f"{type(err).__name__}: {err}"})
                raise
            wall_s = time.perf_counter() - t0
            blocks.append(timing)
            order = channel.ask({"op": "block_done", **channel.stats(timing), "wall_s": wall_s})
        if order["op"] == "solo":  # the other side failed before this one timed a block
            return original(fn, policy, clock, **kw)
        if order["op"] != "end" or not blocks:
            raise RuntimeError(f"gpugauge ab: unexpected order {order!r}")
        return combined(blocks)

    measure.__wrapped__ = original  # type: ignore[attr-defined]
    return measure


def rebind(original: object, wrapped: object) -> None:
    """Point every already-imported name of ``original`` at ``wrapped``.

    ``from gpugauge.measure.timing import measure`` in a module imported before this worker
    (``gpugauge.runtime.pipeline``, by way of a plugin in the side's ``addopts``) holds the bare
    primitive; its calls would time the side alone, and the A/B would pair nothing.
    """
    for module in list(sys.modules.values()):
        try:
            names = [k for k, v in vars(module).items() if v is original]
        except TypeError:  # a None placeholder, or a module without a __dict__
            continue
        for attr in names:
            setattr(module, attr, wrapped)


def _relay(channel: Channel, address: str, key: bytes) -> Relay | None:
    """The relay for this side's ranks, beside the coordinator's socket; None if it cannot be."""
    try:
        from gpugauge.launch.worker import RANK_HOOK_ENV
    except ImportError:  # a side from before rank hooks: its ranks time alone
        return None
    path = os.path.join(os.path.dirname(address), f"{os.getpid()}.r")
    try:
        relay = Relay(channel, path, key)
    except OSError as err:
        print(f"gpugauge ab: no relay for launched ranks ({err})", file=sys.stderr)
        return None
    os.environ[RANKS_ENV] = path
    os.environ[RANK_HOOK_ENV] = f"{__name__}:pace_ranks"
    with contextlib.suppress(ImportError, AttributeError):  # (a side from before: wall time)
        from gpugauge.launch import torchrun

        rebind(torchrun.own_seconds, relay.clock)
    return relay


def _connect() -> tuple[Channel | None, Relay | None]:
    address = os.environ.get(ADDRESS_ENV)
    if not address or os.environ.get(RANKS_ENV):  # no A/B, or a process a side launched
        return None, None
    key = bytes.fromhex(os.environ[KEY_ENV])
    channel = Channel(Client(address, family="AF_UNIX", authkey=key))
    import gpugauge
    import gpugauge.measure.timing as timing

    rebind(timing.measure, paced(timing.measure, channel))  # timing.measure itself too
    relay = _relay(channel, address, key)
    channel.send(
        {
            "op": "hello",
            "side": os.environ.get(SIDE_ENV, "?"),
            "pid": os.getpid(),
            "gpugauge": os.path.dirname(os.path.abspath(gpugauge.__file__)),
            "python": sys.executable,
        }
    )
    return channel, relay


def pace_ranks(ctx: Any) -> None:
    """Rank hook: time this rank's case in the blocks its side's relay orders.

    Every rank of the launch calls it once it joined its process group (``ctx``: its
    ``rank`` and ``world_size``). Rank 0 connects to the relay; the others follow it.
    """
    address = os.environ.get(RANKS_ENV)
    if not address:
        return
    import torch.distributed as dist

    import gpugauge.measure.timing as timing

    group = dist.new_group(backend="gloo") if ctx.world_size > 1 else None
    conn = None
    if ctx.rank == 0:
        conn = Client(address, family="AF_UNIX", authkey=bytes.fromhex(os.environ[KEY_ENV]))
    channel = RankChannel(conn, group, ctx.world_size)
    rebind(timing.measure, paced(timing.measure, channel))


# Wrap the primitive now, before pytest loads the side's own plugin and benches: they
# import it by name. Nothing happens without the coordinator's address.
CHANNEL, RELAY = _connect()


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    """Apply the coordinator's settings to options this side's gpugauge has (others: none).

    By option ``dest``, so that both a side with the option's old name and one with its new
    name get it; a setting a side does not know is left out and said in its log.
    """
    if CHANNEL is None:
        return
    settings = json.loads(os.environ.get(SETTINGS_ENV) or "{}")
    for dests, value in settings:
        known = [d for d in dests if hasattr(config.option, d)]
        for d in known:
            setattr(config.option, d, value)
        if not known:
            print(f"gpugauge ab: this side has none of the options {dests}", file=sys.stderr)


# a test marked so times no result of its own (a memory search, a count): an A/B, which
# compares times, would run it on one side for nothing (the marker: gpugauge.runtime.markers)
UNTIMED = "untimed"


# the node ids of this side's tests marked untimed, kept or left out
UNTIMED_IDS = pytest.StashKey[list[str]]()
# a test marked so times its case in processes it launches, whose start and end both sides
# may run at once (the marker: gpugauge.runtime.markers)
LAUNCHED = "launched"
# gpugauge check's options that add work to every timed round; a rank sizes the work from
# a probe in its setup, which must then have the GPU to itself
INJECTS = ("gauge_inject_slowdown", "gauge_inject_slowdown_ms")


@pytest.hookimpl(hookwrapper=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> Any:
    """After every plugin's selection: add the other build's, then leave out untimed tests.

    A side that follows (:data:`FOLLOWS_ENV`) keeps the tests the other build's side
    selected too, in its own order. Tests marked untimed have no timing to pair: a side
    run as is (a gated run) keeps them, since its run judges their counts alone on the GPU.
    Either way the coordinator hears their ids: a side from before the marker runs them
    unmarked, and is told to skip them.
    """
    every = list(items)
    yield
    if CHANNEL is None:
        return
    if os.environ.get(FOLLOWS_ENV):
        follow(every, items)
    timed, untimed = [], []
    for item in items:
        (timed if item.get_closest_marker(UNTIMED) is None else untimed).append(item)
    config.stash[UNTIMED_IDS] = [item.nodeid for item in untimed]
    if untimed and not os.environ.get(AS_IS_ENV):
        config.hook.pytest_deselected(items=untimed)
        items[:] = timed


def follow(every: list[pytest.Item], items: list[pytest.Item]) -> None:
    """Add to ``items`` the tests of ``every`` that the other build's side selected.

    Asked of the coordinator once that side has collected: a test is the same case in
    both builds by its node id, whatever marks each build gives it. ``items`` keeps its
    order (pytest's own reordering by fixture scope included); each added test goes after
    the test the other side runs before it, so that both sides meet their tests in one
    order. The side's log says how many tests its own selection had left out.
    """
    assert CHANNEL is not None
    order = CHANNEL.ask({"op": "selection"}).get("ids", [])
    kept = {item.nodeid for item in items}
    extra = {item.nodeid: item for item in every if item.nodeid not in kept}
    after: dict[str | None, list[pytest.Item]] = {}  # by the kept test they follow
    anchor = None
    for nodeid in order:
        if nodeid in kept:
            anchor = nodeid
        elif nodeid in extra:
            after.setdefault(anchor, []).append(extra.pop(nodeid))
    if not after:
        return
    merged = after.get(None, [])
    for item in items:
        merged += [item, *after.get(item.nodeid, [])]
    print(
        f"gpugauge ab: this side also runs {len(merged) - len(items)} test(s) that its own "
        "selection left out and the other build's side selected",
        file=sys.stderr,
    )
    items[:] = merged


def start_cuda() -> float | None:
    """Start CUDA and load cuBLAS and cuDNN in this process now; the seconds it took.

    Each side does it before the first test, where each would otherwise do it in turn
    inside its first test's setup, one side waiting for the other (an H200 night's first
    test of a round took 12-17 s). The base side starts it once it has head's
    selection (:func:`follow`): head's CUDA start then overlaps its collection. Nothing a
    result measures runs here, and what it allocated is freed, cuBLAS's workspace too
    (``empty_cache`` keeps that one). The process then holds a CUDA context on the first
    GPU, as after any in-process GPU test.
    None where torch or CUDA is missing, or it failed (said in the side's log; the first
    test then starts CUDA as before).
    """
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_available():
        return None
    t0 = time.perf_counter()
    try:
        x = torch.ones(64, 64, device="cuda")
        (x @ x).sum()  # cuBLAS
        w = torch.ones(8, 8, 3, 3, device="cuda", requires_grad=True)
        torch.nn.functional.conv2d(x.view(1, 8, 16, 32), w, padding=1).sum().backward()  # cuDNN
        torch.cuda.synchronize()
        del x, w
        gc.collect()
        clear = getattr(torch._C, "_cuda_clearCublasWorkspaces", None)
        if clear is not None:
            clear()
        torch.cuda.empty_cache()
    except Exception as err:  # the tests start CUDA themselves, and say what fails
        print(f"gpugauge ab: CUDA not started before the tests: {err}", file=sys.stderr)
        return None
    return time.perf_counter() - t0


def pytest_collection_finish(session: pytest.Session) -> None:
    """Tell the coordinator which tests this side will run, in order, and which are untimed.

    After CUDA started (:func:`start_cuda`): the coordinator starts the first test once
    both sides said so.
    """
    if CHANNEL is not None:
        at = time.monotonic()  # one clock for every process of the host
        opt = session.config.option  # a side told to run on the CPU starts no CUDA
        on_cpu = "cpu" in (getattr(opt, "gauge_device", None), getattr(opt, "device", None))
        CHANNEL.send(
            {
                "op": "collected",
                "ids": [item.nodeid for item in session.items],
                "untimed": session.config.stash.get(UNTIMED_IDS, []),
                "launched": [i.nodeid for i in session.items if i.get_closest_marker(LAUNCHED)],
                "injects": any(getattr(opt, dest, 0) for dest in INJECTS),
                "at": at,
                "cuda_s": start_cuda() if session.items and not on_cpu else None,
            }
        )


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Any:
    """Run a test only when the coordinator says so; free the GPU's cache after it."""
    if CHANNEL is None:
        yield
        return
    order = CHANNEL.ask({"op": "test", "id": item.nodeid})
    if order.get("op") == "skip":  # nothing to pair: not run here
        item.add_marker(pytest.mark.skip(reason=str(order.get("reason", "gpugauge ab"))))
    outcome = yield
    excinfo = getattr(outcome, "excinfo", None)
    if excinfo and issubclass(excinfo[0], KeyboardInterrupt):
        # the coordinator is stopping this side (its SIGINT): it waits for no "done", and
        # a launch's relay may wait forever for the coordinator's answer
        return
    gc.collect()
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
    if RELAY is not None:
        RELAY.wait_quiet()
    CHANNEL.send(
        {"op": "done", "id": item.nodeid, "outcome": CHANNEL.outcomes.pop(item.nodeid, "?")}
    )


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Keep a test's outcome: its worst phase, a skip with its reason."""
    if CHANNEL is None:
        return
    if report.failed:
        CHANNEL.outcomes[report.nodeid] = "failed"
    elif report.skipped and report.nodeid not in CHANNEL.outcomes:
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else "skipped"
        CHANNEL.outcomes[report.nodeid] = f"skipped: {str(reason).removeprefix('Skipped: ')}"
    else:
        CHANNEL.outcomes.setdefault(report.nodeid, "passed")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Say goodbye, so that the coordinator stops waiting for this side."""
    if CHANNEL is not None:
        CHANNEL.send({"op": "bye", "exitstatus": int(exitstatus)})
