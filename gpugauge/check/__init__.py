"""``gpugauge check``: prove the suite on a new GPU or runner before trusting its nightly.

``gpugauge check timer`` times the suite's GPU cases (and three power-heavy ops) with the
suite's timer, with ``triton.testing.do_bench`` and with a bare CUDA-event loop;
``gpugauge check gate`` runs the gated benchmarks twice unchanged (A/A: every regression
is a false alarm) and once with a slowdown injected as device work (every case of 1 ms or
more must regress). :mod:`gpugauge.check.slowdown` is the injection, a pytest plugin;
:mod:`gpugauge.check.timer_plugin` does the timer check's timing inside a pytest run.
See docs/check.md.
"""
