"""Same-GPU A/Bs of two builds: ``gpugauge ab``, ``bisect`` and ``confirm`` (docs/ab.md).

Read first: ``verdict`` (pairs, rounds and the verdict rules), ``pairs`` and ``result``
(what an A/B keeps), ``runner`` (the coordinator: both sides in lock-step) and ``worker``
(the pytest plugin inside each side). The commands: ``cli`` and ``command`` (``ab``),
``bisect``, and ``confirm``, ``confirm_command``, ``measured`` and ``overruled``
(``confirm``); ``gpus`` and ``claims`` spread one A/B over several GPUs. Around them:
``config``, ``budget``, ``sides`` (the builds' worktrees), ``launch`` (the sides'
processes; not :mod:`gpugauge.launch`), ``kernels`` and ``render``.

Words: a *round* here is one pair of fresh processes, one per build; a *timed round* is
one call of the callable, as everywhere else. A *block* is one side's turn on the device,
a *pair* one block of each side. The *base* build is the one compared against (for
``confirm``, the commit that recorded the class baselines); a *reference*, as in the
gate, is what judges a result.
"""
