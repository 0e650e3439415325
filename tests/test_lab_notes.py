"""Lab notes stay in docs/lab/: the library's comments say the rule, not which GPU run showed it.

A comment that cites "run 72" sends a reader to a 1,900-line log to learn why a number is
what it is; the comment should say why, and name the doc that keeps the evidence.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "gpugauge"
# "run 63:", "(runs 42 and 50)", "runs 46-50 listed", "runs 78, 80)" ... but not an option
# ("--runs 2"), a count ("two runs 49% apart") or a rate ("runs 10-15% slower")
CITATION = re.compile(
    r"(?<![-\w])[Rr]uns? \d+(?:\s?[-–]\s?\d+)?(?:(?:,| and) \d+(?:[-–]\d+)?)*(?![\d%.\w-])"
    r"(?!\s(?:seconds|rounds|steps|times|cases|nights|hosts|ms|s\b))"
)


def citations(text: str) -> list[str]:
    """Run citations in ``text``, with comment markers and line breaks read as spaces."""
    flat = re.sub(r"\s*\n\s*(?:#\s?)?", " ", text)
    return CITATION.findall(flat)


@pytest.mark.parametrize(
    ("text", "cited"),
    [
        ("# the cap (run 70: 2.1% apart)", ["run 70"]),
        ("as in runs 42 and 50)", ["runs 42 and 50"]),
        ("(runs 46-50 listed 8 kernels", ["runs 46-50"]),
        ("changed (runs 78, 80), so", ["runs 78, 80"]),
        ("more, so it lengthens (run\n    # 63: 3% injected", ["run 63"]),
        ("gpugauge check gate [--runs 2]", []),
        ("two runs 49% apart", []),
        ("the same kernel runs 10-15% slower", []),
        ("keeps the last 60 runs a host", []),
    ],
)
def test_citation_pattern(text: str, cited: list[str]) -> None:
    assert citations(text) == cited


def test_library_comments_cite_no_gpu_run() -> None:
    found = {
        path.relative_to(ROOT).as_posix(): hits
        for path in sorted(PACKAGE.rglob("*.py"))
        if (hits := citations(path.read_text(encoding="utf-8")))
    }
    assert not found, (
        "say the rule or the reason instead, and name the doc that keeps the evidence "
        f"(docs/*.md, docs/lab/gpu-runs.md): {found}"
    )
