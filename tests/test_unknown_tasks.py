"""A rolling deploy where enqueuers update before workers loses no job.

A worker that does not have a job's task postpones it (with backoff, its
attempt given back to the budget) until ``UNKNOWN_TASK_GRACE`` after the
enqueue, logging a WARNING each time; a worker that has the task then runs it.
After the grace the job fails for good, saying why. Real worker processes:
``default`` workers lack ``tests.deploy_tasks``, ``upgraded`` ones have it
(tests/ops_settings.py).
"""

from __future__ import annotations

import signal
import socket
from collections.abc import Callable

import pytest

from django_jobs import JobState
from django_jobs.models import Job
from django_jobs.retry import Backoff, Decision, Verdict, unknown_task_decision
from tests import deploy_tasks
from tests.conftest import WorkerProcess, wait_until

Burst = Callable[..., str]


def test_unknown_task_decision__within_the_grace_postpones_no_later_than_its_end() -> None:
    decision = unknown_task_decision(
        waited=299.5, grace=300.0, backoff=Backoff(10.0, 60.0), attempt=4, rand=lambda: 1.0
    )
    assert decision == Decision(Verdict.POSTPONE, 0.5)


def test_unknown_task_decision__after_the_grace_gives_up() -> None:
    decision = unknown_task_decision(
        waited=300.0, grace=300.0, backoff=Backoff(10.0, 60.0), attempt=1
    )
    assert decision == Decision(Verdict.GIVE_UP)


@pytest.mark.postgres
def test_unknown_task__is_postponed_by_an_old_worker_and_run_by_a_new_one(
    pg: None, start_workers: Callable[..., WorkerProcess], run_burst: Burst
) -> None:
    result = deploy_tasks.shipped_later.enqueue(21)
    old = start_workers("--concurrency", "1")
    # Postponed twice, never failed: the grace (300 s) is far from over.
    job = wait_until(
        lambda: Job.objects.filter(id=result.id, attempts__gte=2, state=JobState.QUEUED).first()
    )
    old.signal(signal.SIGTERM)
    assert old.wait(30) == 0
    postponed = Job.objects.get(id=result.id)
    # Each postponement gave its attempt back: the task's 2 attempts are all left.
    assert postponed.max_attempts == postponed.attempts + 2
    assert postponed.last_error.startswith("django_jobs.exceptions.UnknownTaskError: No task")

    run_burst("--settings", "tests.ops_settings", "--backend", "upgraded")

    done = Job.objects.get(id=result.id)
    assert (done.state, done.result, done.attempts) == (
        JobState.SUCCEEDED,
        42,
        postponed.attempts + 1,
    )
    warning = next(
        line for line in old.output().splitlines() if f"Job {job.id}" in line and "WARNING" in line
    )
    name = "'tests.deploy_tasks.shipped_later'"
    assert f"No task named {name} is registered in worker {socket.gethostname()}:" in warning
    assert "s left of UNKNOWN_TASK_GRACE, 300s from enqueue" in warning
    assert "could not start" in warning and "the attempt is not counted" in warning


@pytest.mark.postgres
def test_unknown_task__fails_for_good_once_the_grace_has_passed(pg: None, run_burst: Burst) -> None:
    result = deploy_tasks.shipped_later.enqueue(21)

    output = run_burst("--settings", "tests.ops_settings", "--backend", "impatient")

    job = Job.objects.get(id=result.id)
    last = job.attempt_set.order_by("-number").first()
    assert job.state == JobState.FAILED
    assert last is not None and last.error_message.startswith(
        "No task named 'tests.deploy_tasks.shipped_later' is registered in worker "
    )
    assert last.error_message.endswith(
        "and none was found within UNKNOWN_TASK_GRACE (1s from enqueue): failed for good. "
        "Deploy workers that have the task, then retry the job."
    )
    final = [line for line in output.splitlines() if f"Job {job.id}" in line and "ERROR" in line]
    assert len(final) == 1 and "failed for good: not retried" in final[0]
