"""Gauges read from the jobs database at scrape time: depth by state, oldest due, workers.

Counters say what happened in the processes that were scraped; these say
what the database holds now, whoever wrote it, so a stuck queue shows even
when no worker is running. Each query is served by an index and reads only
live rows, never the finished history (most of the table):

* queued jobs: the partial claim index (``state = 'queued'``, ordered by
  queue, priority, run_after), read as a loose index scan: each queue, then
  each of its priorities, then the head of that priority (its oldest
  ``run_after``) and its due range are index probes, so the oldest due job
  costs a few probes per priority in use (at most 201), not a scan of the
  backlog. The counts stop at ``COUNT_LIMIT`` per queue: a gauge showing it
  means at least that many, and a backlog of a million costs no more than
  one of that size;
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
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from django.db import connections
from django.db.models import Count
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from ..models import Job, QueueState
from ..states import JobState
from ..statistics import worker_stats

# prometheus-client is imported when a scrape collects, not with this module:
# every module of the package imports without the extra (tests/test_packaging.py).
if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric
    from prometheus_client.registry import Collector

    _Collector = Collector
else:
    _Collector = object

# The states counted by queue: every state a job waits or runs in, and the
# operator's hold. Finished states are counters' work (and a full scan's).
COUNTED_STATES = (
    JobState.WAITING,
    JobState.QUEUED,
    JobState.RUNNING,
    JobState.CANCELLING,
    JobState.QUARANTINED,
)
# Queued and due jobs are counted up to this many per queue, to bound a scrape.
COUNT_LIMIT = 10_000

# The states are literals: PostgreSQL matches the partial claim index
# (WHERE state = 'queued') only against one. MIN over an index's leading
# column is one probe; the recursion steps from one value to the next.
QUEUED_QUEUES = """
WITH RECURSIVE queues(queue) AS (
    SELECT MIN(queue) FROM django_jobs_job WHERE state = 'queued'
    UNION ALL
    SELECT (SELECT MIN(queue) FROM django_jobs_job
            WHERE state = 'queued' AND queue > queues.queue)
    FROM queues WHERE queues.queue IS NOT NULL
)
SELECT queue FROM queues WHERE queue IS NOT NULL
"""
# Small statements, one per step, rather than one statement for it all: the
# planner guesses a recursive CTE's rows (about a hundred), and priced the
# whole above jit_above_cost; compiling it took PostgreSQL 200 ms per queue,
# far more than the probes themselves.
#
# One queue's priorities in use, highest first, one probe each.
QUEUED_PRIORITIES = """
WITH RECURSIVE priorities(priority) AS (
    SELECT MAX(priority) FROM django_jobs_job WHERE state = 'queued' AND queue = %s
    UNION ALL
    SELECT (SELECT MAX(priority) FROM django_jobs_job
            WHERE state = 'queued' AND queue = %s AND priority < priorities.priority)
    FROM priorities WHERE priorities.priority IS NOT NULL
)
SELECT priority FROM priorities WHERE priority IS NOT NULL
"""
# One priority of one queue: its head (oldest run_after) and its due jobs, a
# prefix of its entries (run_after <= now), counted up to a limit.
# Parameters: queue, priority, queue, priority, now, limit.
PRIORITY_HEAD = """
SELECT (SELECT MIN(run_after) FROM django_jobs_job
        WHERE state = 'queued' AND queue = %s AND priority = %s),
       (SELECT COUNT(*) FROM (
            SELECT 1 FROM django_jobs_job
            WHERE state = 'queued' AND queue = %s AND priority = %s AND run_after <= %s
            LIMIT %s) AS due_range)
"""
QUEUED_COUNT = """
SELECT COUNT(*) FROM (
    SELECT 1 FROM django_jobs_job WHERE state = 'queued' AND queue = %s LIMIT %s
) AS queued
"""


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

    connection = connections[db]
    at = connection.ops.adapt_datetimefield_value(now)
    with connection.cursor() as cursor:
        cursor.execute(QUEUED_QUEUES)
        names = [queue for (queue,) in cursor.fetchall()]
        for name in names:
            reading = entry(name)
            cursor.execute(QUEUED_COUNT, [name, COUNT_LIMIT])
            reading.by_state[JobState.QUEUED] = cursor.fetchone()[0]
            cursor.execute(QUEUED_PRIORITIES, [name, name])
            heads: list[datetime] = []
            for (priority,) in cursor.fetchall():
                left = COUNT_LIMIT - reading.due
                cursor.execute(PRIORITY_HEAD, [name, priority, name, priority, at, max(left, 0)])
                oldest, due = cursor.fetchone()
                heads.append(_as_datetime(oldest))
                reading.due += due
            first = min(heads, default=None)
            reading.oldest_due = first if first is not None and first <= now else None
    jobs = Job.objects.using(db).order_by()
    others = [JobState.RUNNING, JobState.CANCELLING], [JobState.WAITING, JobState.QUARANTINED]
    for states in others:  # apart: each set of states is served by its own index
        counted = jobs.filter(state__in=states).values_list("queue", "state").annotate(n=Count("*"))
        for queue, state, n in counted:
            entry(queue).by_state[state] = n
    for name in QueueState.objects.using(db).filter(paused=True).values_list("queue", flat=True):
        entry(name).paused = True
    workers = worker_stats(db, now, stale_after)
    return Reading(found, workers.live, workers.stale)


def _as_datetime(value: datetime | str) -> datetime:
    """A raw query's timestamp: PostgreSQL returns it aware, SQLite as UTC text."""
    if isinstance(value, datetime):
        return value
    parsed = parse_datetime(value)
    if parsed is None:
        raise ValueError(f"not a timestamp: {value!r}")
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


class JobsCollector(_Collector):
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
        from prometheus_client.core import GaugeMetricFamily

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
