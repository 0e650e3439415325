"""CPU cases measure the code, not the scheduler: one intra-op thread, and the host's load.

torch's CPU ops split across one thread per core by default. On a shared host (a CI
runner, a VM whose cores other jobs use) those threads wait for each other whenever one of
them is descheduled, and a round's time is then mostly that wait: VGG-16's swapped step
read 2.26x and 5.0x faster than the normal one in two runs of one build. With one thread
every case's CV was 1.6-3.7%. So CPU cases run on one intra-op thread unless
``OMP_NUM_THREADS`` pins another count, and the run says which; where the host's load
average reaches its core count during CPU cases, the run warns that other processes took
CPU time from them.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

THREADS_ENV_VAR = "OMP_NUM_THREADS"
DEFAULT_THREADS = 1


@dataclass(frozen=True)
class CpuThreads:
    """How many intra-op threads CPU cases run on, and who chose it."""

    count: int
    source: str  # "default" or THREADS_ENV_VAR

    def describe(self) -> str:
        """'cpu-threads=1 (OMP_NUM_THREADS=N for more)' or 'cpu-threads=4 (OMP_NUM_THREADS)'."""
        if self.source == THREADS_ENV_VAR:
            return f"cpu-threads={self.count} ({THREADS_ENV_VAR})"
        return f"cpu-threads={self.count} ({THREADS_ENV_VAR}=N for more)"


def cpu_threads(environ: dict[str, str] | None = None) -> CpuThreads:
    """One thread, or the count a whole positive ``OMP_NUM_THREADS`` pins."""
    given = (os.environ if environ is None else environ).get(THREADS_ENV_VAR, "").strip()
    if given.isdigit() and int(given) > 0:
        return CpuThreads(int(given), THREADS_ENV_VAR)
    return CpuThreads(DEFAULT_THREADS, "default")


@contextmanager
def pinned(count: int) -> Iterator[None]:
    """Set torch's intra-op threads to ``count`` inside, restored after (the run's own)."""
    import torch

    before = torch.get_num_threads()
    if before != count:
        torch.set_num_threads(count)
    try:
        yield
    finally:
        if torch.get_num_threads() != before:
            torch.set_num_threads(before)


def cores() -> int:
    """The cores this process may run on (its affinity), else the machine's count."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def load_average() -> float | None:
    """The one-minute load average, or None where the platform has none."""
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return None


def load_warning(peak: float | None, ncores: int) -> str | None:
    """A line for the run where the load average reached the core count during CPU cases."""
    if peak is None or peak < ncores:
        return None
    return (
        f"WARNING: the load average reached {peak:.1f} on {ncores} core(s) while CPU cases "
        "ran: other processes took CPU time from them, so their numbers may move from run "
        "to run; measure on a quieter host to compare runs"
    )
