"""The README's "write your own benchmark" examples run as written."""

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"


def test_write_your_own_benchmark_examples_run(gauge_pytester: pytest.Pytester) -> None:
    text = README.read_text()
    section = text[text.index("## Write your own benchmark") :]
    section = section[: section.index("\n## ", 1)]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    assert len(blocks) == 2
    gauge_pytester.makepyfile(test_readme_examples="\n".join(blocks))
    saved = gauge_pytester.path / "out.json"
    result = gauge_pytester.runpytest("-p", "no:cacheprovider", f"--benchmark-json={saved}")
    result.assert_outcomes(passed=2, skipped=1)  # the cuda softmax case skips here
    result.stdout.fnmatch_lines(["*softmax-256x256-cpu*", "*loader-b256-cpu*"])
