"""Operator verbs on one job, and pausing queues: each audited, each compare-and-set.

The job row is locked for the decision and the write is still guarded by the
state it was decided on, so two operators racing cannot both win.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from django.db import transaction
from django.db.models import F, Value
from django.db.models.functions import Coalesce
from django.utils import timezone

from ..exceptions import InvalidTransitionError, JobNotFoundError, LockedRowChangedError
from ..models import Dependency, Job, JobEvent, QueueEvent, QueueState
from ..signals import send_on_commit
from ..states import JobState, Transition, allowed
from ..verbs import VERBS
from . import batches
from .guards import sources, target
from .wakeups import wake_on_commit


def operate(db: str, job_id: uuid.UUID, verb: str, actor: str, note: str = "") -> Transition:
    """Apply an operator verb to one job, or raise InvalidTransitionError; audit it.

    The job row is locked for the decision, and the write is still guarded by
    the state it was decided on, so two operators racing cannot both win.
    """
    now = timezone.now()
    with transaction.atomic(using=db):
        job = (
            Job.objects.using(db)
            .select_for_update()
            .only("id", "state", "queue", "attempts", "attempt_budget", "max_attempts", "batch_id")
            .filter(id=job_id)
            .first()
        )
        if job is None:
            raise JobNotFoundError(f"No job with id {job_id}.")
        transition = next((t for t in VERBS[verb].transitions if allowed(t, job.state)), None)
        if transition is None:
            states = sorted(str(s) for s in VERBS[verb].source_states())
            raise InvalidTransitionError(
                f"Cannot {verb} job {job_id}: it is {job.state}; {verb} applies only to "
                f"jobs that are {', '.join(states)}."
            )
        changes: dict[str, Any] = {"state": target(transition), "updated_at": now}
        if transition is Transition.CANCEL:
            changes.update(cancel_requested_at=now, finished_at=now)
        elif transition is Transition.REQUEST_CANCEL:
            changes["cancel_requested_at"] = now
        elif transition is Transition.RETRY:
            # The operator decided it should run now: its old deadline no longer holds.
            # Nor does waiting for other jobs, for one cancelled while it waited.
            changes.update(
                max_attempts=job.attempts + job.attempt_budget,
                run_after=now,
                finished_at=None,
                cancel_requested_at=None,
                expires_at=None,
                waiting_on=0,
            )
        elif transition is Transition.RELEASE:
            # Queued again: nothing of the finished job it was may stay on the row.
            changes.update(
                run_after=now,
                max_attempts=max(job.max_attempts, job.attempts + 1),
                expires_at=None,
                finished_at=None,
                cancel_requested_at=None,
            )
        elif transition is Transition.QUARANTINE:
            # Held is finished (not live); one that had finished keeps when it did.
            changes["finished_at"] = Coalesce(F("finished_at"), Value(now))
        elif transition is Transition.DISCARD:
            changes["finished_at"] = now
        moved = Job.objects.using(db).filter(id=job_id, state=job.state).update(**changes)
        if moved != 1:
            raise LockedRowChangedError(f"job {job_id} is locked, yet left {job.state}")
        audit(db, job_id, transition, job.state, actor, note, now)
        moves: list[batches.Move] = [(job.batch_id, job.state, target(transition))]
        if transition is Transition.DISCARD:
            moves += cancel_dependents(db, job_id, actor, now)
        batches.moved(db, moves)
        if target(transition) == JobState.QUEUED:
            wake_on_commit(db, job.queue)
        send_on_commit(db, job_id, transition, job.state, target(transition), actor, note)
    return transition


def cancel_dependents(
    db: str, discarded: uuid.UUID, actor: str, now: datetime
) -> list[batches.Move]:
    """Cancel the jobs waiting on ``discarded``, and theirs in turn: none of them can run now.

    A failed, cancelled or expired dependency does not do this: an operator
    may still retry it, and its dependents wait for that. Discarding accepts
    the loss, so the jobs waiting for it end too, each with an audit event
    naming the job it waited for. Returns their moves, for their batches.
    """
    moves: list[batches.Move] = []
    frontier = [discarded]
    while frontier:
        edges = (
            Dependency.objects.using(db)
            .filter(depends_on_id__in=frontier)
            .order_by("job_id")
            .values_list("job_id", "depends_on_id", "job__batch_id")
        )
        frontier = []
        for job_id, depends_on, batch_id in edges:
            note = f"job {depends_on}, which it waited for, was discarded"
            moved = (
                Job.objects.using(db)
                .filter(id=job_id, state__in=sources(Transition.DEPENDENCY_DISCARDED))
                .update(
                    state=target(Transition.DEPENDENCY_DISCARDED),
                    finished_at=now,
                    updated_at=now,
                    last_error=f"cancelled: {note}",
                )
            )
            if not moved:
                continue
            audit(db, job_id, Transition.DEPENDENCY_DISCARDED, JobState.WAITING, actor, note, now)
            send_on_commit(
                db,
                job_id,
                Transition.DEPENDENCY_DISCARDED,
                JobState.WAITING,
                target(Transition.DEPENDENCY_DISCARDED),
                actor,
                note,
            )
            frontier.append(job_id)
            moves.append((batch_id, JobState.WAITING, target(Transition.DEPENDENCY_DISCARDED)))
    return moves


def set_queue_paused(db: str, queue: str, paused: bool, actor: str, note: str = "") -> bool:
    """Pause or resume a queue for every worker; False if it already was.

    Workers read the flag in every claim, so the change takes effect at their
    next claim; jobs already running finish normally.
    """
    now = timezone.now()
    with transaction.atomic(using=db):
        state, _ = (
            QueueState.objects.using(db)
            .select_for_update()
            .get_or_create(queue=queue, defaults={"changed_at": now, "changed_by": actor[:255]})
        )
        if state.paused == paused:
            return False
        QueueState.objects.using(db).filter(pk=state.pk, paused=state.paused).update(
            paused=paused, changed_at=now, changed_by=actor[:255], note=note
        )
        QueueEvent.objects.using(db).create(
            queue=queue,
            at=now,
            action="pause" if paused else "resume",
            actor=actor[:255],
            note=note,
        )
        if not paused:
            wake_on_commit(db, queue)
    return True


def audit(
    db: str,
    job_id: uuid.UUID,
    transition: Transition,
    from_state: str,
    actor: str,
    note: str,
    now: datetime,
) -> None:
    JobEvent.objects.using(db).create(
        job_id=job_id,
        at=now,
        transition=transition,
        from_state=from_state,
        to_state=target(transition),
        actor=actor[:255],
        note=note,
    )
