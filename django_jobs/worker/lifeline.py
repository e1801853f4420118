"""The heartbeat thread: keeping this worker's leases, and recovering those of dead workers.

Every ``HEARTBEAT_SECONDS`` it renews the leases of the running attempts (also
those whose outcome waits to be written: the job is still ours), writes the
progress tasks set since the last beat (one write per beat, however chatty the
task), hands cancel requests to the attempts, notices leases the database
no longer has, and gives back those it has that this worker never heard of.
Every ``REAP_SECONDS`` it reaps expired leases of dead workers, expires
queued jobs past their deadline and sees whether a table of ours needs a
vacuum (``vacuum.py``). It runs on a thread and a
connection of its own so that a long claim or a slow batch of outcomes never
delays a renewal past the lease.
"""

from __future__ import annotations

import logging
import random
import threading
import time
import uuid

from django.db import DatabaseError, connections

from ..conf import JobsOptions
from ..engine.base import Engine
from ..logging import job_fields
from ..values import Unheard
from .faults import REFUSED, Faults, said
from .pulse import Pulse
from .runner import given_back, this_worker
from .running import Key, Running
from .vacuum import Vacuums

logger = logging.getLogger("django_jobs.worker")


class Lifeline(threading.Thread):
    def __init__(
        self,
        engine: Engine,
        worker_id: uuid.UUID,
        running: Running,
        settings: JobsOptions,
        stopping: threading.Event,
        hurry: threading.Event,
        faults: Faults,
        pulse: Pulse,
    ) -> None:
        super().__init__(name="django-jobs-heartbeat", daemon=True)
        self.engine = engine
        self.worker_id = worker_id
        self.running = running
        self.settings = settings
        self.stopping = stopping
        self.hurry = hurry
        self.faults = faults  # shared with the claim loop: an outage is logged once
        self.pulse = pulse
        # Reapers of many workers start at random moments, not all at once.
        self.next_reap = time.monotonic() + random.random() * settings.REAP_SECONDS
        self.vacuums = Vacuums(engine, settings.VACUUM_DEAD_ROWS)

    @property
    def lost_leases(self) -> set[Key]:
        """Running attempts whose lease was lost; each leaves this set when it ends."""
        return self.running.lost_leases()

    def run(self) -> None:
        self.pulse.beat()
        while not self.hurry.wait(self.settings.HEARTBEAT_SECONDS):
            self.pulse.beat()
            if self.stopping.is_set() and not len(self.running):
                break
            try:
                self.beat()
            except DatabaseError as exc:
                self.faults.note("heartbeat", exc)
            else:
                self.faults.recovered()
        self.vacuums.stop()
        connections.close_all()

    def beat(self) -> None:
        """One heartbeat: renew, write progress, deliver cancels, note losses; reap if due."""
        running = self.running.snapshot()
        progress = {
            key: value
            for key, attempt in running.items()
            if (value := attempt.control.take_progress()) is not None
        }
        try:
            renewed = self.engine.renew(self.worker_id, running, progress)
        except REFUSED as exc:
            if not progress:
                raise
            # Refused for good: without it, every lease would expire.
            logger.warning(
                "The database refused the progress of %d attempt(s) (%s); it is dropped and "
                "their leases renewed without it.",
                len(progress),
                said(exc),
                extra={"db": self.engine.db},
            )
            renewed = self.engine.renew(self.worker_id, running)
        for key in renewed.cancelling:
            if key in running:
                running[key].control.request_cancel()
        self.give_back_unknown(renewed.unknown)
        for key in sorted(self.running.lose(renewed.lost)):
            claimed = running[key].claimed
            logger.warning(
                "Job %s (%s, queue %s) attempt %d lost its lease (reaped or released while "
                "it ran): it may run again elsewhere, and its outcome here will not count.",
                claimed.job_id,
                claimed.task_name,
                claimed.queue,
                claimed.token,
                extra=job_fields(claimed.job_id, claimed.task_name, claimed.queue, claimed.token),
            )
        if time.monotonic() >= self.next_reap:
            self.next_reap = time.monotonic() + self.settings.REAP_SECONDS
            self.reap()

    def give_back_unknown(self, unknown: dict[Key, Unheard]) -> None:
        """Give back the leases this worker holds in the database and never heard of.

        A claim whose commit went through as the connection failed never
        reaches the worker: its jobs stay leased to a worker that heartbeats,
        so no reaper takes them, and they would stay ``running`` for as long
        as it lives. ``renew`` names those held a lease's length
        (``LEASE_SECONDS``) unknown here, past any claim about to start. Their
        attempts never ran: back to their queue, due at once and not counted,
        as an attempt claimed ahead and never started is.
        """
        if not unknown:
            return
        reports = [
            given_back(
                key,
                unheard.attempt_id,
                f"claimed for {this_worker()} by a claim whose answer never reached it",
            )
            for key, unheard in sorted(unknown.items())
        ]
        done = self.engine.finish(self.worker_id, reports)
        for report, _ in done.applied:
            unheard = unknown[report.job_id, report.token]
            logger.warning(
                "Job %s (%s, queue %s) attempt %d was leased to this worker by a claim whose "
                "answer never reached it (its connection failed as it committed): given back "
                "to its queue, the attempt not counted.",
                report.job_id,
                unheard.task_name,
                unheard.queue,
                report.token,
                extra=job_fields(report.job_id, unheard.task_name, unheard.queue, report.token),
            )

    def reap(self) -> None:
        """Recover the expired leases of dead workers; expire jobs past their deadline; vacuum."""
        reaped = self.engine.reap()
        self.engine.expire_overdue()
        self.vacuums.check()
        if reaped:
            logger.warning("Reaped %d expired lease(s).", reaped)
