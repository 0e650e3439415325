"""The built-in benchmark families, one package each, every one exposing ``FAMILY``.

Nothing here lists them: each is declared like any other family, by one entry point of the
``gpugauge.families`` group in ``pyproject.toml`` (:mod:`gpugauge.family.entries`), and the
harness reaches it only through :mod:`gpugauge.family.registry`.
"""
