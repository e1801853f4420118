"""The lifeline: renew leases, deliver cancels and progress, notice lost leases, reap.

Real PostgreSQL; jobs are enqueued and claimed through the engine, and a
lease is lost the way it is in production: its worker falls silent, it
expires, and a reaper takes it.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import uuid
from collections.abc import Callable
from datetime import timedelta

import pytest
from django.db.models.functions import Now
from django.utils import timezone

from django_jobs import AttemptOutcome, JobState, control
from django_jobs.backend import jobs_backend
from django_jobs.models import Attempt, Job, Worker
from django_jobs.values import Claimed, Report, WorkerIdentity
from django_jobs.worker.completer import Completer
from django_jobs.worker.faults import Faults
from django_jobs.worker.lifeline import Lifeline
from django_jobs.worker.pulse import Pulse
from django_jobs.worker.running import Running
from tests.testapp import tasks

pytestmark = pytest.mark.postgres


class Setup:
    def __init__(self) -> None:
        backend = jobs_backend("fast")
        self.engine = backend.engine
        self.me = WorkerIdentity(uuid.uuid4(), "test:lifeline")
        self.engine.register_worker(
            self.me, "fast", socket.gethostname(), os.getpid(), ["default"], 4
        )
        self.running = Running()
        self.stopping, self.hurry = threading.Event(), threading.Event()
        faults = Faults(self.engine.db, self.stopping)
        self.lifeline = Lifeline(
            self.engine,
            self.me.id,
            self.running,
            backend.settings,
            self.stopping,
            self.hurry,
            faults,
            Pulse(),
        )
        self.completer = Completer(
            self.engine,
            self.me.id,
            self.running,
            faults,
            sender=type(backend),
            on_retry=lambda due: None,
        )

    def claim(self, count: int) -> list[Claimed]:
        got = self.engine.claim(self.me, ["default"], count)
        for claimed in got:
            self.running.start(claimed)
        return got


@pytest.fixture
def setup(pg: None) -> Setup:
    return Setup()


def expire_lease(claimed: Claimed) -> None:
    """Its worker silent for a minute, and the lease as old: expired (LEASE_SECONDS is 2)."""
    job = Job.objects.get(id=claimed.job_id)
    Job.objects.filter(id=job.id).update(leased_at=Now() - timedelta(seconds=60))
    Worker.objects.filter(id=job.leased_by).update(heartbeat_at=Now() - timedelta(seconds=60))


def test_lifeline__a_lost_lease_is_noticed_once_and_forgotten_when_its_attempt_ends(
    setup: Setup, caplog: pytest.LogCaptureFixture
) -> None:
    tasks.add.enqueue(1, 1)
    tasks.add.enqueue(2, 2)
    (lost,) = setup.claim(1)
    expire_lease(lost)
    assert setup.engine.reap() == 1  # another worker's reaper takes it
    (kept,) = setup.claim(1)
    with caplog.at_level(logging.WARNING, logger="django_jobs.worker"):
        setup.lifeline.beat()
        setup.lifeline.beat()
    assert setup.lifeline.lost_leases == {(lost.job_id, lost.token)}
    warnings = [r.getMessage() for r in caplog.records if "lost its lease" in r.getMessage()]
    assert warnings == [
        f"Job {lost.job_id} (tests.testapp.tasks.add, queue default) attempt 1 lost its "
        "lease (reaped or released while it ran): it may run again elsewhere, and its "
        "outcome here will not count."
    ]
    # The attempt ends: its late report is written (and kept aside), and it leaves.
    setup.completer.submit(
        Report(lost.job_id, lost.token, lost.attempt_id, AttemptOutcome.SUCCEEDED, result=2)
    )
    setup.completer.collect()
    setup.completer.write(lambda: None, otherwise=None)
    assert setup.lifeline.lost_leases == set()
    late = Attempt.objects.get(id=lost.attempt_id).late_report
    assert late is not None and late["outcome"] == "succeeded"
    assert (kept.job_id, kept.token) in setup.running.snapshot()


def test_lifeline__an_ending_attempts_vanished_lease_is_not_lost(setup: Setup) -> None:
    tasks.add.enqueue(1, 1)
    (claimed,) = setup.claim(1)
    key = (claimed.job_id, claimed.token)
    setup.running.writing([key])  # the completer is writing its outcome
    setup.engine.release_lease(setup.me.id, claimed.job_id, claimed.token, "ended elsewhere")
    setup.lifeline.beat()
    assert setup.lifeline.lost_leases == set()


def test_lifeline__keeps_held_leases_by_stamping_its_worker(setup: Setup) -> None:
    tasks.add.enqueue(1, 1)
    (claimed,) = setup.claim(1)
    expire_lease(claimed)  # one more moment of silence and the reaper takes it
    before = timezone.now()
    setup.lifeline.beat()
    reaped = setup.engine.reap()
    worker = Worker.objects.get(id=setup.me.id)
    assert worker.heartbeat_at >= before
    assert (reaped, Job.objects.get(id=claimed.job_id).leased_by) == (0, setup.me.id)


def test_lifeline__delivers_cancel_requests_and_writes_progress(setup: Setup) -> None:
    tasks.add.enqueue(1, 1)
    (claimed,) = setup.claim(1)
    attempt = setup.running.snapshot()[(claimed.job_id, claimed.token)]
    attempt.control.set_progress(3, 10, "three")
    control.cancel(str(claimed.job_id), actor="ops")
    assert not attempt.control.cancelled
    setup.lifeline.beat()
    job = Job.objects.get(id=claimed.job_id)
    assert attempt.control.cancelled
    assert (job.state, job.progress_done, job.progress_message) == (
        JobState.CANCELLING,
        3,
        "three",
    )


def test_lifeline__progress_the_database_refuses_is_dropped_and_the_leases_kept(
    setup: Setup, job_check: Callable[[str], str], caplog: pytest.LogCaptureFixture
) -> None:
    job_check("progress_message NOT LIKE '%password%'")
    tasks.add.enqueue(1, 1)
    (claimed,) = setup.claim(1)
    attempt = setup.running.snapshot()[(claimed.job_id, claimed.token)]
    attempt.control.set_progress(3, 10, "the password is hunter2")
    Worker.objects.filter(id=setup.me.id).update(heartbeat_at=Now() - timedelta(seconds=60))
    with caplog.at_level(logging.WARNING, logger="django_jobs.worker"):
        setup.lifeline.beat()
    job, worker = Job.objects.get(id=claimed.job_id), Worker.objects.get(id=setup.me.id)
    assert (job.progress_done, job.progress_message) == (None, "")
    assert timezone.now() - worker.heartbeat_at < timedelta(seconds=5)  # the lease is renewed
    assert "The database refused the progress of 1 attempt(s) (IntegrityError" in caplog.text
    assert setup.engine.reap() == 0


def test_lifeline__a_lease_whose_claim_never_reached_the_worker_is_given_back_uncounted(
    setup: Setup, caplog: pytest.LogCaptureFixture
) -> None:
    tasks.add.enqueue(1, 1)
    # Committed as a claim whose answer was lost: leased to this worker a
    # lease's length ago (LEASE_SECONDS is 2), and it never heard of it.
    (unheard,) = setup.engine.claim(setup.me, ["default"], 1)
    Job.objects.filter(id=unheard.job_id).update(leased_at=Now() - timedelta(seconds=3))
    with caplog.at_level(logging.WARNING, logger="django_jobs.worker"):
        setup.lifeline.beat()
    job, attempt = Job.objects.get(id=unheard.job_id), Attempt.objects.get(id=unheard.attempt_id)
    assert (job.state, job.leased_by, job.attempts, job.max_attempts) == (
        JobState.QUEUED,
        None,
        1,
        4,
    )
    assert (attempt.outcome, attempt.error_type, attempt.traceback) == (
        AttemptOutcome.NOT_STARTED,
        "django_jobs.exceptions.AttemptNotStartedError",
        "",  # nothing raised it
    )
    (line,) = [r for r in caplog.records if "answer never reached it" in r.getMessage()]
    assert (line.task, line.queue, line.attempt) == ("tests.testapp.tasks.add", "default", 1)  # type: ignore[attr-defined]


def test_lifeline__a_lease_unknown_for_less_than_a_lease_is_kept(setup: Setup) -> None:
    tasks.add.enqueue(1, 1)
    (claimed,) = setup.engine.claim(setup.me, ["default"], 1)  # the producer starts it next
    setup.lifeline.beat()
    assert Job.objects.get(id=claimed.job_id).state == JobState.RUNNING


def test_lifeline__reaps_a_dead_workers_expired_lease_and_expires_overdue_jobs(
    setup: Setup,
) -> None:
    tasks.add.enqueue(1, 1)
    dead = WorkerIdentity(uuid.uuid4(), "dead:1")
    setup.engine.register_worker(dead, "fast", "elsewhere", 1, ["default"], 1)
    (orphan,) = setup.engine.claim(dead, ["default"], 1)
    expire_lease(orphan)
    overdue = tasks.add.using(run_after=timezone.now() + timedelta(seconds=60)).enqueue(3, 3)
    Job.objects.filter(id=overdue.id).update(expires_at=Now() - timedelta(seconds=1))
    setup.lifeline.next_reap = 0.0  # due now, not at its random first moment
    setup.lifeline.beat()
    job = Job.objects.get(id=orphan.job_id)
    assert (job.state, Attempt.objects.get(id=orphan.attempt_id).outcome) == (
        JobState.QUEUED,
        AttemptOutcome.LOST,
    )
    assert Job.objects.get(id=overdue.id).state == JobState.EXPIRED


def test_lifeline__the_thread_ends_when_stopping_with_nothing_running(setup: Setup) -> None:
    setup.lifeline.start()
    setup.stopping.set()
    setup.lifeline.join(timeout=5)
    assert not setup.lifeline.is_alive()
