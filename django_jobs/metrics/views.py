"""The metrics page of the web process: ``path("metrics/", metrics)`` in a URLconf.

It shows this process's counters (jobs enqueued here; with
``PROMETHEUS_MULTIPROC_DIR`` set, every process's that shares the
directory, as a multi-process web server needs) and the database gauges of
the backend (``{"backend": "other"}`` in the URL pattern's kwargs for
another one). It does not check who asks: protect it as docs/operations.md
shows (a token, or the network), as queue names and task paths are in it.
"""

from __future__ import annotations

import os

from django.http import HttpRequest, HttpResponse
from django.views.decorators.http import require_GET

from ..backend import jobs_backend
from .exposition import require_client
from .instruments import MULTIPROCESS_ENV, instruments


@require_GET
def metrics(request: HttpRequest, backend: str = "default") -> HttpResponse:
    require_client()
    from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, CollectorRegistry, generate_latest
    from prometheus_client.multiprocess import MultiProcessCollector

    from .collector import JobsCollector

    jobs = jobs_backend(backend)
    instruments()  # the counters exist, at zero, before the first job
    directory = os.environ.get(MULTIPROCESS_ENV)
    if directory:
        counters = CollectorRegistry()
        MultiProcessCollector(counters, path=directory)  # type: ignore[no-untyped-call]
    else:
        counters = REGISTRY
    gauges = CollectorRegistry()
    gauges.register(JobsCollector(jobs.db, jobs.queues, jobs.settings.WORKER_STALE_SECONDS))
    # Two registries, two texts: the process's own must not query the
    # database for every exporter that reads it.
    body = generate_latest(counters) + generate_latest(gauges)
    return HttpResponse(body, content_type=CONTENT_TYPE_LATEST)
