"""The family machinery: a family's record, where families are declared, the registry.

:mod:`.record` holds :class:`Family` (what a family hands the harness), :mod:`.entries`
reads the ``gpugauge.families`` entry points without loading one, and :mod:`.registry`
loads and checks each record. A family imports its record from here
(``from gpugauge.family import Family``), loaded on first use: reading the entry points
(the markers, at every pytest start-up) must not load the record's imports.
"""

from __future__ import annotations

__all__ = ["Chart", "Family"]


def __getattr__(name: str) -> object:
    """``Family`` and ``Chart`` from :mod:`.record`, imported when first asked for."""
    if name in __all__:
        from gpugauge.family import record

        return getattr(record, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
