"""Testing your own tasks: run queued jobs in the test, and assert what was enqueued.

* ``drain()`` runs the jobs that are due, in the test's thread and database
  connection, through the worker's own claim, runner and completer
  (``drain.py`` says what differs from a worker, and why).
* ``assert_enqueued`` / ``assert_not_enqueued`` / ``enqueued_jobs`` read the
  jobs table (``assertions.py``).
* ``captured_jobs()`` gives the jobs a block enqueued (``capture.py``).
* ``Jobs`` binds them all to one backend; the pytest plugin
  (``django_jobs.pytest_plugin``) hands one out as the ``jobs`` fixture.

Enqueue goes through the backend as in production, so what production
refuses (arguments that are not JSON, an unknown queue, a full queue) is
refused here too. Works in a ``TestCase`` and a ``TransactionTestCase``, on
PostgreSQL and SQLite. Django's ``ImmediateBackend`` is no substitute: it
runs a task without our context, retries or argument checks.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any

from ..framework import Task
from ..models import Job
from ..results import JobResult
from .assertions import assert_enqueued, assert_not_enqueued, enqueued_jobs
from .capture import captured_jobs
from .drain import DEFAULT_MAX_ATTEMPTS, Drained, DrainLimitError, Ran, drain


class Jobs:
    """Every helper of this module bound to one backend: what the ``jobs`` fixture is."""

    def __init__(self, backend: str = "default") -> None:
        from ..backend import jobs_backend

        jobs_backend(backend)  # refused here, with its reason, rather than at first use
        self.backend = backend

    def drain(
        self,
        queue: str | None = None,
        *,
        queues: list[str] | tuple[str, ...] | None = None,
        with_scheduled: bool = False,
        wait_for_backoff: bool = False,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
    ) -> Drained:
        return drain(
            queue,
            queues=queues,
            backend=self.backend,
            with_scheduled=with_scheduled,
            wait_for_backoff=wait_for_backoff,
            max_attempts=max_attempts,
        )

    def assert_enqueued(
        self,
        task: Task[Any, Any] | str,
        *,
        args: Any = None,
        kwargs: Any = None,
        queue: str | None = None,
        count: int | None = None,
    ) -> list[Job]:
        return assert_enqueued(
            task, args=args, kwargs=kwargs, queue=queue, count=count, backend=self.backend
        )

    def assert_not_enqueued(
        self,
        task: Task[Any, Any] | str,
        *,
        args: Any = None,
        kwargs: Any = None,
        queue: str | None = None,
    ) -> None:
        assert_not_enqueued(task, args=args, kwargs=kwargs, queue=queue, backend=self.backend)

    def enqueued(self, task: Task[Any, Any] | str | None = None) -> list[Job]:
        return enqueued_jobs(task, backend=self.backend)

    def captured(self) -> AbstractContextManager[list[JobResult[Any, Any]]]:
        return captured_jobs(backend=self.backend)


class JobsWorker:
    """A worker that runs only when asked: each call is one ``drain``, all of them kept.

    What the ``jobs_worker`` fixture is: ``jobs_worker()`` runs what is due,
    ``jobs_worker.ran`` is every attempt it ran during the test.
    """

    def __init__(self, backend: str = "default", **defaults: Any) -> None:
        self.jobs = Jobs(backend)
        self.defaults = defaults  # drain()'s options for every call
        self.drains: list[Drained] = []
        self._ran: list[Ran] = []  # every call's attempts, a call that raised too

    def __call__(self, queue: str | None = None, **options: Any) -> Drained:
        try:
            drained = self.jobs.drain(queue, **{**self.defaults, **options})
        except DrainLimitError as stopped:
            self._ran += stopped.ran
            raise
        self.drains.append(drained)
        self._ran += drained.ran
        return drained

    @property
    def ran(self) -> list[Ran]:
        return list(self._ran)


__all__ = [
    "DrainLimitError",
    "Drained",
    "Jobs",
    "JobsWorker",
    "Ran",
    "assert_enqueued",
    "assert_not_enqueued",
    "captured_jobs",
    "drain",
    "enqueued_jobs",
]
