"""The task class our backend gives to ``@task``, the typed decorator, and the context.

Django 6.1 hands extra ``@task(...)`` keyword arguments to the backend's
``task_class``; ``JobTask`` takes the retry policy from there. Per-call identity
(tenant, idempotency key, concurrency key, initiator, deadline) comes from
``.using(...)``, exactly like Django's own ``priority`` or ``run_after``.

``django.tasks.task`` builds a ``JobTask`` at run time, but django-stubs types
it with Django's options only and with ``TaskContext`` as the context, so a type
checker refuses ``@task(max_attempts=5)`` and ``def f(context: JobContext)``.
``django_jobs.task`` is the same call, typed for this backend.
"""

from __future__ import annotations

import inspect
import uuid
from collections.abc import Callable, Coroutine, Iterable
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import (
    TYPE_CHECKING,
    Any,
    Concatenate,
    Literal,
    Protocol,
    TypedDict,
    Unpack,
    cast,
    overload,
)

from .framework import (
    DEFAULT_TASK_BACKEND_ALIAS,
    DEFAULT_TASK_PRIORITY,
    DEFAULT_TASK_QUEUE_NAME,
    Task,
    TaskResult,
    task_backends,
)
from .framework import task as django_task
from .generic import GenericTask, GenericTaskContext, P, T
from .retry import Backoff
from .states import JobState
from .unique import states_given

if TYPE_CHECKING:
    from .attempt import AttemptControl
    from .models import Job
    from .results import JobResult
    from .steps import Steps

# One job that ``after=`` names: anything that carries the job's id.
type DependencyRef = TaskResult[Any, Any] | Job | uuid.UUID | str


@dataclass(frozen=True, slots=True, kw_only=True)
class JobTask(GenericTask[P, T]):
    """A task on a django-jobs backend: Django's ``Task`` plus our policy and identity.

    Generic like django-stubs' ``Task``: ``P`` is what ``enqueue`` takes (the
    function's parameters, without the context of a ``takes_context`` task),
    ``T`` what the function returns (awaited, for a coroutine function).
    """

    # Policy, declared on @task(...).
    max_attempts: int | None = None  # None: the backend's MAX_ATTEMPTS
    timeout: float | None = None  # hard timeout in seconds
    backoff: Backoff | float | None = None  # a float is the base, in seconds
    retry_on: tuple[type[BaseException], ...] = (Exception,)
    give_up_on: tuple[type[BaseException], ...] = ()
    version: str = ""

    # Identity, set per call with .using(...).
    tenant: str = ""
    initiator: str = ""
    idempotency_key: str | None = None
    concurrency_key: str | None = None
    expires_at: datetime | None = None
    # Jobs (their ids, results or rows) that must succeed before this one runs.
    after: tuple[Any, ...] = ()
    # Unique jobs and debounce (unique.py): per call too.
    unique_key: str | None = None
    unique_for: timedelta | None = None
    unique_states: tuple[JobState, ...] | None = None
    debounce: timedelta | None = None

    def using(
        self,
        *,
        priority: int | None = None,
        queue_name: str | None = None,
        run_after: datetime | None = None,
        backend: str | None = None,
        tenant: str | None = None,
        initiator: str | None = None,
        idempotency_key: str | None = None,
        concurrency_key: str | None = None,
        expires_at: datetime | None = None,
        after: DependencyRef | Iterable[DependencyRef] | None = None,
        unique_key: str | None = None,
        unique_for: timedelta | None = None,
        unique_states: Iterable[JobState | str] | None = None,
        debounce: timedelta | None = None,
    ) -> JobTask[P, T]:
        """Return a copy with per-call options; Django's own are handled by Django.

        ``after``: jobs — a ``TaskResult``, a ``Job`` or a job id — that must
        all succeed before this one runs; checked at enqueue. ``unique_key``
        with ``unique_for`` / ``unique_states``, or with ``debounce``: see
        docs/unique.md.
        """
        # Task.using copies ``self`` (dataclasses.replace): a JobTask stays one.
        base = cast(
            "JobTask[P, T]",
            Task.using(
                self,
                priority=priority,
                queue_name=queue_name,
                run_after=run_after,
                backend=backend,
            ),
        )
        ours: dict[str, Any] = {
            "tenant": tenant,
            "initiator": initiator,
            "idempotency_key": idempotency_key,
            "concurrency_key": concurrency_key,
            "expires_at": expires_at,
            "after": None if after is None else _one_or_many(after),
            "unique_key": unique_key,
            "unique_for": unique_for,
            "unique_states": states_given(unique_states),
            "debounce": debounce,
        }
        changes = {name: value for name, value in ours.items() if value is not None}
        return replace(base, **changes) if changes else base

    if TYPE_CHECKING:
        # Django's methods, run as they are; our backend returns a JobResult
        # from them (the results of a JobTask sent to another backend with
        # ``.using(backend=...)`` are that backend's).
        def enqueue(self, *args: P.args, **kwargs: P.kwargs) -> JobResult[P, T]: ...
        async def aenqueue(self, *args: P.args, **kwargs: P.kwargs) -> JobResult[P, T]: ...
        def get_result(self, result_id: str) -> JobResult[P, T]: ...
        async def aget_result(self, result_id: str) -> JobResult[P, T]: ...

    def get_backoff(self, default: Backoff) -> Backoff:
        if self.backoff is None:
            return default
        if isinstance(self.backoff, Backoff):
            return self.backoff
        return Backoff(base=float(self.backoff), cap=max(default.cap, float(self.backoff)))


def _one_or_many(after: Any) -> tuple[Any, ...]:
    """``after=`` takes one job as well as several: a job id is text, not a sequence."""
    if isinstance(after, str | uuid.UUID) or hasattr(after, "id"):
        return (after,)
    try:
        return tuple(after)
    except TypeError:
        return (after,)  # refused, with its type named, when the task is validated


@dataclass(frozen=True, slots=True, kw_only=True)
class JobContext(GenericTaskContext[Any, Any]):  # type: ignore[misc]  # the stubs drop frozen=True
    """What a ``takes_context=True`` task receives.

    ``job_id`` is the same for every attempt of the job: use it (or
    ``idempotency_key``, if the caller gave one) as the key for downstream
    side effects, so a re-run after a lost attempt does not do them twice.
    """

    # Django's field, narrowed: the worker passes the running job's JobResult.
    task_result: JobResult[Any, Any]
    job_id: uuid.UUID
    attempt_number: int
    max_attempts: int
    tenant: str
    idempotency_key: str | None
    control: AttemptControl = field(repr=False)
    steps: Steps = field(repr=False)

    @property
    def attempt(self) -> int:
        return self.attempt_number

    @property
    def stable_key(self) -> str:
        """A key that does not change between attempts of this job."""
        return self.idempotency_key or str(self.job_id)

    @property
    def is_last_attempt(self) -> bool:
        return self.attempt_number >= self.max_attempts

    @property
    def cancelled(self) -> bool:
        """True once an operator asked to cancel this job (seen at the next heartbeat)."""
        return self.control.cancelled

    def raise_if_cancelled(self) -> None:
        """Raise ``JobCancelled`` if cancel was asked: the cooperative way to stop."""
        self.control.raise_if_cancelled()

    def set_progress(self, done: int, total: int | None = None, message: str = "") -> None:
        """Report progress; it must not decrease within an attempt.

        Cheap to call often: the worker writes the latest value once per heartbeat.
        """
        self.control.set_progress(done, total, message)

    def step[**A, R](
        self, name: str, fn: Callable[A, R], /, *args: A.args, **kwargs: A.kwargs
    ) -> R:
        """Run ``fn(*args, **kwargs)`` once for this job, whatever the attempt; return its result.

        The result is recorded under the job (JSON, as arguments are stored);
        an attempt that finds ``name`` recorded gets the record back and does
        not call ``fn``. Names are unique within a run. Raises
        ``StaleAttemptError`` (the task stops) if this attempt lost its lease
        before it could record. See docs/steps.md.
        """
        return self.steps.run(name, fn, *args, **kwargs)

    def sleep_until(self, when: datetime, *, name: str | None = None) -> None:
        """End this attempt and run the job again at ``when``, holding no worker meanwhile.

        The next run goes past the steps it completed and past this sleep.
        Does not use up an attempt. ``name`` defaults to ``sleep-1``,
        ``sleep-2``, ... in the order the run reaches its sleeps.
        """
        self.steps.sleep_until(when, name)

    def sleep(self, seconds: float, *, name: str | None = None) -> None:
        """``sleep_until(now + seconds)``."""
        self.steps.sleep(seconds, name)


class TaskOptions(TypedDict, total=False):
    """``@task(...)``'s options but ``takes_context``: Django's, then django-jobs'.

    Only the options given are passed on, as with Django's decorator, so the
    defaults stay the backend's (``max_attempts``: ``OPTIONS["MAX_ATTEMPTS"]``).
    """

    priority: int
    queue_name: str
    backend: str
    max_attempts: int | None
    timeout: float | None
    backoff: Backoff | float | None
    retry_on: tuple[type[BaseException], ...]
    give_up_on: tuple[type[BaseException], ...]
    version: str


class TaskDecorator(Protocol):
    """What ``@task(...)`` returns: turns a function into a ``JobTask``."""

    @overload
    def __call__(self, function: Callable[P, Coroutine[Any, Any, T]], /) -> JobTask[P, T]: ...
    @overload
    def __call__(self, function: Callable[P, T], /) -> JobTask[P, T]: ...


class ContextTaskDecorator(Protocol):
    """What ``@task(takes_context=True, ...)`` returns: the function takes a JobContext first."""

    @overload
    def __call__(
        self, function: Callable[Concatenate[JobContext, P], Coroutine[Any, Any, T]], /
    ) -> JobTask[P, T]: ...
    @overload
    def __call__(self, function: Callable[Concatenate[JobContext, P], T], /) -> JobTask[P, T]: ...


# Coroutine functions come first: their task's result is what they return
# once awaited, as the worker awaits them.
@overload
def task(
    function: Callable[P, Coroutine[Any, Any, T]],
    /,
    *,
    takes_context: Literal[False] = False,
    **options: Unpack[TaskOptions],
) -> JobTask[P, T]: ...
@overload
def task(
    function: Callable[P, T],
    /,
    *,
    takes_context: Literal[False] = False,
    **options: Unpack[TaskOptions],
) -> JobTask[P, T]: ...
@overload
def task(
    function: Callable[Concatenate[JobContext, P], Coroutine[Any, Any, T]],
    /,
    *,
    takes_context: Literal[True],
    **options: Unpack[TaskOptions],
) -> JobTask[P, T]: ...
@overload
def task(
    function: Callable[Concatenate[JobContext, P], T],
    /,
    *,
    takes_context: Literal[True],
    **options: Unpack[TaskOptions],
) -> JobTask[P, T]: ...
@overload
def task(
    *, takes_context: Literal[False] = False, **options: Unpack[TaskOptions]
) -> TaskDecorator: ...
@overload
def task(
    *, takes_context: Literal[True], **options: Unpack[TaskOptions]
) -> ContextTaskDecorator: ...
def task(
    function: Callable[..., Any] | None = None,
    /,
    *,
    takes_context: bool = False,
    **options: Unpack[TaskOptions],
) -> JobTask[Any, Any] | Callable[[Callable[..., Any]], JobTask[Any, Any]]:
    """Django's ``@task``, typed for django-jobs: bare, or with Django's options and ours.

    It calls ``django.tasks.task`` with what it was given, so it builds exactly
    what that builds (a ``JobTask``, on a django-jobs backend); only the types
    differ. The function of a ``takes_context=True`` task takes a ``JobContext``
    first, and ``enqueue`` takes the rest.
    """
    # Refused here, as Django 6 refuses it: 6.0's @task and the backport's
    # would fail with a less helpful TypeError of their own.
    if "run_after" in options:
        raise TypeError(
            "run_after cannot be defined statically with the @task decorator. "
            "Use .using(run_after=...) to set it dynamically."
        )
    # The stub of django.tasks.task knows neither our options nor JobContext.
    untyped = cast("Callable[..., Any]", django_task if TASK_TAKES_OPTIONS else _task_of_backend)
    return cast(
        "JobTask[Any, Any] | Callable[[Callable[..., Any]], JobTask[Any, Any]]",
        untyped(function, takes_context=takes_context, **options),
    )


# Django 6.1 (and the django-tasks backport on 5.2) pass extra @task keyword
# arguments on to the backend's task class; 6.0's @task accepts only its own.
TASK_TAKES_OPTIONS = any(
    parameter.kind is inspect.Parameter.VAR_KEYWORD
    for parameter in inspect.signature(django_task).parameters.values()
)


def _task_of_backend(
    function: Callable[..., Any] | None = None,
    /,
    *,
    backend: str = DEFAULT_TASK_BACKEND_ALIAS,
    **options: Any,
) -> Task[Any, Any] | Callable[[Callable[..., Any]], Task[Any, Any]]:
    """What Django 6.1's ``@task`` does, for 6.0: the backend's task class, all options given."""

    def wrapper(func: Callable[..., Any]) -> Task[Any, Any]:
        task_class = task_backends[backend].task_class
        return task_class(
            func=func,
            backend=backend,
            run_after=None,
            priority=options.pop("priority", DEFAULT_TASK_PRIORITY),
            queue_name=options.pop("queue_name", DEFAULT_TASK_QUEUE_NAME),
            **options,
        )

    return wrapper(function) if function is not None else wrapper
