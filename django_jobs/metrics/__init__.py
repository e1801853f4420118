"""Prometheus metrics: an optional integration (``pip install django-jobs[metrics]``).

Nothing here is imported unless it is used, and ``prometheus_client`` is
imported only when a metric is first recorded or exposed, so django-jobs
works the same without the extra.

* ``instruments``: the counters and histograms, made once per process.
* ``record``: what the enqueue path, the worker and the engine call as jobs
  move; each call is a no-op without the extra.
* ``collector``: gauges read from the database at scrape time.
* ``exposition``: the registries and ``runworkers --metrics-port``'s server.
* ``views``: the Django view for the web process.

Labels are ``queue``, ``task``, ``outcome`` and ``state`` only, each bounded
by the configuration (queues, registered tasks) or by the code (outcomes,
states); never a job id or a tenant, so the series count does not grow with
the jobs. See docs/operations.md for every metric.
"""
