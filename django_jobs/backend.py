"""``django_jobs.backend.JobsBackend``: Django's Tasks framework, on durable rows.

Configure it like any Tasks backend::

    TASKS = {
        "default": {
            "BACKEND": "django_jobs.backend.JobsBackend",
            "QUEUES": ["default", "emails"],
            "OPTIONS": {"LEASE_SECONDS": 10},
        }
    }

and ``@task`` functions and ``.enqueue()`` run on it unchanged. Enqueue
validates everything before it writes anything; see ``enqueue.py`` for the
transaction rules.

This module imports no model at import time: Django imports it to build the
backend for ``manage.py check`` too, and a project that forgot ``django_jobs``
in ``INSTALLED_APPS`` must get the check's message (``django_jobs.E001``), not
a model's ``RuntimeError``. The modules that need the models are imported where
they are used.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from django.apps import apps
from django.conf import settings
from django.core import checks
from django.utils import timezone
from django.utils.functional import cached_property

from . import registry, tracing, versions
from .conf import JobsOptions
from .exceptions import (
    MAX_ATTEMPTS_LIMIT,
    MAX_RETRY_DELAY_SECONDS,
    ConfigurationError,
    EnqueueError,
    InvalidJobOptionError,
    NotAJobsBackendError,
    UnknownQueueError,
    UnknownTaskError,
)
from .framework import (
    BaseTaskBackend,
    InvalidTaskBackend,
    Task,
    TaskResultDoesNotExist,
    task_backends,
    task_enqueued,
)
from .generic import P, T
from .payload import check_arguments
from .retry import Backoff, RetryPolicy
from .signals import send_each
from .states import JobState
from .tasks import JobTask
from .text import unstorable
from .unique import EnqueueOutcome, problem, rule_of

if TYPE_CHECKING:
    from .engine.base import Engine
    from .enqueue import DepthGauge
    from .models import Job
    from .results import JobResult

APP_NOT_INSTALLED = "django_jobs.E001"

# Column widths of Job; longer values are refused instead of truncated.
_MAX_LENGTHS = {"version": 64}


class JobsBackend(BaseTaskBackend):
    task_class = JobTask
    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        # A broken configuration is kept, not raised: Django builds every
        # backend for ``manage.py check``, which reports it as a check message;
        # any use of the backend raises it.
        self._settings: JobsOptions | ConfigurationError
        if not apps.is_installed("django_jobs"):
            self._settings = ConfigurationError(
                f"TASKS[{alias!r}] uses django_jobs, but 'django_jobs' is not in INSTALLED_APPS.",
                check_id=APP_NOT_INSTALLED,
                hint="Add 'django_jobs' to INSTALLED_APPS and run migrate.",
            )
            return
        try:
            self._settings = JobsOptions.from_mapping(alias, self.options)
        except ConfigurationError as exc:
            self._settings = exc
            return
        from .enqueue import DepthGauge

        self.depth: DepthGauge = DepthGauge()

    @property
    def problem(self) -> ConfigurationError | None:
        """What is wrong with this backend's configuration, if anything."""
        return self._settings if isinstance(self._settings, ConfigurationError) else None

    @property
    def settings(self) -> JobsOptions:
        """The validated ``OPTIONS``; raises the configuration problem if there is one."""
        if isinstance(self._settings, ConfigurationError):
            raise self._settings
        return self._settings

    @property
    def db(self) -> str:
        """The alias of the database that holds the jobs."""
        return self.settings.DATABASE

    @cached_property
    def engine(self) -> Engine:
        """The storage engine for the jobs database, chosen once, bound to these options."""
        from .engine import engine_for

        return engine_for(self.db, self.settings)

    # -- validation ---------------------------------------------------------

    def validate_task(self, task: Task[Any, Any]) -> None:
        if self.queues and task.queue_name not in self.queues:
            raise UnknownQueueError(
                f"Queue {task.queue_name!r} is not one of TASKS[{self.alias!r}]['QUEUES'] "
                f"({', '.join(sorted(self.queues))})."
            )
        super().validate_task(task)
        # A misconfigured backend still lets @task modules import (they are
        # imported by URLconfs during ``manage.py check``, which reports the
        # problem); enqueue refuses.
        if isinstance(task, JobTask) and self.problem is None:
            _validate_job_options(task)
            registry.register(task)

    def retry_policy(self, task: Task[Any, Any] | None, max_attempts: int) -> RetryPolicy:
        default = Backoff(self.settings.BACKOFF_BASE_SECONDS, self.settings.BACKOFF_CAP_SECONDS)
        if isinstance(task, JobTask):
            return RetryPolicy(
                max_attempts=max_attempts,
                backoff=task.get_backoff(default),
                retry_on=task.retry_on,
                give_up_on=task.give_up_on,
            )
        return RetryPolicy(max_attempts=max_attempts, backoff=default)

    # -- enqueue ------------------------------------------------------------

    def enqueue(self, task: Task[P, T], args: Any, kwargs: Any) -> JobResult[P, T]:
        self._check_task(task)  # first: it also says if the app is not installed
        from .dependencies import dependency_ids
        from .enqueue import accept
        from .membership import member_of
        from .results import build
        from .rows import new_job

        encoded = check_arguments(list(args), dict(kwargs), self.settings.MAX_PAYLOAD_BYTES)
        job = new_job(args=encoded.args, kwargs=encoded.kwargs, **self._job_template(task))
        job.batch_id = member_of(self)
        after = dependency_ids(task.after) if isinstance(task, JobTask) else []
        limit = self.settings.QUEUE_MAX_DEPTH.get(task.queue_name)
        if limit is not None:
            self.depth.check(self.db, task.queue_name, limit)
        text = (encoded.args_json, encoded.kwargs_json)
        rule = rule_of(task) if isinstance(task, JobTask) else None
        # One result a job, built once: the result returned is the one
        # task_enqueued carries, as enqueue_many's and Django's own backends'
        # are. In autocommit the signal goes before accept() returns; a
        # deferred insert (a transaction open elsewhere) may announce another
        # job than the one it predicted and returned.
        results: dict[uuid.UUID, JobResult[P, T]] = {}

        def result(stored: Job, outcome: EnqueueOutcome) -> JobResult[P, T]:
            if stored.id not in results:
                results[stored.id] = build(task, stored, [], outcome)
            return results[stored.id]

        def write() -> Job:
            stored, outcome = accept(
                self.engine,
                job,
                text,
                lambda j: self._announce(result(j, EnqueueOutcome.CREATED)),
                after,
                rule,
            )
            result(stored, outcome)
            return stored

        return results[tracing.sending(job, write).id]

    def enqueue_many(
        self,
        task: Task[P, T],
        calls_given: Iterable[tuple[Sequence[Any], Mapping[str, Any]]],
    ) -> list[JobResult[P, T]]:
        """Enqueue many calls of one task: every call validated, then one COPY.

        Same transaction rules as ``enqueue``: all the jobs exist iff the
        caller's transaction commits, and workers are woken once, after it.
        Idempotency keys are refused here (each would need its own lookup);
        ``after=`` applies to every job of the batch (a fan-out).
        """
        self._check_task(task)  # first: it also says if the app is not installed
        from .bulk import Call
        from .dependencies import dependency_ids, wait_for
        from .enqueue import accept_many
        from .ids import new_ids
        from .membership import member_of
        from .results import Stamp, build
        from .rows import new_job

        if isinstance(task, JobTask) and task.idempotency_key is not None:
            raise InvalidJobOptionError(
                f"{task.module_path}: enqueue_many does not take an idempotency key; "
                "enqueue those jobs one by one."
            )
        if isinstance(task, JobTask) and task.unique_key is not None:
            raise InvalidJobOptionError(
                f"{task.module_path}: enqueue_many does not take a unique key (each call "
                "would find or update a job of its own); enqueue those jobs one by one."
            )
        given = list(calls_given)
        if not given:
            return []
        limit = self.settings.QUEUE_MAX_DEPTH.get(task.queue_name)
        if limit is not None:
            self.depth.check_room(self.db, task.queue_name, limit, len(given))
        template = self._job_template(task)
        prototype = new_job(args=[], kwargs={}, **template)
        prototype.batch_id = member_of(self)
        after = dependency_ids(task.after) if isinstance(task, JobTask) else []
        if after:
            # Refuses a bad dependency now; sets the state the results report.
            wait_for(self.engine, prototype, after, lock=False)
        stamp = Stamp(build(task, prototype, [], EnqueueOutcome.CREATED))
        results: list[JobResult[P, T]] = []
        ids = new_ids(len(given))
        # timezone.now() reads settings.USE_TZ through the lazy settings on
        # every call (a tenth of a bulk enqueue's time under cProfile): once here.
        zone = UTC if settings.USE_TZ else None
        max_bytes = self.settings.MAX_PAYLOAD_BYTES

        def validated() -> Iterator[Call]:
            """Each call checked, its result recorded, as accept_many drains it."""
            for index, each in enumerate(given):
                args, kwargs = _call(index, each)
                try:
                    encoded = check_arguments(args, kwargs, max_bytes)
                    now = datetime.now(zone)
                    call = Call(ids[index], *encoded, now, template["run_after"] or now)
                except EnqueueError as exc:
                    raise type(exc)(f"call {index}: {exc}") from None
                results.append(stamp(call.id, args, kwargs, call.at, call.run_after))
                yield call

        def announce() -> None:
            from .metrics import record

            record.enqueued(prototype.queue, prototype.task_name, len(results))
            send_each(task_enqueued, type(self), "task_result", results)

        tracing.sending_many(
            prototype,
            len(given),
            lambda: accept_many(self.engine, prototype, validated(), announce, after),
        )
        if prototype.state != stamp.template.state:
            # A dependency finished between the unlocked look and the locked one.
            for result in results:
                object.__setattr__(result, "state", JobState(prototype.state))
        return results

    def _check_task(self, task: Task[Any, Any]) -> None:
        if (problem := self.problem) is not None:
            raise problem
        self.validate_task(task)
        if not registry.is_registered(task):
            raise UnknownTaskError(
                f"Task {task.module_path!r} is not registered with django_jobs; define it "
                f"with @task in a module that workers import (an app's tasks.py or "
                f"TASKS[{self.alias!r}]['OPTIONS']['TASK_MODULES'])."
            )

    def _job_template(self, task: Task[Any, Any]) -> dict[str, Any]:
        """Everything a job of ``task`` takes but its arguments: worked out once per batch."""
        options = task if isinstance(task, JobTask) else None
        return {
            "backend": self.alias,
            "task_name": task.module_path,
            "task_version": options.version if options else "",
            "queue": task.queue_name,
            "priority": task.priority,
            "run_after": task.run_after,
            "expires_at": options.expires_at if options else None,
            "tenant": options.tenant if options else "",
            "initiator": options.initiator if options else "",
            "idempotency_key": options.idempotency_key if options else None,
            "unique_key": options.unique_key if options else None,
            "concurrency_key": options.concurrency_key if options else None,
            "max_attempts": (options.max_attempts if options else None)
            or self.settings.MAX_ATTEMPTS,
            "timeout": options.timeout if options else None,
        }

    def _announce(self, result: JobResult[Any, Any]) -> None:
        from .metrics import record

        record.enqueued(result.queue, result.task.module_path)
        task_enqueued.send(type(self), task_result=result)

    # -- results ------------------------------------------------------------

    def get_result(self, result_id: str) -> JobResult:
        from .models import Job
        from .results import build

        try:
            job_id = uuid.UUID(str(result_id))
        except ValueError:
            raise TaskResultDoesNotExist(f"{result_id!r} is not a job id (a UUID).") from None
        job = Job.objects.using(self.db).filter(id=job_id).first()
        if job is None:
            raise TaskResultDoesNotExist(f"No job with id {result_id}.")
        task = registry.get(job.task_name)
        if task is None:
            raise TaskResultDoesNotExist(
                f"Job {result_id} exists, but its task {job.task_name!r} is not registered "
                "in this process."
            )
        attempts = list(job.attempt_set.using(self.db).order_by("number"))
        return build(task, job, attempts)

    # -- checks -------------------------------------------------------------

    def check(self, **kwargs: Any) -> list[checks.CheckMessage]:
        from .checks import check_backend

        return check_backend(self)


def jobs_backend(alias: str) -> JobsBackend:
    """The backend of ``TASKS[alias]``, which must be a ``JobsBackend``.

    Everything that is given an alias (a setting, a ``--backend``, a
    ``backend=`` argument) looks it up here, so a wrong one fails the same way
    everywhere: ``NotAJobsBackendError`` naming the alias and what is wrong,
    or the backend's ``ConfigurationError`` if its ``OPTIONS`` are broken.
    """
    try:
        backend = task_backends[alias]
    except InvalidTaskBackend as exc:
        if alias in settings.TASKS:  # its BACKEND does not import
            raise NotAJobsBackendError(f"TASKS[{alias!r}]: {exc}") from exc
        configured = ", ".join(sorted(settings.TASKS)) or "none"
        raise NotAJobsBackendError(
            f"TASKS has no backend {alias!r}; the configured aliases are {configured}."
        ) from exc
    if not isinstance(backend, JobsBackend):
        kind = type(backend)
        raise NotAJobsBackendError(
            f"TASKS[{alias!r}] uses {kind.__module__}.{kind.__qualname__}, "
            "not django_jobs.backend.JobsBackend or a subclass of it."
        )
    if (problem := backend.problem) is not None:
        raise problem
    return backend


def _call(index: int, given: Any) -> tuple[list[Any], dict[str, Any]]:
    """One ``enqueue_many`` call as its args and kwargs, or refused as not a call.

    Taken as given, ``list()`` of a dict keeps its keys and of a string its
    characters: a job the caller never meant, written without a word.
    """
    if isinstance(given, tuple | list) and len(given) == 2:
        args, kwargs = given
        if isinstance(args, tuple | list) and isinstance(kwargs, Mapping):
            return list(args), dict(kwargs)
    raise EnqueueError(
        f"call {index}: each call must be a pair (args, kwargs) of a list or tuple and a "
        f"dict, not {_shape(given)}."
    )


def _shape(given: Any) -> str:
    """What a refused call was, by type, without its arguments (they may be large or private)."""
    if isinstance(given, tuple | list):
        parts = [type(part).__name__ for part in given[:3]] + ["..."] * (len(given) > 3)
        return f"a {type(given).__name__} of {len(given)}: ({', '.join(parts)})"
    return f"a value of type {type(given).__name__}"


def _validate_job_options(task: JobTask) -> None:
    def fail(message: str) -> None:
        raise InvalidJobOptionError(f"{task.module_path}: {message}")

    if task.max_attempts is not None and (
        isinstance(task.max_attempts, bool)
        or not isinstance(task.max_attempts, int)
        or not 1 <= task.max_attempts <= MAX_ATTEMPTS_LIMIT
    ):
        fail(
            f"max_attempts must be a whole number from 1 to {MAX_ATTEMPTS_LIMIT}, "
            f"not {task.max_attempts!r}."
        )
    if task.timeout is not None and (
        isinstance(task.timeout, bool)
        or not isinstance(task.timeout, int | float)
        or not 0 < task.timeout <= MAX_RETRY_DELAY_SECONDS  # NaN and infinity too
    ):
        fail(
            f"timeout must be a positive number of seconds, at most {MAX_RETRY_DELAY_SECONDS} "
            f"(a hundred years), not {task.timeout!r}."
        )
    if task.backoff is not None and not isinstance(task.backoff, Backoff):
        if isinstance(task.backoff, bool) or not isinstance(task.backoff, int | float):
            fail(f"backoff must be a number of seconds or a Backoff, not {task.backoff!r}.")
        elif not 0 <= task.backoff <= MAX_RETRY_DELAY_SECONDS:  # NaN too
            fail(
                f"backoff must be from 0 to {MAX_RETRY_DELAY_SECONDS} seconds (a hundred "
                f"years), not {task.backoff!r}."
            )
    for name in ("retry_on", "give_up_on"):
        classes = getattr(task, name)
        if not isinstance(classes, tuple) or not all(
            isinstance(c, type) and issubclass(c, BaseException) for c in classes
        ):
            fail(f"{name} must be a tuple of exception classes, not {classes!r}.")
    keys = ("idempotency_key", "concurrency_key", "unique_key")
    for name in ("tenant", "initiator", *keys, "version"):
        value = getattr(task, name)
        if value is None:
            continue
        if not isinstance(value, str):
            fail(f"{name} must be a string, not {type(value).__name__}.")
        elif len(value) > (limit := _MAX_LENGTHS.get(name, 255)):
            fail(f"{name} is {len(value)} characters long; at most {limit} fit.")
        elif (wrong := unstorable(value)) is not None:
            fail(f"{name} must not contain {wrong}: {value!r}.")
        elif name in keys and not value:
            fail(f"{name} must not be empty (pass None for no key).")
    if (wrong := versions.problem(task.version)) is not None:
        fail(wrong)
    if (wrong := problem(task)) is not None:
        fail(wrong)
    from .dependencies import dependency_ids

    try:
        dependency_ids(task.after)
    except ValueError as exc:
        fail(str(exc))
    if task.expires_at is not None:
        if not isinstance(task.expires_at, datetime):
            fail(f"expires_at must be a datetime, not {type(task.expires_at).__name__}.")
        elif settings.USE_TZ and timezone.is_naive(task.expires_at):
            fail("expires_at must be an aware datetime.")
