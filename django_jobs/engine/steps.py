"""Recording the completed steps of a job (``context.step``), fenced on the lease.

A step is recorded only by the attempt that holds the job's lease under its
token, and only once per name: a stale attempt (its lease reaped, a newer
attempt running) is refused, and an existing record is never overwritten.
The ORM way, for SQLite, where ``BEGIN IMMEDIATE`` makes the check and the
insert one writer's; PostgreSQL does the same in one statement
(``statements.RECORD_STEP``). The record of a sleep is written by the
completion that puts the job to sleep, in its transaction and under its
fence, so a sleep counts as slept exactly when the job was re-queued by it.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from django.db import transaction
from django.utils import timezone

from ..codec import to_json
from ..models import Job, Step
from ..states import LEASED_STATES
from ..values import StepWrite


def record_step(
    db: str, worker_id: uuid.UUID, job_id: uuid.UUID, token: int, name: str, result: Any
) -> StepWrite:
    """Record step ``name`` of the attempt ``token``, if that attempt still holds the lease."""
    with transaction.atomic(using=db):
        held = (
            Job.objects.using(db)
            .filter(id=job_id, attempts=token, leased_by=worker_id, state__in=sorted(LEASED_STATES))
            .exists()
        )
        if not held:
            return StepWrite.STALE
        if Step.objects.using(db).filter(job_id=job_id, name=name).exists():
            return StepWrite.DUPLICATE
        Step.objects.using(db).create(
            job_id=job_id, name=name, attempt=token, result=result, recorded_at=timezone.now()
        )
    return StepWrite.RECORDED


def record_sleep(db: str, job_id: uuid.UUID, token: int, name: str, until: datetime) -> None:
    """The record of a sleep, written with the transition that puts its job to sleep.

    Its result is the time it sleeps until; a name already recorded is kept
    as it is (the runner returns from a recorded sleep, so only a hand-made
    row can be there).
    """
    Step.objects.using(db).bulk_create(
        [
            Step(
                job_id=job_id,
                name=name,
                attempt=token,
                result=to_json(until, f"the wake time of {name!r}"),
                recorded_at=timezone.now(),
            )
        ],
        ignore_conflicts=True,
    )
