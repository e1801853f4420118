"""Stopping attempts past their timeout or cancel grace, and giving up on threads that stay.

A stop is an exception raised into the task's thread (or a kill of its
isolated child); the executor turns it into a ``timed_out`` or ``cancelled``
outcome. A thread blocked in C never sees the exception: after
``STOP_GRACE_SECONDS`` it is abandoned, and only replacing the whole process
ends it. Its report is made here, held by the completer and written just
before the process exits, so the job cannot run elsewhere while it still runs
here.
"""

from __future__ import annotations

import logging
import time

from ..conf import JobsOptions
from ..exceptions import JobCancelled, JobTimedOut
from ..values import Report
from .runner import TaskRunner
from .running import Running, RunningAttempt

logger = logging.getLogger("django_jobs.worker")


class Watchdog:
    def __init__(self, settings: JobsOptions, running: Running, runner: TaskRunner) -> None:
        self.settings = settings
        self.running = running
        self.runner = runner

    def check(self) -> list[Report]:
        """Stop what is due to stop; return the reports of attempts given up on now."""
        now = time.monotonic()
        given_up: list[Report] = []
        for key, attempt in self.running.snapshot().items():
            control = attempt.control
            if attempt.abandoned:
                continue
            if control.stop_sent is None:
                if control.deadline is not None and now >= control.deadline:
                    if control.stop(JobTimedOut):
                        logger.warning("Job %s attempt %d timed out; stopping it.", *key)
                elif (
                    control.cancel_seen is not None
                    and now >= control.cancel_seen + self.settings.CANCEL_GRACE_SECONDS
                ) and control.stop(JobCancelled):
                    logger.warning("Job %s attempt %d ignored its cancel; stopping it.", *key)
            elif (
                now >= control.stop_sent + self.settings.STOP_GRACE_SECONDS
                # It stopped: its outcome is made, or waits to be written (a
                # database outage), and nothing is left to give up on.
                and not control.finished
                and self.running.abandon(key)
            ):
                given_up.append(self._abandoned(attempt))
        return given_up

    def _abandoned(self, attempt: RunningAttempt) -> Report:
        kind = attempt.control.stop_kind or JobTimedOut
        message = (
            f"did not stop within {self.settings.STOP_GRACE_SECONDS:g}s of being told to "
            "(blocked outside Python); its worker process was replaced to end it. The "
            "effect of the work done so far is unknown."
        )
        logger.error("Job %s attempt %d %s", *attempt.key, message)
        return self.runner.stopped(attempt.claimed, attempt.control, kind(message))

    def next_check(self) -> float | None:
        """The next moment ``check`` must act on, if any attempt has one."""
        moments: list[float] = []
        for attempt in self.running.snapshot().values():
            control = attempt.control
            if attempt.abandoned or control.finished:
                continue
            # A timeout, the end of a cancel's grace, or the end of a stop's grace.
            if control.stop_sent is not None:
                moments.append(control.stop_sent + self.settings.STOP_GRACE_SECONDS)
            elif control.cancel_seen is not None:
                moments.append(control.cancel_seen + self.settings.CANCEL_GRACE_SECONDS)
            elif control.deadline is not None:
                moments.append(control.deadline)
        return min(moments, default=None)
