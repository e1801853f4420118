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
  claims that started in each minute, nearest-rank, each reported as the
  upper bound of its histogram bucket (``LATENCY_BOUNDS``: "p95 ≤ 0.02 s"),
  or, above the last bound, as the minute's slowest claim. Only claims whose
  due time is still on the row count (``claims`` says how many): the latest
  claim of each job, unless the job has been queued again since.

Costs: every read is bounded by the window through an index — finished jobs
through ``django_jobs_finished_idx``, ended attempts through
``django_jobs_attempt_ended_idx``, running ones through the lease table, due
jobs through the partial claim index — so the cost follows the last hour's
traffic and the backlog, not the history. And every read is aggregated in the
database, the same ORM on PostgreSQL and SQLite: a wait comes back as a count
per (minute it began, minute it ended), a claim's latency as a count per
(minute, bucket), so no query returns more than 61 * 61 rows however
many jobs the hour ran. The database still reads each of the hour's rows; what
no longer grows with them is what crosses the wire and what Python builds.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db.models import (
    Case,
    Count,
    DurationField,
    ExpressionWrapper,
    F,
    Max,
    OuterRef,
    Q,
    QuerySet,
    Subquery,
    Value,
    When,
)
from django.db.models.functions import Coalesce, Greatest, Trunc

from .models import Attempt, Job
from .states import LEASED_STATES, AttemptOutcome, JobState
from .statistics import FAILURE_STATES

MINUTES = 60
MINUTE = timedelta(minutes=1)
OUTCOMES = ("succeeded", "retried", "failed", "cancelled")
PERCENTILES = {"p50": 50, "p95": 95, "p99": 99}
FAILED_OUTCOMES = (AttemptOutcome.FAILED, AttemptOutcome.TIMED_OUT, AttemptOutcome.LOST)
# Left the queue without a claim: cancelled or quarantined while queued, or expired.
UNCLAIMED_EXITS = (JobState.CANCELLED, JobState.EXPIRED, JobState.QUARANTINED)
# Upper bounds (inclusive) of the pickup latency histogram: 1-2-5 steps from
# 1 ms to 2,000 s, then an hour; a last, open, bucket holds anything slower.
# Fixed bounds let the database count claims per bucket: a percentile is
# then read from at most len + 1 counts a minute, at the price of reporting
# a bucket's bound (at most 2.5 times the true value) instead of the value.
LATENCY_BOUNDS: tuple[timedelta, ...] = (
    *(
        timedelta(milliseconds=step * 10**power)
        for power in range(7)
        for step in (1, 2, 5)
        if step * 10**power < 3_600_000
    ),
    timedelta(hours=1),
)


@dataclass(frozen=True, slots=True)
class Timeseries:
    now: datetime
    # The start of each minute, oldest first.
    minutes: list[datetime]
    throughput: dict[str, list[int]]
    failed_jobs: list[int]
    depth: list[int]
    # Upper bounds, in seconds, of each minute's percentiles (see LATENCY_BOUNDS).
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


def percentile_bucket(counts: Sequence[int], p: int) -> int:
    """Nearest-rank over a histogram: the first bucket whose running total reaches ``p`` %.

    The rank is computed in integers: ``0.95 * 20`` in floating point need not be 19.
    """
    rank = max(-(-p * sum(counts) // 100), 1)
    total = 0
    for index, count in enumerate(counts):
        total += count
        if total >= rank:
            return index
    raise ValueError(f"No percentile of an empty histogram: {list(counts)!r}.")


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

    def minute(field: Any) -> Trunc:
        return Trunc(field, "minute", tzinfo=UTC)

    def began(field: Any) -> Trunc:
        # Clamped in the database, so that waits begun before the window
        # make one group, not one per minute of the history.
        return minute(Greatest(field, Value(start)))

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

    # Waits, for the depth, counted by the minute each began (0 for any
    # before the window) and the minute it ended (MINUTES while it goes on).
    waits: Counter[tuple[int, int]] = Counter()
    waiting = jobs.filter(state=JobState.QUEUED, run_after__lte=now).annotate(
        since=began("run_after")
    )
    for since, n in waiting.values_list("since").annotate(n=Count("pk")):
        waits[bucket(since), MINUTES] += n

    histograms = [[0] * (len(LATENCY_BOUNDS) + 1) for _ in range(MINUTES)]
    slowest: list[timedelta] = [timedelta(0)] * MINUTES
    for claimed in _claimed(attempts, start, db):
        pairs = claimed.annotate(since=began(_wait_began(db)), at=minute("started_at"))
        for since, at, n in pairs.values_list("since", "at").annotate(n=Count("pk")):
            waits[bucket(since), bucket(at)] += n
        measured = claimed.filter(_DUE_ON_ROW).annotate(
            at=minute("started_at"),
            latency=ExpressionWrapper(
                F("started_at") - F("job__run_after"), output_field=DurationField()
            ),
            rank=Case(
                *(
                    When(latency__lte=bound, then=Value(i))
                    for i, bound in enumerate(LATENCY_BOUNDS)
                ),
                default=Value(len(LATENCY_BOUNDS)),
            ),
        )
        by_bucket = measured.values_list("at", "rank").annotate(n=Count("pk"), top=Max("latency"))
        for at, rank, n, top in by_bucket:
            if bucket(at) < MINUTES:
                histograms[bucket(at)][rank] += n
                slowest[bucket(at)] = max(slowest[bucket(at)], top)

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
    exits = unclaimed.annotate(since=began("run_after"), at=minute("finished_at"))
    for since, at, n in exits.values_list("since", "at").annotate(n=Count("pk")):
        waits[bucket(since), bucket(at)] += n

    def upper_bound(i: int, p: int) -> float | None:
        if not any(histograms[i]):
            return None
        rank = percentile_bucket(histograms[i], p)
        top = LATENCY_BOUNDS[rank] if rank < len(LATENCY_BOUNDS) else slowest[i]
        return top.total_seconds()

    return Timeseries(
        now=now,
        minutes=[start + i * MINUTE for i in range(MINUTES)],
        throughput=throughput,
        failed_jobs=failed_jobs,
        depth=_depth(waits),
        latency={
            name: [upper_bound(i, p) for i in range(MINUTES)] for name, p in PERCENTILES.items()
        },
        claims=[sum(histogram) for histogram in histograms],
    )


# The job's run_after is this claim's due time while this is its latest
# attempt and the row was not queued again: every requeue writes a
# run_after later than the claim.
_DUE_ON_ROW = Q(number=F("job__attempts"), job__run_after__lte=F("started_at"))


def _claimed(attempts: QuerySet[Attempt], start: datetime, db: str) -> Iterator[QuerySet[Attempt]]:
    """The attempts started in the window, in two reads that each use an index.

    Running attempts are read through their running jobs (the holder index);
    ended ones through the ended-attempts index. An attempt's start is at most its end, so together
    they are every attempt started in the window.
    """
    yield attempts.filter(finished_at__gte=start, started_at__gte=start)
    running = Job.objects.using(db).filter(state__in=sorted(LEASED_STATES)).values("id")
    yield attempts.filter(job__in=running, finished_at__isnull=True, started_at__gte=start)


def _wait_began(db: str) -> Coalesce:
    """When a claim's wait began: its due time if still on the row, else the
    earliest it can have been due (the end of the attempt before, or the
    enqueue for a first attempt), else the claim itself (no wait counted)."""
    previous_end = Subquery(
        Attempt.objects.using(db)
        .filter(job=OuterRef("job"), number=OuterRef("number") - 1)
        .order_by()
        .values("finished_at")
    )
    return Coalesce(
        Case(
            When(_DUE_ON_ROW, then=F("job__run_after")),
            When(number=1, then=F("job__enqueued_at")),
            default=previous_end,
        ),
        F("started_at"),
    )


def _depth(waits: Mapping[tuple[int, int], int]) -> list[int]:
    """Waits open at the end of each minute: begun in or before it, ended after it."""
    change = [0] * (MINUTES + 1)
    for (began, ended), n in waits.items():
        if began < ended:
            change[began] += n
            change[min(ended, MINUTES)] -= n
    depth, open_now = [], 0
    for i in range(MINUTES):
        open_now += change[i]
        depth.append(open_now)
    return depth
