"""Leases: kept by the holder's heartbeat, reaped when it stops, released when a worker dies.

A lease is a running attempt's claim on its job, and it lives on the job row:
``leased_by`` (the worker) beside the token (``attempts``, the attempt
number), written by the claim's update and cleared by the update that ends
the attempt. It lives as long as its worker heartbeats: it has expired when it
was taken more than ``LEASE_SECONDS`` ago and its worker's ``heartbeat_at`` is
older than that too (or the worker row is gone, or marked stopped) — the
moment a lease row renewed by the same heartbeats expired. So a heartbeat
keeps every lease of its worker with one write, to the worker row, whatever
the number of running jobs.

Losing one records the attempt ``lost`` — never success, never a plain
failure — and requeues the job (or exhausts it, or holds it as possible poison
after ``POISON_LOST_ATTEMPTS`` losses in a row). Safe to run in every worker
at once: expired leases' jobs are locked with SKIP LOCKED, so each is reaped
by exactly one reaper, and a worker finishing that very job either wins the
lock first (its report applies) or finds the lease gone (its report is stale).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction
from django.db.models import (
    BooleanField,
    Exists,
    ExpressionWrapper,
    F,
    OuterRef,
    Q,
    QuerySet,
    Value,
)
from django.db.models.functions import Now
from django.utils import timezone

from ..exceptions import LeaseLostError, error_type
from ..logging import job_fields
from ..metrics import record
from ..models import Attempt, Job, Worker
from ..signals import send_on_commit
from ..states import LEASED_STATES, TRANSITIONS, AttemptOutcome, JobState, Transition
from ..values import Progress, Renewed, Unheard
from . import batches
from .guards import sources, target
from .operator import audit
from .wakeups import wake_on_commit

logger = logging.getLogger("django_jobs.engine")

LEASED = sorted(LEASED_STATES)
# What losing a lease reads of its job.
LOST_FIELDS = (
    "id",
    "task_name",
    "queue",
    "state",
    "attempts",
    "max_attempts",
    "lost_streak",
    "batch_id",
    "leased_by",
)


def held_by(db: str, worker_id: uuid.UUID) -> QuerySet[Job]:
    """The jobs whose lease ``worker_id`` holds: read through django_jobs_holder_idx."""
    return Job.objects.using(db).filter(leased_by=worker_id, state__in=LEASED)


def expired(db: str, lease_seconds: float) -> QuerySet[Job]:
    """Leased jobs whose lease has expired: taken, and last heartbeaten, too long ago.

    Reads the running jobs only (django_jobs_holder_idx), each against its
    holder's worker row by primary key: never the backlog of queued jobs.
    """
    stale = Now() - Value(timedelta(seconds=lease_seconds))
    alive = Worker.objects.using(db).filter(
        id=OuterRef("leased_by"), stopped_at__isnull=True, heartbeat_at__gte=stale
    )
    return (
        Job.objects.using(db).filter(state__in=LEASED, leased_at__lt=stale).exclude(Exists(alive))
    )


def renew(
    db: str,
    worker_id: uuid.UUID,
    held: Iterable[tuple[uuid.UUID, int]],
    progress: Mapping[tuple[uuid.UUID, int], Progress] | None,
    lease_seconds: float,
) -> Renewed:
    """Keep this worker's leases, write throttled progress, and learn of loss and cancellation.

    One write keeps every lease: the worker row's heartbeat, the same one
    operators see. The jobs are only read, to learn which leases are gone and
    which jobs were asked to cancel. Progress is written only under a lease
    this worker still holds: a stale holder's progress changes nothing.
    """
    held = set(held)
    # Read with each lease: whether it was taken a lease ago, by the database's
    # clock. A lease the worker does not name is nearly always a claim it is
    # about to start; only one that old needs a look at its attempt.
    long_held = Q(leased_at__lt=Now() - Value(timedelta(seconds=lease_seconds)))
    with transaction.atomic(using=db):
        rows = list(
            held_by(db, worker_id)
            .order_by()
            .annotate(long_held=ExpressionWrapper(long_held, output_field=BooleanField()))
            .values_list("id", "attempts", "state", "long_held")
        )
        current = {(job_id, token): state for job_id, token, state, _ in rows}
        unknown = {(job_id, token) for job_id, token, _, old in rows if old} - held
        writes = {key: value for key, value in (progress or {}).items() if key in current}
        if writes:
            write_progress(db, worker_id, writes, timezone.now())
        # Last, as the completer updates this row last too (jobs_done): the
        # two lock a job row and the worker row in the same order.
        Worker.objects.using(db).filter(id=worker_id).update(heartbeat_at=Now())
    return Renewed(
        lost=held - set(current),
        cancelling={key for key, state in current.items() if state == JobState.CANCELLING},
        unknown=unheard_of(db, worker_id, unknown) if unknown else {},
    )


def unheard_of(
    db: str, worker_id: uuid.UUID, keys: Iterable[tuple[uuid.UUID, int]]
) -> dict[tuple[uuid.UUID, int], Unheard]:
    """These leases, held by the worker a lease long and never named by it, as it must end them.

    A claim the worker just made is started a moment after its commit; one
    still unknown a lease later never reached it. Each comes with its
    attempt's id (the job's current attempt), to end that attempt, and its
    job's task and queue, to say which it was. A lease gone since is left out.
    """
    rows = (
        Attempt.objects.using(db)
        .filter(
            job_id__in=[job_id for job_id, _ in keys],
            number=F("job__attempts"),
            job__leased_by=worker_id,
        )
        .values_list("job_id", "number", "id", "job__task_name", "job__queue")
    )
    return {
        (job_id, number): Unheard(attempt_id, task_name, queue)
        for job_id, number, attempt_id, task_name, queue in rows
    }


def write_progress(
    db: str,
    worker_id: uuid.UUID,
    writes: Mapping[tuple[uuid.UUID, int], Progress],
    now: datetime,
) -> None:
    """Progress of jobs whose lease this worker holds under those tokens.

    Rows the completer has locked (it is ending their attempts, with the
    progress in its report) are skipped, not waited for: the two lock this
    worker's jobs in different orders, and waiting deadlocked them.
    """
    locked = (
        held_by(db, worker_id)
        .filter(id__in=[job_id for job_id, _ in writes])
        .select_for_update(skip_locked=True)
        .order_by()
        .values_list("id", "attempts")
    )
    for job_id, token in list(locked):
        if (job_id, token) in writes:
            Job.objects.using(db).filter(id=job_id, attempts=token, leased_by=worker_id).update(
                **progress_fields(token, writes[(job_id, token)], now)
            )


def progress_fields(token: int, value: Progress, now: datetime) -> dict[str, Any]:
    """The job columns that hold the progress ``value`` of attempt ``token``."""
    return {
        "progress_done": value.done,
        "progress_total": value.total,
        "progress_message": value.message[:500],
        "progress_attempt": token,
        "progress_at": now,
    }


def reap(db: str, batch: int, poison_after: int, lease_seconds: float) -> int:
    """Turn expired leases into ``lost`` attempts and requeue (or exhaust) their jobs.

    Safe to run in every worker at once: the expired leases' jobs are locked
    with SKIP LOCKED, so each one is reaped by exactly one reaper, and a
    worker finishing that very job at the same moment either wins the lock
    first (and its report is applied) or finds its lease gone (and its
    report is stale).
    """
    with transaction.atomic(using=db):
        jobs = list(
            expired(db, lease_seconds)
            .select_for_update(skip_locked=True)
            .only(*LOST_FIELDS)
            .order_by("leased_at")[:batch]
        )
        lose(
            db,
            jobs,
            "lease expired without a report: the worker stopped heartbeating",
            poison_after,
        )
    return len(jobs)


def release_worker(
    db: str, worker_id: uuid.UUID, reason: str, poison_after: int, *, suspect: bool = True
) -> int:
    """Give back every lease of one worker at once, its attempts ``lost``.

    Used when the supervisor saw the worker process die and when a shutdown's
    grace period ends with jobs still running: waiting for the leases to
    expire would only delay the re-run. ``suspect=False`` for the second: a
    worker that stops on purpose says nothing of whether its jobs kill
    workers (``lose``).
    """
    with transaction.atomic(using=db):
        jobs = list(
            held_by(db, worker_id)
            .select_for_update(skip_locked=True)
            .only(*LOST_FIELDS)
            .order_by("id")
        )
        lose(db, jobs, reason, poison_after, suspect=suspect)
    return len(jobs)


def release_lease(
    db: str,
    worker_id: uuid.UUID,
    job_id: uuid.UUID,
    token: int,
    reason: str,
    poison_after: int,
) -> int:
    """Give back one lease, its attempt ``lost``: the worker saw the attempt die.

    Used for an isolated attempt whose child process died: the worker is alive
    and knows the attempt ended, but not what it did before it ended.
    """
    with transaction.atomic(using=db):
        jobs = list(
            held_by(db, worker_id)
            .filter(id=job_id, attempts=token)
            .select_for_update()
            .only(*LOST_FIELDS)
            .order_by()
        )
        lose(db, jobs, reason, poison_after)
    return len(jobs)


def lose(
    db: str, jobs: Sequence[Job], reason: str, poison_after: int, *, suspect: bool = True
) -> None:
    """End the leases of locked, leased ``jobs``: each attempt ``lost``, each job moved on.

    ``suspect``: whether the loss may be the job's doing (its worker died, its
    lease expired), counted in ``lost_streak`` towards poison. A worker that
    releases what outlived its shutdown's grace is not: counted, a long job
    interrupted by three deploys in a row was quarantined as poison, and ran
    isolated after each one.
    """
    if not jobs:
        return
    now = timezone.now()
    moves: list[batches.Move] = []
    for job in jobs:
        token = job.attempts
        attempt_changed = (
            Attempt.objects.using(db)
            .filter(job_id=job.id, number=token, outcome=AttemptOutcome.RUNNING)
            .update(
                outcome=AttemptOutcome.LOST,
                finished_at=now,
                error_type=error_type(LeaseLostError),
                error_message=reason,
            )
        )
        if attempt_changed:
            record.attempt_lost(db, job.queue, job.task_name)
        else:
            # No running attempt to lose (only a hand-written row is so): the
            # lease ends and the job stays as it is, for an operator to see.
            Job.objects.using(db).filter(id=job.id, leased_by=job.leased_by).update(
                leased_by=None, leased_at=None
            )
            continue
        if job.state == JobState.CANCELLING:
            transition = Transition.REAP_CANCEL
        elif suspect and job.lost_streak + 1 >= poison_after:
            transition = Transition.POISON
        elif job.attempts < job.max_attempts:
            transition = Transition.REAP
        else:
            transition = Transition.REAP_EXHAUST
        changes: dict[str, Any] = {
            "state": target(transition),
            "updated_at": now,
            "last_error": f"lost: {reason}",
            "leased_by": None,
            "leased_at": None,
        }
        if suspect:
            changes["lost_streak"] = F("lost_streak") + 1
        if transition is Transition.REAP:
            changes["run_after"] = now
        else:
            changes["finished_at"] = now
        moved = (
            Job.objects.using(db)
            .filter(
                id=job.id,
                attempts=token,
                leased_by=job.leased_by,
                state__in=sources(transition),
            )
            .update(**changes)
        )
        if not moved:
            continue
        if job.batch_id is not None:
            moves.append((job.batch_id, job.state, target(transition)))
        note = reason
        if transition is Transition.POISON:
            note = f"{poison_after} attempts in a row were lost; held as possible poison."
            audit(db, job.id, transition, job.state, "system", note, now)
        if transition is Transition.REAP:
            # Commit-time wake-up, so an idle worker re-runs it without waiting a poll.
            wake_on_commit(db, job.queue)
        send_on_commit(db, job.id, transition, job.state, target(transition), note=note)
        # Exhausted or held: someone must look. Requeued: it runs again by itself.
        held = transition in (Transition.REAP_EXHAUST, Transition.POISON)
        logger.log(
            logging.ERROR if held else logging.WARNING,
            "Job %s (%s, queue %s) attempt %d lost (%s); job %s%s",
            job.id,
            job.task_name,
            job.queue,
            token,
            reason,
            target(transition),
            f": {note}" if transition is Transition.POISON else "",
            extra={
                **job_fields(job.id, job.task_name, job.queue, token),
                "outcome": str(AttemptOutcome.LOST),
                "state": str(target(transition)),
            },
        )
    batches.moved(db, moves)


def expire_overdue(db: str, batch: int) -> int:
    """Mark queued jobs whose deadline passed ``expired``: they must never run late."""
    now = timezone.now()
    with transaction.atomic(using=db):
        locked = list(
            Job.objects.using(db)
            .select_for_update(skip_locked=True)
            .filter(state=JobState.QUEUED, expires_at__lte=Now())
            .values_list("id", "batch_id")[:batch]
        )
        if not locked:
            return 0
        ids = [job_id for job_id, _ in locked]
        rule = TRANSITIONS[Transition.EXPIRE]
        expired = (
            Job.objects.using(db)
            .filter(id__in=ids, state__in=sources(Transition.EXPIRE))
            .update(
                state=rule.target,
                finished_at=now,
                updated_at=now,
                last_error="expired: its deadline passed before it started",
            )
        )
        for job_id in ids:
            send_on_commit(db, job_id, Transition.EXPIRE, JobState.QUEUED, rule.target)
        batches.moved(db, [(b, JobState.QUEUED, rule.target) for _, b in locked if b is not None])
    return expired
