"""The operator verbs: cancel, retry, quarantine, release, discard, run_now, rerun.

The admin, the REST API and ``manage.py jobs`` all call these, and only
these. Each is a compare-and-set transition (``Engine.operate``): one that
does not apply to the job's current state raises ``InvalidTransitionError``
and changes nothing; one that applies writes an audit record (who, when, why)
kept with the job, and sends its signal after commit.

The verbs are declared in ``django_jobs.verbs`` (``VERBS``): what each does,
the transitions it may take (``states.TRANSITIONS`` is the truth about
states) and whether it needs a note. ``apply`` takes any of them by name;
``cancel``, ``retry``, ... are the same call, typed; ``perform`` says
everything a verb did (a rerun's new job too), and ``apply_matching`` applies
one to every job a filter matches, in bounded batches, once its count is
confirmed.

Queues have two verbs of their own, ``pause_queue`` and ``resume_queue``,
recorded in ``QueueEvent``.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from django.db.models import Count, Q, QuerySet
from django.utils import timezone

from .backend import jobs_backend
from .exceptions import (
    ActorRequiredError,
    InvalidTransitionError,
    JobNotFoundError,
    NoteRequiredError,
    OperatorRequestError,
    QueueNotFoundError,
    StaleCountError,
    UnknownVerbError,
)
from .models import Job, QueueState
from .states import Transition
from .text import unstorable
from .values import Operated
from .verbs import VERBS

#: Jobs per transaction when a verb walks a filter: small enough that no
#: batch holds its row locks (or the vacuum horizon) for long.
BATCH_SIZE = 500

JobRef = Job | uuid.UUID | str


@dataclass(slots=True)
class BulkResult:
    """What a bulk verb did: the jobs it changed, and why it refused the others."""

    changed: list[uuid.UUID] = field(default_factory=list)
    refused: dict[uuid.UUID, str] = field(default_factory=dict)
    #: For ``rerun``: the new job made from each changed one.
    reruns: dict[uuid.UUID, uuid.UUID] = field(default_factory=dict)
    #: Of the changed, the running jobs ``cancel`` only asked to stop: they
    #: are ``cancelling`` and may still end succeeded.
    stopping: list[uuid.UUID] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Matching:
    """What a filter holds for a verb: the jobs it matches, and how many the verb applies to."""

    matched: int
    applicable: int


@dataclass(slots=True)
class MatchingResult:
    """What a verb over a filter did."""

    matched: int
    applicable: int
    changed: list[uuid.UUID] = field(default_factory=list)
    reruns: dict[uuid.UUID, uuid.UUID] = field(default_factory=dict)
    #: As ``BulkResult.stopping``.
    stopping: list[uuid.UUID] = field(default_factory=list)

    @property
    def skipped(self) -> int:
        """Matched but left as they were: the verb does not apply, or they moved first."""
        return self.matched - len(self.changed)

    def report(self, verb: str) -> dict[str, Any]:
        """As the API answers it and ``jobs VERB --json`` prints it: counts, and reruns' ids."""
        return {
            "verb": verb,
            "matched": self.matched,
            "applicable": self.applicable,
            "changed": len(self.changed),
            "stopping": len(self.stopping),
            "skipped": self.skipped,
            "reruns": {str(k): v for k, v in self.reruns.items()},
        }


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


def _checked_verb(verb: str) -> None:
    if verb not in VERBS:
        raise UnknownVerbError(f"Unknown verb {verb!r}; verbs are {', '.join(VERBS)}.")


def _checked_note(verb: str, note: str) -> str:
    """The stripped note, once the verb is known and has the note it needs."""
    _checked_verb(verb)
    note = _storable_note(note)
    if VERBS[verb].needs_note and not note:
        raise NoteRequiredError(f"{verb} needs a note saying why.")
    return note


def _storable_note(note: str) -> str:
    """The stripped note, refused if the audit trail cannot keep it (a DataError midway)."""
    note = note.strip()
    if (wrong := unstorable(note)) is not None:
        raise OperatorRequestError(f"The note must not contain {wrong}.")
    return note


def perform(
    verb: str,
    job: JobRef,
    *,
    actor: Any,
    note: str = "",
    backend: str = "default",
) -> Operated:
    """Apply ``verb`` to one job; what it did, including the new job of a ``rerun``.

    Refusals as ``apply``'s.
    """
    note = _checked_note(verb, note)
    engine = jobs_backend(backend).engine
    return engine.operate(_job_id(job), verb, actor_name(actor), note)


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
    return perform(verb, job, actor=actor, note=note, backend=backend).transition


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
            done = perform(verb, job_id, actor=name, note=note, backend=backend)
        except (InvalidTransitionError, JobNotFoundError) as exc:
            result.refused[job_id] = str(exc)
        else:
            result.changed.append(job_id)
            if done.rerun is not None:
                result.reruns[job_id] = done.rerun
            if done.transition is Transition.REQUEST_CANCEL:
                result.stopping.append(job_id)
    return result


def _applicable(verb: str, now: Any) -> Q:
    """The jobs ``verb`` applies to, as a filter: its states (and being scheduled)."""
    condition = Q(state__in=VERBS[verb].source_states())
    if VERBS[verb].only_scheduled:
        condition &= Q(run_after__gt=now)
    return condition


def count_matching(verb: str, jobs: QuerySet[Job]) -> Matching:
    """How many jobs ``jobs`` holds, and to how many of them ``verb`` applies now.

    What the operator confirms before ``apply_matching``. One query; an exact
    count, so on a broad filter of a big table it reads every matching row.
    """
    _checked_verb(verb)
    counts = jobs.order_by().aggregate(
        matched=Count("pk"), applicable=Count("pk", filter=_applicable(verb, timezone.now()))
    )
    return Matching(matched=counts["matched"], applicable=counts["applicable"])


def apply_matching(
    verb: str,
    jobs: QuerySet[Job],
    *,
    actor: Any,
    note: str = "",
    expected: int | None = None,
    batch_size: int = BATCH_SIZE,
    backend: str = "default",
) -> MatchingResult:
    """Apply ``verb`` to every job ``jobs`` matches, ``batch_size`` jobs per transaction.

    ``expected``: the count the operator saw and confirmed (``count_matching``'s
    ``matched``). If the filter matches another number now, ``StaleCountError``
    is raised and nothing changes. ``None`` skips the check (scripts that
    mean "whatever matches").

    The jobs are walked in id order, each batch a compare-and-set per job in
    one short transaction (``Engine.operate_batch``): a job that moved since
    it was read (left the state the filter read it in) is skipped, not
    forced. The walk never changes more jobs than the filter matched when it
    started, and leaves alone jobs enqueued after that: what was confirmed
    bounds what happens.
    """
    note = _checked_note(verb, note)
    name = actor_name(actor)
    if expected is not None and (
        not isinstance(expected, int) or isinstance(expected, bool) or expected < 0
    ):
        raise OperatorRequestError(
            f"expected must be a count of jobs (0 or more), not {expected!r}."
        )
    if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1:
        raise OperatorRequestError(f"batch_size must be at least 1, not {batch_size!r}.")
    engine = jobs_backend(backend).engine
    started = timezone.now()
    counts = count_matching(verb, jobs)
    if expected is not None and counts.matched != expected:
        raise StaleCountError(
            f"The filter matches {counts.matched} jobs now, not the {expected} confirmed; "
            f"nothing was changed. Look again, and confirm {counts.matched} to go on.",
            matched=counts.matched,
            expected=expected,
        )
    result = MatchingResult(matched=counts.matched, applicable=counts.applicable)
    scope = (
        jobs.filter(_applicable(verb, started), enqueued_at__lte=started)
        .order_by("pk")
        .values_list("pk", "state")
    )
    last: uuid.UUID | None = None
    while len(result.changed) < counts.matched:
        page = scope if last is None else scope.filter(pk__gt=last)
        read_in = dict(page[: min(batch_size, counts.matched - len(result.changed))])
        if not read_in:
            break
        last = next(reversed(read_in))
        for done in engine.operate_batch(read_in, verb, name, note):
            if isinstance(done, Operated):
                result.changed.append(done.job_id)
                if done.rerun is not None:
                    result.reruns[done.job_id] = done.rerun
                if done.transition is Transition.REQUEST_CANCEL:
                    result.stopping.append(done.job_id)
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


def run_now(job: JobRef, *, actor: Any, note: str = "", backend: str = "default") -> Transition:
    return apply("run_now", job, actor=actor, note=note, backend=backend)


def rerun(job: JobRef, *, actor: Any, note: str = "", backend: str = "default") -> Job:
    """A new queued job copied from a finished one (``verbs.py`` says what is copied)."""
    done = perform("rerun", job, actor=actor, note=note, backend=backend)
    return Job.objects.using(jobs_backend(backend).db).get(id=str(done.rerun))


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
    return backend.engine.set_queue_paused(queue, paused, actor_name(actor), _storable_note(note))
