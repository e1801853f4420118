"""One worker process: claim, run in threads, report, heartbeat, reap.

Threads and what each owns (each has its own database connection):

* the main thread claims batches sized to the free slots and applies the
  outcomes reported by job threads in batches (``transitions.finish``);
* ``concurrency`` job threads run task code, outside any transaction of ours;
* the heartbeat thread renews this process's leases every
  ``HEARTBEAT_SECONDS`` and reaps expired leases of dead workers every
  ``REAP_SECONDS``;
* on PostgreSQL, a listener thread wakes the main thread on NOTIFY.

Database faults (a restart, a dropped connection) are waited out: every loop
catches them, drops the broken connection and tries again, and outcomes that
could not be written yet stay in memory until they can. If that takes longer
than the lease, the reaper re-runs the job and our late report is kept on the
attempt, not applied.
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import random
import signal
import socket
import threading
import time
import traceback as tb
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from types import FrameType
from typing import Any

from django.db import DatabaseError, close_old_connections, connections
from django.tasks import task_backends
from django.tasks.signals import task_finished, task_started

from . import registry, transitions
from .backend import JobsBackend
from .exceptions import ResultNotJSONError, ResultTooLargeError, UnknownTaskError
from .models import Job
from .payload import check_result
from .results import JobResult
from .retry import Decision, Verdict
from .states import LIVE_STATES, AttemptOutcome, JobState, django_status
from .tasks import JobContext
from .transitions import Claimed, Report, WorkerIdentity
from .wakeup import Listener

logger = logging.getLogger("django_jobs.worker")


@dataclass(frozen=True, slots=True)
class WorkerConfig:
    backend: str = "default"
    queues: tuple[str, ...] = ()  # empty: every queue of the backend
    concurrency: int = 4
    burst: bool = False  # exit once no job of our queues is queued or running
    max_jobs: int | None = None  # recycle the process after this many jobs
    max_memory_mb: int | None = None  # ... or once its RSS grows past this


def rss_mb() -> float:
    """Resident memory of this process, from /proc (Linux) or the peak otherwise."""
    try:
        with open("/proc/self/statm") as statm:
            pages = int(statm.read().split()[1])
        return pages * os.sysconf("SC_PAGE_SIZE") / 2**20
    except OSError:
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class Worker:
    def __init__(self, config: WorkerConfig, worker_id: uuid.UUID | None = None) -> None:
        backend = task_backends[config.backend]
        if not isinstance(backend, JobsBackend):
            raise TypeError(f"TASKS[{config.backend!r}] is not a django_jobs backend.")
        self.backend = backend
        self.settings = backend.settings
        self.db = backend.db
        self.config = config
        self.queues: tuple[str, ...] = config.queues or tuple(sorted(backend.queues))
        unknown = sorted(set(self.queues) - backend.queues)
        if unknown:
            raise ValueError(
                f"Unknown queue(s) {', '.join(unknown)} for TASKS[{config.backend!r}]; "
                f"its queues are {', '.join(sorted(backend.queues))}."
            )
        self.identity = WorkerIdentity(
            id=worker_id or uuid.uuid4(), name=f"{socket.gethostname()}:{os.getpid()}"
        )
        self.stopping = threading.Event()  # stop claiming, drain, exit
        self.hurry = threading.Event()  # skip the rest of the grace period
        self.wake = threading.Event()
        self.reports: queue.SimpleQueue[Report] = queue.SimpleQueue()
        self.unsent: list[Report] = []
        self.running: dict[tuple[uuid.UUID, int], Claimed] = {}
        self.running_lock = threading.Lock()
        # Jobs whose outcome is being written: their leases vanish on purpose.
        self.reporting: set[tuple[uuid.UUID, int]] = set()
        self.jobs_done = 0
        self.lost_leases: set[tuple[uuid.UUID, int]] = set()
        # When the soonest retry this worker scheduled becomes due: no NOTIFY
        # announces it, so the idle wait is cut short to meet it.
        self.next_due: float | None = None

    # -- lifecycle ----------------------------------------------------------

    def install_signal_handlers(self, handle_sigint: bool = True) -> None:
        def on_signal(signum: int, frame: FrameType | None) -> None:
            if self.stopping.is_set():
                logger.warning("Second stop signal: releasing running jobs now.")
                self.hurry.set()
            else:
                logger.info("Stop signal: no more claims, finishing running jobs.")
                self.stopping.set()
            self.wake.set()

        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGINT, on_signal if handle_sigint else signal.SIG_IGN)

    def run(self) -> int:
        registry.discover(self.settings.TASK_MODULES)
        self._retry_db(
            lambda: transitions.register_worker(
                self.db,
                self.identity,
                backend=self.config.backend,
                host=socket.gethostname(),
                pid=os.getpid(),
                queues=self.queues,
                concurrency=self.config.concurrency,
            )
        )
        logger.info(
            "Worker %s started: queues=%s concurrency=%d",
            self.identity.name,
            ",".join(self.queues),
            self.config.concurrency,
        )
        heartbeat = threading.Thread(target=self._heartbeat_loop, name="django-jobs-heartbeat")
        heartbeat.daemon = True
        heartbeat.start()
        listener = None
        if self.settings.LISTEN and connections[self.db].vendor == "postgresql":
            listener = Listener(self.db, self.queues, self.wake.set, self.stopping)
            listener.start()
        pool = ThreadPoolExecutor(self.config.concurrency, thread_name_prefix="django-jobs-job")
        try:
            self._main_loop(pool)
        finally:
            self.stopping.set()
            pool.shutdown(wait=False, cancel_futures=True)
            self._retry_db(lambda: transitions.stop_worker(self.db, self.identity.id), tries=5)
            connections.close_all()
        logger.info("Worker %s stopped after %d jobs", self.identity.name, self.jobs_done)
        return 0

    def _main_loop(self, pool: ThreadPoolExecutor) -> None:
        deadline: float | None = None
        while True:
            self._flush_reports()
            if self._should_recycle():
                self.stopping.set()
            free = self.config.concurrency - len(self.running)
            if self.stopping.is_set():
                if not self.running and not self.unsent:
                    return
                deadline = deadline or time.monotonic() + self.settings.SHUTDOWN_GRACE_SECONDS
                if self.hurry.is_set() or time.monotonic() >= deadline:
                    self._release_all("worker shut down before the job finished")
                    return
                self.wake.wait(0.1)
                self.wake.clear()
                continue
            got = self._claim(free) if free else []
            for claimed in got:
                with self.running_lock:
                    self.running[(claimed.job_id, claimed.token)] = claimed
                pool.submit(self._execute, claimed)
            if self.config.burst and not got and not self.running and self._idle():
                return
            if got and len(got) == min(free, self.settings.CLAIM_BATCH) and len(got) < free:
                continue  # a full batch and room for more: claim again at once
            self.wake.wait(self._idle_wait())
            self.wake.clear()

    def _idle_wait(self) -> float:
        wait = self.settings.POLL_SECONDS
        if self.next_due is not None:
            wait = min(wait, max(0.0, self.next_due - time.monotonic()))
            if self.next_due <= time.monotonic():
                self.next_due = None
        return wait

    def _should_recycle(self) -> bool:
        if self.config.max_jobs is not None and self.jobs_done >= self.config.max_jobs:
            return True
        return self.config.max_memory_mb is not None and rss_mb() > self.config.max_memory_mb

    # -- database steps, each surviving faults --------------------------------

    def _claim(self, free: int) -> list[Claimed]:
        limit = min(free, self.settings.CLAIM_BATCH)
        try:
            return transitions.claim(
                self.db, self.identity, self.queues, limit, self.settings.LEASE_SECONDS
            )
        except DatabaseError as exc:
            self._db_fault("claim", exc)
            return []

    def _idle(self) -> bool:
        try:
            return not (
                Job.objects.using(self.db)
                .filter(queue__in=self.queues, state__in=[str(s) for s in LIVE_STATES])
                .exists()
            )
        except DatabaseError as exc:
            self._db_fault("idle check", exc)
            return False

    def _flush_reports(self) -> None:
        while True:
            try:
                self.unsent.append(self.reports.get_nowait())
            except queue.Empty:
                break
        if not self.unsent:
            return
        with self.running_lock:
            self.reporting.update((r.job_id, r.token) for r in self.unsent)
        try:
            done = transitions.finish(
                self.db, self.identity.id, self.unsent, self.settings.RETRY_BUDGET
            )
        except DatabaseError as exc:
            self._db_fault("report", exc)
            return
        batch, self.unsent = self.unsent, []
        with self.running_lock:
            for report in batch:
                self.running.pop((report.job_id, report.token), None)
                self.reporting.discard((report.job_id, report.token))
        self.jobs_done += len(batch)
        for report in done.stale:
            logger.warning(
                "Late report for job %s attempt %d (%s) ignored: the lease was lost; "
                "kept on the attempt.",
                report.job_id,
                report.token,
                report.outcome,
            )
        for report, state in done.applied:
            if state is JobState.QUEUED and report.decision is not None:
                due = time.monotonic() + report.decision.delay
                self.next_due = min(due, self.next_due or due)
            self._send_finished(report)

    def _release_all(self, reason: str) -> None:
        released = self._retry_db(
            lambda: transitions.release_worker(self.db, self.identity.id, reason), tries=5
        )
        if released:
            logger.warning("Released %d running job(s): %s", released, reason)
        with self.running_lock:
            self.running.clear()

    def _db_fault(self, what: str, exc: BaseException) -> None:
        logger.warning("Database unavailable during %s (%s); retrying.", what, exc)
        with contextlib.suppress(DatabaseError):
            connections[self.db].close()
        self.stopping.wait(0.5 + random.random() * 0.5)

    def _retry_db(self, step: Callable[[], Any], tries: int | None = None) -> Any:
        attempt = 0
        while True:
            attempt += 1
            try:
                return step()
            except DatabaseError as exc:
                if tries is not None and attempt >= tries:
                    logger.error("Giving up after %d tries: %s", attempt, exc)
                    return None
                self._db_fault("start-up" if tries is None else "shutdown", exc)

    # -- heartbeat and reaper ---------------------------------------------------

    def _heartbeat_loop(self) -> None:
        next_reap = time.monotonic() + random.random() * self.settings.REAP_SECONDS
        while not self.hurry.wait(self.settings.HEARTBEAT_SECONDS):
            if self.stopping.is_set() and not self.running:
                break
            try:
                with self.running_lock:
                    held = list(self.running)
                renewed = transitions.renew(
                    self.db, self.identity.id, held, self.settings.LEASE_SECONDS
                )
                with self.running_lock:
                    lost = {key for key in renewed.lost if key not in self.reporting}
                for key in lost - self.lost_leases:
                    logger.warning(
                        "Lease on job %s attempt %d was lost; its outcome will not count.", *key
                    )
                self.lost_leases |= lost
                if time.monotonic() >= next_reap:
                    next_reap = time.monotonic() + self.settings.REAP_SECONDS
                    reaped = transitions.reap(
                        self.db, poison_after=self.settings.POISON_LOST_ATTEMPTS
                    )
                    if reaped:
                        logger.warning("Reaped %d expired lease(s).", reaped)
            except DatabaseError as exc:
                logger.warning("Heartbeat failed (%s); retrying.", exc)
                with contextlib.suppress(DatabaseError):
                    connections[self.db].close()
        connections.close_all()

    # -- running one attempt ----------------------------------------------------

    def _execute(self, claimed: Claimed) -> None:
        close_old_connections()
        try:
            report = self._run_task(claimed)
        finally:
            close_old_connections()
        self.reports.put(report)
        self.wake.set()

    def _run_task(self, claimed: Claimed) -> Report:
        task = registry.get(claimed.task_name)
        if task is None:
            error = UnknownTaskError(
                f"No task named {claimed.task_name!r} is registered in this worker; "
                "it was not imported or run."
            )
            return _failure(claimed, AttemptOutcome.FAILED, error, Decision(Verdict.GIVE_UP))
        result = self._running_result(task, claimed)
        task_started.send(type(self.backend), task_result=result)
        try:
            if task.takes_context:
                context = JobContext(
                    task_result=result,
                    job_id=claimed.job_id,
                    attempt_number=claimed.token,
                    max_attempts=claimed.max_attempts,
                    tenant=claimed.tenant,
                    idempotency_key=claimed.idempotency_key,
                )
                value = task.call(context, *claimed.args, **claimed.kwargs)
            else:
                value = task.call(*claimed.args, **claimed.kwargs)
            check_result(value, self.settings.MAX_RESULT_BYTES)
        except BaseException as exc:  # SystemExit too: in a job thread it ends the job, not us
            policy = self.backend.retry_policy(task, claimed.max_attempts)
            decision = (
                Decision(Verdict.GIVE_UP)
                if _is_result_error(exc)
                else policy.decide(exc, claimed.token)
            )
            return _failure(claimed, AttemptOutcome.FAILED, exc, decision)
        return Report(
            job_id=claimed.job_id,
            token=claimed.token,
            attempt_id=claimed.attempt_id,
            outcome=AttemptOutcome.SUCCEEDED,
            result=value,
        )

    def _running_result(self, task: Any, claimed: Claimed) -> JobResult:
        return JobResult(
            task=task,
            id=str(claimed.job_id),
            status=django_status(JobState.RUNNING),
            enqueued_at=claimed.enqueued_at,
            started_at=claimed.started_at,
            finished_at=None,
            last_attempted_at=claimed.started_at,
            args=claimed.args,
            kwargs=claimed.kwargs,
            backend=self.config.backend,
            errors=[],
            worker_ids=[str(self.identity.id)] * claimed.token,
            state=JobState.RUNNING,
            queue=claimed.queue,
            priority=claimed.priority,
            tenant=claimed.tenant,
            idempotency_key=claimed.idempotency_key,
            max_attempts=claimed.max_attempts,
            run_after=claimed.started_at,
            last_error="",
        )

    def _send_finished(self, report: Report) -> None:
        if not task_finished.has_listeners(type(self.backend)):
            return
        try:
            result = self.backend.get_result(str(report.job_id))
        except Exception:
            logger.exception("Could not load job %s for task_finished", report.job_id)
            return
        task_finished.send(type(self.backend), task_result=result)


def _is_result_error(exc: BaseException) -> bool:
    return isinstance(exc, ResultNotJSONError | ResultTooLargeError)


def _failure(
    claimed: Claimed, outcome: AttemptOutcome, exc: BaseException, decision: Decision
) -> Report:
    kind = type(exc)
    return Report(
        job_id=claimed.job_id,
        token=claimed.token,
        attempt_id=claimed.attempt_id,
        outcome=outcome,
        error_type=f"{kind.__module__}.{kind.__qualname__}",
        error_message=str(exc),
        traceback="".join(tb.format_exception(exc)),
        decision=decision,
    )


def run_worker(
    config: WorkerConfig, worker_id: uuid.UUID | None = None, handle_sigint: bool = True
) -> int:
    worker = Worker(config, worker_id)
    worker.install_signal_handlers(handle_sigint)
    return worker.run()
