"""Queue and worker statistics: the one place the dashboard, the API and ``jobs stats`` count.

Three surfaces once counted on their own and disagreed on "failed in the last
hour" (one counted ``expired``, the other not). They now all read these
functions, so a definition changes in one place and the surfaces cannot drift.

Two costs, chosen by the caller: counting only some states (the dashboard's
live ones, each served by a partial index) is cheap on any table; counting
every state (the API and the CLI show the whole breakdown) groups the whole
table, as long as a ``count(*)``. Finished work is always read through the
``finished_at`` index, limited to the longest window.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db.models import Count, Min, Q, QuerySet

from .models import Job, Worker
from .states import LEASED_STATES, JobState

# Ended without doing its work: an operator should look at these.
FAILURE_STATES = frozenset({JobState.FAILED, JobState.EXHAUSTED, JobState.EXPIRED})
# The windows finished work is counted in, by the key each surface shows.
WINDOWS = {"5m": timedelta(minutes=5), "1h": timedelta(hours=1)}


@dataclass(slots=True)
class QueueStats:
    queue: str
    by_state: Counter[str] = field(default_factory=Counter)
    # Queued with run_after in the future: delayed jobs and retries in backoff.
    scheduled: int = 0
    # The earliest run_after among due jobs: a job waits from when it became
    # due (a retry, from the end of its backoff).
    oldest_due: datetime | None = None
    # Jobs that finished in each window (WINDOWS keys), and how they ended.
    finished: Counter[str] = field(default_factory=Counter)
    succeeded: Counter[str] = field(default_factory=Counter)
    failed: Counter[str] = field(default_factory=Counter)

    @property
    def ready(self) -> int:
        """Queued jobs whose run_after has passed."""
        return self.by_state[JobState.QUEUED] - self.scheduled

    @property
    def running(self) -> int:
        return sum(self.by_state[s] for s in LEASED_STATES)

    def waited(self, now: datetime) -> timedelta | None:
        """How long the oldest due job has waited to be claimed."""
        return None if self.oldest_due is None else now - self.oldest_due


@dataclass(frozen=True, slots=True)
class WorkerStats:
    live: int
    stale: int


def queue_stats(
    jobs: QuerySet[Job],
    queues: Iterable[str],
    now: datetime,
    *,
    states: Collection[str] | None = None,
) -> list[QueueStats]:
    """Stats of ``jobs`` for the configured ``queues`` and any other queue with rows, by name.

    ``jobs`` is the whole table, or what an API caller may see. ``states``
    limits the counts by state to those (None: every state).
    """
    stats: dict[str, QueueStats] = {name: QueueStats(name) for name in queues}

    def entry(name: str) -> QueueStats:
        return stats.setdefault(name, QueueStats(name))

    jobs = jobs.order_by()
    counted = jobs if states is None else jobs.filter(state__in=list(states))
    for row in counted.values("queue", "state").annotate(
        n=Count("pk"),
        scheduled=Count("pk", filter=Q(state=JobState.QUEUED, run_after__gt=now)),
        oldest_due=Min("run_after", filter=Q(state=JobState.QUEUED, run_after__lte=now)),
    ):
        found = entry(row["queue"])
        found.by_state[row["state"]] = row["n"]
        if row["state"] == JobState.QUEUED:
            found.scheduled = row["scheduled"]
            found.oldest_due = row["oldest_due"]

    since = {key: now - span for key, span in WINDOWS.items()}
    aggregates: dict[str, Any] = {}
    for key, start in since.items():
        ended = Q(finished_at__gte=start)
        aggregates[f"finished_{key}"] = Count("pk", filter=ended)
        aggregates[f"succeeded_{key}"] = Count("pk", filter=ended & Q(state=JobState.SUCCEEDED))
        aggregates[f"failed_{key}"] = Count("pk", filter=ended & Q(state__in=FAILURE_STATES))
    recent: Iterable[Mapping[str, Any]] = (
        jobs.filter(finished_at__gte=min(since.values())).values("queue").annotate(**aggregates)
    )
    for totals in recent:
        found = entry(totals["queue"])
        for key in WINDOWS:
            found.finished[key] = totals[f"finished_{key}"]
            found.succeeded[key] = totals[f"succeeded_{key}"]
            found.failed[key] = totals[f"failed_{key}"]
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
