"""Django's ``task_finished``, sent for written outcomes from a thread of its own.

Sent by the producer after each commit, as it was, a receiver that raised
ended the claim loop, and the worker with it, with the batch it had just
claimed never run (each attempt then recorded ``lost``), at every batch; and
while the signals went out, nothing was claimed. From this thread a receiver
that raises is logged, and the sending, like the claiming, goes on; its
Python (the result built for it, Django's own receiver logging each job at
INFO) runs while the producer waits on PostgreSQL. On no-op jobs the drain
rate moved within this machine's noise (docs/benchmarks.md, "task_finished
off the claim loop").

What a receiver sees is unchanged: each job's signal comes after the
transaction that wrote its outcome committed, in the order written, once. A
receiver runs in this thread (a database query there has this thread's own
connection, closed after each batch as a job thread's is). At most
``BACKLOG_BATCHES`` batches wait here; beyond that the producer waits, so slow
receivers hold the claims back instead of filling the memory. Before it
exits, the worker waits up to ``SHUTDOWN_GRACE_SECONDS`` for everything
handed over to be sent.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from django.db import close_old_connections, connections
from django.utils import timezone

from ..codec import from_json
from ..framework import TaskError, task_finished
from ..results import replaced
from ..signals import receiver_failed, send_each
from ..states import JobState, django_status
from ..values import Report

if TYPE_CHECKING:
    from ..framework import BaseTaskBackend
    from ..results import JobResult

logger = logging.getLogger("django_jobs.worker")

# A written report, the state its job was left in, and the result the attempt's
# task_started was sent with.
Ended = tuple[Report, JobState, "JobResult"]

# Batches handed over and not sent yet, before the producer waits for the thread.
BACKLOG_BATCHES = 64

_RECEIVER_FAILED = receiver_failed(
    "task_finished", "the job's outcome is written, and the other receivers and jobs are sent it"
)


def finished_result(report: Report, state: JobState, started: JobResult) -> JobResult:
    """The result Django's task_finished is sent with, from what this worker knows: no query.

    ``errors`` holds this attempt's error only; ``get_result()`` has them all.
    An isolated attempt sent task_started in its child, so it has no
    ``started`` result here and no task_finished either.
    """
    errors = []
    if report.error_type:
        errors.append(TaskError(exception_class_path=report.error_type, traceback=report.traceback))
    result = replaced(
        started,
        status=django_status(state),
        state=state,
        finished_at=timezone.now(),
        errors=errors,
        last_error=report.error_message,
    )
    if state is JobState.SUCCEEDED:
        value = from_json(report.result, "the return value")  # as get_result() gives it
        object.__setattr__(result, "_return_value", value)
    return result


def send_task_finished(
    sender: type[BaseTaskBackend],
    ended: Sequence[Ended],
    on_error: Callable[[BaseException], None] | None = None,
) -> None:
    """Django's task_finished for each ended attempt, in order."""
    results = (finished_result(*each) for each in ended)
    send_each(task_finished, sender, "task_result", results, on_error=on_error)


class Notifier:
    """The thread that sends task_finished for the batches the completer wrote."""

    def __init__(self, sender: type[BaseTaskBackend]) -> None:
        self.sender = sender
        self._inbox: queue.Queue[Sequence[Ended] | None] = queue.Queue(BACKLOG_BATCHES)
        # A daemon, like the job threads: a receiver that never returns must not
        # hold the process open once ``close`` has given up waiting for it.
        self._thread = threading.Thread(
            target=self._serve, name="django-jobs-notifier", daemon=True
        )

    def start(self) -> None:
        self._thread.start()

    def send(self, ended: Sequence[Ended]) -> None:
        """Hand over a written batch: its signals go out in this thread's turn, in order."""
        self._inbox.put(ended)

    def close(self, timeout: float) -> None:
        """Send everything handed over, then end the thread; wait at most ``timeout`` for it."""
        if not self._thread.is_alive():
            return
        deadline = time.monotonic() + timeout
        try:
            self._inbox.put(None, timeout=timeout)  # the backlog may be full
            ended = True
        except queue.Full:
            ended = False
        self._thread.join(max(0.0, deadline - time.monotonic()))
        if self._thread.is_alive():
            logger.warning(
                "A task_finished receiver did not return within %gs; the worker exits "
                "without sending task_finished for the batch it is in and %d more.",
                timeout,
                self._inbox.qsize() - ended,  # not counting close's own item
            )

    def _serve(self) -> None:
        try:
            while (ended := self._inbox.get()) is not None:
                try:
                    send_task_finished(self.sender, ended, on_error=_RECEIVER_FAILED)
                    close_old_connections()
                except Exception:
                    # Our own bug: the thread must live on, or the producer
                    # would wait for it for good once the backlog is full.
                    logger.exception("task_finished could not be sent for %d jobs", len(ended))
        finally:
            connections.close_all()
