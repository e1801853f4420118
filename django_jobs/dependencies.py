"""Dependencies at enqueue: a job that runs only after other jobs have succeeded.

``task.using(after=[a, b]).enqueue(...)`` writes the job ``waiting`` with
``waiting_on`` = how many of ``a`` and ``b`` have not succeeded yet (or
``queued`` if both already have), and one ``Dependency`` row for each. From
there the engine takes over: each success decrements its waiting dependents'
count and queues those it brings to zero (``engine/completion.py``); a
discarded dependency cancels them (``engine/operator.py``). A dependency that
failed, was cancelled or expired leaves its dependents waiting: an operator
may still retry it.

The jobs waited for are locked ``FOR SHARE`` while the new job is written, so
a dependency cannot finish between the moment its state is read here and the
moment the new job's row (which its completion must then find) is committed.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from django.db.models import QuerySet

from .exceptions import DependencyError
from .models import Job
from .states import JobState

if TYPE_CHECKING:
    from .engine.base import Engine

# More than this is a batch, not a dependency list: enqueue a job after a few
# "barrier" jobs instead.
MAX_DEPENDENCIES = 100


def dependency_ids(after: Iterable[Any]) -> list[uuid.UUID]:
    """The job ids ``after`` names, in order and without repeats.

    Each item is a job id (text or UUID), or anything with an ``id`` that is
    one (a ``TaskResult``, a ``Job``). Raises ``ValueError`` saying which item
    is wrong; the backend adds the task's name.
    """
    ids: dict[uuid.UUID, None] = {}
    for index, item in enumerate(after):
        value = getattr(item, "id", item)
        if isinstance(value, uuid.UUID):
            ids[value] = None
            continue
        if not isinstance(value, str):
            raise ValueError(
                f"after[{index}] must be a job id, a TaskResult or a Job, "
                f"not {type(item).__name__}."
            )
        try:
            ids[uuid.UUID(value)] = None
        except ValueError:
            raise ValueError(f"after[{index}]: {value!r} is not a job id (a UUID).") from None
    if len(ids) > MAX_DEPENDENCIES:
        raise ValueError(f"after names {len(ids)} jobs; at most {MAX_DEPENDENCIES} are allowed.")
    return list(ids)


def wait_for(engine: Engine, job: Job, ids: Sequence[uuid.UUID], *, lock: bool = True) -> None:
    """Read the states of the jobs ``job`` waits for and set its first state from theirs.

    Raises ``DependencyError`` if one is missing, discarded or of another
    tenant than ``job``. ``job`` is not
    saved yet (for ``enqueue_many`` it is the batch's prototype); its
    ``Dependency`` rows are written once it is. ``lock=False`` reads without
    locking, to refuse bad input and to tell the caller the likely state
    before the transaction that writes, which reads again with the lock.
    """
    found = engine.depended_on(ids, lock=lock)
    _check(ids, found, job.tenant)
    unmet = sum(1 for state, _ in found.values() if state != JobState.SUCCEEDED)
    # The new job's initial state, set before its only insert.
    job.state = JobState.WAITING if unmet else JobState.QUEUED
    job.waiting_on = unmet


def waits_for(job: Job) -> QuerySet[Job]:
    """The jobs ``job`` was enqueued after, oldest first (the admin, the API, ``jobs show``)."""
    return (
        Job.objects.using(job._state.db).filter(dependents__job=job).order_by("enqueued_at", "id")
    )


def waited_for_by(job: Job) -> QuerySet[Job]:
    """The jobs enqueued after ``job``, oldest first."""
    return (
        Job.objects.using(job._state.db)
        .filter(dependencies__depends_on=job)
        .order_by("enqueued_at", "id")
    )


def _check(ids: Sequence[uuid.UUID], found: dict[uuid.UUID, tuple[str, str]], tenant: str) -> None:
    for job_id in ids:
        if job_id not in found:
            raise DependencyError(f"after: there is no job {job_id}; nothing was enqueued.")
        state, its_tenant = found[job_id]
        if its_tenant != tenant:
            # A tenant is an authority scope: waiting across one would show a
            # tenant's user the other's job id (the job's waits_for), and a
            # discard by the other's user would cancel this job (its dependents).
            raise DependencyError(
                f"after: job {job_id} is of another tenant than this job's ({tenant!r}); a "
                "job waits only for jobs of its own tenant. Nothing was enqueued."
            )
        if state == JobState.DISCARDED:
            raise DependencyError(
                f"after: job {job_id} was discarded and can never succeed; nothing was enqueued."
            )
