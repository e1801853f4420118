"""Leases: renewed by the heartbeat, reaped when they expire, released when a worker dies.

A lease is a running attempt's claim on its job, fenced by its token (the
attempt number). Losing one records the attempt ``lost`` — never success,
never a plain failure — and requeues the job (or exhausts it, or holds it as
possible poison after ``POISON_LOST_ATTEMPTS`` losses in a row). Safe to run
in every worker at once: expired leases are locked with SKIP LOCKED, so each
is reaped by exactly one reaper, and a worker finishing that very job either
wins the lock first (its report applies) or finds its lease gone (its report
is stale).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction
from django.db.models import F, Value
from django.db.models.functions import Now
from django.utils import timezone

from ..exceptions import LeaseLostError
from ..logging import job_fields
from ..metrics import record
from ..models import Attempt, Job, Lease, Worker
from ..signals import send_on_commit
from ..states import TRANSITIONS, AttemptOutcome, JobState, Transition
from ..values import Progress, Renewed
from . import batches
from .guards import sources, target
from .operator import audit
from .wakeups import wake_on_commit

logger = logging.getLogger("django_jobs.engine")


def renew(
    db: str,
    worker_id: uuid.UUID,
    held: Iterable[tuple[uuid.UUID, int]],
    lease_seconds: float,
    progress: Mapping[tuple[uuid.UUID, int], Progress] | None = None,
) -> Renewed:
    """Extend this worker's leases, write throttled progress, and learn of cancellations.

    Also stamps the worker row, so the heartbeat that keeps leases alive is
    the same one operators see. Progress is written only under a lease this
    worker still holds: a stale holder's progress changes nothing.
    """
    held = set(held)
    with transaction.atomic(using=db):
        # Leases the completer has locked (it is ending them) are skipped, not
        # waited for: the two lock this worker's leases in different orders,
        # and waiting deadlocked them (a second lost by both to detection).
        mine = Lease.objects.using(db).filter(worker_id=worker_id)
        Lease.objects.using(db).filter(
            pk__in=mine.select_for_update(skip_locked=True).values("pk")
        ).update(
            expires_at=Now() + Value(timedelta(seconds=lease_seconds)),
            renewed_at=Now(),
        )
        current = {
            (job_id, token): state
            for job_id, token, state in Lease.objects.using(db)
            .filter(worker_id=worker_id)
            .values_list("job_id", "token", "job__state")
        }
        now = timezone.now()
        for (job_id, token), value in (progress or {}).items():
            if (job_id, token) in current:
                write_progress(db, job_id, token, value, now)
        Worker.objects.using(db).filter(id=worker_id).update(heartbeat_at=Now())
    return Renewed(
        lost=held - set(current),
        cancelling={key for key, state in current.items() if state == JobState.CANCELLING},
    )


def write_progress(db: str, job_id: uuid.UUID, token: int, value: Progress, now: datetime) -> None:
    Job.objects.using(db).filter(id=job_id, attempts=token).update(
        progress_done=value.done,
        progress_total=value.total,
        progress_message=value.message[:500],
        progress_attempt=token,
        progress_at=now,
    )


def reap(db: str, batch: int, poison_after: int) -> int:
    """Turn expired leases into ``lost`` attempts and requeue (or exhaust) their jobs.

    Safe to run in every worker at once: expired leases are locked with
    SKIP LOCKED, so each one is reaped by exactly one reaper, and a worker
    finishing that very job at the same moment either wins the lock first
    (and its report is applied) or finds its lease gone (and its report is
    stale).
    """
    with transaction.atomic(using=db):
        leases = list(
            Lease.objects.using(db)
            .select_for_update(skip_locked=True, of=("self",))
            .filter(expires_at__lt=Now())
            .select_related("job")
            .order_by("expires_at")[:batch]
        )
        lose(
            db,
            leases,
            "lease expired without a report: the worker stopped heartbeating",
            poison_after,
        )
    return len(leases)


def release_worker(db: str, worker_id: uuid.UUID, reason: str, poison_after: int) -> int:
    """Give back every lease of one worker at once, its attempts ``lost``.

    Used when the supervisor saw the worker process die and when a shutdown's
    grace period ends with jobs still running: waiting for the leases to
    expire would only delay the re-run.
    """
    with transaction.atomic(using=db):
        leases = list(
            Lease.objects.using(db)
            .select_for_update(skip_locked=True, of=("self",))
            .select_related("job")
            .filter(worker_id=worker_id)
        )
        lose(db, leases, reason, poison_after)
    return len(leases)


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
        leases = list(
            Lease.objects.using(db)
            .select_for_update(of=("self",))
            .select_related("job")
            .filter(worker_id=worker_id, job_id=job_id, token=token)
        )
        lose(db, leases, reason, poison_after)
    return len(leases)


def lose(db: str, leases: Sequence[Lease], reason: str, poison_after: int) -> None:
    if not leases:
        return
    now = timezone.now()
    moves: list[batches.Move] = []
    for lease in leases:
        job = lease.job
        attempt_changed = (
            Attempt.objects.using(db)
            .filter(id=lease.attempt_id, outcome=AttemptOutcome.RUNNING)
            .update(
                outcome=AttemptOutcome.LOST,
                finished_at=now,
                error_type=f"{LeaseLostError.__module__}.{LeaseLostError.__qualname__}",
                error_message=reason,
            )
        )
        if attempt_changed:
            record.attempt_lost(db, job.queue, job.task_name)
        if not attempt_changed or job.attempts != lease.token:
            continue
        if job.state == JobState.CANCELLING:
            transition = Transition.REAP_CANCEL
        elif job.lost_streak + 1 >= poison_after:
            transition = Transition.POISON
        elif job.attempts < job.max_attempts:
            transition = Transition.REAP
        else:
            transition = Transition.REAP_EXHAUST
        changes: dict[str, Any] = {
            "state": target(transition),
            "updated_at": now,
            "last_error": f"lost: {reason}",
            "lost_streak": F("lost_streak") + 1,
        }
        if transition is Transition.REAP:
            changes["run_after"] = now
        else:
            changes["finished_at"] = now
        moved = (
            Job.objects.using(db)
            .filter(id=job.id, attempts=lease.token, state__in=sources(transition))
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
            lease.token,
            reason,
            target(transition),
            f": {note}" if transition is Transition.POISON else "",
            extra={
                **job_fields(job.id, job.task_name, job.queue, lease.token),
                "outcome": str(AttemptOutcome.LOST),
                "state": str(target(transition)),
            },
        )
    Lease.objects.using(db).filter(job_id__in=[lease.job_id for lease in leases]).delete()
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
