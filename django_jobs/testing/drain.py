"""Running the queued jobs of a test in its own thread and connection, the way a worker does.

``drain`` is a worker made of the worker's own parts, one attempt at a time:
the engine's claim, the ``TaskRunner`` a job thread uses, and the
``Completer``, which hands each outcome to the engine and sends Django's
``task_finished``. Nothing here runs a task or changes a job by itself, so a
test sees what production would do: the same retry decisions, the same
dependency releases, the same refusals.

What differs from a worker, and why:

* It uses the caller's thread and database connection. Inside a
  ``TestCase`` everything stays in the test's transaction, which nobody else
  can see; so there is no LISTEN, no heartbeat and no reaper. A lease never
  expires during a drain.
* Time does not pass by itself. A retry's backoff is skipped, and so is a
  ``context.sleep`` (the job runs again at once, past the sleep), and with
  ``with_scheduled=True`` so is a ``run_after`` in the future: when nothing
  is due, the engine brings the soonest waiting moment forward
  (``Engine.bring_forward``), so jobs run in the order the clock would have
  run them, without sleeping. ``wait_for_backoff=True`` sleeps instead.
* A timeout is enforced by a timer that raises ``JobTimedOut`` into this
  thread, as the watchdog does into a job thread: a task blocked in C (a
  ``sleep``, a socket read) sees it only when that call returns.
* A task never runs in an isolated child process, and a cancel asked while a
  task runs is not delivered to it (no heartbeat brings it).
"""

from __future__ import annotations

import os
import socket
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from django.db import connections
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models.functions import Now
from django.utils import timezone

from .. import registry
from ..backend import JobsBackend, jobs_backend
from ..exceptions import JobTimedOut
from ..models import Job
from ..results import JobResult
from ..states import AttemptOutcome, JobState
from ..values import Claimed, Report, WorkerIdentity
from ..worker.completer import Completer
from ..worker.faults import Faults
from ..worker.runner import TaskRunner
from ..worker.running import Running

DEFAULT_MAX_ATTEMPTS = 1000

# Final states that are a failure of the job, for ``Drained.failed``.
_FAILURES = (JobState.FAILED, JobState.EXHAUSTED)


class DrainLimitError(AssertionError):
    """A drain ran its most attempts and work was still due: a task may re-enqueue forever.

    ``ran`` holds the attempts it did run, as ``Drained.ran`` would have.
    """

    def __init__(self, message: str, ran: tuple[Ran, ...] = ()) -> None:
        super().__init__(message)
        self.ran = ran


@dataclass(frozen=True, slots=True)
class Ran:
    """One attempt a drain ran, and where it left its job."""

    job_id: str  # as a TaskResult's id
    task_name: str
    attempt: int
    outcome: AttemptOutcome
    state: JobState  # the job's state once the outcome was written
    error: str  # "module.Type: message", or "" for a success
    # The backoff the retry policy chose, skipped unless wait_for_backoff.
    backoff: float | None = None


@dataclass(frozen=True, slots=True)
class Drained:
    """What one drain ran: every attempt in order, and each job's result at the end."""

    ran: tuple[Ran, ...]
    # One per job that ran, in the order each first ran, read after the drain.
    results: tuple[JobResult[Any, Any], ...]
    counts: dict[str, int] = field(default_factory=dict)  # jobs by their final state

    @property
    def succeeded(self) -> int:
        return self.counts.get(JobState.SUCCEEDED, 0)

    @property
    def failed(self) -> int:
        """Jobs that ended in failure: a permanent failure or every attempt used."""
        return sum(self.counts.get(state, 0) for state in _FAILURES)

    @property
    def cancelled(self) -> int:
        return self.counts.get(JobState.CANCELLED, 0)

    @property
    def retried(self) -> int:
        """Attempts that failed and left their job queued for another."""
        return sum(
            1 for r in self.ran if r.state is JobState.QUEUED and r.outcome != AttemptOutcome.SLEPT
        )

    @property
    def slept(self) -> int:
        """Attempts that ended in ``context.sleep``, their job queued for its wake time."""
        return sum(1 for r in self.ran if r.outcome == AttemptOutcome.SLEPT)

    @property
    def attempts(self) -> int:
        return len(self.ran)

    def __str__(self) -> str:
        counts = ", ".join(f"{n} {state}" for state, n in sorted(self.counts.items())) or "no job"
        return f"{len(self.ran)} attempt(s) of {len(self.results)} job(s): {counts}"


class _Raise(Faults):
    """A database error in a test is the test's failure, not a fault to wait out."""

    def fault(self, what: str, exc: BaseException) -> None:
        raise exc


def drain(
    queue: str | None = None,
    *,
    queues: list[str] | tuple[str, ...] | None = None,
    backend: str = "default",
    with_scheduled: bool = False,
    wait_for_backoff: bool = False,
    max_attempts: int = DEFAULT_MAX_ATTEMPTS,
) -> Drained:
    """Run every job of ``queue`` (or ``queues``; all the backend's by default) that is due.

    Runs until nothing is due: retries run again at once (``wait_for_backoff``
    sleeps for their backoff instead), jobs waiting on others run once those
    succeed, jobs scheduled later are left unless ``with_scheduled``.
    ``max_attempts`` bounds the attempts, for a task that re-enqueues itself.
    """
    chosen = jobs_backend(_text("backend", backend))
    names = _queues(chosen, queue, queues)
    for name, flag in (("with_scheduled", with_scheduled), ("wait_for_backoff", wait_for_backoff)):
        if not isinstance(flag, bool):
            raise TypeError(f"{name} must be True or False, not {flag!r}.")
    if isinstance(max_attempts, bool) or not isinstance(max_attempts, int) or max_attempts < 1:
        raise ValueError(
            f"max_attempts must be a whole number of at least 1, not {max_attempts!r}."
        )
    registry.discover(chosen.settings.TASK_MODULES)  # what a worker imports at start
    return _Drain(chosen, names, with_scheduled, wait_for_backoff).run(max_attempts)


class _Drain:
    def __init__(
        self, backend: JobsBackend, queues: tuple[str, ...], scheduled: bool, wait: bool
    ) -> None:
        self.backend = backend
        self.engine = backend.engine
        self.queues = queues
        self.scheduled = scheduled
        self.wait = wait
        self.identity = WorkerIdentity(
            uuid.uuid4(), f"django_jobs.testing@{socket.gethostname()}:{os.getpid()}"
        )
        self.running = Running()
        self.runner = TaskRunner(backend, self.identity.id)
        self.completer = Completer(
            self.engine,
            self.identity.id,
            self.running,
            _Raise(self.engine.db, threading.Event()),
            type(backend),
            on_retry=lambda due: None,  # retries are found in the rows: see _next
        )
        self.retried: set[uuid.UUID] = set()  # jobs whose retry this drain scheduled
        self.ran: list[Ran] = []

    def run(self, limit: int) -> Drained:
        while (claimed := self._next()) is not None:
            if len(self.ran) >= limit:
                # Given back as a worker that stops gives back what it holds.
                reason = "django_jobs.testing: the drain reached max_attempts"
                self.engine.release_lease(self.identity.id, claimed.job_id, claimed.token, reason)
                raise DrainLimitError(
                    f"drain ran {limit} attempts and jobs of {', '.join(self.queues)} are still "
                    "due: a task may be enqueueing jobs without end. Pass max_attempts=... to "
                    "allow more.",
                    ran=tuple(self.ran),
                )
            report = self._attempt(claimed)
            self.ran.append(self._written(claimed, report))
        return self._drained()

    def _next(self) -> Claimed | None:
        """The next due job, claimed; when none is, the next moment brought forward.

        After each moment brought forward (or slept until) it claims again: a
        retry may also have fallen due by itself since the last claim. It stops
        when a moment moved nothing and nothing could be claimed.
        """
        got = self._claim()
        if got is not None:
            return got
        for bring in self._moments():
            while True:
                moved = bring()
                got = self._claim()
                if got is not None:
                    return got
                if not moved:
                    break
        return None

    def _moments(self) -> list[Callable[[], bool]]:
        """How time is made to pass: this drain's retries first, then scheduled jobs."""
        moments: list[Callable[[], bool]] = []
        if self.wait:
            moments.append(self._sleep_until_retry)
        elif self.retried:
            moments.append(lambda: bool(self.engine.bring_forward(self.queues, self.retried)))
        if self.scheduled:
            moments.append(lambda: bool(self.engine.bring_forward(self.queues)))
        return moments

    def _claim(self) -> Claimed | None:
        def one() -> list[Claimed]:
            return self.engine.claim(self.identity, self.queues, 1)

        nothing: list[Claimed] = []
        got = self.completer.write(one, otherwise=nothing)
        return got[0] if got else None

    def _attempt(self, claimed: Claimed) -> Report:
        attempt = self.running.start(claimed)
        timer = None
        if claimed.timeout is not None:
            timer = threading.Timer(claimed.timeout, attempt.control.stop, (JobTimedOut,))
            timer.daemon = True
            timer.start()
        # Inside a TestCase the task shares the test's transaction: a database
        # error it raised aborted that transaction, and every write after it
        # (this attempt's outcome first) failed. In a savepoint, it aborts only
        # the task's part, as autocommit in a worker would.
        connection = connections[self.engine.db]
        savepoint = connection.savepoint() if connection.in_atomic_block else None
        try:
            return self.runner.run(claimed, attempt.control)
        finally:
            if timer is not None:
                timer.cancel()
            if savepoint is not None:
                if aborted(connection):
                    connection.savepoint_rollback(savepoint)
                else:
                    connection.savepoint_commit(savepoint)

    def _written(self, claimed: Claimed, report: Report) -> Ran:
        """Write the outcome through the completer, and see where it left the job."""
        self.completer.submit(report)
        self.completer.collect()
        self.completer.write(lambda: None, otherwise=None)
        state = JobState(
            Job.objects.using(self.engine.db).values_list("state", flat=True).get(id=claimed.job_id)
        )
        if state is JobState.QUEUED:
            self.retried.add(claimed.job_id)
        else:
            self.retried.discard(claimed.job_id)
        decision = report.decision
        return Ran(
            job_id=str(claimed.job_id),
            task_name=claimed.task_name,
            attempt=claimed.token,
            outcome=report.outcome,
            state=state,
            error=f"{report.error_type}: {report.error_message}" if report.error_type else "",
            backoff=decision.delay if decision is not None and state is JobState.QUEUED else None,
        )

    def _sleep_until_retry(self) -> bool:
        """Sleep until the soonest retry of this drain is due; False if none is waiting."""
        due = (
            Job.objects.using(self.engine.db)
            .filter(id__in=self.retried, state=JobState.QUEUED, run_after__gt=Now())
            .order_by("run_after")
            .values_list("run_after", flat=True)
            .first()
        )
        if due is None:
            return False
        time.sleep(max(0.0, (due - timezone.now()).total_seconds()))
        return True

    def _drained(self) -> Drained:
        order = list(dict.fromkeys(r.job_id for r in self.ran))
        rows = {
            str(job_id): (task_name, state)
            for job_id, task_name, state in Job.objects.using(self.engine.db)
            .filter(id__in=order)
            .values_list("id", "task_name", "state")
        }
        # A job of a task this process does not know has no result to build;
        # its attempt says why (UnknownTaskError).
        known = [job_id for job_id in order if registry.get(rows[job_id][0]) is not None]
        return Drained(
            ran=tuple(self.ran),
            results=tuple(self.backend.get_result(job_id) for job_id in known),
            counts=dict(Counter(state for _, state in rows.values())),
        )


def _text(name: str, value: object) -> str:
    if not isinstance(value, str) or not value:
        raise TypeError(f"{name} must be a non-empty string, not {value!r}.")
    return value


def _queues(
    backend: JobsBackend, queue: str | None, queues: list[str] | tuple[str, ...] | None
) -> tuple[str, ...]:
    """The queues asked for, each one the backend has; all of them if none is named."""
    if queue is not None and queues is not None:
        raise TypeError("Pass queue= or queues=, not both.")
    if queue is not None:
        names: tuple[str, ...] = (_text("queue", queue),)
    elif queues is not None:
        if isinstance(queues, str) or not queues:
            raise TypeError(f"queues must be a non-empty list of queue names, not {queues!r}.")
        names = tuple(_text("queues[]", name) for name in queues)
    else:
        names = tuple(sorted(backend.queues))
    unknown = sorted(set(names) - set(backend.queues))
    if unknown:
        raise ValueError(
            f"Unknown queue(s) {', '.join(map(repr, unknown))} for TASKS[{backend.alias!r}]; "
            f"its queues are {', '.join(sorted(backend.queues))}."
        )
    return names


def aborted(connection: BaseDatabaseWrapper) -> bool:
    """Whether the connection's transaction failed and takes no statement but a rollback.

    PostgreSQL's state, read from psycopg without a query; SQLite has no such state.
    """
    info = getattr(connection.connection, "info", None)
    status = getattr(info, "transaction_status", None)
    return getattr(status, "name", "") == "INERROR"
