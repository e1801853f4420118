"""The log line of every attempt that did not simply succeed, once the database took it.

Written by the completer after ``Engine.finish`` applied the report, so the
line says what really happened to the job (retry scheduled, failed for good,
exhausted, cancelled), not what the worker hoped. Django's own
``django.tasks`` line for a failed task has no traceback (its signal is sent
outside the ``except`` block); this one carries the exception as
``exc_info`` when the attempt ran in this process, and the traceback text the
attempt row keeps when it ran in an isolated child, so Sentry and log-based
error tracking see the error either way.

An attempt given back unstarted is logged at INFO: nothing ran. A successful
attempt logs nothing at INFO: one line per job would drown a busy worker's log
(``django.tasks`` logs them at INFO for whoever wants them).
"""

from __future__ import annotations

import logging

from ..logging import job_fields
from ..retry import Verdict
from ..states import AttemptOutcome, JobState
from ..values import Claimed, Report

logger = logging.getLogger("django_jobs.jobs")

_ENDINGS = {
    JobState.QUEUED: (logging.WARNING, "retry scheduled in {delay}"),
    JobState.FAILED: (logging.ERROR, "failed for good: not retried"),
    JobState.EXHAUSTED: (logging.ERROR, "exhausted: no attempt left of {max_attempts}"),
    JobState.CANCELLED: (logging.INFO, "cancelled"),
}

_HOW = {
    AttemptOutcome.FAILED: "failed",
    AttemptOutcome.TIMED_OUT: "timed out",
    AttemptOutcome.CANCELLED: "was stopped",
    AttemptOutcome.SLEPT: "went to sleep",
    AttemptOutcome.NOT_STARTED: "did not start",
}


def log_applied(report: Report, state: JobState, claimed: Claimed) -> None:
    """Log how an attempt ended and what became of its job, if it did not succeed."""
    if report.outcome == AttemptOutcome.SUCCEEDED:
        return
    if report.outcome == AttemptOutcome.SLEPT and state is JobState.QUEUED:
        return  # asleep as the task asked: nothing went wrong
    level, ending = _ENDINGS[state]
    how = _HOW[report.outcome]
    delay = report.decision.delay if report.decision is not None else 0.0
    if report.outcome == AttemptOutcome.NOT_STARTED:
        # Routine: a worker gives back what it claimed ahead when long jobs
        # take its threads.
        level = logging.INFO
        if state is JobState.QUEUED:
            ending = "the attempt is not counted"
    elif report.decision is not None and report.decision.verdict is Verdict.POSTPONE:
        how, ending = "could not start", "postponed {delay}; the attempt is not counted"
    then = ending.format(delay=f"{delay:.1f}s", max_attempts=claimed.max_attempts)
    message = (
        f"Job {claimed.job_id} ({claimed.task_name}, queue {claimed.queue}) attempt "
        f"{claimed.token} {how}: {report.error_type}: {report.error_message}; {then}"
    )
    extra = {
        **job_fields(claimed.job_id, claimed.task_name, claimed.queue, claimed.token),
        "outcome": str(report.outcome),
        "state": str(state),
        "error_type": report.error_type,
    }
    if report.exception is not None:
        logger.log(level, "%s", message, exc_info=report.exception, extra=extra)
    elif report.traceback:
        # Run in an isolated child: the exception stayed there, its text came back.
        logger.log(level, "%s\n%s", message, report.traceback.rstrip(), extra=extra)
    else:
        logger.log(level, "%s", message, extra=extra)


def log_stale(report: Report, claimed: Claimed) -> None:
    """A report that came after the lease was lost: kept on the attempt, applied nowhere."""
    logger.warning(
        "Job %s (%s, queue %s) attempt %d reported %s after its lease was lost: not "
        "applied, kept on the attempt.",
        claimed.job_id,
        claimed.task_name,
        claimed.queue,
        claimed.token,
        report.outcome,
        extra={
            **job_fields(claimed.job_id, claimed.task_name, claimed.queue, claimed.token),
            "outcome": str(report.outcome),
        },
    )
