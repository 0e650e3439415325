"""The suite's model definitions, which live in the checkout's top-level ``models/``.

A wheel ships that folder as this package (``pyproject.toml``: ``package-dir``), so an
install adds no top-level ``models`` to collide with a project's own. From a plain checkout
(the GPU runners' ``python3 -m pytest benches``, no install), this file points the package
at that folder.
"""

from pathlib import Path

__path__ = [str(Path(__file__).resolve().parents[2] / "models")]
