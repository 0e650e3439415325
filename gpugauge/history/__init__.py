"""The results history: every result of every run, per host; references and change points.

Modules, one job each: :mod:`~gpugauge.history.records` (the records and
:class:`~gpugauge.history.records.HistoryError`), :mod:`~gpugauge.history.store` (the
:class:`~gpugauge.history.store.History` on SQLite or PostgreSQL, through
:mod:`~gpugauge.history.backends`, :mod:`~gpugauge.history.targets`,
:mod:`~gpugauge.history.schema` and :mod:`~gpugauge.history.columns`; its bounded reads
in :mod:`~gpugauge.history.windows`),
:mod:`~gpugauge.history.capture` (results and saved runs into records),
:mod:`~gpugauge.history.reference` and :mod:`~gpugauge.history.host_checks` (host-aware
references and verdicts), :mod:`~gpugauge.history.changepoints` (with
:mod:`~gpugauge.history.pelt`), and the command line (:mod:`~gpugauge.history.cli`,
:mod:`~gpugauge.history.render`, :mod:`~gpugauge.history.rows`).

How a pytest session uses it (the plugin's part)::

    from gpugauge.history.capture import host_id, metric_records, result_record, run_record
    from gpugauge.regress.baselines import kernel_shares
    from gpugauge.history.host_checks import check_case
    from gpugauge.history.store import History

    history = History.open(target)         # path or postgresql:// URL; None: the default
    host = host_id()                       # the GPU's NVML UUID, else the hostname
    # per result m (a Measurement), where the gate would judge it:
    metrics = metric_records(m)            # gpugauge.history.capture
    judged = check_case(
        m.id, m.spec.family, m.device_class, metrics,
        host=host,
        points=history.case_points(m.id, m.device_class, [x.metric for x in metrics]),
        tolerance=tolerances.for_benchmark(m.spec.family, m.id),
        baseline=stored_baseline_entry_or_None,
        kernels=kernel_shares(m.extra.get("kernels")),
    )
    judged.verdict / judged.gate (a GateResult) / judged.message()
    # regressed: measure again, judge the second measurement the same way;
    # keep both: result_record(first, judged1, attempt=1), result_record(second, judged2,
    # attempt=2, earlier={"time": (first_median,)})
    # at session end, once:
    history.append(run_record(fingerprint, host=host, device_class=..., argv=sys.argv,
                              profile=options.profile), records)
    history.close()

Reading: ``History.points(id, metric, device_class)`` (a case's trend),
``History.to_frame()`` (pandas), :func:`gpugauge.history.changepoints.case_changes`.
"""
