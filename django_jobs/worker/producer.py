"""The claim loop: fill free slots, sleep until there may be work, stop in good order.

It runs on the worker's main thread. Each cycle it collects the outcomes of
ended attempts, has the watchdog stop what is due, claims up to the free
slots and, while jobs are short, one waiting attempt per thread beyond them
(``prefetch.py``; in the completer's transaction, so outcomes and claim
commit once), hands each claimed attempt to the executor and gives them a
moment to end (``LINGER_SECONDS``), so the next cycle carries them whole. Idle, it sleeps
until a NOTIFY (the listener), a job thread's outcome, the next retry this
worker scheduled (no NOTIFY announces it), the next stop the watchdog must
make, or the poll interval, whichever comes first.

It also decides when the process ends: ``--burst`` with nothing left to do,
``--max-jobs`` / ``--max-memory`` reached, a thread the watchdog gave up on,
or a stop signal; and then it lets running attempts finish for up to
``SHUTDOWN_GRACE_SECONDS`` before releasing the rest.
"""

from __future__ import annotations

import logging
import os
import threading
import time

from django.db import DatabaseError

from ..conf import JobsOptions
from ..engine.base import Engine
from ..metrics import record
from ..values import Claimed, WorkerIdentity
from .completer import Completer
from .config import WorkerConfig
from .executor import Executor
from .faults import Faults
from .prefetch import Prefetch
from .pulse import Pulse
from .running import Running
from .watchdog import Watchdog

logger = logging.getLogger("django_jobs.worker")

# A worker exits with this to be replaced at once, also under --burst: it hit
# --max-jobs/--max-memory, or had to abandon a thread that would not stop.
RECYCLE_EXIT_CODE = 75

# How long the producer gives the attempts it just handed out to end before
# its next cycle. Short jobs end within it, so the next cycle writes their
# outcomes and claims their slots again all at once; without it, the cycle
# that starts at once finds only the previous batch's outcomes, and the
# threads settle into two half-batches a cycle (W2 in one process of 16
# threads: 3,400 -> 4,500 jobs/s). A job that runs longer loses at most this
# much before its slot is claimed for again.
LINGER_SECONDS = 0.002

# How often the last writes of a stopping worker are tried: its outcomes, then
# the release of what still runs. A stopping worker does not wait between tries.
RELEASE_TRIES = 5


def rss_mb() -> float:
    """Resident memory of this process, from /proc (Linux) or the peak otherwise."""
    try:
        with open("/proc/self/statm") as statm:
            pages = int(statm.read().split()[1])
        return pages * os.sysconf("SC_PAGE_SIZE") / 2**20
    except OSError:
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class Producer:
    def __init__(
        self,
        *,
        config: WorkerConfig,
        queues: tuple[str, ...],
        engine: Engine,
        identity: WorkerIdentity,
        settings: JobsOptions,
        running: Running,
        executor: Executor,
        completer: Completer,
        watchdog: Watchdog,
        prefetch: Prefetch,
        faults: Faults,
        stopping: threading.Event,
        hurry: threading.Event,
        wake: threading.Event,
        pulse: Pulse,
    ) -> None:
        self.config = config
        self.queues = queues  # the config's, or every queue of the backend
        self.engine = engine
        self.identity = identity
        self.settings = settings
        self.running = running
        self.executor = executor
        self.completer = completer
        self.watchdog = watchdog
        self.prefetch = prefetch
        self.faults = faults
        self.stopping = stopping  # stop claiming, drain, exit
        self.hurry = hurry  # skip the rest of the grace period
        self.wake = wake
        self.pulse = pulse
        # When the soonest retry this worker scheduled becomes due.
        self.next_due: float | None = None
        self.exit_code = 0

    def retry_scheduled(self, due: float) -> None:
        """The completer wrote a retry due at ``due`` (monotonic): wake up for it."""
        self.next_due = min(due, self.next_due or due)

    def run(self) -> int:
        """Claim and hand out attempts until the process should end; its exit code."""
        while True:
            self.pulse.loop()
            self._tend()
            if self.stopping.is_set():
                return self._drain()
            # Slots whose outcome is about to be written count as free: the
            # outcomes and the next claim share one transaction (one commit).
            idle = self.config.concurrency - len(self.running) + self.completer.pending
            # And while jobs are short, each thread may have one waiting (prefetch.py).
            free = min(max(0, idle + self.prefetch.ahead), self.settings.CLAIM_BATCH)
            now = min(max(0, idle), free)
            ahead = free - now
            got = self._write_and_claim(now, ahead)
            record.started(got)
            for claimed in got:
                attempt = self.running.start(claimed)
                self.executor.start(claimed, attempt.control)
            if self.config.burst and not got and not len(self.running) and self._idle():
                return self.exit_code
            if got and len(got) == free and len(got) < idle:
                continue  # a full batch and threads still idle: claim again at once
            if got:
                self.completer.await_outcomes(len(got), LINGER_SECONDS)
            self.wake.wait(self._idle_wait())
            self.wake.clear()

    def _tend(self) -> None:
        """Take in ended attempts, stop overdue ones, and decide whether to recycle."""
        # Attempts given back go in with this cycle's outcomes, written in it.
        for report in self.prefetch.check():
            self.completer.submit(report)
        self.completer.collect()
        for report in self.watchdog.check():
            self.completer.hold(report)
            self._recycle()
        if self._should_recycle():
            self._recycle()

    def _drain(self) -> int:
        """No more claims: write outcomes as attempts end, for up to the grace period."""
        deadline = time.monotonic() + self.settings.SHUTDOWN_GRACE_SECONDS
        while True:
            self._write_and_claim(0, 0)
            if self.running.only_abandoned() and not self.completer.pending:
                self.completer.write_held()
                return self.exit_code
            if self.hurry.is_set() or time.monotonic() >= deadline:
                # Attempts still waiting for a thread never started: given
                # back uncounted, not released as lost with the running ones.
                for report in self.prefetch.give_back_all():
                    self.completer.submit(report)
                self.completer.collect()
                self._write_last()
                self.completer.write_held()
                self._release_all("worker shut down before the job finished")
                return self.exit_code
            self.wake.wait(0.1)
            self.wake.clear()
            self.pulse.loop()
            self._tend()

    def _write_and_claim(self, now: int, ahead: int) -> list[Claimed]:
        """Write the pending outcomes, claim ``now`` attempts and ``ahead`` more: one commit."""
        if not self.completer.pending and not now + ahead:
            return []

        def claim() -> list[Claimed]:
            return self.engine.claim(self.identity, self.queues, now, ahead)

        return self.completer.write(claim, otherwise=[])

    def _write_last(self) -> None:
        """Write the outcomes in hand before the rest is released, tried as often as the release.

        Written once, a dropped connection (a database restart) failed the
        write and the release that follows reconnected: an attempt that had
        succeeded, or was given back unstarted, was recorded ``lost`` and its
        job run again, counted and marked suspect.
        """
        for _ in range(RELEASE_TRIES):
            self._write_and_claim(0, 0)
            if not self.completer.pending:
                return

    def _idle_wait(self) -> float:
        wait = self.settings.POLL_SECONDS
        now = time.monotonic()
        if self.next_due is not None:
            wait = min(wait, max(0.0, self.next_due - now))
            if self.next_due <= now:
                self.next_due = None
        moment = self.watchdog.next_check()
        if moment is not None:
            wait = min(wait, max(0.01, moment - now))
        return wait

    def _idle(self) -> bool:
        try:
            idle = self.engine.idle(self.queues)
        except DatabaseError as exc:
            self.faults.fault("idle check", exc)
            return False
        self.faults.recovered()
        return idle

    def _should_recycle(self) -> bool:
        max_jobs, max_memory_mb = self.config.max_jobs, self.config.max_memory_mb
        if max_jobs is not None and self.completer.jobs_done >= max_jobs:
            return True
        return max_memory_mb is not None and rss_mb() > max_memory_mb

    def _recycle(self) -> None:
        """Stop claiming, finish like on SIGTERM, and exit to be replaced at once."""
        self.exit_code = RECYCLE_EXIT_CODE
        self.stopping.set()

    def _release_all(self, reason: str) -> None:
        released = self.faults.retry(
            lambda: self.engine.release_worker(self.identity.id, reason, suspect=False),
            tries=RELEASE_TRIES,
        )
        if released:
            logger.warning("Released %d running job(s): %s", released, reason)
        self.running.clear()
