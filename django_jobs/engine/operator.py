"""Operator verbs on jobs, and pausing queues: each audited, each compare-and-set.

The job row is locked for the decision and the write is still guarded by the
state it was decided on, so two operators racing cannot both win.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from django.db import transaction
from django.db.models import F, Value
from django.db.models.functions import Coalesce
from django.utils import timezone

from ..exceptions import InvalidTransitionError, JobNotFoundError, LockedRowChangedError
from ..models import Dependency, Job, JobEvent, QueueEvent, QueueState
from ..rows import new_job
from ..signals import send_on_commit
from ..states import JobState, Transition, allowed
from ..values import Operated
from ..verbs import VERBS, Verb
from . import batches
from .guards import sources, target
from .wakeups import wake_on_commit


def operate(db: str, job_id: uuid.UUID, verb: str, actor: str, note: str = "") -> Operated:
    """Apply an operator verb to one job, or raise InvalidTransitionError; audit it.

    The job row is locked for the decision, and the write is still guarded by
    the state it was decided on, so two operators racing cannot both win.
    """
    with transaction.atomic(using=db):
        return _operate(db, job_id, VERBS[verb], actor, note, timezone.now())


def operate_batch(
    db: str, read_in: Mapping[uuid.UUID, str], verb: str, actor: str, note: str = ""
) -> list[Operated | InvalidTransitionError | JobNotFoundError]:
    """Apply a verb to each job of a batch, in one transaction; a refusal does not stop the rest.

    One commit per batch rather than per job: a filter of a hundred thousand
    jobs is walked in batches by ``control.apply_matching``, each short enough
    not to hold locks or the vacuum horizon for long. Rows are locked in id
    order, so two operators walking overlapping filters cannot deadlock.

    ``read_in`` maps each job to the state the walk's filter read it in. A
    job that has left that state by the time its row is locked is refused:
    whatever moved it (another operator's quarantine, a worker) was not what
    the operator confirmed, and the verb's other transitions must not undo it.
    """
    now = timezone.now()
    done: list[Operated | InvalidTransitionError | JobNotFoundError] = []
    with transaction.atomic(using=db):
        for job_id in sorted(read_in):
            try:
                done.append(_operate(db, job_id, VERBS[verb], actor, note, now, read_in[job_id]))
            except (InvalidTransitionError, JobNotFoundError) as exc:
                # Refused before anything was written: the batch goes on.
                done.append(exc)
    return done


def _operate(
    db: str,
    job_id: uuid.UUID,
    verb: Verb,
    actor: str,
    note: str,
    now: datetime,
    read_in: str | None = None,
) -> Operated:
    rows = Job.objects.using(db).select_for_update().filter(id=job_id)
    if not verb.copies_from:
        rows = rows.only(
            "id",
            "state",
            "queue",
            "attempts",
            "attempt_budget",
            "max_attempts",
            "run_after",
            "batch_id",
        )
    job = rows.first()
    if job is None:
        raise JobNotFoundError(f"No job with id {job_id}.")
    if read_in is not None and job.state != read_in:
        raise InvalidTransitionError(
            f"Cannot {verb.name} job {job.id}: it was {read_in} when the filter read it and "
            f"is {job.state} now; left as it is."
        )
    if verb.copies_from:
        if job.state not in verb.copies_from:
            raise _refusal(verb, job)
        return _rerun(db, job, actor, note, now)
    transition = next((t for t in verb.transitions if allowed(t, job.state)), None)
    if transition is None:
        raise _refusal(verb, job)
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
    elif transition is Transition.RUN_NOW:
        if job.run_after <= now:
            raise InvalidTransitionError(
                f"Cannot {verb.name} job {job_id}: it is {job.state} and already due "
                f"(run_after {job.run_after.isoformat()}); {verb.name} applies only to "
                "queued jobs scheduled for later."
            )
        # Its deadline stays: run_now moves the start, not the promise.
        changes["run_after"] = now
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
    return Operated(job_id, transition, JobState(job.state), JobState(target(transition)))


def _refusal(verb: Verb, job: Job) -> InvalidTransitionError:
    states = sorted(str(s) for s in verb.source_states())
    return InvalidTransitionError(
        f"Cannot {verb.name} job {job.id}: it is {job.state}; {verb.name} applies only to "
        f"jobs that are {', '.join(states)}."
    )


def _rerun(db: str, original: Job, actor: str, note: str, now: datetime) -> Operated:
    """A new queued job copied from ``original``; an event on each names the other.

    The copy keeps the work and where and for whom it runs. Not the idempotency
    or unique key (it is meant to be a second job), nor the deadline or the
    dependencies (the operator wants it to run now), nor anything the
    original's attempts wrote.
    """
    copy = new_job(
        backend=original.backend,
        task_name=original.task_name,
        task_version=original.task_version,
        args=original.args,
        kwargs=original.kwargs,
        queue=original.queue,
        priority=original.priority,
        run_after=now,
        expires_at=None,
        tenant=original.tenant,
        initiator=actor[:255],
        idempotency_key=None,
        unique_key=None,
        concurrency_key=original.concurrency_key,
        max_attempts=original.attempt_budget,
        timeout=original.timeout,
        now=now,
    )
    copy.rerun_of = original.id
    copy.save(using=db, force_insert=True)
    why = f": {note}" if note else ""
    state = JobState(original.state)
    JobEvent.objects.using(db).bulk_create(
        [
            JobEvent(
                job_id=original.id,
                at=now,
                transition=Transition.RERUN,
                from_state=state,
                to_state=state,
                actor=actor[:255],
                note=f"rerun as job {copy.id}{why}",
            ),
            JobEvent(
                job_id=copy.id,
                at=now,
                transition=Transition.RERUN,
                from_state=JobState.QUEUED,
                to_state=JobState.QUEUED,
                actor=actor[:255],
                note=f"rerun of job {original.id}{why}",
            ),
        ]
    )
    wake_on_commit(db, copy.queue)
    send_on_commit(db, original.id, Transition.RERUN, state, state, actor, note)
    return Operated(original.id, Transition.RERUN, state, state, rerun=copy.id)


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
