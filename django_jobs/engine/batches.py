"""Batches in the engine: counting members as they settle, and enqueueing the callbacks.

Every step that moves a job in or out of a final state reports the move here
(``moved``), in its own transaction, after the job row is written: the
batch's counters change by one guarded ``UPDATE``, which locks the batch row
until the commit. The completer whose move brings the counts to the total is
therefore the only one to see them there with the callback not yet enqueued;
it inserts the callback job and records its id on the row, in that same
transaction (``fire_due``). No process polls; a crash before the commit
rolls back the member's state, its count and the callback together.

PostgreSQL's batch of plain successes (``statements.COMPLETE``) counts in the
statement itself and calls ``fire_due`` only for the batches it brought to
their total. Jobs outside a batch never reach this module.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from django.db.models import Count, F
from django.utils import timezone

from ..codec import from_json, to_json
from ..exceptions import LockedRowChangedError
from ..ids import new_id
from ..models import Batch, Job
from ..states import BatchState, JobState
from .wakeups import wake_on_commit

# The counter each final state is counted in; live states are in none.
COUNTED_AS: dict[str, str] = {
    JobState.SUCCEEDED: "succeeded",
    JobState.FAILED: "failed",
    JobState.EXHAUSTED: "failed",
    JobState.EXPIRED: "failed",
    JobState.QUARANTINED: "failed",
    JobState.CANCELLED: "cancelled",
    JobState.DISCARDED: "cancelled",
}

# A move of one member: (its batch or None, the state it left, the state it took).
Move = tuple[uuid.UUID | None, str, str]


def moved(db: str, moves: Iterable[Move]) -> None:
    """Count the members' moves in their batches; enqueue the callbacks now due.

    Call it in the transaction that moved the jobs, after their rows are
    written. Moves of jobs outside a batch, and moves within the live states
    or within one counter (exhausted to quarantined), change nothing.
    """
    deltas: dict[uuid.UUID, Counter[str]] = {}
    for batch_id, left, took in moves:
        before, after = COUNTED_AS.get(left), COUNTED_AS.get(took)
        if batch_id is None or before == after:
            continue
        delta = deltas.setdefault(batch_id, Counter())
        if before is not None:
            delta[before] -= 1
        if after is not None:
            delta[after] += 1
    if not deltas:
        return
    for batch_id in sorted(deltas):  # one lock order for every writer: no deadlock
        delta = deltas[batch_id]
        Batch.objects.using(db).filter(id=batch_id).update(
            **{name: F(name) + n for name, n in delta.items() if n}
        )
    fire_due(db, sorted(deltas))


def seal(db: str, batch: Batch) -> None:
    """End a batch's block: its total and counts from its members, then what is due.

    Counted from the members' states, not from the moves before: a member
    can only have moved before the seal inside the block's own transaction.
    An empty batch is due at once.
    """
    counts: Counter[str] = Counter()
    members = (
        Job.objects.using(db)
        .filter(batch_id=batch.id)
        .order_by()
        .values_list("state")
        .annotate(n=Count("id"))
    )
    for state, n in members:
        counts["total"] += n
        if state in COUNTED_AS:
            counts[COUNTED_AS[state]] += n
    batch.total = counts["total"]
    batch.succeeded, batch.failed = counts["succeeded"], counts["failed"]
    batch.cancelled = counts["cancelled"]
    batch.state = BatchState.RUNNING
    Batch.objects.using(db).filter(id=batch.id, state=BatchState.OPEN).update(
        total=batch.total,
        succeeded=batch.succeeded,
        failed=batch.failed,
        cancelled=batch.cancelled,
        state=batch.state,
    )
    fire_due(db, [batch.id])
    batch.refresh_from_db(using=db)


def fire_due(db: str, ids: Sequence[uuid.UUID]) -> None:
    """Enqueue the callbacks of these batches that their counts make due, once each.

    The caller's write of each row holds its lock until the commit, so the
    row read here is current and nobody else decides for it meanwhile;
    the write below is still guarded by what was read.
    """
    now = timezone.now()
    rows = Batch.objects.using(db).filter(id__in=ids).exclude(state=BatchState.OPEN).order_by("id")
    for batch in rows:
        changes: dict[str, Any] = {}
        if batch.finished_at is None and batch.settled >= batch.total:
            changes.update(finished_at=now, state=BatchState.FINISHED)
            if batch.on_finish is not None:
                changes["on_finish_job"] = new_id()
        if batch.succeeded_at is None and batch.succeeded >= batch.total:
            changes.update(succeeded_at=now, state=BatchState.SUCCEEDED)
            if batch.on_success is not None:
                changes["on_success_job"] = new_id()
        if not changes:
            continue
        written = (
            Batch.objects.using(db)
            .filter(
                id=batch.id,
                finished_at=batch.finished_at,
                succeeded_at=batch.succeeded_at,
            )
            .update(**changes)
        )
        if written != 1:
            raise LockedRowChangedError(f"batch {batch.id} is locked, yet changed under us")
        summary = _summary(batch)
        for kind in ("on_finish", "on_success"):
            job_id = changes.get(f"{kind}_job")
            if job_id is not None:
                _enqueue_callback(db, batch, kind, job_id, summary, now)


def _summary(batch: Batch) -> dict[str, Any]:
    """What a callback receives as its ``batch`` keyword argument."""
    return {
        "id": str(batch.id),
        "label": batch.label,
        "total": batch.total,
        "succeeded": batch.succeeded,
        "failed": batch.failed,
        "cancelled": batch.cancelled,
    }


def _enqueue_callback(
    db: str,
    batch: Batch,
    kind: str,
    job_id: uuid.UUID,
    summary: dict[str, Any],
    now: datetime,
) -> None:
    """Insert a callback job as ``batches.Callback`` stored it, with the batch's counts.

    Its idempotency key names the batch and the kind: a second insert, were
    the guards above ever wrong, would fail this transaction instead of
    running the callback twice.
    """
    from ..rows import new_job

    stored: dict[str, Any] = getattr(batch, kind)
    kwargs = to_json({**from_json(stored["kwargs"], "kwargs"), "batch": summary}, "kwargs")
    options = stored["options"]
    job = new_job(
        backend=options["backend"],
        task_name=stored["task_name"],
        task_version=options["task_version"],
        args=stored["args"],
        kwargs=kwargs,
        queue=options["queue"],
        priority=options["priority"],
        run_after=now,
        expires_at=None,
        tenant=options["tenant"],
        initiator=options["initiator"],
        idempotency_key=f"batch:{batch.id}:{kind}",
        unique_key=None,
        concurrency_key=options["concurrency_key"],
        max_attempts=options["max_attempts"],
        timeout=options["timeout"],
    )
    job.id = job_id
    job.save(using=db, force_insert=True)
    wake_on_commit(db, job.queue)
