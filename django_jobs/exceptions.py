"""Exceptions users catch, and the signals tasks raise to steer their retries."""

from __future__ import annotations

from datetime import datetime

from django.core.exceptions import ImproperlyConfigured

from .framework import InvalidTask


class EnqueueError(InvalidTask):
    """Enqueue refused the job before writing anything."""


class UnknownTaskError(EnqueueError):
    """The task is not registered with this backend, so no worker would run it."""


class UnknownQueueError(EnqueueError):
    """The queue is not one of the backend's ``QUEUES``."""


class ArgumentsNotJSONError(EnqueueError):
    """An argument would not come back equal after a JSON round trip."""


class PayloadNotDecodableError(ValueError):
    """A stored argument or result holds a tag this version does not know, or a bad value.

    Written by a newer enqueuer (or by hand); the worker fails the job without
    calling the task, naming where the tag is.
    """


class PayloadTooLargeError(EnqueueError):
    """The JSON of args + kwargs exceeds ``MAX_PAYLOAD_BYTES``."""


class InvalidJobOptionError(EnqueueError):
    """A per-job option (tenant, idempotency key, ...) has a value we cannot store."""


class DependencyError(EnqueueError):
    """A job named in ``after=`` does not exist, or was discarded and can never succeed."""


class BatchError(ValueError):
    """A ``batch()`` was refused: nested, a bad callback, or a member it could not count.

    Nothing was written.
    """


class NotAJobsBackendError(ImproperlyConfigured):
    """A setting or argument names a ``TASKS`` alias that is not a django-jobs backend.

    The alias is not in ``TASKS``, its ``BACKEND`` does not import, or it is
    another kind of backend (Django's ``ImmediateBackend``, say): whatever asked
    for it (a worker, a command's ``--backend``, the API's ``BACKEND``, an
    operator verb's ``backend=``) cannot work on jobs through it, so this is a
    configuration mistake, raised before anything is read or written.
    """


class ConfigurationError(ImproperlyConfigured):
    """A setting django-jobs reads is wrong: what, where, and how to fix it.

    It carries the system-check id and hint it is reported under, so
    ``manage.py check`` (and every command that runs the checks) shows it as one
    ``django_jobs.E0xx`` message instead of a traceback; using the broken part
    (an enqueue, a worker) raises it with the same text.
    """

    def __init__(self, message: str, *, check_id: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.check_id = check_id
        self.hint = hint


def error_type(kind: type[BaseException]) -> str:
    """How an attempt's history (and a span) names an exception's class: its dotted path."""
    return f"{kind.__module__}.{kind.__qualname__}"


class LeaseLostError(Exception):
    """The error type of an attempt whose lease was lost: its worker died, hung or was cut off.

    Never raised: the reaper (or a worker releasing its jobs) writes this
    class's path as the ``error_type`` of the attempt it marks ``lost``, so the
    attempt history names what happened the way it names a task's exception.
    A report that arrives after the lease was lost is refused and kept on the
    attempt (``late_report``), not raised either.
    """


class ReportRefusedError(Exception):
    """The error type of an attempt whose report the database refused to store.

    Never raised: a value the database will not take (a constraint a DBA
    added, a trigger, a text PostgreSQL cannot hold) used to fail the
    completer's whole batch on every try, holding every job in it ``running``
    for as long as the worker lived. The completer then writes the batch's
    reports one by one and records the refused one as failed for good with
    this type, naming what the database said: the same code would report the
    same again, and an operator retries the job once the cause is fixed.
    """


# The longest wait before a retry: a hundred years. Longer (or infinite, or NaN),
# the due time could not be worked out, and the worker writing it failed.
MAX_RETRY_DELAY_SECONDS = 100 * 365 * 24 * 3600

# The most attempts a job may have: its attempt counter is a PostgreSQL
# integer. Larger, the enqueue's INSERT failed with a bare DataError, and the
# caller's transaction with it.
MAX_ATTEMPTS_LIMIT = 2**31 - 1


class RetryLater(Exception):
    """Raise from a task to be run again after ``delay`` seconds.

    It uses up an attempt like any failure (so a task that always asks to be
    retried still ends ``exhausted``), but skips the retry-on/give-up-on checks
    and uses the given delay instead of the backoff.
    """

    def __init__(self, delay: float, reason: str = "") -> None:
        if not 0 <= delay <= MAX_RETRY_DELAY_SECONDS:  # NaN too
            raise ValueError(
                f"RetryLater delay must be a number of seconds from 0 to "
                f"{MAX_RETRY_DELAY_SECONDS} (a hundred years), not {delay!r}."
            )
        super().__init__(reason or f"retry requested in {delay:g}s")
        self.delay = float(delay)


class ResultTooLargeError(Exception):
    """A task returned more JSON than ``MAX_RESULT_BYTES``; the attempt fails for good."""


class ResultNotJSONError(Exception):
    """A task returned a value that does not survive a JSON round trip."""


class QueueFullError(EnqueueError):
    """The queue already holds its ``QUEUE_MAX_DEPTH`` of queued jobs (backpressure)."""


class JobNotFoundError(LookupError):
    """No job has this id."""


class InvalidTransitionError(Exception):
    """An operator verb does not apply to the job's current state; nothing changed."""


class OperatorRequestError(ValueError):
    """An operator's request (``control``, the admin, the API, the CLI) was refused as asked.

    Raised before anything is read or written. A ``ValueError``, as these
    refusals always were; each kind has its class, so callers (the API's
    status codes, say) tell them apart without reading the message.
    """


class ActorRequiredError(OperatorRequestError):
    """No actor: a user with a username, or a non-empty name, is needed for the audit trail."""


class UnknownVerbError(OperatorRequestError):
    """Not one of the operator verbs (``verbs.VERBS``)."""


class NoteRequiredError(OperatorRequestError):
    """The verb needs a note saying why (quarantine, discard)."""


class QueueNotFoundError(OperatorRequestError):
    """Not one of the backend's ``QUEUES``, or not a name a queue can have."""


class StaleCountError(OperatorRequestError):
    """A verb over a filter was confirmed for another number of jobs than the filter matches now.

    The operator saw N jobs and agreed to act on N; if the filter matches more
    (or fewer) when the action starts, what they agreed to is not what would
    happen, so nothing is changed and they are told the new count.
    """

    def __init__(self, message: str, *, matched: int, expected: int) -> None:
        super().__init__(message)
        self.matched = matched
        self.expected = expected


class LockedRowChangedError(RuntimeError):
    """A write found a row it holds locked in another state than it read: a broken invariant.

    Only a row written outside django_jobs (by hand, by another tool) or a
    bug can cause it. Raised inside the write's transaction, so nothing of
    the write is kept; checked explicitly, not with ``assert``, so it holds
    under ``python -O`` too.
    """


class TaskVersionError(Exception):
    """A worker has the job's task only at an older version than the one that enqueued it.

    The error type of the attempts of such a job: postponed for a worker of
    the newer release while ``UNKNOWN_TASK_GRACE`` lasts, then failed for good
    (``versions.py``).
    """


class AttemptNotStartedError(Exception):
    """An attempt went back to its queue before a job thread took it.

    A worker claims a waiting attempt for each job thread while its jobs are
    short (``PREFETCH``, docs/workers.md); one that still waits a second later
    is given back, due at once, and its attempt recorded ``not_started`` with
    this as its error (why it never started), not counted against
    ``max_attempts``. So is an attempt whose claim
    committed as the worker's connection failed, so that the worker never
    received it (its heartbeat gives it back). It was never raised in a task.
    """


class JobStopped(BaseException):
    """Raised inside a task's thread to stop it: its timeout passed or it was cancelled.

    A BaseException, so a task's ``except Exception`` does not swallow it.
    """


class JobTimedOut(JobStopped):
    """The attempt outlived its ``timeout``."""


class JobCancelled(JobStopped):
    """The job was cancelled; raised by ``context.raise_if_cancelled()`` or by force."""


class StepError(ValueError):
    """A ``context.step`` or ``context.sleep`` was called wrongly; nothing was recorded.

    A mistake in the task's code (a name that is not a string, used twice in
    one run, a naive datetime), so the attempt fails for good: running the
    same code again would make the same mistake.
    """


class DuplicateStepError(StepError):
    """Two steps of one run of a job have the same name, so a re-run could not tell them apart."""


class StepResultNotJSONError(ResultNotJSONError):
    """A step's function returned a value that does not survive a JSON round trip.

    The function ran, but its result was not recorded: the step runs again on
    the next attempt. Failed for good, as a task's own result would be.
    """


class StepResultTooLargeError(ResultTooLargeError):
    """A step's result is over ``MAX_RESULT_BYTES`` as JSON; it was not recorded."""


class StaleAttemptError(JobStopped):
    """The attempt no longer holds its job's lease, so it may not record a step.

    Its lease was reaped or released (its worker stopped heartbeating, or was
    thought dead) and the job may already run again elsewhere: recording now
    could let two attempts both believe they own the step. Raised from
    ``context.step`` (before the step's result is recorded) and, being a
    ``JobStopped``, not caught by a task's ``except Exception``: the task stops,
    and its report is kept on the attempt as a late report, changing nothing.
    """


class JobSleeping(BaseException):
    """Raised by ``context.sleep`` / ``sleep_until`` to end the attempt until ``until``.

    The worker catches it and re-queues the job for that time (``AttemptOutcome.SLEPT``,
    ``Transition.SLEEP``), without using up an attempt. A ``BaseException``, so
    a task's ``except Exception`` does not swallow the sleep.
    """

    def __init__(self, until: datetime, step: str) -> None:
        super().__init__(f"sleeping until {until.isoformat()} ({step})")
        self.until = until
        self.step = step
