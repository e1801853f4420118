"""The supervisor behind ``manage.py runworkers``: it starts, watches and replaces workers.

Why a separate process: a worker that dies (SIGKILL, the OOM killer, a crash
in a C extension) cannot say so itself. The supervisor outlives it, sees the
exit at once, and releases that worker's leases right away — its jobs run
again within moments instead of after the lease expires. If the supervisor
dies too, the leases still expire and any other worker's reaper recovers them.

Workers are forked (POSIX only), after every database connection is closed,
so no child shares a socket with its parent.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import multiprocessing.connection
import os
import signal
import threading
import time
import uuid
from dataclasses import dataclass, field
from multiprocessing.process import BaseProcess
from types import FrameType

from django.db import DatabaseError, connections

from .backend import jobs_backend
from .health import database_problem
from .probes import ProbeServer
from .worker import RECYCLE_EXIT_CODE, WorkerConfig, run_worker
from .worker.process import STOP_SIGNALS
from .worker.pulse import Pulse

logger = logging.getLogger("django_jobs.supervisor")

_MAX_RESTART_DELAY = 30.0


@dataclass
class _Slot:
    number: int
    process: BaseProcess | None = None
    pulse: Pulse = field(default_factory=Pulse)  # read by the health probe's /livez
    worker_id: uuid.UUID = field(default_factory=uuid.uuid4)
    started: float = 0.0
    restart_delay: float = 0.0
    restart_at: float = 0.0


def _child_main(config: WorkerConfig, worker_id: uuid.UUID, pulse: Pulse) -> None:
    # Ctrl-C reaches the whole process group; the supervisor relays it as
    # SIGTERM, so the child must not count it as a second stop request.
    exit_code = run_worker(config, worker_id, handle_sigint=False, pulse=pulse)
    # Exit now, without joining job threads: a job still running after the
    # grace period has had its lease released and must not hold the process.
    logging.shutdown()
    os._exit(exit_code)


class Supervisor:
    def __init__(
        self, config: WorkerConfig, processes: int, health_port: int | None = None
    ) -> None:
        """Raises OSError if ``health_port`` cannot be served, before any worker starts."""
        if processes < 1:
            raise ValueError("processes must be at least 1.")
        backend = jobs_backend(config.backend)
        self.engine = backend.engine
        self.grace = backend.settings.SHUTDOWN_GRACE_SECONDS
        self.stall_after = backend.settings.WORKER_STALE_SECONDS
        self.config = config
        self.processes = processes
        self.slots = [_Slot(number) for number in range(processes)]
        self.context = multiprocessing.get_context("fork")
        self.stop_requests = 0
        # Held while forking, and by a readiness check while its connection is
        # open: no child may inherit a socket that another thread is using.
        self._forking = threading.Lock()
        self.probes = (
            None
            if health_port is None
            else ProbeServer(health_port, {"/livez": self.liveness, "/readyz": self.readiness})
        )

    def liveness(self) -> str | None:
        """Why some worker process is not live (its loops stopped turning), or None.

        A slot between two processes (one died, the next is due) is not
        stalled: the supervisor is handling it, and readiness tells whether
        any worker is up meanwhile.
        """
        for slot in list(self.slots):
            process = slot.process
            if process is not None and (stall := slot.pulse.stalled(self.stall_after)):
                return f"worker process {process.pid} (slot {slot.number}): {stall}"
        return None

    def readiness(self) -> str | None:
        """Why this runworkers cannot take work (database, no worker process up), or None."""
        if self.stop_requests:
            return "shutting down"
        # Only the main loop joins children (is_alive() would reap them under it).
        if all(slot.process is None for slot in self.slots):
            return "no worker process is running"
        with self._forking:
            try:
                return database_problem(self.engine.db)
            finally:
                # This request's thread ends now; its connection must not outlive it.
                connections[self.engine.db].close()

    def run(self, handle_signals: bool = True) -> int:
        """Run the workers until asked to stop; return the exit code.

        Without ``handle_signals`` (``runworkers --reload`` runs this in a
        thread, where no handler can be installed) only ``request_stop`` stops it.
        """

        def on_signal(signum: int, frame: FrameType | None) -> None:
            self.request_stop()

        if handle_signals:
            signal.signal(signal.SIGTERM, on_signal)
            signal.signal(signal.SIGINT, on_signal)
        self._log_start()
        if self.probes is not None:
            self.probes.start()
        try:
            return self._supervise()
        finally:
            if self.probes is not None:
                self.probes.stop()

    def _log_start(self) -> None:
        config = self.config
        logger.info(
            "Supervisor %d starting %d worker process(es) for backend %s: queues=%s "
            "concurrency=%d%s%s%s; shutdown grace %gs.",
            os.getpid(),
            self.processes,
            config.backend,
            ",".join(config.queues) or "all",
            config.concurrency,
            " burst" if config.burst else "",
            f" max_jobs={config.max_jobs}" if config.max_jobs is not None else "",
            f" max_memory_mb={config.max_memory_mb}" if config.max_memory_mb is not None else "",
            self.grace,
            extra={"backend": config.backend, "processes": self.processes},
        )

    def _supervise(self) -> int:
        for slot in self.slots:
            self._spawn(slot)
        relayed = 0
        kill_at: float | None = None
        while any(slot.process is not None for slot in self.slots) or (
            not self.stop_requests and any(slot.restart_at for slot in self.slots)
        ):
            sentinels = [s.process.sentinel for s in self.slots if s.process is not None]
            multiprocessing.connection.wait(sentinels, timeout=0.5)
            for slot in self.slots:
                self._reap_child(slot)
                due = slot.restart_at and time.monotonic() >= slot.restart_at
                if slot.process is None and due and not self.stop_requests:
                    self._spawn(slot)
            while relayed < self.stop_requests:
                relayed += 1
                self._signal_children(signal.SIGTERM)
                kill_at = kill_at or time.monotonic() + self.grace + 5.0
            if kill_at is not None and time.monotonic() >= kill_at:
                logger.error("Workers outlived the grace period; killing them.")
                self._signal_children(signal.SIGKILL)
                kill_at = None
        logger.info("Supervisor %d stopped", os.getpid())
        return 0

    def request_stop(self) -> None:
        """Stop as SIGTERM does: the first request lets workers finish, a second hurries them."""
        self.stop_requests += 1

    def _spawn(self, slot: _Slot) -> None:
        connections.close_all()
        slot.worker_id = uuid.uuid4()
        slot.pulse.reset()
        process = self.context.Process(
            target=_child_main,
            args=(self.config, slot.worker_id, slot.pulse),
            name=f"django-jobs-worker-{slot.number}",
        )
        # Forked with the stop signals blocked: until the worker installs its own
        # handlers, a relayed SIGTERM reached the supervisor's handler in the
        # child's copy, did nothing, and the worker ran on until SIGKILLed.
        with self._forking:
            mask = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
            try:
                process.start()
            finally:
                signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        slot.process = process
        slot.started = time.monotonic()
        slot.restart_at = 0.0

    def _reap_child(self, slot: _Slot) -> None:
        process = slot.process
        if process is None or process.is_alive():
            return
        process.join()
        code = process.exitcode
        slot.process = None
        # Even after a clean exit code: a task's os._exit(0) ends its worker
        # with "0" and its leases held, which then waited for the reaper, or
        # (with --burst) for nobody at all.
        self._release(slot, process.pid, code, died=code not in (0, RECYCLE_EXIT_CODE))
        if self.stop_requests or (code == 0 and self.config.burst):
            return
        # A worker that keeps dying at start-up is restarted ever more slowly;
        # one that asked to be replaced is replaced at once.
        lived = time.monotonic() - slot.started
        if code == RECYCLE_EXIT_CODE or lived > 60:
            slot.restart_delay = 0.0
        else:
            slot.restart_delay = min(_MAX_RESTART_DELAY, max(0.5, slot.restart_delay * 2))
        slot.restart_at = time.monotonic() + slot.restart_delay
        logger.info("Replacing worker slot %d in %.1fs", slot.number, slot.restart_delay)

    def _release(self, slot: _Slot, pid: int | None, code: int | None, *, died: bool) -> None:
        how = f"killed by signal {-code}" if code is not None and code < 0 else f"exit {code}"
        reason = f"worker process {pid} died ({how})"
        if died:
            logger.error("Worker process %s died (%s); releasing its jobs now.", pid, how)
        # A clean exit released its own jobs, as a rule: one look for what a
        # task's os._exit(0) left, not twenty tries at a database that is down.
        for _ in range(20 if died else 1):
            try:
                released = self.engine.release_worker(slot.worker_id, reason)
                self.engine.stop_worker(slot.worker_id)
                if released and not died:
                    logger.error(
                        "Worker process %s exited (%s) still holding %d job(s); released them.",
                        pid,
                        how,
                        released,
                    )
                elif released:
                    logger.warning("Released %d job(s) of worker %s", released, pid)
                break
            except DatabaseError as exc:
                connections.close_all()
                if not died:  # its leases, if any, go to the reaper
                    logger.warning("Could not look at worker %s after its exit (%s).", pid, exc)
                    break
                logger.warning("Could not release worker %s yet (%s); retrying", pid, exc)
                time.sleep(0.5)
        connections.close_all()

    def _signal_children(self, signum: int) -> None:
        for slot in self.slots:
            if slot.process is not None and slot.process.pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(slot.process.pid, signum)
