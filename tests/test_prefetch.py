"""Attempts claimed ahead of a free thread (worker/prefetch.py), with real ``runworkers``."""

from __future__ import annotations

import os
import signal
import time
import uuid
from collections import Counter
from collections.abc import Callable

import pytest
from django.db import transaction

from django_jobs import AttemptOutcome, JobState, enqueue_many
from django_jobs.attempt import AttemptControl
from django_jobs.models import Attempt, Job, Worker
from tests.conftest import WorkerProcess, wait_until
from tests.testapp import tasks

pytestmark = pytest.mark.postgres

Burst = Callable[..., str]
Start = Callable[..., WorkerProcess]

NOT_STARTED = "django_jobs.exceptions.AttemptNotStartedError"


def _running(*job_ids: str) -> int:
    """How many of these jobs are running (leased) now."""
    return Job.objects.filter(id__in=job_ids, state=JobState.RUNNING).count()


def _one_waits_behind_a_long_job(
    start_workers: Start, seconds: float, *args: str
) -> tuple[str, str]:
    """A worker of one thread runs a job of ``seconds`` and holds ``add``'s, claimed with it."""
    with transaction.atomic():
        long = tasks.sleeps.using(priority=1).enqueue(seconds)
        short = tasks.add.enqueue(1, 2)
    start_workers(*args, "--concurrency", "1")
    wait_until(lambda: _running(long.id, short.id) == 2, timeout=30)
    return long.id, short.id


def test_prefetch__a_worker_claims_a_waiting_attempt_for_each_thread_while_jobs_are_short(
    pg: None, run_burst: Burst
) -> None:
    with transaction.atomic():
        enqueue_many(tasks.noop, [((), {})] * 64)
    run_burst("-c", "16")
    # A claim stamps every job it takes with one started_at.
    claims = Counter(Job.objects.values_list("started_at", flat=True))
    assert (max(claims.values()), Job.objects.filter(state=JobState.SUCCEEDED).count()) == (32, 64)
    assert Attempt.objects.exclude(outcome=AttemptOutcome.SUCCEEDED).count() == 0


def test_prefetch__nothing_is_claimed_ahead_while_a_job_runs_long(
    pg: None, start_workers: Start
) -> None:
    long = tasks.sleeps.enqueue(1.5)
    start_workers("--concurrency", "1")
    wait_until(lambda: _running(long.id) == 1, timeout=30)
    time.sleep(0.3)
    short = tasks.add.enqueue(1, 2)
    time.sleep(0.5)
    waited = Job.objects.get(id=short.id).state
    wait_until(lambda: Job.objects.get(id=short.id).state == JobState.SUCCEEDED, timeout=30)
    short.refresh()
    assert (waited, [a.outcome for a in short.attempt_log]) == (
        JobState.QUEUED,
        [AttemptOutcome.SUCCEEDED],
    )


def test_prefetch__nothing_is_claimed_ahead_from_a_queue_with_a_concurrency_limit(
    pg: None, start_workers: Start
) -> None:
    """Its limit of two would be held by one worker of one thread, one attempt waiting."""
    limited = tasks.sleeps.using(backend="flow", queue_name="limited")
    with transaction.atomic():
        first, second = limited.enqueue(0.5), limited.enqueue(0.5)
    start_workers("--backend", "flow", "--concurrency", "1")
    held = wait_until(lambda: _running(first.id, second.id), timeout=30)
    wait_until(lambda: Job.objects.filter(state=JobState.SUCCEEDED).count() == 2, timeout=30)
    outcomes = list(Attempt.objects.values_list("outcome", flat=True))
    assert (held, outcomes) == (1, [AttemptOutcome.SUCCEEDED] * 2)


def test_prefetch__an_attempt_waiting_behind_a_long_job_goes_back_to_its_queue_uncounted(
    pg: None, start_workers: Start
) -> None:
    long, short = _one_waits_behind_a_long_job(start_workers, 6.0)
    start_workers("--concurrency", "1")
    wait_until(lambda: Job.objects.get(id=short).state == JobState.SUCCEEDED, timeout=30)
    long_state = Job.objects.get(id=long).state
    job = Job.objects.get(id=short)
    given_back, ran = Attempt.objects.filter(job_id=short).order_by("number")
    assert (long_state, job.attempts, job.max_attempts, job.lost_streak) == (
        JobState.RUNNING,
        2,
        4,  # the default 3, and the attempt given back
        0,
    )
    assert (given_back.outcome, given_back.error_type, ran.outcome) == (
        AttemptOutcome.NOT_STARTED,
        NOT_STARTED,
        AttemptOutcome.SUCCEEDED,
    )
    assert given_back.worker_id != ran.worker_id


def test_prefetch__a_waiting_attempt_times_out_counting_from_its_start_not_its_claim(
    pg: None, run_burst: Burst
) -> None:
    with transaction.atomic():
        tasks.sleeps.using(priority=1).enqueue(0.6)
        # 0.6 s waiting and 0.2 s running: over its 0.5 s timeout only if waiting counted.
        short = tasks.sleeps_within_half_a_second.enqueue(0.2)
    run_burst("--concurrency", "1")
    short.refresh()
    claims = Counter(Job.objects.values_list("started_at", flat=True))
    assert (len(claims), short.state, [a.outcome for a in short.attempt_log]) == (
        1,  # both in one claim: the second waited for the first
        JobState.SUCCEEDED,
        [AttemptOutcome.SUCCEEDED],
    )


def test_prefetch__a_hurried_shutdown_gives_back_a_waiting_attempt_instead_of_losing_it(
    pg: None, start_workers: Start
) -> None:
    long, short = _one_waits_behind_a_long_job(start_workers, 30.0, "--backend", "fast")
    # The worker process itself, not its supervisor (which relays signals
    # every half second): the two stops land well within the second after
    # which a waiting attempt is given back anyway.
    pid = Worker.objects.get(id=Attempt.objects.get(job_id=long).worker_id).pid
    os.kill(pid, signal.SIGTERM)
    time.sleep(0.2)
    os.kill(pid, signal.SIGTERM)  # a second stop: no grace period
    # Both outcomes: the waiting attempt's give-back and the running one's
    # release are written one after the other as the worker exits.
    wait_until(lambda: _running(long, short) == 0, timeout=30)
    first = {
        a.job_id.hex: (a.outcome, a.error_type)
        for a in Attempt.objects.filter(job_id__in=[long, short], number=1)
    }
    assert (first[uuid.UUID(long).hex][0], first[uuid.UUID(short).hex]) == (
        AttemptOutcome.LOST,
        (AttemptOutcome.NOT_STARTED, NOT_STARTED),
    )


def test_attempt_control__a_given_back_attempt_never_starts() -> None:
    control = AttemptControl(timeout=None)
    assert (control.give_back(), control.start(), control.running) == (True, False, False)


def test_attempt_control__a_started_attempt_is_never_given_back() -> None:
    control = AttemptControl(timeout=None)
    assert (control.start(), control.give_back(), control.given_back) == (True, False, False)


def test_attempt_control__the_timeout_counts_from_the_start() -> None:
    control = AttemptControl(timeout=5.0)
    waited = control.deadline
    time.sleep(0.05)
    control.start()
    assert waited is None
    assert control.deadline == control.started + 5.0
    assert control.started - control.claimed >= 0.05
