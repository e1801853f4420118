"""Durable background jobs for Django, behind Django's Tasks framework.

Public API: the backend (``django_jobs.backend.JobsBackend``, named in
settings), ``task`` (Django's ``@task``, typed with our options), the retry
policy pieces a task declares, the exceptions enqueue raises (and
``NotAJobsBackendError``, for an alias that names no django-jobs backend),
``EnqueueOutcome`` (what an enqueue with a key did), the refusals of operator
verbs (``django_jobs.control``), the context a ``takes_context=True`` task
receives, the errors of its durable steps, and batches (``batch``, ``callback``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

# First: on an unsupported Django, a clear refusal instead of an ImportError.
from . import supported  # noqa: F401
from .batches import Callback, batch, callback
from .exceptions import (
    ActorRequiredError,
    ArgumentsNotJSONError,
    AttemptNotStartedError,
    BatchError,
    DependencyError,
    DuplicateStepError,
    EnqueueError,
    InvalidJobOptionError,
    InvalidTransitionError,
    JobNotFoundError,
    LeaseLostError,
    NotAJobsBackendError,
    NoteRequiredError,
    OperatorRequestError,
    PayloadNotDecodableError,
    PayloadTooLargeError,
    QueueNotFoundError,
    ReportRefusedError,
    ResultNotJSONError,
    ResultTooLargeError,
    RetryLater,
    StaleAttemptError,
    StaleCountError,
    StepError,
    StepResultNotJSONError,
    StepResultTooLargeError,
    TaskVersionError,
    UnknownQueueError,
    UnknownTaskError,
    UnknownVerbError,
)
from .retry import Backoff
from .states import AttemptOutcome, JobState
from .tasks import JobContext, JobTask, task
from .unique import EnqueueOutcome

if TYPE_CHECKING:
    from .framework import Task
    from .generic import P, T
    from .results import JobResult


def enqueue_many(
    task: Task[P, T], calls: Iterable[tuple[Sequence[Any], Mapping[str, Any]]]
) -> list[JobResult[P, T]]:
    """Enqueue many calls of one task at once: ``[(args, kwargs), ...]``.

    Every call is validated (nothing is written if one is wrong) and the jobs
    are inserted in bulk in the caller's transaction; workers are woken once,
    after it commits.
    """
    from .backend import JobsBackend

    backend = task.get_backend()
    if not isinstance(backend, JobsBackend):
        raise TypeError(f"{task.module_path} does not use a django_jobs backend.")
    return backend.enqueue_many(task, calls)


__all__ = [
    "ActorRequiredError",
    "ArgumentsNotJSONError",
    "AttemptNotStartedError",
    "AttemptOutcome",
    "Backoff",
    "BatchError",
    "Callback",
    "DependencyError",
    "DuplicateStepError",
    "EnqueueError",
    "EnqueueOutcome",
    "InvalidJobOptionError",
    "InvalidTransitionError",
    "JobContext",
    "JobNotFoundError",
    "JobState",
    "JobTask",
    "LeaseLostError",
    "NotAJobsBackendError",
    "NoteRequiredError",
    "OperatorRequestError",
    "PayloadNotDecodableError",
    "PayloadTooLargeError",
    "QueueNotFoundError",
    "ReportRefusedError",
    "ResultNotJSONError",
    "ResultTooLargeError",
    "RetryLater",
    "StaleAttemptError",
    "StaleCountError",
    "StepError",
    "StepResultNotJSONError",
    "StepResultTooLargeError",
    "TaskVersionError",
    "UnknownQueueError",
    "UnknownTaskError",
    "UnknownVerbError",
    "batch",
    "callback",
    "enqueue_many",
    "task",
]
