"""Retention: delete finished history so the jobs tables stay the size of the work.

``prune()`` deletes finished jobs older than a cutoff, with their attempts,
leases and audit events, in batches, each batch its own short transaction.
``manage.py jobs prune`` calls it; so can a periodic task of yours.

What it deletes, and why it is shaped this way:

* Jobs that ended ``succeeded``, ``failed``, ``cancelled``, ``discarded`` or
  ``expired`` and whose ``finished_at`` is before the cutoff. Those are history:
  nothing will act on them again unless an operator does.
* ``exhausted`` and ``quarantined`` jobs only when asked (``include_held``):
  they wait for an operator's decision, and deleting them silently would be
  deciding for one. Their age is taken from ``updated_at`` (the last change),
  because a job put on hold yesterday was looked at yesterday, however long
  ago it failed.
* Live jobs (``waiting``, ``queued``, ``running``, ``cancelling``) never, whatever
  their dates; nor a finished job that a ``waiting`` job still waits for.
* ``RetryWindow`` and ``RateWindow`` rows whose window started more than
  ``keep_retry_windows`` / ``keep_rate_windows`` ago (a day by default; ``jobs
  prune`` keeps the longest configured window): a budget or a rate limit only
  reads the current window.
* Fair-queue clocks (``FairClock``) not moved since the cutoff: a tenant
  that received nothing for that long starts level with the others when it
  comes back, with or without its old clock.
* ``Worker`` rows that stopped before the cutoff, and rows of workers that
  never said they stopped (killed with SIGKILL, host lost) whose last
  heartbeat is before the cutoff: nobody alive owns them.

Each batch locks its jobs (``FOR UPDATE SKIP LOCKED``) before deleting them,
so an operator's ``retry`` of the same job either waits for the batch or is
skipped by it, and the delete never races a state change: a job retried just
before the lock is no longer finished and is not selected. Batches keep each
transaction, its locks and its WAL short on a large table; an interrupted
prune has deleted the oldest jobs first and can simply be run again.

Limits: a dry run counts what a real run would delete at that moment; rows
that finish or are retried in between change the numbers. ``--backend`` picks
the database, not the jobs: every job in that database is a candidate,
whichever backend alias enqueued it (workers do not tell them apart either).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db import transaction
from django.db.models import Count, Exists, OuterRef, Q, QuerySet
from django.utils import timezone

from .models import (
    Attempt,
    Dependency,
    FairClock,
    Job,
    JobEvent,
    RateWindow,
    RetryWindow,
    Worker,
)
from .states import FINISHED_STATES, JobState

# Finished, but waiting for an operator: kept unless asked.
HELD_STATES = frozenset({JobState.EXHAUSTED, JobState.QUARANTINED})
# Finished and done with: pruned by age.
PRUNABLE_STATES = FINISHED_STATES - HELD_STATES

DEFAULT_BATCH_SIZE = 1000
RETRY_WINDOW_KEEP = timedelta(days=1)


@dataclass(slots=True)
class PruneResult:
    """What a prune deleted (or, for a dry run, would delete)."""

    cutoff: datetime
    dry_run: bool
    jobs: int = 0
    jobs_by_state: Counter[str] = field(default_factory=Counter)
    attempts: int = 0
    events: int = 0
    batches: int = 0
    retry_windows: int = 0
    rate_windows: int = 0
    fair_clocks: int = 0
    workers: int = 0


def _candidates(db: str, cutoff: datetime, include_held: bool) -> list[QuerySet[Job]]:
    """One queryset per pass; two passes so the common one can use the finished_at index."""
    # A finished job that others still wait for (a failed dependency an
    # operator may retry) is kept: deleting it would leave them waiting for a
    # job that no longer exists.
    awaited = Exists(
        Dependency.objects.using(db).filter(depends_on=OuterRef("pk"), job__state=JobState.WAITING)
    )
    finished = (
        Job.objects.using(db)
        .filter(state__in=PRUNABLE_STATES, finished_at__lt=cutoff)
        .exclude(awaited)
        # Oldest first, along django_jobs_finished_idx, so LIMIT stops early
        # (the model's default ordering, -enqueued_at, would sort every match).
        .order_by("finished_at")
    )
    passes = [finished]
    if include_held:
        held = (
            Job.objects.using(db)
            .filter(state__in=HELD_STATES, updated_at__lt=cutoff)
            .exclude(awaited)
        )
        passes.append(held.order_by())
    return passes


def prune(
    db: str,
    *,
    older_than: timedelta,
    include_held: bool = False,
    batch_size: int = DEFAULT_BATCH_SIZE,
    dry_run: bool = False,
    keep_retry_windows: timedelta = RETRY_WINDOW_KEEP,
    keep_rate_windows: timedelta = RETRY_WINDOW_KEEP,
    now: datetime | None = None,
) -> PruneResult:
    """Delete finished jobs older than ``older_than`` and stale bookkeeping rows.

    Returns the counts; with ``dry_run`` nothing is written and the counts say
    what would have been deleted.
    """
    if older_than <= timedelta(0):
        raise ValueError("older_than must be positive: pruning by age zero deletes everything.")
    if batch_size < 1:
        raise ValueError("batch_size must be at least 1.")
    now = now or timezone.now()
    cutoff = now - older_than
    result = PruneResult(cutoff=cutoff, dry_run=dry_run)
    passes = _candidates(db, cutoff, include_held)
    windows = RetryWindow.objects.using(db).filter(window_start__lt=now - keep_retry_windows)
    rate_windows = RateWindow.objects.using(db).filter(window_start__lt=now - keep_rate_windows)
    clocks = FairClock.objects.using(db).filter(updated_at__lt=cutoff)
    workers = Worker.objects.using(db).filter(
        Q(stopped_at__lt=cutoff) | Q(stopped_at__isnull=True, heartbeat_at__lt=cutoff)
    )
    if dry_run:
        for candidates in passes:
            ids = candidates.order_by().values("id")
            for row in candidates.order_by().values("state").annotate(n=Count("id")):
                result.jobs_by_state[row["state"]] += row["n"]
            result.attempts += Attempt.objects.using(db).filter(job_id__in=ids).count()
            result.events += JobEvent.objects.using(db).filter(job_id__in=ids).count()
        result.jobs = result.jobs_by_state.total()
        result.retry_windows = windows.count()
        result.rate_windows = rate_windows.count()
        result.fair_clocks = clocks.count()
        result.workers = workers.count()
        return result
    for candidates in passes:
        while _delete_batch(db, candidates, batch_size, result):
            result.batches += 1
    result.jobs = result.jobs_by_state.total()
    result.retry_windows = windows.delete()[0]
    result.rate_windows = rate_windows.delete()[0]
    result.fair_clocks = clocks.delete()[0]
    result.workers = workers.delete()[0]
    return result


def _delete_batch(db: str, candidates: QuerySet[Job], size: int, result: PruneResult) -> bool:
    """Delete up to ``size`` candidates and everything that cascades from them.

    ``DELETE ... WHERE id IN (SELECT id ... LIMIT n FOR UPDATE SKIP LOCKED)``,
    in two statements so the cascade (attempts, leases, events, and any model
    that points at Job with CASCADE) goes through Django's collector and is
    counted. Returns False when nothing was left to delete.
    """
    with transaction.atomic(using=db):
        rows = list(
            candidates.select_for_update(skip_locked=True).values_list("id", "state")[:size]
        )
        if not rows:
            return False
        # only("id"): the collector would otherwise load every payload and result.
        _, deleted = Job.objects.using(db).filter(id__in=[r[0] for r in rows]).only("id").delete()
    result.jobs_by_state.update(state for _, state in rows)
    result.attempts += deleted.get(Attempt._meta.label, 0)
    result.events += deleted.get(JobEvent._meta.label, 0)
    return True
