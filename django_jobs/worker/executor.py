"""Running claimed attempts, each in a job thread or, for a suspect, in a child of its own.

The executor only runs: it turns each attempt into an ``Outcome`` and hands it
on, and never touches the database itself (the task's own code may). How an
attempt ended is all it knows, including that an isolated child died or that
the watchdog stopped it; writing that down is the completer's work. So a job
thread never waits on the database, and whatever the database does, the
executor can be run and tested without it.
"""

from __future__ import annotations

import collections
import logging
import queue
import threading
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING

from django.db import close_old_connections

from ..attempt import AttemptControl
from ..exceptions import JobCancelled, JobStopped
from ..isolation import run_isolated
from ..values import ChildDied, Claimed, Outcome, Report
from .runner import TaskRunner

if TYPE_CHECKING:
    from ..backend import JobsBackend

logger = logging.getLogger("django_jobs.worker")


_Work = tuple[Claimed, AttemptControl] | None  # None: the thread that takes it ends


class JobThreads:
    """Up to ``size`` job threads, fed from one queue.

    Not a ``ThreadPoolExecutor``: its ``submit`` builds a ``Future`` (with its
    condition and lock) per call that nothing here reads, since an attempt's
    outcome is delivered by the thread itself; on a busy worker of no-op jobs
    that was 7 % of the process's time. Threads start as work finds none
    idle, as the executor's did, so a worker of 64 slots that never runs more
    than a few jobs at once keeps a few threads. They are daemons: a thread
    that will not stop must not hold the process open after the worker gave
    up on it (the watchdog holds its report until then).

    A thread counts itself idle before it delivers the outcome: the producer,
    woken by that outcome, may start the next attempt at once, and must find
    the thread free rather than start another.
    """

    def __init__(
        self,
        size: int,
        run: Callable[[Claimed, AttemptControl], Outcome | None],
        deliver: Callable[[Outcome], None],
    ) -> None:
        self._size = size
        self._run = run
        self._deliver = deliver
        self._inbox: queue.SimpleQueue[_Work] = queue.SimpleQueue()
        # One token per idle thread. A deque's append and pop are atomic (C,
        # under the GIL or their own lock), where a Semaphore is Python code
        # around a Condition: a release and a non-blocking acquire, once per
        # attempt, took 790 ns against the deque's 28 ns.
        self._idle: collections.deque[None] = collections.deque()
        self._threads: list[threading.Thread] = []
        self._closed = False

    def start(self, claimed: Claimed, control: AttemptControl) -> None:
        if self._closed:
            raise RuntimeError("the job threads were shut down")
        self._inbox.put((claimed, control))
        try:
            self._idle.pop()
        except IndexError:
            if len(self._threads) >= self._size:
                return
            thread = threading.Thread(
                target=self._serve,
                name=f"django-jobs-job_{len(self._threads)}",
                daemon=True,
            )
            self._threads.append(thread)
            thread.start()

    def shutdown(self) -> None:
        """Drop the attempts not started yet; each thread ends after its current one."""
        self._closed = True
        while True:
            try:
                self._inbox.get_nowait()
            except queue.Empty:
                break
        for _ in self._threads:
            self._inbox.put(None)

    def _serve(self) -> None:
        while (work := self._inbox.get()) is not None:
            outcome: Outcome | None = None
            try:
                outcome = self._run(*work)
            except Exception:
                # The executor judges every way a task can end; this is our own bug.
                logger.exception("A job thread failed outside the task: %s", work[0].job_id)
            self._idle.append(None)
            if outcome is not None:
                self._deliver(outcome)


class Executor:
    """Runs attempts on ``threads`` job threads and delivers each one's outcome."""

    def __init__(
        self,
        backend: JobsBackend,
        worker_id: uuid.UUID,
        deliver: Callable[[Outcome], None],
        threads: int = 1,
    ) -> None:
        self.runner = TaskRunner(backend, worker_id)
        self.settings = backend.settings
        self.worker_id = worker_id
        self._threads = JobThreads(threads, self.execute, deliver)

    def start(self, claimed: Claimed, control: AttemptControl) -> None:
        """Run the attempt on a free job thread; its outcome is delivered when it ends."""
        self._threads.start(claimed, control)

    def shutdown(self) -> None:
        """Start no queued attempt; each thread ends after the one it runs, or with the process."""
        self._threads.shutdown()

    def execute(self, claimed: Claimed, control: AttemptControl) -> Outcome | None:
        """Run one attempt here, in the calling thread, to its end.

        None, and nothing run, if the attempt waited for a thread so long that
        the producer gave it back meanwhile (``prefetch.py``): its report is
        made there.
        """
        if not control.start():
            return None
        if control.cancelled:  # asked while it waited for a thread
            control.end()
            cancelled = JobCancelled("the job was cancelled before it started")
            return self.runner.stopped(claimed, control, cancelled)
        close_old_connections()  # the task's connections, as a request would
        try:
            if claimed.suspect and self.settings.ISOLATE_SUSPECTS:
                return self._isolated(claimed, control)
            return self.runner.run(claimed, control)
        except JobStopped as exc:
            # The stop landed just outside the task call, in our own code.
            return self.runner.stopped(claimed, control, exc)
        except Exception as exc:
            logger.exception(
                "Job %s: something around its task call raised; the attempt is recorded failed",
                claimed.job_id,
            )
            return self.runner.broken(claimed, control, exc)
        finally:
            control.end()
            close_old_connections()

    def _isolated(self, claimed: Claimed, control: AttemptControl) -> Outcome:
        """Run a suspect in its own process (see isolation.py); its death loses only it."""
        ended = run_isolated(
            self.runner.backend.alias, self.worker_id, claimed, control.adopt_child
        )
        if isinstance(ended, Report):
            return ended
        stop = control.stop_kind
        if stop is not None:  # the watchdog killed it: a timeout or a forced cancel
            return self.runner.stopped(claimed, control, stop())
        return ChildDied(
            job_id=claimed.job_id,
            token=claimed.token,
            attempt_id=claimed.attempt_id,
            exit_code=ended,
        )
