"""Calling one attempt's task in this process and judging how it ended.

Both a worker's job thread and an isolated child run an attempt through
``TaskRunner``, so the two judge a return value, an exception or a stop the
same way. It writes nothing: the verdict is a ``Report`` for the completer.
Here the arguments are decoded from their stored form, and the return value
encoded to it (``codec.py``), so both paths hand the task the same types.
It lives apart from the executor because the isolated child imports it, and
the executor imports the isolation.
"""

from __future__ import annotations

import os
import socket
import traceback as tb
import uuid
from typing import TYPE_CHECKING, Any

from django.utils import timezone

from .. import registry, tracing, versions
from ..attempt import AttemptControl
from ..codec import from_json
from ..exceptions import (
    AttemptNotStartedError,
    JobCancelled,
    JobSleeping,
    JobStopped,
    JobTimedOut,
    PayloadNotDecodableError,
    ResultNotJSONError,
    ResultTooLargeError,
    StaleAttemptError,
    StepError,
    TaskVersionError,
    UnknownTaskError,
    error_type,
)
from ..framework import task_started
from ..models import ERROR_TEXT_MAX_LENGTH, ERROR_TYPE_MAX_LENGTH
from ..payload import check_result
from ..results import JobResult
from ..retry import Decision, Verdict, unknown_task_decision
from ..signals import receiver_failed, send_each
from ..states import AttemptOutcome, JobState, django_status
from ..steps import Steps
from ..tasks import JobContext
from ..text import clipped, middle_clipped, storable
from ..values import Claimed, Report

if TYPE_CHECKING:
    from ..backend import JobsBackend
    from ..framework import Task


_RUNNING = django_status(JobState.RUNNING)
_STARTED_FAILED = receiver_failed("task_started", "the task runs all the same")


class TaskRunner:
    """Runs attempts for one backend, on behalf of one worker."""

    def __init__(self, backend: JobsBackend, worker_id: uuid.UUID) -> None:
        self.backend = backend
        self.settings = backend.settings
        self.worker_id = worker_id
        self._worker_ids = [str(worker_id)]  # each attempt's result lists it once per attempt

    def run(self, claimed: Claimed, control: AttemptControl) -> Report:
        """Call the task here, in its trace's span when traced (``tracing.py``)."""
        return tracing.processing(claimed, lambda: self._run(claimed, control))

    def _run(self, claimed: Claimed, control: AttemptControl) -> Report:
        """Call the task; a stop that lands in our own code is judged as a stop."""
        try:
            return self._call(claimed, control)
        except JobStopped as exc:
            return self.stopped(claimed, control, exc)

    def _call(self, claimed: Claimed, control: AttemptControl) -> Report:
        task = registry.get(claimed.task_name)
        if task is None:
            return self._unknown_task(claimed)
        version = getattr(task, "version", "")
        if not versions.runs(version, claimed.task_version):
            return self._unknown_task(claimed, version)
        try:
            args = from_json(claimed.args, "args")
            kwargs = from_json(claimed.kwargs, "kwargs")
        except PayloadNotDecodableError as exc:
            return _failure(claimed, AttemptOutcome.FAILED, exc, Decision(Verdict.GIVE_UP))
        result = self._running_result(task, claimed, args, kwargs)
        control.result = result
        # A receiver that raises is logged and the task runs. Raised here, it
        # ended the job thread's work with no outcome, and the attempt stayed
        # running, its lease renewed, for as long as the worker lived.
        send_each(task_started, type(self.backend), "task_result", (result,), _STARTED_FAILED)
        try:
            control.begin()
            if task.takes_context:
                context = JobContext(
                    task_result=result,
                    job_id=claimed.job_id,
                    attempt_number=claimed.token,
                    max_attempts=claimed.max_attempts,
                    tenant=claimed.tenant,
                    idempotency_key=claimed.idempotency_key,
                    control=control,
                    steps=Steps(
                        self.backend.engine,
                        self.worker_id,
                        claimed.job_id,
                        claimed.token,
                        self.settings.MAX_RESULT_BYTES,
                    ),
                )
                value = task.call(context, *args, **kwargs)
            else:
                value = task.call(*args, **kwargs)
            control.end()
            stored = check_result(value, self.settings.MAX_RESULT_BYTES)
        except JobStopped as exc:
            control.end()
            return self.stopped(claimed, control, exc)
        except JobSleeping as sleep:
            control.end()
            return Report(
                job_id=claimed.job_id,
                token=claimed.token,
                attempt_id=claimed.attempt_id,
                outcome=AttemptOutcome.SLEPT,
                progress=control.take_progress(),
                wake_at=sleep.until,
                sleep_step=sleep.step,
            )
        except BaseException as exc:  # SystemExit too: in a job thread it ends the job, not us
            control.end()
            policy = self.backend.retry_policy(task, claimed.max_attempts)
            # What the same code would do again: the result, or a step misused.
            decision = (
                Decision(Verdict.GIVE_UP)
                if isinstance(exc, ResultNotJSONError | ResultTooLargeError | StepError)
                else policy.decide(exc, claimed.token)
            )
            return _failure(claimed, AttemptOutcome.FAILED, exc, decision, control)
        return Report(
            job_id=claimed.job_id,
            token=claimed.token,
            attempt_id=claimed.attempt_id,
            outcome=AttemptOutcome.SUCCEEDED,
            result=stored,
            progress=control.take_progress(),
        )

    def _unknown_task(self, claimed: Claimed, version: str | None = None) -> Report:
        """Postpone a job whose task this worker lacks, until ``UNKNOWN_TASK_GRACE`` ends.

        During a rolling deploy the enqueuers may run new code before every
        worker does; failing such a job at once would lose it. Only after the
        grace (counted from the enqueue) is the task name taken to be wrong.
        A worker that has the task only at an older ``version`` than the job's
        (``versions.py``) lacks it the same way.
        """
        grace = self.settings.UNKNOWN_TASK_GRACE
        waited = (timezone.now() - claimed.enqueued_at).total_seconds()
        backoff = self.backend.retry_policy(None, claimed.max_attempts).backoff
        decision = unknown_task_decision(waited, grace, backoff, claimed.token)
        where = this_worker()
        if version is None:
            lacks = f"No task named {claimed.task_name!r} is registered in {where}"
            wanted = "a worker that has it"
            after = "none was found"
            deploy = "workers that have the task"
            error: type[Exception] = UnknownTaskError
        else:
            lacks = (
                f"Task {claimed.task_name!r} is {_version(version)} in {where}, but the job "
                f"was enqueued by {_version(claimed.task_version)}"
            )
            wanted = f"a worker of version {claimed.task_version} or later"
            after = "no such worker took it"
            deploy = f"workers of version {claimed.task_version} or later"
            error = TaskVersionError
        if decision.verdict is Verdict.POSTPONE:
            message = (
                f"{lacks}; postponed {decision.delay:.1f}s for {wanted} ({grace - waited:.0f}s "
                f"left of UNKNOWN_TASK_GRACE, {grace:g}s from enqueue). Is a deploy under way?"
            )
        else:
            message = (
                f"{lacks}, and {after} within UNKNOWN_TASK_GRACE ({grace:g}s from enqueue): "
                f"failed for good. Deploy {deploy}, then retry the job."
            )
        return _failure(claimed, AttemptOutcome.FAILED, error(message), decision)

    def not_started(self, claimed: Claimed, waited: float) -> Report:
        """How an attempt claimed ahead and given back unstarted is recorded: not counted."""
        return given_back(
            (claimed.job_id, claimed.token),
            claimed.attempt_id,
            f"claimed ahead by {this_worker()} and not started within {waited:.1f}s, every "
            "job thread being busy",
        )

    def broken(self, claimed: Claimed, control: AttemptControl, exc: Exception) -> Report:
        """How an attempt is recorded when something around the task call raised.

        A tracer's span processor, a signal's dispatch, a connection closed
        between jobs: not the task, but its attempt still needs an outcome, or
        it stays running, its lease renewed, for as long as the worker lives.
        The task's retry policy decides, as for an exception from the task.
        """
        return _failure(claimed, AttemptOutcome.FAILED, exc, self._decide(claimed, exc), control)

    def _decide(self, claimed: Claimed, exc: BaseException) -> Decision:
        """What the claimed task's retry policy says of ``exc`` after this attempt."""
        task = registry.get(claimed.task_name)
        return self.backend.retry_policy(task, claimed.max_attempts).decide(exc, claimed.token)

    def stopped(self, claimed: Claimed, control: AttemptControl, exc: JobStopped) -> Report:
        """How an attempt that was stopped (timeout or cancel) is recorded."""
        if isinstance(exc, JobTimedOut):
            seconds = claimed.timeout or 0.0
            if not exc.args:
                exc = JobTimedOut(f"the attempt outlived its timeout of {seconds:g}s")
            # For retry_on / give_up_on, a timeout counts as a TimeoutError.
            decision = self._decide(claimed, TimeoutError(str(exc)))
            return _failure(claimed, AttemptOutcome.TIMED_OUT, exc, decision, control)
        if isinstance(exc, StaleAttemptError):
            # Its report is stale whatever it says: kept on the attempt, applied nowhere.
            return _failure(claimed, AttemptOutcome.FAILED, exc, Decision(Verdict.GIVE_UP), control)
        if not exc.args:
            grace = self.settings.CANCEL_GRACE_SECONDS
            exc = JobCancelled(
                f"the job was cancelled and did not stop within {grace:g}s; stopped by "
                "force. The effect of the work done so far is unknown."
            )
        return _failure(claimed, AttemptOutcome.CANCELLED, exc, Decision(Verdict.GIVE_UP), control)

    def _running_result(
        self, task: Task[Any, Any], claimed: Claimed, args: list[Any], kwargs: dict[str, Any]
    ) -> JobResult:
        """The result Django's task_started is sent with, from the claim: no query."""
        return JobResult(
            task=task,
            id=str(claimed.job_id),
            status=_RUNNING,
            enqueued_at=claimed.enqueued_at,
            started_at=claimed.started_at,
            finished_at=None,
            last_attempted_at=claimed.started_at,
            args=args,
            kwargs=kwargs,
            backend=self.backend.alias,
            errors=[],
            worker_ids=self._worker_ids * claimed.token,
            state=JobState.RUNNING,
            queue=claimed.queue,
            priority=claimed.priority,
            tenant=claimed.tenant,
            idempotency_key=claimed.idempotency_key,
            max_attempts=claimed.max_attempts,
            run_after=claimed.started_at,
            last_error="",
        )


def _version(version: str) -> str:
    return f"version {version}" if version else "unversioned"


def this_worker() -> str:
    """This worker process, as its messages name it: the host and pid it registers under."""
    return f"worker {socket.gethostname()}:{os.getpid()}"


def given_back(key: tuple[uuid.UUID, int], attempt_id: int, how: str) -> Report:
    """How an attempt given back to its queue without starting is recorded: not counted.

    ``how`` says why it never started: the attempt's error message, under the
    type ``AttemptNotStartedError``. Nothing raised it, so there is no
    traceback to keep or to log. Due at once for any worker, its attempt back
    in the budget.
    """
    job_id, token = key
    return Report(
        job_id=job_id,
        token=token,
        attempt_id=attempt_id,
        outcome=AttemptOutcome.NOT_STARTED,
        error_type=error_type(AttemptNotStartedError),
        error_message=f"{how}; given back to its queue",
        decision=Decision(Verdict.POSTPONE, 0.0),
    )


def _failure(
    claimed: Claimed,
    outcome: AttemptOutcome,
    exc: BaseException,
    decision: Decision,
    control: AttemptControl | None = None,
) -> Report:
    return Report(
        job_id=claimed.job_id,
        token=claimed.token,
        attempt_id=claimed.attempt_id,
        outcome=outcome,
        error_type=clipped(storable(error_type(type(exc))), ERROR_TYPE_MAX_LENGTH),
        error_message=clipped(storable(_message(exc)), ERROR_TEXT_MAX_LENGTH),
        traceback=middle_clipped(
            storable("".join(tb.format_exception(exc))), ERROR_TEXT_MAX_LENGTH
        ),
        decision=decision,
        progress=control.take_progress() if control is not None else None,
        exception=exc,
    )


def _message(exc: BaseException) -> str:
    """``str(exc)``, or what happened instead when the exception cannot say it.

    A task may raise an exception whose ``__str__`` fails; raised from here,
    that failure left the attempt with no outcome, running for good.
    """
    try:
        return str(exc)
    except Exception as failed:
        return f"<{type(exc).__name__}: its str() raised {type(failed).__name__}>"
