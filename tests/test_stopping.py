"""A stopping worker writes what it holds before it releases the rest, through a lost connection.

The first test runs a real ``runworkers``; the other two build the worker's
parts in this process (``worker.process.Worker``), with real threads and the
real database, to hold the one moment they are about: the last writes of a
hurried stop, and a watchdog looking at a thread that has stopped while its
outcome waits for the database.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Iterator

import psycopg
import pytest
from django.db import connections, transaction

from django_jobs import AttemptOutcome, JobState
from django_jobs.models import Attempt, Job, Worker
from django_jobs.worker.config import WorkerConfig
from django_jobs.worker.process import Worker as WorkerParts
from tests.conftest import WorkerProcess, terminate_backend_of, wait_until
from tests.testapp import tasks

pytestmark = pytest.mark.postgres

Start = Callable[..., WorkerProcess]


def terminate_every_other_session() -> None:
    """End every session of the jobs database but this test's, as a restart would."""
    with connections["default"].cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        (ours,) = cursor.fetchone()
    params = connections["default"].get_connection_params()
    with psycopg.connect(**params, autocommit=True) as admin:
        admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid NOT IN (pg_backend_pid(), %s)",
            [ours],
        )


def first_attempt(job_id: str) -> tuple[str, str]:
    attempt = Attempt.objects.get(job_id=job_id, number=1)
    return attempt.outcome, attempt.error_type


def test_hurried_stop__after_a_restart_gives_back_the_waiting_attempt_instead_of_losing_it(
    pg: None, start_workers: Start
) -> None:
    with transaction.atomic():
        long = tasks.sleeps.using(priority=1).enqueue(30.0)
        short = tasks.add.enqueue(1, 2)  # claimed ahead, waiting for the one thread
    start_workers("--backend", "fast", "--concurrency", "1")
    wait_until(lambda: Job.objects.filter(state=JobState.RUNNING).count() == 2, timeout=30)
    holder = Attempt.objects.get(job_id=long.id).worker_id
    assert holder is not None
    pid = Worker.objects.get(id=holder).pid

    terminate_every_other_session()  # the worker's connections are dead when it stops
    os.kill(pid, signal.SIGTERM)
    time.sleep(0.2)
    os.kill(pid, signal.SIGTERM)  # a second stop: no grace period

    wait_until(lambda: not Job.objects.filter(state=JobState.RUNNING).exists(), timeout=30)
    assert first_attempt(short.id) == (
        AttemptOutcome.NOT_STARTED,
        "django_jobs.exceptions.AttemptNotStartedError",
    )
    assert Job.objects.get(id=short.id).lost_streak == 0
    assert first_attempt(long.id)[0] == AttemptOutcome.LOST


@pytest.fixture
def parts(pg: None) -> Iterator[WorkerParts]:
    """One worker process's parts, registered, with one job thread; its threads end after."""
    worker = WorkerParts(WorkerConfig(backend="default", queues=("default",), concurrency=1))
    worker._register()
    yield worker
    worker.executor.shutdown()
    connections.close_all()


def test_hurried_stop__a_success_in_hand_is_written_through_a_dropped_connection(
    parts: WorkerParts,
) -> None:
    tasks.add.enqueue(1, 1)
    (claimed,) = parts.engine.claim(parts.identity, ("default",), 1, 0)
    parts.executor.start(claimed, parts.running.start(claimed).control)
    wait_until(lambda: parts.completer._inbox, timeout=10)  # the task returned
    terminate_backend_of("default")  # the main thread's connection, as a restart would
    parts.stopping.set()
    parts.hurry.set()

    parts.producer._drain()

    connections["default"].close()
    job = Job.objects.get(id=claimed.job_id)
    attempt = Attempt.objects.get(id=claimed.attempt_id)
    assert (job.state, attempt.outcome) == (JobState.SUCCEEDED, AttemptOutcome.SUCCEEDED)


def test_watchdog__does_not_give_up_on_a_stopped_thread_whose_outcome_waits_for_the_database(
    parts: WorkerParts,
) -> None:
    tasks.busy_forever.enqueue()  # timeout 1 s; a busy loop stops at once
    (claimed,) = parts.engine.claim(parts.identity, ("default",), 1, 0)
    control = parts.running.start(claimed).control
    parts.executor.start(claimed, control)

    def outcome_in_hand() -> bool:
        parts.producer._tend()  # the watchdog stops it at its timeout
        return bool(parts.completer.pending)

    wait_until(outcome_in_hand, timeout=10)
    terminate_backend_of("default")
    parts.producer._write_and_claim(0, 0)  # fails: the outcome stays in hand
    time.sleep(parts.settings.STOP_GRACE_SECONDS + 0.1)

    parts.producer._tend()

    assert not parts.stopping.is_set()  # no recycle: nothing was given up on
    parts.producer._write_and_claim(0, 0)
    attempt = Attempt.objects.get(id=claimed.attempt_id)
    assert (attempt.outcome, attempt.late_report) == (AttemptOutcome.TIMED_OUT, None)
