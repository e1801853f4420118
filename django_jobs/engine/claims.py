"""The ORM claim: lock ready rows, mark them running and leased, give each an attempt.

SQLite claims plain queues this way, and both engines lease the rows their
flow-controlled claims chose (``flow.py``) with ``lease``. PostgreSQL claims
plain queues in one statement instead (``postgres/statements.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from django.db import transaction
from django.db.models import F, Value
from django.db.models.functions import Coalesce, Now
from django.utils import timezone

from ..exceptions import LockedRowChangedError
from ..models import Attempt, Job
from ..signals import send_on_commit
from ..states import JobState, Transition
from ..values import Claimed, WorkerIdentity
from .guards import paused, ready, target

CLAIM_FIELDS = (
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
    "lost_streak",
    "concurrency_key",
    "trace_context",
    "task_version",
)


def claim_plain(
    db: str, worker: WorkerIdentity, queues: Sequence[str], limit: int
) -> list[Claimed]:
    """Claim from queues without flow control: highest priority, then oldest first."""
    with transaction.atomic(using=db):
        rows = list(
            ready(db, queues)
            .exclude(queue__in=paused(db))
            .select_for_update(skip_locked=True, of=("self",))
            .order_by("-priority", "run_after")
            .only(*CLAIM_FIELDS)[:limit]
        )
        return lease(db, worker, rows)


def lease(
    db: str, worker: WorkerIdentity, rows: Sequence[Job], now: datetime | None = None
) -> list[Claimed]:
    """Mark locked, queued rows running, leased to ``worker``, and give each an attempt.

    The lease is on the row (``leased_by``, ``leased_at``), written by the
    update that marks it running: no row of its own. ``now``: the claim's
    moment, its attempts' start (a flow-controlled claim counted its rate
    windows at it).
    """
    if not rows:
        return []
    now = now or timezone.now()
    # By primary key alone, for the same reason as the lock: the rows are
    # locked by this transaction and were queued when it locked them.
    updated = (
        Job.objects.using(db)
        .filter(id__in=[r.id for r in rows])
        .update(
            state=target(Transition.CLAIM),
            attempts=F("attempts") + 1,
            started_at=Coalesce(F("started_at"), Value(now)),
            updated_at=now,
            leased_by=worker.id,
            # The database's clock, which the reaper compares it with.
            leased_at=Now(),
        )
    )
    # We hold the row locks, so nobody can have moved these rows since the
    # SELECT; a mismatch means the locking assumption is broken.
    if updated != len(rows):
        raise LockedRowChangedError(f"claimed {len(rows)} locked rows but updated {updated}")
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
    for r in rows:
        send_on_commit(db, r.id, Transition.CLAIM, JobState.QUEUED, JobState.RUNNING)
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
            suspect=r.lost_streak > 0,
            trace_context=r.trace_context,
            task_version=r.task_version,
        )
        for r, a in zip(rows, attempts, strict=True)
    ]
