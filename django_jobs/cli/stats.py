"""Per-queue numbers for ``manage.py jobs stats``: depth, age of the backlog, throughput.

Read-only, and honest about cost: the counts by state group the whole jobs
table (a sequential scan on PostgreSQL), so on a table of millions of rows
this takes as long as a ``count(*)``. Pruning keeps that table small.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db.models import Count, Min, Q, QuerySet

from ..models import Job, Worker
from ..states import LEASED_STATES, JobState

THROUGHPUT_WINDOW = timedelta(hours=1)
# Ended without success in a way an operator should look at.
FAILED_STATES = frozenset({JobState.FAILED, JobState.EXHAUSTED})


@dataclass(slots=True)
class QueueStats:
    queue: str
    by_state: Counter[str] = field(default_factory=Counter)
    # Queued with run_after in the future: delayed jobs and retries in backoff.
    scheduled: int = 0
    # The oldest job that could run now: how long it has waited since run_after.
    oldest_ready: timedelta | None = None
    succeeded_last_hour: int = 0
    failed_last_hour: int = 0

    @property
    def running(self) -> int:
        return sum(self.by_state[s] for s in LEASED_STATES)


@dataclass(frozen=True, slots=True)
class WorkerStats:
    live: int
    stale: int


def queue_stats(jobs: QuerySet[Job], queues: Iterable[str], now: datetime) -> list[QueueStats]:
    """Stats of ``jobs`` for the configured ``queues`` and any other queue with rows, by name.

    ``jobs`` is the whole table for the CLI, and what the caller may see for the API.
    """
    stats: dict[str, QueueStats] = {name: QueueStats(name) for name in queues}

    def entry(name: str) -> QueueStats:
        if name not in stats:
            stats[name] = QueueStats(name)
        return stats[name]

    jobs = jobs.order_by()
    for row in jobs.values("queue", "state").annotate(n=Count("id")):
        entry(row["queue"]).by_state[row["state"]] = row["n"]
    ready = jobs.filter(state=JobState.QUEUED).values("queue")
    for waiting in ready.annotate(
        scheduled=Count("id", filter=Q(run_after__gt=now)),
        oldest=Min("run_after", filter=Q(run_after__lte=now)),
    ):
        found = entry(waiting["queue"])
        found.scheduled = waiting["scheduled"]
        oldest = waiting["oldest"]
        found.oldest_ready = now - oldest if oldest is not None else None
    since = now - THROUGHPUT_WINDOW
    recent = jobs.filter(finished_at__gte=since).values("queue")
    for ended in recent.annotate(
        succeeded=Count("id", filter=Q(state=JobState.SUCCEEDED)),
        failed=Count("id", filter=Q(state__in=FAILED_STATES)),
    ):
        found = entry(ended["queue"])
        found.succeeded_last_hour = ended["succeeded"]
        found.failed_last_hour = ended["failed"]
    return [stats[name] for name in sorted(stats)]


def worker_stats(db: str, now: datetime, stale_after: float) -> WorkerStats:
    """Workers that have not stopped: live if they heartbeat recently, else stale."""
    running = Worker.objects.using(db).filter(stopped_at__isnull=True)
    fresh = now - timedelta(seconds=stale_after)
    counts = running.aggregate(
        live=Count("id", filter=Q(heartbeat_at__gte=fresh)),
        stale=Count("id", filter=Q(heartbeat_at__lt=fresh)),
    )
    return WorkerStats(live=counts["live"], stale=counts["stale"])
