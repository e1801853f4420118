"""One worker process: its parts, the threads they run on, and its start and stop.

Threads and what each owns (each has its own database connection):

* the main thread runs the producer: it claims batches sized to the free
  slots, in one transaction with the completer's batch of outcomes, and has
  the watchdog stop attempts past their time;
* ``concurrency`` job threads run the executor, one attempt each, outside any
  transaction of ours (a suspect runs in a child process of its own);
* the lifeline's thread renews this process's leases every
  ``HEARTBEAT_SECONDS`` and reaps expired leases of dead workers every
  ``REAP_SECONDS``;
* on PostgreSQL, a listener thread wakes the main thread on NOTIFY;
* the notifier's thread sends Django's ``task_finished`` for each batch of
  outcomes the main thread wrote, after its commit, while the main thread
  goes on claiming.

The parts share the running attempts (``Running``) and three events:
``stopping`` (no more claims), ``hurry`` (skip the grace period) and ``wake``.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
import uuid
from types import FrameType

from django.db import connections

from .. import registry
from ..backend import jobs_backend
from ..schedules import Scheduler
from ..values import Outcome, WorkerIdentity
from ..wakeup import Listener, listener_name
from .completer import Completer
from .config import WorkerConfig
from .executor import Executor
from .faults import Faults
from .lifeline import Lifeline
from .notifier import Notifier
from .prefetch import Prefetch
from .producer import Producer
from .pulse import Pulse
from .running import Running
from .watchdog import Watchdog

logger = logging.getLogger("django_jobs.worker")


# The signals that stop a worker, blocked while the supervisor forks one.
STOP_SIGNALS = frozenset({signal.SIGTERM, signal.SIGINT})


class Worker:
    def __init__(
        self,
        config: WorkerConfig,
        worker_id: uuid.UUID | None = None,
        pulse: Pulse | None = None,
    ) -> None:
        backend = jobs_backend(config.backend)
        self.backend = backend
        self.settings = backend.settings
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
        self.running = Running()
        self.pulse = pulse or Pulse()  # a supervisor passes the one it reads
        self.faults = Faults(backend.db, self.stopping)
        self.executor = Executor(backend, self.identity.id, self._deliver, config.concurrency)
        self.notifier = Notifier(sender=type(backend))
        self.completer = Completer(
            self.engine,
            self.identity.id,
            self.running,
            self.faults,
            sender=type(backend),
            on_retry=self._retry_scheduled,
            notify=self.notifier.send,
        )
        self.lifeline = Lifeline(
            self.engine,
            self.identity.id,
            self.running,
            self.settings,
            self.stopping,
            self.hurry,
            self.faults,
            self.pulse,
        )
        self.producer = Producer(
            config=config,
            queues=self.queues,
            engine=self.engine,
            identity=self.identity,
            settings=self.settings,
            running=self.running,
            executor=self.executor,
            completer=self.completer,
            watchdog=Watchdog(self.settings, self.running, self.executor.runner),
            prefetch=Prefetch(
                self.settings.PREFETCH, config.concurrency, self.running, self.executor.runner
            ),
            faults=self.faults,
            stopping=self.stopping,
            hurry=self.hurry,
            wake=self.wake,
            pulse=self.pulse,
        )

    def _deliver(self, outcome: Outcome) -> None:
        """From a job thread: hand the outcome to the completer and wake the producer."""
        self.completer.submit(outcome)
        self.wake.set()

    def _retry_scheduled(self, due: float) -> None:
        self.producer.retry_scheduled(due)

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
        # The supervisor forks with the stop signals blocked (supervisor.py): one
        # it relayed meanwhile waited, and is handled here, now that it can be.
        signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)

    def run(self) -> int:
        registry.discover(self.settings.TASK_MODULES)
        if not self.faults.retry(self._register):
            logger.info("Worker %s stopped before it started.", self.identity.name)
            return 0
        listens = self.settings.LISTEN and self.engine.listens
        self._log_start(listens)
        self.notifier.start()
        self.lifeline.start()
        # Every worker runs a scheduler; each tick still fires once (schedules.py).
        Scheduler(self.backend, self.stopping).start()
        if listens:
            Listener(
                self.backend.db,
                self.queues,
                self.wake.set,
                self.stopping,
                application_name=listener_name(self.identity.id),
            ).start()
        try:
            exit_code = self.producer.run()
        finally:
            self.stopping.set()
            self.executor.shutdown()
            self.notifier.close(self.settings.SHUTDOWN_GRACE_SECONDS)
            self.faults.retry(lambda: self.engine.stop_worker(self.identity.id), tries=5)
            connections.close_all()
        logger.info(
            "Worker %s stopped after %d jobs (exit code %d).",
            self.identity.name,
            self.completer.jobs_done,
            exit_code,
            extra={"worker_id": str(self.identity.id), "jobs_done": self.completer.jobs_done},
        )
        return exit_code

    def _register(self) -> bool:
        self.engine.register_worker(
            self.identity,
            backend=self.config.backend,
            host=socket.gethostname(),
            pid=os.getpid(),
            queues=self.queues,
            concurrency=self.config.concurrency,
        )
        return True

    def _log_start(self, listens: bool) -> None:
        """What an operator needs to tell this worker's behaviour from the log alone."""
        config, settings = self.config, self.settings
        limits = [
            f"{name}={value}"
            for name, value in (
                ("max_jobs", config.max_jobs),
                ("max_memory_mb", config.max_memory_mb),
            )
            if value is not None
        ]
        logger.info(
            "Worker %s started (id %s, backend %s): queues=%s concurrency=%d%s%s; "
            "wake-ups by %s; lease %gs, heartbeat %gs; suspects %s.",
            self.identity.name,
            self.identity.id,
            config.backend,
            ",".join(self.queues),
            config.concurrency,
            " burst" if config.burst else "",
            "".join(f" {limit}" for limit in limits),
            "LISTEN and polling" if listens else f"polling every {settings.POLL_SECONDS:g}s",
            settings.LEASE_SECONDS,
            settings.HEARTBEAT_SECONDS,
            "isolated" if settings.ISOLATE_SUSPECTS else "not isolated",
            extra={"worker_id": str(self.identity.id), "queues": list(self.queues)},
        )


def run_worker(
    config: WorkerConfig,
    worker_id: uuid.UUID | None = None,
    handle_sigint: bool = True,
    pulse: Pulse | None = None,
) -> int:
    worker = Worker(config, worker_id, pulse)
    worker.install_signal_handlers(handle_sigint)
    return worker.run()
