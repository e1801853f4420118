"""Running claimed attempts, each in a job thread or, for a suspect, in a child of its own.

The executor only runs: it turns each attempt into an ``Outcome`` and hands it
on, and never touches the database itself (the task's own code may). How an
attempt ended is all it knows, including that an isolated child died or that
the watchdog stopped it; writing that down is the completer's work. So a job
thread never waits on the database, and whatever the database does, the
executor can be run and tested without it.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

from django.db import close_old_connections

from ..attempt import AttemptControl
from ..exceptions import JobStopped
from ..isolation import run_isolated
from ..values import ChildDied, Claimed, Outcome, Report
from .runner import TaskRunner

if TYPE_CHECKING:
    from ..backend import JobsBackend


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
        self._deliver = deliver
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="django-jobs-job")

    def start(self, claimed: Claimed, control: AttemptControl) -> None:
        """Run the attempt on a free job thread; its outcome is delivered when it ends."""
        self._pool.submit(self._run, claimed, control)

    def shutdown(self) -> None:
        """Start no queued attempt; leave running threads to end with the process."""
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _run(self, claimed: Claimed, control: AttemptControl) -> None:
        self._deliver(self.execute(claimed, control))

    def execute(self, claimed: Claimed, control: AttemptControl) -> Outcome:
        """Run one attempt here, in the calling thread, to its end."""
        close_old_connections()  # the task's connections, as a request would
        try:
            if claimed.suspect and self.settings.ISOLATE_SUSPECTS:
                return self._isolated(claimed, control)
            return self.runner.run(claimed, control)
        except JobStopped as exc:
            # The stop landed just outside the task call, in our own code.
            return self.runner.stopped(claimed, control, exc)
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
