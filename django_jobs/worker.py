"""One worker process: claim, run in threads, report, heartbeat, reap.

Threads and what each owns (each has its own database connection):

* the main thread claims batches sized to the free slots and applies the
  outcomes reported by job threads in batches (``Engine.finish``);
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
import dataclasses
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

from django.db import DatabaseError, close_old_connections, connections, transaction
from django.tasks.base import TaskError
from django.tasks.signals import task_finished, task_started
from django.utils import timezone

from . import registry
from .attempt import AttemptControl
from .backend import jobs_backend
from .exceptions import (
    JobCancelled,
    JobStopped,
    JobTimedOut,
    ResultNotJSONError,
    ResultTooLargeError,
    UnknownTaskError,
)
from .isolation import run_isolated
from .payload import check_result
from .results import JobResult
from .retry import Decision, Verdict
from .schedules import Scheduler
from .states import AttemptOutcome, JobState, django_status
from .tasks import JobContext
from .values import Claimed, Finished, Report, WorkerIdentity
from .wakeup import Listener

logger = logging.getLogger("django_jobs.worker")

# A worker exits with this to be replaced at once, also under --burst: it hit
# --max-jobs/--max-memory, or had to abandon a thread that would not stop.
RECYCLE_EXIT_CODE = 75


@dataclass(frozen=True, slots=True)
class Running:
    claimed: Claimed
    control: AttemptControl


@dataclass(frozen=True, slots=True)
class WorkerConfig:
    backend: str = "default"
    queues: tuple[str, ...] = ()  # empty: every queue of the backend
    concurrency: int = 16
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
        backend = jobs_backend(config.backend)
        self.backend = backend
        self.settings = backend.settings
        self.db = backend.db
        self.engine = backend.engine
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
        self.running: dict[tuple[uuid.UUID, int], Running] = {}
        self.running_lock = threading.Lock()
        # Jobs whose outcome is being written: their leases vanish on purpose.
        self.reporting: set[tuple[uuid.UUID, int]] = set()
        self.jobs_done = 0
        self.lost_leases: set[tuple[uuid.UUID, int]] = set()
        # When the soonest retry this worker scheduled becomes due: no NOTIFY
        # announces it, so the idle wait is cut short to meet it.
        self.next_due: float | None = None
        # Reports for attempts whose thread would not stop: written just before
        # this process exits, so the job cannot run elsewhere while it still runs here.
        self.abandoned: dict[tuple[uuid.UUID, int], Report] = {}
        self.exit_code = 0

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
            lambda: self.engine.register_worker(
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
        # Every worker runs a scheduler; each tick still fires once (schedules.py).
        Scheduler(self.backend, self.stopping).start()
        listener = None
        if self.settings.LISTEN and self.engine.listens:
            listener = Listener(self.db, self.queues, self.wake.set, self.stopping)
            listener.start()
        pool = ThreadPoolExecutor(self.config.concurrency, thread_name_prefix="django-jobs-job")
        try:
            self._main_loop(pool)
        finally:
            self.stopping.set()
            pool.shutdown(wait=False, cancel_futures=True)
            self._retry_db(lambda: self.engine.stop_worker(self.identity.id), tries=5)
            connections.close_all()
        logger.info("Worker %s stopped after %d jobs", self.identity.name, self.jobs_done)
        return self.exit_code

    def _main_loop(self, pool: ThreadPoolExecutor) -> None:
        deadline: float | None = None
        while True:
            self._collect_reports()
            self._police()
            if self._should_recycle():
                self.exit_code = RECYCLE_EXIT_CODE
                self.stopping.set()
            free = self.config.concurrency - len(self.running)
            if self.stopping.is_set():
                self._report_and_claim(0)
                if len(self.running) == len(self.abandoned) and not self.unsent:
                    self._write_abandoned()
                    return
                deadline = deadline or time.monotonic() + self.settings.SHUTDOWN_GRACE_SECONDS
                if self.hurry.is_set() or time.monotonic() >= deadline:
                    self._write_abandoned()
                    self._release_all("worker shut down before the job finished")
                    return
                self.wake.wait(0.1)
                self.wake.clear()
                continue
            # Slots whose outcome is about to be written count as free: the
            # outcomes and the next claim share one transaction (one commit).
            free = self.config.concurrency - len(self.running) + len(self.unsent)
            got = self._report_and_claim(free)
            for claimed in got:
                running = Running(claimed, AttemptControl(claimed.timeout))
                with self.running_lock:
                    self.running[(claimed.job_id, claimed.token)] = running
                pool.submit(self._execute, running)
            if self.config.burst and not got and not self.running and self._idle():
                return
            if got and len(got) == min(free, self.settings.CLAIM_BATCH) and len(got) < free:
                continue  # a full batch and room for more: claim again at once
            self.wake.wait(self._idle_wait())
            self.wake.clear()

    def _idle_wait(self) -> float:
        wait = self.settings.POLL_SECONDS
        now = time.monotonic()
        if self.next_due is not None:
            wait = min(wait, max(0.0, self.next_due - now))
            if self.next_due <= now:
                self.next_due = None
        with self.running_lock:
            controls = [r.control for r in self.running.values()]
        for control in controls:
            # The next moment _police must act on: a timeout, the end of a cancel's
            # grace, or the end of a stop's grace.
            if control.stop_sent is not None:
                moment = control.stop_sent + self.settings.STOP_GRACE_SECONDS
            elif control.cancel_seen is not None:
                moment = control.cancel_seen + self.settings.CANCEL_GRACE_SECONDS
            elif control.deadline is not None:
                moment = control.deadline
            else:
                continue
            wait = min(wait, max(0.01, moment - now))
        return wait

    # -- timeouts and forced cancellation --------------------------------------

    def _police(self) -> None:
        """Stop attempts past their timeout or cancel grace; give up on threads that stay."""
        now = time.monotonic()
        with self.running_lock:
            running = list(self.running.items())
        for key, item in running:
            control = item.control
            if key in self.abandoned:
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
            elif now >= control.stop_sent + self.settings.STOP_GRACE_SECONDS:
                self._abandon(key, item)

    def _abandon(self, key: tuple[uuid.UUID, int], item: Running) -> None:
        """The thread did not stop (a blocking C call): replace this whole process."""
        kind = item.control.stop_kind or JobTimedOut
        message = (
            f"did not stop within {self.settings.STOP_GRACE_SECONDS:g}s of being told to "
            "(blocked outside Python); its worker process was replaced to end it. The "
            "effect of the work done so far is unknown."
        )
        exc = kind(message)
        self.abandoned[key] = self._stopped_report(item, exc)
        logger.error("Job %s attempt %d %s", key[0], key[1], message)
        self.exit_code = RECYCLE_EXIT_CODE
        self.stopping.set()

    def _write_abandoned(self) -> None:
        if not self.abandoned:
            return
        reports = list(self.abandoned.values())
        self._retry_db(
            lambda: self.engine.finish(self.identity.id, reports),
            tries=10,
        )
        with self.running_lock:
            for key in self.abandoned:
                self.running.pop(key, None)

    def _should_recycle(self) -> bool:
        if self.config.max_jobs is not None and self.jobs_done >= self.config.max_jobs:
            return True
        return self.config.max_memory_mb is not None and rss_mb() > self.config.max_memory_mb

    # -- database steps, each surviving faults --------------------------------

    def _idle(self) -> bool:
        try:
            return self.engine.idle(self.queues)
        except DatabaseError as exc:
            self._db_fault("idle check", exc)
            return False

    def _collect_reports(self) -> None:
        while True:
            try:
                report = self.reports.get_nowait()
            except queue.Empty:
                break
            key = (report.job_id, report.token)
            if report.outcome == AttemptOutcome.LOST:
                # Already applied by release_lease from the job thread.
                with self.running_lock:
                    self.running.pop(key, None)
            elif key not in self.abandoned:
                self.unsent.append(report)

    def _report_and_claim(self, free: int) -> list[Claimed]:
        """Write the outcomes collected so far and claim up to ``free`` jobs, in one transaction.

        One commit (one WAL flush) per cycle instead of two. With no outcome to
        write, the claim is one statement and needs no transaction of ours: in
        autocommit it is one round trip instead of three (BEGIN, claim,
        COMMIT), which is most of an idle worker's pickup latency. If the
        database is unavailable nothing is lost: the outcomes stay in memory
        for the next try.
        """
        limit = min(free, self.settings.CLAIM_BATCH) if free > 0 else 0
        reports = list(self.unsent)
        if not reports and not limit:
            return []
        with self.running_lock:
            self.reporting.update((r.job_id, r.token) for r in reports)
        scope = transaction.atomic(using=self.db) if reports else contextlib.nullcontext()
        try:
            with scope:
                done = self.engine.finish(self.identity.id, reports)
                got = self.engine.claim(self.identity, self.queues, limit)
        except DatabaseError as exc:
            self._db_fault("report and claim", exc)
            return []
        self.unsent = self.unsent[len(reports) :]
        self._reported(reports, done)
        return got

    def _reported(self, batch: list[Report], done: Finished) -> None:
        ended: dict[tuple[uuid.UUID, int], Running] = {}
        with self.running_lock:
            for report in batch:
                key = (report.job_id, report.token)
                item = self.running.pop(key, None)
                if item is not None:
                    ended[key] = item
                self.reporting.discard(key)
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
            item = ended.get((report.job_id, report.token))
            if item is not None:
                self._send_finished(report, state, item)

    def _release_all(self, reason: str) -> None:
        released = self._retry_db(
            lambda: self.engine.release_worker(self.identity.id, reason), tries=5
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
                    running = dict(self.running)
                progress = {
                    key: value
                    for key, item in running.items()
                    if (value := item.control.take_progress()) is not None
                }
                renewed = self.engine.renew(self.identity.id, running, progress)
                for key in renewed.cancelling:
                    if key in running:
                        running[key].control.request_cancel()
                with self.running_lock:
                    # Leases of attempts that ended meanwhile vanished on purpose.
                    lost = {
                        key
                        for key in renewed.lost
                        if key in self.running and key not in self.reporting
                    }
                for key in lost - self.lost_leases:
                    logger.warning(
                        "Lease on job %s attempt %d was lost; its outcome will not count.", *key
                    )
                self.lost_leases |= lost
                if time.monotonic() >= next_reap:
                    next_reap = time.monotonic() + self.settings.REAP_SECONDS
                    reaped = self.engine.reap()
                    self.engine.expire_overdue()
                    if reaped:
                        logger.warning("Reaped %d expired lease(s).", reaped)
            except DatabaseError as exc:
                logger.warning("Heartbeat failed (%s); retrying.", exc)
                with contextlib.suppress(DatabaseError):
                    connections[self.db].close()
        connections.close_all()

    # -- running one attempt ----------------------------------------------------

    def _execute(self, item: Running) -> None:
        close_old_connections()
        try:
            if item.claimed.suspect and self.settings.ISOLATE_SUSPECTS:
                report = self._run_isolated(item)
            else:
                report = self._run_task(item)
        except JobStopped as exc:
            # The stop landed just outside the task call, in our own code.
            report = self._stopped_report(item, exc)
        finally:
            item.control.end()
            close_old_connections()
        self.reports.put(report)
        self.wake.set()

    def _run_task(self, item: Running) -> Report:
        claimed, control = item.claimed, item.control
        task = registry.get(claimed.task_name)
        if task is None:
            error = UnknownTaskError(
                f"No task named {claimed.task_name!r} is registered in this worker; "
                "it was not imported or run."
            )
            return _failure(claimed, AttemptOutcome.FAILED, error, Decision(Verdict.GIVE_UP))
        result = self._running_result(task, claimed)
        control.result = result
        task_started.send(type(self.backend), task_result=result)
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
                )
                value = task.call(context, *claimed.args, **claimed.kwargs)
            else:
                value = task.call(*claimed.args, **claimed.kwargs)
            control.end()
            check_result(value, self.settings.MAX_RESULT_BYTES)
        except JobStopped as exc:
            control.end()
            return self._stopped_report(item, exc)
        except BaseException as exc:  # SystemExit too: in a job thread it ends the job, not us
            control.end()
            policy = self.backend.retry_policy(task, claimed.max_attempts)
            decision = (
                Decision(Verdict.GIVE_UP)
                if _is_result_error(exc)
                else policy.decide(exc, claimed.token)
            )
            return _failure(claimed, AttemptOutcome.FAILED, exc, decision, control)
        return Report(
            job_id=claimed.job_id,
            token=claimed.token,
            attempt_id=claimed.attempt_id,
            outcome=AttemptOutcome.SUCCEEDED,
            result=value,
            progress=control.take_progress(),
        )

    def _run_isolated(self, item: Running) -> Report:
        """Run a suspect in its own process (see isolation.py); its death loses only it."""
        claimed = item.claimed
        outcome = run_isolated(self.config, self.identity.id, claimed, item.control.adopt_child)
        if isinstance(outcome, Report):
            return outcome
        stop = item.control.stop_kind
        if stop is not None:  # we killed it: a timeout or a forced cancel
            return self._stopped_report(item, stop())
        how = f"killed by signal {-outcome}" if outcome < 0 else f"exit {outcome}"
        reason = f"isolated attempt's process died ({how})"
        self.engine.release_lease(self.identity.id, claimed.job_id, claimed.token, reason)
        return Report(
            job_id=claimed.job_id,
            token=claimed.token,
            attempt_id=claimed.attempt_id,
            outcome=AttemptOutcome.LOST,
            error_message=reason,
        )

    def _stopped_report(self, item: Running, exc: JobStopped) -> Report:
        """How an attempt that was stopped (timeout or cancel) is recorded."""
        claimed, control = item.claimed, item.control
        if isinstance(exc, JobTimedOut):
            seconds = claimed.timeout or 0.0
            if not exc.args:
                exc = JobTimedOut(f"the attempt outlived its timeout of {seconds:g}s")
            task = registry.get(claimed.task_name)
            policy = self.backend.retry_policy(task, claimed.max_attempts)
            # For retry_on / give_up_on, a timeout counts as a TimeoutError.
            decision = policy.decide(TimeoutError(str(exc)), claimed.token)
            return _failure(claimed, AttemptOutcome.TIMED_OUT, exc, decision, control)
        if not exc.args:
            grace = self.settings.CANCEL_GRACE_SECONDS
            exc = JobCancelled(
                f"the job was cancelled and did not stop within {grace:g}s; stopped by "
                "force. The effect of the work done so far is unknown."
            )
        return _failure(claimed, AttemptOutcome.CANCELLED, exc, Decision(Verdict.GIVE_UP), control)

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

    def _send_finished(self, report: Report, state: JobState, item: Running) -> None:
        """Django's task_finished, from what this worker knows: no extra query per job.

        ``errors`` holds this attempt's error only; ``get_result()`` has them all.
        """
        started = item.control.result
        if started is None or not task_finished.has_listeners(type(self.backend)):
            return
        errors = []
        if report.error_type:
            errors.append(
                TaskError(exception_class_path=report.error_type, traceback=report.traceback)
            )
        result = dataclasses.replace(
            started,
            status=django_status(state),
            state=state,
            finished_at=timezone.now(),
            errors=errors,
            last_error=report.error_message,
        )
        if state is JobState.SUCCEEDED:
            object.__setattr__(result, "_return_value", report.result)
        task_finished.send(type(self.backend), task_result=result)


def _is_result_error(exc: BaseException) -> bool:
    return isinstance(exc, ResultNotJSONError | ResultTooLargeError)


def _failure(
    claimed: Claimed,
    outcome: AttemptOutcome,
    exc: BaseException,
    decision: Decision,
    control: AttemptControl | None = None,
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
        progress=control.take_progress() if control is not None else None,
    )


def run_worker(
    config: WorkerConfig, worker_id: uuid.UUID | None = None, handle_sigint: bool = True
) -> int:
    worker = Worker(config, worker_id)
    worker.install_signal_handlers(handle_sigint)
    return worker.run()
