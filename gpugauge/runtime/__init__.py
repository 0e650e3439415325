"""The pytest runtime: the ``gauge`` fixture, the session, its options and start-up.

:mod:`gpugauge.plugin` is the plugin pytest loads; everything it runs lives here: the
``--gauge-*`` flags and the options read from them, the session, the measurement pipeline,
the markers, and the bridge to pytest-benchmark's storage and options.
"""
