"""The counters and histograms, made once per process, when prometheus-client is installed.

They are made at first use, not at import: ``prometheus_client`` picks its
storage when a metric is constructed (in memory, or files in
``PROMETHEUS_MULTIPROC_DIR`` that the ``runworkers`` supervisor adds up), and
``runworkers --metrics-port`` sets that directory before anything records.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from prometheus_client import Counter, Histogram

MULTIPROCESS_ENV = "PROMETHEUS_MULTIPROC_DIR"

# Seconds. Jobs run from milliseconds to an hour; the default buckets stop at 10 s.
DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600)
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600)


@dataclass(frozen=True, slots=True)
class Instruments:
    enqueued: Counter
    started: Counter
    finished: Counter
    retries: Counter
    lost: Counter
    duration: Histogram
    latency: Histogram


@cache
def instruments() -> Instruments | None:
    """This process's metrics; None without prometheus-client."""
    try:
        from prometheus_client import Counter, Histogram
    except ImportError:
        return None
    by_task = ("queue", "task")
    return Instruments(
        enqueued=Counter(
            "django_jobs_jobs_enqueued",
            "Jobs enqueued (counted when the enqueuing transaction commits).",
            by_task,
        ),
        started=Counter(
            "django_jobs_attempts_started",
            "Attempts started: jobs claimed by a worker, once per attempt.",
            by_task,
        ),
        finished=Counter(
            "django_jobs_attempts_finished",
            "Attempts whose worker reported how they ended, by that outcome.",
            (*by_task, "outcome"),
        ),
        retries=Counter(
            "django_jobs_retries",
            "Failed attempts whose job was queued again by the retry policy.",
            by_task,
        ),
        lost=Counter(
            "django_jobs_lost_leases",
            "Attempts recorded lost: their lease expired or their worker died.",
            by_task,
        ),
        duration=Histogram(
            "django_jobs_attempt_duration_seconds",
            "Attempt run time, from its claim to its outcome written.",
            by_task,
            buckets=DURATION_BUCKETS,
        ),
        latency=Histogram(
            "django_jobs_start_latency_seconds",
            "From enqueue to the first attempt's start.",
            by_task,
            buckets=LATENCY_BUCKETS,
        ),
    )


@cache
def worker_instruments() -> Instruments | None:
    """The metrics of a worker or supervisor, when something collects them.

    Worker processes are forked by ``runworkers``: what they count in memory
    nobody could read, so they record only into ``PROMETHEUS_MULTIPROC_DIR``
    (set by ``--metrics-port`` or by the operator); otherwise the hot path
    pays one cached call.
    """
    if not os.environ.get(MULTIPROCESS_ENV):
        return None
    return instruments()
