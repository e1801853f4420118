"""Gauges read from the jobs database at scrape time: depth by state, oldest due, workers.

Counters say what happened in the processes that were scraped; these say
what the database holds now, whoever wrote it, so a stuck queue shows even
when no worker is running. Each query is served by an index and reads only
live rows, never the finished history (most of the table):

* queued jobs, how many are due and the oldest due ``run_after``: the
  partial claim index (``state = 'queued'``), an index-only scan;
* running and cancelling: the partial lease index (``state, queue``);
* waiting and quarantined: the ``(state, -enqueued_at)`` index, a range per
  state;
* paused queues and live workers: small tables (workers through their
  partial index of the ones not stopped).

The cost grows with the live rows only (the figures are in
docs/operations.md). ``django_jobs_collector_duration_seconds`` reports
what each scrape took, to watch it.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime

from django.db import connections
from django.db.models import Count, Min, Q
from django.utils import timezone
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from ..models import Job, QueueState
from ..states import JobState
from ..statistics import worker_stats

# The states counted by queue: every state a job waits or runs in, and the
# operator's hold. Finished states are counters' work (and a full scan's).
COUNTED_STATES = (
    JobState.WAITING,
    JobState.QUEUED,
    JobState.RUNNING,
    JobState.CANCELLING,
    JobState.QUARANTINED,
)


@dataclass(slots=True)
class QueueReading:
    by_state: dict[str, int] = field(default_factory=lambda: dict.fromkeys(COUNTED_STATES, 0))
    due: int = 0
    oldest_due: datetime | None = None
    paused: bool = False


@dataclass(frozen=True, slots=True)
class Reading:
    queues: dict[str, QueueReading]
    live_workers: int
    stale_workers: int


def read(db: str, queues: Iterable[str], now: datetime, stale_after: float) -> Reading:
    """What the gauges show: the given queues always, any other queue that has live rows."""
    found: dict[str, QueueReading] = {name: QueueReading() for name in queues}

    def entry(name: str) -> QueueReading:
        return found.setdefault(name, QueueReading())

    jobs = Job.objects.using(db).order_by()
    due = Q(run_after__lte=now)
    # Counting run_after (never NULL), not the id: the claim index holds no
    # id, and an index-only scan reads nothing that is not in the index.
    for row in (
        jobs.filter(state=JobState.QUEUED)
        .values("queue")
        .annotate(
            n=Count("*"),
            due=Count("run_after", filter=due),
            oldest=Min("run_after", filter=due),
        )
    ):
        reading = entry(row["queue"])
        reading.by_state[JobState.QUEUED] = row["n"]
        reading.due = row["due"]
        reading.oldest_due = row["oldest"]
    others = [JobState.RUNNING, JobState.CANCELLING], [JobState.WAITING, JobState.QUARANTINED]
    for states in others:  # apart: each set of states is served by its own index
        counted = jobs.filter(state__in=states).values_list("queue", "state").annotate(n=Count("*"))
        for queue, state, n in counted:
            entry(queue).by_state[state] = n
    for name in QueueState.objects.using(db).filter(paused=True).values_list("queue", flat=True):
        entry(name).paused = True
    workers = worker_stats(db, now, stale_after)
    return Reading(found, workers.live, workers.stale)


class JobsCollector(Collector):
    """The database gauges of one jobs database, for a prometheus-client registry.

    ``close_connection``: close the database connection after each scrape,
    for servers that answer each request on a new thread (prometheus-client's
    own), where a connection left open would be one more per scrape. A
    Django view leaves it to the request's end, as for any query.
    """

    def __init__(
        self,
        db: str,
        queues: Iterable[str],
        stale_after: float,
        *,
        close_connection: bool = False,
    ) -> None:
        self.db = db
        self.queues = tuple(queues)
        self.stale_after = stale_after
        self.close_connection = close_connection

    def collect(self) -> Iterator[Metric]:
        began = time.perf_counter()
        now = timezone.now()
        try:
            reading = read(self.db, self.queues, now, self.stale_after)
        finally:
            if self.close_connection:
                connections[self.db].close()
        took = time.perf_counter() - began
        jobs = GaugeMetricFamily(
            "django_jobs_jobs",
            "Jobs in each live state (and quarantined).",
            labels=["queue", "state"],
        )
        due = GaugeMetricFamily(
            "django_jobs_queue_due_jobs",
            "Queued jobs whose run_after has passed: ready to be claimed now.",
            labels=["queue"],
        )
        oldest = GaugeMetricFamily(
            "django_jobs_queue_oldest_due_age_seconds",
            "How long the oldest due job has waited since it became due (0: none due).",
            labels=["queue"],
        )
        paused = GaugeMetricFamily(
            "django_jobs_queue_paused", "1 while the queue is paused.", labels=["queue"]
        )
        for name in sorted(reading.queues):
            queue = reading.queues[name]
            for state, count in queue.by_state.items():
                jobs.add_metric([name, str(state)], count)
            due.add_metric([name], queue.due)
            waited = 0.0 if queue.oldest_due is None else (now - queue.oldest_due).total_seconds()
            oldest.add_metric([name], max(0.0, waited))
            paused.add_metric([name], 1.0 if queue.paused else 0.0)
        workers = GaugeMetricFamily(
            "django_jobs_workers",
            "Registered worker processes not stopped: live if they heartbeat recently, else stale.",
            labels=["state"],
        )
        workers.add_metric(["live"], reading.live_workers)
        workers.add_metric(["stale"], reading.stale_workers)
        cost = GaugeMetricFamily(
            "django_jobs_collector_duration_seconds",
            "What reading these gauges from the database took, this scrape.",
            value=took,
        )
        yield from (jobs, due, oldest, paused, workers, cost)
