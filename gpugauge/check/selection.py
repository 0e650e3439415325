"""Whether a ``-k`` selection can reach any stored baseline, decided before pytest runs.

``gpugauge check gate -k cuda`` on a machine without CUDA ran both of its pytest runs
(about 10 s on a laptop) only to find nothing to judge: every result there is a CPU
result, judged only against the baselines of the CPU's own device class. The expression
is evaluated here against those baselines' case ids and families, as pytest's ``-k``
reads names (a case-insensitive substring of a name). It answers only where it
understands every name in the expression; a name it cannot place (a marker such as
``nightly``, a test function's name) leaves the question to pytest, as before.
"""

from __future__ import annotations

from collections.abc import Iterable
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
