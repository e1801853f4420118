"""Every write to jobs, attempts and leases, each a guarded compare-and-set.

Nothing else in django_jobs changes a job's state. Each function here:

* guards on the current state (from ``states.TRANSITIONS``) *and*, for work
  reported by a worker, on the lease token, so two actors racing (worker vs.
  reaper, two reapers, a worker that came back from a long pause) cannot both
  win;
* checks how many rows it changed, and reports the ones it could not change as
  stale instead of pretending they were applied;
* runs in one short transaction of the jobs database.

Guarantees and limits, honestly:

* Delivery is at least once. When a lease expires the worker may or may not
  have done the work; the attempt is recorded ``lost`` (never success, never a
  plain failure) and the job runs again. Tasks make their effects idempotent
  with ``context.stable_key``.
* The reaper trusts the database clock (``Now()``), so worker hosts may drift;
  ``run_after`` of new jobs is taken from the enqueuing host's clock.
* On SQLite there are no row locks: ``skip_locked`` is a no-op and correctness
  comes from ``BEGIN IMMEDIATE`` serialising every transaction (see checks.py).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction
from django.db.models import F, Q, Value
from django.db.models.functions import Coalesce, Now
from django.utils import timezone

from .models import Attempt, Job, Lease, Worker
from .retry import Decision, Verdict
from .states import TRANSITIONS, AttemptOutcome, JobState, Transition
from .wakeup import wake_on_commit

logger = logging.getLogger("django_jobs.transitions")


@dataclass(frozen=True, slots=True)
class WorkerIdentity:
    id: uuid.UUID
    name: str  # host:pid, for people


@dataclass(frozen=True, slots=True)
class Claimed:
    """What a worker needs to run one attempt; ``token`` fences its reports."""

    job_id: uuid.UUID
    attempt_id: int
    token: int
    task_name: str
    args: list[Any]
    kwargs: dict[str, Any]
    queue: str
    priority: int
    max_attempts: int
    timeout: float | None
    tenant: str
    idempotency_key: str | None
    backend: str
    enqueued_at: datetime
    started_at: datetime
    lease_expires_at: datetime


@dataclass(frozen=True, slots=True)
class Report:
    """A worker's account of how one attempt ended."""

    job_id: uuid.UUID
    token: int
    attempt_id: int
    outcome: AttemptOutcome  # SUCCEEDED, FAILED or TIMED_OUT
    result: Any = None
    error_type: str = ""
    error_message: str = ""
    traceback: str = ""
    decision: Decision | None = None  # for failures: what the retry policy said

    def as_late_report(self) -> dict[str, Any]:
        return {
            "outcome": str(self.outcome),
            "error_type": self.error_type,
            "error_message": self.error_message[:2000],
            "reported_at": timezone.now().isoformat(),
        }


@dataclass(slots=True)
class Finished:
    applied: list[tuple[Report, JobState]] = field(default_factory=list)
    stale: list[Report] = field(default_factory=list)


def _sources(transition: Transition) -> list[str]:
    return [str(s) for s in TRANSITIONS[transition].sources]


def _target(transition: Transition) -> str:
    return str(TRANSITIONS[transition].target)


# ---------------------------------------------------------------------------
# Claim
# ---------------------------------------------------------------------------


def claim(
    db: str,
    worker: WorkerIdentity,
    queues: Sequence[str],
    limit: int,
    lease_seconds: float,
) -> list[Claimed]:
    """Lease up to ``limit`` ready jobs, highest priority then oldest first.

    One short transaction: lock the rows (``SKIP LOCKED``, so concurrent
    claimers take disjoint batches instead of queueing behind each other),
    mark them running, write one attempt and one lease each. The task itself
    runs after this commits, outside any transaction of ours.
    """
    if limit < 1:
        return []
    with transaction.atomic(using=db):
        rows = list(
            Job.objects.using(db)
            .select_for_update(skip_locked=True, of=("self",))
            .filter(state=JobState.QUEUED, queue__in=queues, run_after__lte=Now())
            .order_by("-priority", "run_after")
            .annotate(db_now=Now())
            .only(
                "id",
                "task_name",
                "args",
                "kwargs",
                "queue",
                "priority",
                "attempts",
                "max_attempts",
                "timeout",
                "tenant",
                "idempotency_key",
                "backend",
                "enqueued_at",
                "started_at",
            )[:limit]
        )
        if not rows:
            return []
        now: datetime = rows[0].db_now
        expires = now + timedelta(seconds=lease_seconds)
        updated = (
            Job.objects.using(db)
            .filter(id__in=[r.id for r in rows], state__in=_sources(Transition.CLAIM))
            .update(
                state=_target(Transition.CLAIM),
                attempts=F("attempts") + 1,
                started_at=Coalesce(F("started_at"), Value(now)),
                updated_at=now,
            )
        )
        # We hold the row locks, so nobody can have moved these rows since the
        # SELECT; a mismatch means the locking assumption is broken.
        assert updated == len(rows), f"claimed {len(rows)} rows but updated {updated}"
        attempts = Attempt.objects.using(db).bulk_create(
            Attempt(
                job_id=r.id,
                number=r.attempts + 1,
                worker_id=worker.id,
                worker_name=worker.name,
                started_at=now,
            )
            for r in rows
        )
        Lease.objects.using(db).bulk_create(
            Lease(
                job_id=r.id,
                attempt_id=a.pk,
                token=a.number,
                worker_id=worker.id,
                acquired_at=now,
                renewed_at=now,
                expires_at=expires,
            )
            for r, a in zip(rows, attempts, strict=True)
        )
    return [
        Claimed(
            job_id=r.id,
            attempt_id=a.pk,
            token=a.number,
            task_name=r.task_name,
            args=r.args,
            kwargs=r.kwargs,
            queue=r.queue,
            priority=r.priority,
            max_attempts=r.max_attempts,
            timeout=r.timeout,
            tenant=r.tenant,
            idempotency_key=r.idempotency_key,
            backend=r.backend,
            enqueued_at=r.enqueued_at,
            started_at=r.started_at or now,
            lease_expires_at=expires,
        )
        for r, a in zip(rows, attempts, strict=True)
    ]


# ---------------------------------------------------------------------------
# Heartbeat
# ---------------------------------------------------------------------------


def renew(
    db: str,
    worker_id: uuid.UUID,
    held: Iterable[tuple[uuid.UUID, int]],
    lease_seconds: float,
) -> set[tuple[uuid.UUID, int]]:
    """Extend this worker's leases; return the (job, token) pairs it no longer holds.

    Also stamps the worker row, so the heartbeat that keeps leases alive is
    the same one operators see.
    """
    held = set(held)
    with transaction.atomic(using=db):
        Lease.objects.using(db).filter(worker_id=worker_id).update(
            expires_at=Now() + Value(timedelta(seconds=lease_seconds)),
            renewed_at=Now(),
        )
        still = set(
            Lease.objects.using(db).filter(worker_id=worker_id).values_list("job_id", "token")
        )
        Worker.objects.using(db).filter(id=worker_id).update(heartbeat_at=Now())
    return held - still


# ---------------------------------------------------------------------------
# Completion and failure
# ---------------------------------------------------------------------------


def _transition_for(report: Report) -> Transition:
    if report.outcome == AttemptOutcome.SUCCEEDED:
        return Transition.COMPLETE
    assert report.decision is not None, "a failure report needs the retry policy's decision"
    return {
        Verdict.RETRY: Transition.SCHEDULE_RETRY,
        Verdict.EXHAUSTED: Transition.EXHAUST,
        Verdict.GIVE_UP: Transition.FAIL,
    }[report.decision.verdict]


def finish(db: str, worker_id: uuid.UUID, reports: Sequence[Report]) -> Finished:
    """Apply a batch of attempt outcomes; fence each on its lease.

    A report whose lease is gone (reaped, released, or re-claimed under a newer
    token) is *stale*: it is written to its attempt's ``late_report`` and
    changes nothing else.
    """
    done = Finished()
    if not reports:
        return done
    now = timezone.now()
    with transaction.atomic(using=db):
        # Lock the leases we claim to hold: the reaper locks them the same way
        # (SKIP LOCKED), so it either reaps before us or skips while we finish.
        held = set(
            Lease.objects.using(db)
            .select_for_update()
            .filter(worker_id=worker_id, job_id__in=[r.job_id for r in reports])
            .values_list("job_id", "token")
        )
        current = [r for r in reports if (r.job_id, r.token) in held]
        done.stale = [r for r in reports if (r.job_id, r.token) not in held]
        if current:
            Lease.objects.using(db).filter(
                job_id__in=[r.job_id for r in current], worker_id=worker_id
            ).delete()
        for report in current:
            transition = _transition_for(report)
            job_changes: dict[str, Any] = {
                "state": _target(transition),
                "updated_at": now,
            }
            if transition is Transition.COMPLETE:
                job_changes.update(result=report.result, finished_at=now, last_error="")
            else:
                job_changes["last_error"] = _short_error(report)
                if transition is Transition.SCHEDULE_RETRY:
                    assert report.decision is not None
                    job_changes["run_after"] = now + timedelta(seconds=report.decision.delay)
                else:
                    job_changes["finished_at"] = now
            changed = (
                Job.objects.using(db)
                .filter(
                    id=report.job_id,
                    attempts=report.token,
                    state__in=_sources(transition),
                )
                .update(**job_changes)
            )
            if changed != 1:
                # The lease was ours but the job moved on (an operator verb that
                # keeps leases would do this): treat it like any late report.
                done.stale.append(report)
                continue
            Attempt.objects.using(db).filter(
                id=report.attempt_id, outcome=AttemptOutcome.RUNNING
            ).update(
                outcome=report.outcome,
                finished_at=now,
                error_type=report.error_type,
                error_message=report.error_message,
                traceback=report.traceback,
            )
            done.applied.append((report, JobState(_target(transition))))
        for report in done.stale:
            Attempt.objects.using(db).filter(id=report.attempt_id, late_report__isnull=True).update(
                late_report=report.as_late_report()
            )
        if done.applied:
            Worker.objects.using(db).filter(id=worker_id).update(
                jobs_done=F("jobs_done") + len(done.applied)
            )
    return done


def _short_error(report: Report) -> str:
    first_line = report.error_message.strip().splitlines()[0] if report.error_message else ""
    return f"{report.error_type}: {first_line}"[:1000]


# ---------------------------------------------------------------------------
# Recovery: the reaper and the supervisor's immediate release
# ---------------------------------------------------------------------------


def reap(db: str, batch: int = 100) -> int:
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
        _lose(db, leases, "lease expired without a report: the worker stopped heartbeating")
    return len(leases)


def release_worker(db: str, worker_id: uuid.UUID, reason: str) -> int:
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
        _lose(db, leases, reason)
    return len(leases)


def _lose(db: str, leases: Sequence[Lease], reason: str) -> None:
    if not leases:
        return
    now = timezone.now()
    for lease in leases:
        attempt_changed = (
            Attempt.objects.using(db)
            .filter(id=lease.attempt_id, outcome=AttemptOutcome.RUNNING)
            .update(
                outcome=AttemptOutcome.LOST,
                finished_at=now,
                error_type="django_jobs.exceptions.LeaseLostError",
                error_message=reason,
            )
        )
        base = Job.objects.using(db).filter(id=lease.job_id, attempts=lease.token)
        requeued = (
            base.filter(
                Q(attempts__lt=F("max_attempts")), state__in=_sources(Transition.REAP)
            ).update(
                state=_target(Transition.REAP),
                run_after=now,
                updated_at=now,
                last_error=f"lost: {reason}",
            )
            if attempt_changed
            else 0
        )
        if attempt_changed and not requeued:
            base.filter(state__in=_sources(Transition.REAP_EXHAUST)).update(
                state=_target(Transition.REAP_EXHAUST),
                finished_at=now,
                updated_at=now,
                last_error=f"lost: {reason}",
            )
        if requeued:
            # Commit-time wake-up, so an idle worker re-runs it without waiting a poll.
            wake_on_commit(db, lease.job.queue)
        logger.warning(
            "Attempt %s of job %s lost (%s); job %s",
            lease.token,
            lease.job_id,
            reason,
            "requeued" if requeued else "exhausted",
        )
    Lease.objects.using(db).filter(job_id__in=[lease.job_id for lease in leases]).delete()


# ---------------------------------------------------------------------------
# Worker presence
# ---------------------------------------------------------------------------


def register_worker(
    db: str,
    worker: WorkerIdentity,
    backend: str,
    host: str,
    pid: int,
    queues: Sequence[str],
    concurrency: int,
) -> None:
    now = timezone.now()
    Worker.objects.using(db).create(
        id=worker.id,
        backend=backend,
        host=host,
        pid=pid,
        queues=list(queues),
        concurrency=concurrency,
        started_at=now,
        heartbeat_at=now,
    )


def stop_worker(db: str, worker_id: uuid.UUID) -> None:
    Worker.objects.using(db).filter(id=worker_id, stopped_at=None).update(stopped_at=Now())
