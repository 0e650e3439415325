"""Whether a ``-k`` selection can reach any stored baseline, decided before pytest runs.

``gpugauge check gate -k cuda`` on a machine without CUDA ran both of its pytest runs
(about 10 s on a laptop) only to find nothing to judge: every result there is a CPU
result, judged only against the baselines of the CPU's own device class. The expression
is evaluated here against those baselines' case ids and families, as pytest's ``-k``
reads names (a case-insensitive substring of a name). It answers only where it
understands every name in the expression; a name it cannot place (a marker such as
``nightly``, a test function's name) leaves the question to pytest, as before.

:func:`default_selection` makes the ``-k`` a check runs without one: a registered
family's marker, and for a family no marker names (a user's own cases, or tests that call
``gauge(fn)``: family ``custom``) its stored cases' names, so that it selects what the
baselines hold rather than nothing.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from pathlib import Path
from typing import Any

from gpugauge.regress.baselines import BaselineError, BaselineStore

DEVICE_WORDS = frozenset({"cpu", "cuda", "gpu"})  # names a case's device makes


def stored_cases(baselines: Path, device_cls: str | None = None) -> list[tuple[str, str]]:
    """(case id, family) of every stored baseline entry: of ``device_cls``, or of all."""
    store = BaselineStore(baselines)
    pattern = f"{device_cls}/*.json" if device_cls else "*/*.json"
    out = []
    for path in sorted(baselines.glob(pattern)):
        try:
            entries = store.load(path.parent.name, path.stem) or {}
        except BaselineError:
            continue  # judged as it was: the gated run names a broken file
        out += [(case, path.stem) for case in entries]
    return out


def _as_keyword(case: str) -> str:
    """The name ``-k`` finds a case by: a node id's last part (``test_mm[a]``), or the id."""
    return case.rsplit("::", 1)[-1]


def _selects_one_name(word: str) -> bool:
    """Whether ``word`` is one ``-k`` name (not an operator, nothing pytest cannot parse)."""
    from _pytest.mark.expression import Expression

    seen: list[str] = []
    try:
        Expression.compile(word).evaluate(lambda name, /, **kw: seen.append(name) or True)
    except Exception:  # a malformed expression, another pytest
        return False
    return seen == [word]


def default_selection(
    baselines: Path, device_cls: str | None, families: Iterable[str], markers: Collection[str]
) -> str:
    """The ``-k`` of a check that was given none: every family with baselines of a class.

    ``device_cls``: the class whose stored cases name a family's cases (None: every class).
    A family in ``markers`` (the registry's: each has its marker) is selected by name. Any
    other family is selected by its stored cases' names: a family name no test carries
    (``custom``, of ``gauge(fn)`` tests) would select nothing. ValueError naming the case
    where a name is no ``-k`` name.
    """
    words: list[str] = []
    for family in families:
        if family in markers:
            words.append(family)
            continue
        cases = [c for c, f in stored_cases(baselines, device_cls) if f == family]
        for case in cases:
            word = _as_keyword(case)
            if not _selects_one_name(word):
                raise ValueError(
                    f"family {family!r} has no marker (not a registered family), and its "
                    f"case {case!r} is no name -k can select by; pass -k EXPR naming the "
                    "benchmarks to check"
                )
            words.append(word)
    return " or ".join(dict.fromkeys(words))


def can_select(select: str, here: Iterable[tuple[str, str]], known: Iterable[str]) -> bool | None:
    """Whether ``-k select`` can match a case of ``here``; None where it cannot tell.

    ``known`` holds every name of every stored case (ids, families): an identifier of the
    expression that is none of their substrings nor a device word is not understood.
    """
    from _pytest.mark.expression import Expression

    vocabulary = " ".join(known).lower()
    unknown: list[str] = []

    def matcher_for(names: str) -> Any:
        def match(name: str, /, **kwargs: object) -> bool:
            word = name.lower()
            if kwargs or (word not in vocabulary and word not in DEVICE_WORDS):
                unknown.append(name)
            return word in names

        return match

    try:
        expression = Expression.compile(select)
        hits = [expression.evaluate(matcher_for(f"{c} {f}".lower())) for c, f in here]
    except Exception:  # a malformed expression, another pytest: pytest judges it
        return None
    if unknown:
        return None
    return any(hits)
