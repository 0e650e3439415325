"""How a pytest run of the suite went, saved beside its results: selected, skipped, ended early.

pytest-benchmark saves whatever was measured, also when a run is interrupted (Ctrl-C) or
stops at its first failure (``-x``), and it saves nothing of the tests that skipped. A
saved file read later (the report, ``gpugauge baseline``) would then look like a whole run
of fewer cases. :class:`RunOutcome` travels in the saved JSON (``gpugauge.outcome``) so
that every reader can say what the results are part of.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

SKIP_PREFIX = "Skipped: "


@dataclass(frozen=True)
class Skip:
    """One test that did not run here, and pytest's reason."""

    test: str
    why: str


@dataclass(frozen=True)
class RunOutcome:
    """``selected`` tests, ``finished`` of them, those ``skipped``, and why it stopped early.

    ``interrupted`` is the exception that ended the run ('KeyboardInterrupt' for Ctrl-C or
    SIGTERM turned into one), or None; ``stopped`` is pytest's reason for starting no more
    tests (``-x``, ``--maxfail``, ``--gauge-stop-after``), or None.
    """

    selected: int
    finished: int
    skipped: tuple[Skip, ...] = ()
    interrupted: str | None = None
    stopped: str | None = None

    @property
    def complete(self) -> bool:
        """Every selected test ran to its end, and nothing interrupted the run."""
        return self.interrupted is None and self.stopped is None and self.finished >= self.selected

    def ended_early(self) -> str | None:
        """One line saying how the run ended early, or None for a complete run."""
        if self.complete:
            return None
        how = "stopped early" + (f" ({self.stopped})" if self.stopped else "")
        if self.interrupted:
            how = f"interrupted ({self.interrupted})"
        return (
            f"the run was {how} after {self.finished} of {self.selected} selected tests: "
            "its results are a part of the run"
        )

    def skip_lines(self) -> list[str]:
        """'8 tests skipped: needs a CUDA GPU; none is visible here', one line per reason."""
        counts = Counter(s.why for s in self.skipped)
        return [
            f"{n} test{'s' if n != 1 else ''} skipped: {why}" for why, n in counts.most_common()
        ]

    def as_dict(self) -> dict[str, Any]:
        """Plain JSON."""
        return {
            "selected": self.selected,
            "finished": self.finished,
            "skipped": [{"test": s.test, "why": s.why} for s in self.skipped],
            "interrupted": self.interrupted,
            "stopped": self.stopped,
        }

    @classmethod
    def from_dict(cls, d: object) -> RunOutcome:
        """Read :meth:`as_dict` back; ValueError naming the field that is wrong."""
        if not isinstance(d, dict):
            raise ValueError(f"outcome must be an object, not {type(d).__name__}")
        counts = {}
        for key in ("selected", "finished"):
            value = d.get(key)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"outcome.{key} must be a count, not {value!r}")
            counts[key] = value
        skipped = d.get("skipped", [])
        if not isinstance(skipped, list) or not all(
            isinstance(s, dict) and isinstance(s.get("test"), str) and isinstance(s.get("why"), str)
            for s in skipped
        ):
            raise ValueError("outcome.skipped must be a list of {test, why} strings")
        why = {}
        for key in ("interrupted", "stopped"):
            value = d.get(key)
            if value is not None and not isinstance(value, str):
                raise ValueError(f"outcome.{key} must be a string or null, not {value!r}")
            why[key] = value
        return cls(
            counts["selected"],
            counts["finished"],
            tuple(Skip(s["test"], s["why"]) for s in skipped),
            **why,
        )


def test_id(nodeid: str) -> str:
    """A test's case id: its parameter id (the spec id) where it has one, else its name."""
    name = nodeid.rpartition("::")[2]
    head, bracket, params = name.partition("[")
    return params.removesuffix("]") if bracket else head


def skip_reason(longrepr: object) -> str:
    """The skip reason in a pytest report's ``longrepr`` ((path, line, 'Skipped: why'))."""
    text = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)
    return str(text).removeprefix(SKIP_PREFIX)
