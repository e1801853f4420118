"""The last hour, minute by minute: throughput, failures, queue depth and pickup latency.

The dashboard's charts read these numbers through the admin's timeseries view;
another surface (the API, the CLI) should read them here too, so that they
cannot drift. Everything is read from rows the system already writes (jobs and
their attempts); nothing samples or stores anything.

Buckets are whole clock minutes: the first starts 59 minutes before the
current one, and the last is the current, partial, minute.

* **Throughput**: attempts that ended in each minute, by what came of them:
  ``succeeded``; ``retried`` (failed, timed out or lost, and the job ran or
  will run again); ``failed`` (the same outcomes, and the job will not run
  again unless an operator retries it); ``cancelled``.
* **Failed jobs**: jobs that ended in a failure state (``statistics.
  FAILURE_STATES``) in each minute, as the dashboard table counts them.
* **Depth**: due jobs waiting to be claimed at the end of each minute (the
  last point is now). It is rebuilt from timestamps: a job's wait runs from
  when it became due (``run_after``) to its claim (the attempt's
  ``started_at``), its cancellation or expiry (``finished_at``), or on. A
  retry overwrites ``run_after``, so for a claim whose job has been queued
  again since, the wait is counted from the end of the attempt before (from
  ``enqueued_at`` for a first attempt): the backoff is counted as waiting, an
  overestimate bounded by the backoffs of the retries in the hour.
* **Pickup latency**: p50, p95 and p99 of ``started_at - run_after`` over the
  claims that started in each minute, nearest-rank. Only claims whose due
  time is still on the row count (``claims`` says how many): the latest claim
  of each job, unless the job has been queued again since.

Costs: every read is bounded by the window through an index — finished jobs
through ``django_jobs_finished_idx``, ended attempts through
``django_jobs_attempt_ended_idx``, running ones through the lease table, due
jobs through the partial claim index — so the cost follows the last hour's
traffic and the backlog, not the history. Claims are fetched row by row (the
percentiles are computed here, the same way on PostgreSQL and SQLite), so a
busy hour costs a row per claim.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db.models import (
    Case,
    Count,
    F,
    OuterRef,
    Q,
    QuerySet,
    Subquery,
    Value,
    When,
)
from django.db.models.functions import Greatest, Trunc

from .models import Attempt, Job, Lease
from .states import AttemptOutcome, JobState
from .statistics import FAILURE_STATES

MINUTES = 60
MINUTE = timedelta(minutes=1)
OUTCOMES = ("succeeded", "retried", "failed", "cancelled")
PERCENTILES = {"p50": 50, "p95": 95, "p99": 99}
FAILED_OUTCOMES = (AttemptOutcome.FAILED, AttemptOutcome.TIMED_OUT, AttemptOutcome.LOST)
# Left the queue without a claim: cancelled or quarantined while queued, or expired.
UNCLAIMED_EXITS = (JobState.CANCELLED, JobState.EXPIRED, JobState.QUARANTINED)


@dataclass(frozen=True, slots=True)
class Timeseries:
    now: datetime
    # The start of each minute, oldest first.
    minutes: list[datetime]
    throughput: dict[str, list[int]]
    failed_jobs: list[int]
    depth: list[int]
    latency: dict[str, list[float | None]]
    claims: list[int]

    def as_json(self) -> dict[str, Any]:
        """The shape the dashboard's script and the API read: ISO times, seconds."""
        return {
            "now": self.now.isoformat(),
            "minutes": [minute.isoformat() for minute in self.minutes],
            "throughput": self.throughput,
            "failed_jobs": self.failed_jobs,
            "depth": self.depth,
            "latency": self.latency,
            "claims": self.claims,
        }


def window_start(now: datetime) -> datetime:
    return now.astimezone(UTC).replace(second=0, microsecond=0) - (MINUTES - 1) * MINUTE


def percentile(ordered: Sequence[float], p: int) -> float:
    """Nearest-rank: the smallest value with at least ``p`` % of the values at or below it."""
    return ordered[max(math.ceil(p / 100 * len(ordered)), 1) - 1]


def timeseries(jobs: QuerySet[Job], now: datetime, *, queue: str | None = None) -> Timeseries:
    """The last hour of ``jobs`` (the whole table, or what an API caller may see).

    ``queue`` limits every series to that queue.
    """
    start = window_start(now)
    db = jobs.db
    jobs = jobs.order_by()
    attempts = Attempt.objects.using(db).order_by()
    if jobs.query.has_filters():
        # Only a narrowed view joins: a semi-join on the whole table would
        # read all of it.
        attempts = attempts.filter(job__in=jobs.values("pk"))
    if queue is not None:
        jobs = jobs.filter(queue=queue)
        attempts = attempts.filter(job__queue=queue)

    def bucket(moment: datetime) -> int:
        return int((moment - start) // MINUTE)

    def minute(field: str | Greatest) -> Trunc:
        return Trunc(field, "minute", tzinfo=UTC)

    throughput = {outcome: [0] * MINUTES for outcome in OUTCOMES}
    ended = attempts.filter(finished_at__gte=start).annotate(at=minute("finished_at"))
    plain = {AttemptOutcome.SUCCEEDED: "succeeded", AttemptOutcome.CANCELLED: "cancelled"}
    for at, outcome, n in ended.values_list("at", "outcome").annotate(n=Count("pk")):
        if outcome in plain and 0 <= bucket(at) < MINUTES:
            throughput[plain[outcome]][bucket(at)] += n
    # Only failures need their job (did it run again?): the join stays as
    # small as the failures, not as large as the hour's work.
    failed = ended.filter(outcome__in=FAILED_OUTCOMES).annotate(
        came_to=Case(
            When(
                Q(number__lt=F("job__attempts")) | Q(job__state=JobState.QUEUED),
                then=Value("retried"),
            ),
            default=Value("failed"),
        )
    )
    for at, came_to, n in failed.values_list("at", "came_to").annotate(n=Count("pk")):
        if 0 <= bucket(at) < MINUTES:
            throughput[came_to][bucket(at)] += n

    failed_jobs = [0] * MINUTES
    failures = jobs.filter(finished_at__gte=start, state__in=FAILURE_STATES)
    by_minute = failures.annotate(at=minute("finished_at")).values_list("at")
    for at, n in by_minute.annotate(n=Count("pk")):
        if 0 <= bucket(at) < MINUTES:
            failed_jobs[bucket(at)] += n

    # A wait, for the depth: the minute it began (0 for any before the window)
    # and the minute it ended (MINUTES for one still waiting).
    waits: list[tuple[int, int]] = []
    waiting = jobs.filter(state=JobState.QUEUED, run_after__lte=now).annotate(
        since=minute(Greatest("run_after", Value(start)))
    )
    for since, n in waiting.values_list("since").annotate(n=Count("pk")):
        waits.extend([(bucket(since), MINUTES)] * n)

    latencies: list[list[float]] = [[] for _ in range(MINUTES)]
    for started, due, entered in _claims(attempts, start, db):
        if due is not None and bucket(started) < MINUTES:
            latencies[bucket(started)].append((started - due).total_seconds())
        waits.append((max(bucket(due or entered), 0), bucket(started)))

    left = jobs.filter(
        finished_at__gte=start,
        state__in=UNCLAIMED_EXITS,
        waiting_on=0,
        run_after__lte=F("finished_at"),
    ).annotate(
        claimed_at=Subquery(
            Attempt.objects.using(db)
            .filter(job=OuterRef("pk"), number=OuterRef("attempts"))
            .order_by()
            .values("started_at")
        )
    )
    unclaimed = left.filter(Q(claimed_at__isnull=True) | Q(claimed_at__lt=F("run_after")))
    for due, finished in unclaimed.values_list("run_after", "finished_at"):
        if finished is not None:
            waits.append((max(bucket(due), 0), bucket(finished)))

    return Timeseries(
        now=now,
        minutes=[start + i * MINUTE for i in range(MINUTES)],
        throughput=throughput,
        failed_jobs=failed_jobs,
        depth=_depth(waits),
        latency={
            name: [percentile(sorted(values), p) if values else None for values in latencies]
            for name, p in PERCENTILES.items()
        },
        claims=[len(values) for values in latencies],
    )


def _claims(
    attempts: QuerySet[Attempt], start: datetime, db: str
) -> Iterable[tuple[datetime, datetime | None, datetime]]:
    """Each claim in the window: when it started, when it was due (None if overwritten since),
    and when its wait began at the earliest (used when the due time is gone).

    Running attempts are read through their leases; ended ones through the
    ended-attempts index. An attempt's start is at most its end, so together
    they are every attempt started in the window.
    """
    previous_end = Subquery(
        Attempt.objects.using(db)
        .filter(job=OuterRef("job"), number=OuterRef("number") - 1)
        .order_by()
        .values("finished_at")
    )
    # The job's run_after is this claim's due time while this is its latest
    # attempt and the row was not queued again: every requeue writes a
    # run_after later than the claim.
    exact = Q(number=F("job__attempts"), job__run_after__lte=F("started_at"))
    fields = ("started_at", "due", "entered")
    for claimed in (
        attempts.filter(finished_at__gte=start, started_at__gte=start),
        attempts.filter(id__in=Lease.objects.using(db).values("attempt_id"), started_at__gte=start),
    ):
        rows = claimed.annotate(
            due=Case(When(exact, then=F("job__run_after"))),
            entered=Case(
                When(exact, then=F("job__run_after")),
                When(number=1, then=F("job__enqueued_at")),
                default=previous_end,
            ),
        ).values_list(*fields)
        for started, due, entered in rows:
            yield started, due, entered if entered is not None else started


def _depth(waits: Iterable[tuple[int, int]]) -> list[int]:
    """Waits open at the end of each minute: begun in or before it, ended after it."""
    change = [0] * (MINUTES + 1)
    for began, ended in waits:
        if began < ended:
            change[began] += 1
            change[min(ended, MINUTES)] -= 1
    depth, open_now = [], 0
    for i in range(MINUTES):
        open_now += change[i]
        depth.append(open_now)
    return depth
