"""How gpugauge says counts and times: '1 run', '2 runs' (never 'run(s)'); '40 s', '3 min'."""

from __future__ import annotations

from collections.abc import Callable

Note = Callable[[str], None]  # where a command's progress lines go: print, or pytest's terminal


def plural(count: int, noun: str, many: str = "") -> str:
    """'1 outlier', '3 outliers'; ``many`` where the plural is not ``noun + 's'``."""
    return f"{count} {noun if count == 1 else many or noun + 's'}"


def joined(*notes: str) -> str:
    """'a; b': the notes that say something, in one line, each part once.

    Two judges of one result can note the same thing (the class baseline's gate and the
    history both see its kernels change), and a reader should read it once. So each part
    a note joins with '; ' must say its whole thing alone.
    """
    parts = (part for note in notes if note for part in note.split("; "))
    return "; ".join(dict.fromkeys(part for part in parts if part))


def duration(seconds: float) -> str:
    """A rough time, said as one: '40 s' under 90 s, '3 min' from there."""
    return f"{seconds / 60:.0f} min" if seconds >= 90 else f"{seconds:.0f} s"


def seconds_left(spent_s: float, done: int, left: int) -> float | None:
    """What ``left`` more items will take if each costs the mean of the ``done`` ones, s.

    None before the first item ends (nothing to go by) and when none is left. A rough guide:
    items differ (a split's search is minutes, a skipped case milliseconds).
    """
    if done <= 0 or left <= 0:
        return None
    return spent_s / done * left


def progress(
    spent_s: float,
    done: int,
    total: int,
    noun: str = "test",
    *,
    costly: tuple[int, int] | None = None,
) -> str:
    """'12 of 93 tests done in 2 min; about 8 min left' (no estimate before the first).

    ``costly``: how many of the items done, and of those left, do more than skip at once
    (a CUDA case where no GPU is): the estimate goes by them alone. Default: every item.
    """
    ran, left = costly if costly is not None else (done, total - done)
    eta = seconds_left(spent_s, ran, left)
    after = "" if eta is None else f"; about {duration(eta)} left"
    return f"{done} of {plural(total, noun)} done in {duration(spent_s)}{after}"


def efficiency(timed_s: float, warmup_s: float, wall_s: float) -> str:
    """'efficiency: timed rounds 146 s and warm-up 20 s of 458 s (36%)'.

    Every run's last line, a gated run's or an A/B's, in the same words.
    """
    share = (timed_s + warmup_s) / wall_s if wall_s > 0 else 0.0
    return (
        f"efficiency: timed rounds {timed_s:.0f} s and warm-up {warmup_s:.0f} s of "
        f"{wall_s:.0f} s ({share:.0%})"
    )
