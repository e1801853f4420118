"""The operator verbs: cancel, retry, quarantine, release, discard.

The admin, the REST API and ``manage.py jobs`` all call these, and only
these. Each is a compare-and-set transition (``Engine.operate``): one that
does not apply to the job's current state raises ``InvalidTransitionError``
and changes nothing; one that applies writes an audit record (who, when, why)
kept with the job, and sends its signal after commit.

The verbs are declared in ``django_jobs.verbs`` (``VERBS``): what each does,
the transitions it may take (``states.TRANSITIONS`` is the truth about
states) and whether it needs a note. ``apply`` takes any of them by name;
``cancel``, ``retry``, ... are the same call, typed.

Queues have two verbs of their own, ``pause_queue`` and ``resume_queue``,
recorded in ``QueueEvent``.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from .backend import jobs_backend
from .exceptions import (
    ActorRequiredError,
    InvalidTransitionError,
    JobNotFoundError,
    NoteRequiredError,
    QueueNotFoundError,
    UnknownVerbError,
)
from .models import Job, QueueState
from .states import Transition
from .verbs import VERBS

JobRef = Job | uuid.UUID | str


@dataclass(slots=True)
class BulkResult:
    """What a bulk verb did: the jobs it changed, and why it refused the others."""

    changed: list[uuid.UUID] = field(default_factory=list)
    refused: dict[uuid.UUID, str] = field(default_factory=dict)


def actor_name(actor: Any) -> str:
    """A user (its username), or any string ("cron", "api:token-7")."""
    if isinstance(actor, str):
        name = actor.strip()
    else:
        name = str(actor.get_username()) if hasattr(actor, "get_username") else ""
    if not name:
        raise ActorRequiredError("An operator action needs an actor: a user or a non-empty name.")
    return name


def _job_id(job: JobRef) -> uuid.UUID:
    if isinstance(job, Job):
        return job.id
    if isinstance(job, uuid.UUID):
        return job
    try:
        return uuid.UUID(str(job))
    except ValueError:
        raise JobNotFoundError(f"{job!r} is not a job id (a UUID).") from None


def _checked_note(verb: str, note: str) -> str:
    """The stripped note, once the verb is known and has the note it needs."""
    if verb not in VERBS:
        raise UnknownVerbError(f"Unknown verb {verb!r}; verbs are {', '.join(VERBS)}.")
    note = note.strip()
    if VERBS[verb].needs_note and not note:
        raise NoteRequiredError(f"{verb} needs a note saying why.")
    return note


def apply(
    verb: str,
    job: JobRef,
    *,
    actor: Any,
    note: str = "",
    backend: str = "default",
) -> Transition:
    """Apply ``verb`` to one job; return the transition it took.

    Raises ``InvalidTransitionError`` (wrong state), ``JobNotFoundError``,
    ``UnknownVerbError``, ``ActorRequiredError``, ``NoteRequiredError`` (each an
    ``OperatorRequestError``, a ``ValueError``), or
    ``NotAJobsBackendError`` (``backend`` is not a django-jobs alias in ``TASKS``).
    """
    note = _checked_note(verb, note)
    engine = jobs_backend(backend).engine
    return engine.operate(_job_id(job), verb, actor_name(actor), note)


def apply_many(
    verb: str,
    jobs: Iterable[JobRef],
    *,
    actor: Any,
    note: str = "",
    backend: str = "default",
) -> BulkResult:
    """Apply ``verb`` to each job in its own transaction; refusals do not stop the rest."""
    note = _checked_note(verb, note)
    name = actor_name(actor)
    result = BulkResult()
    # Every id is checked before any job changes, so a malformed one changes nothing.
    for job_id in [_job_id(job) for job in jobs]:
        try:
            apply(verb, job_id, actor=name, note=note, backend=backend)
        except (InvalidTransitionError, JobNotFoundError) as exc:
            result.refused[job_id] = str(exc)
        else:
            result.changed.append(job_id)
    return result


# Typed shorthands for ``apply``, documented as public API. ``note`` has no
# default where the verb needs one (VERBS[...].needs_note), so a type checker
# asks for it too.


def cancel(job: JobRef, *, actor: Any, note: str = "", backend: str = "default") -> Transition:
    return apply("cancel", job, actor=actor, note=note, backend=backend)


def retry(job: JobRef, *, actor: Any, note: str = "", backend: str = "default") -> Transition:
    return apply("retry", job, actor=actor, note=note, backend=backend)


def quarantine(job: JobRef, *, actor: Any, note: str, backend: str = "default") -> Transition:
    return apply("quarantine", job, actor=actor, note=note, backend=backend)


def release(job: JobRef, *, actor: Any, note: str = "", backend: str = "default") -> Transition:
    return apply("release", job, actor=actor, note=note, backend=backend)


def discard(job: JobRef, *, actor: Any, note: str, backend: str = "default") -> Transition:
    return apply("discard", job, actor=actor, note=note, backend=backend)


def pause_queue(queue: str, *, actor: Any, note: str = "", backend: str = "default") -> bool:
    """Stop every worker from claiming jobs of ``queue``; running jobs finish.

    Returns False (and records nothing) if the queue was already paused.
    """
    return _set_paused(queue, True, actor, note, backend)


def resume_queue(queue: str, *, actor: Any, note: str = "", backend: str = "default") -> bool:
    """Let workers claim from ``queue`` again; False if it was not paused."""
    return _set_paused(queue, False, actor, note, backend)


def _set_paused(queue: str, paused: bool, actor: Any, note: str, alias: str) -> bool:
    backend = jobs_backend(alias)
    if backend.queues and queue not in backend.queues:
        raise QueueNotFoundError(
            f"Unknown queue {queue!r}; the queues are {', '.join(sorted(backend.queues))}."
        )
    # With QUEUES = [] any name is a queue, but not one the table cannot hold:
    # that would be a database error, not a refusal.
    longest = QueueState._meta.get_field("queue").max_length or 0
    if len(queue) > longest or "\x00" in queue:
        raise QueueNotFoundError(
            f"{queue!r} cannot be a queue: a queue name has at most {longest} "
            "characters and no NUL."
        )
    return backend.engine.set_queue_paused(queue, paused, actor_name(actor), note.strip())
