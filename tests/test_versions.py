"""Task versions: a worker runs jobs of its task's version or an earlier one (versions.py).

A job enqueued by newer code than a worker's waits for a worker of that
release, as a job whose task a worker lacks does, and fails for good once
``UNKNOWN_TASK_GRACE`` has passed. Real worker processes; the rows of "another
release" are written as that release's enqueuer would write them.
"""

from __future__ import annotations

import dataclasses
import signal
import socket
from collections.abc import Callable

import pytest

from django_jobs import InvalidJobOptionError, JobState, versions
from django_jobs.models import Attempt, Job
from tests import deploy_tasks
from tests.conftest import WorkerProcess, wait_until
from tests.testapp import tasks

Burst = Callable[..., str]

VERSION_ERROR = "django_jobs.exceptions.TaskVersionError"


@pytest.mark.parametrize(
    ("worker", "job", "runs"),
    [
        ("2", "2", True),
        ("2", "1", True),
        ("2", "", True),
        ("1.10", "1.9", True),
        ("2", "2.0", True),
        ("1.9", "1.10", False),
        ("", "1", False),
        ("1", "2", False),
        ("1", "a label written before versions were compared", True),
    ],
)
def test_versions__a_worker_runs_its_own_version_and_every_earlier_one(
    worker: str, job: str, runs: bool
) -> None:
    assert versions.runs(worker, job) is runs


@pytest.mark.parametrize("version", ["v2", "2.", "1..2", " 2", "2-beta", "٣"])
def test_task__a_version_that_is_not_dotted_whole_numbers_is_refused(version: str) -> None:
    with pytest.raises(InvalidJobOptionError, match="version must be whole numbers separated"):
        dataclasses.replace(tasks.add, version=version)  # as @task(version=...) builds it


@pytest.mark.postgres
def test_task_version__a_job_from_newer_code_is_postponed_by_an_older_worker_uncounted(
    pg: None, start_workers: Callable[..., WorkerProcess]
) -> None:
    result = tasks.add.enqueue(1, 2)
    Job.objects.filter(id=result.id).update(task_version="2")  # the next release's enqueuer
    enqueued_with = Job.objects.get(id=result.id).max_attempts
    old = start_workers("--concurrency", "1")
    # Postponed, never failed: the grace (300 s) is far from over.
    wait_until(
        lambda: Job.objects.filter(id=result.id, attempts__gte=1, state=JobState.QUEUED).exists()
    )
    old.signal(signal.SIGTERM)
    assert old.wait(30) == 0

    job = Job.objects.get(id=result.id)
    assert job.max_attempts == enqueued_with + job.attempts  # each attempt given back
    assert job.last_error.startswith(
        f"{VERSION_ERROR}: Task 'tests.testapp.tasks.add' is unversioned in worker "
        f"{socket.gethostname()}:"
    )
    assert ", but the job was enqueued by version 2; postponed " in job.last_error
    assert "for a worker of version 2 or later" in job.last_error


@pytest.mark.postgres
def test_task_version__a_job_from_newer_code_is_failed_after_the_grace(
    pg: None, run_burst: Burst
) -> None:
    result = tasks.add.enqueue(1, 2)
    Job.objects.filter(id=result.id).update(task_version="2")  # the next release's enqueuer

    run_burst("--settings", "tests.ops_settings", "--backend", "impatient")

    job = Job.objects.get(id=result.id)
    attempts = list(Attempt.objects.filter(job_id=result.id).order_by("number"))
    assert (job.state, job.result) == (JobState.FAILED, None)
    assert {a.error_type for a in attempts} == {VERSION_ERROR}
    message = attempts[-1].error_message
    assert message.startswith(
        f"Task 'tests.testapp.tasks.add' is unversioned in worker {socket.gethostname()}:"
    )
    assert message.endswith(
        ", but the job was enqueued by version 2, and no such worker took it within "
        "UNKNOWN_TASK_GRACE (1s from enqueue): failed for good. Deploy workers of version 2 "
        "or later, then retry the job."
    )


@pytest.mark.postgres
@pytest.mark.parametrize("enqueued_by", ["", "1", "2.0"])
def test_task_version__a_job_from_older_code_runs_on_a_newer_worker(
    pg: None, run_burst: Burst, enqueued_by: str
) -> None:
    result = deploy_tasks.reworked.enqueue(41)
    Job.objects.filter(id=result.id).update(task_version=enqueued_by)

    run_burst("--settings", "tests.ops_settings", "--backend", "upgraded")

    job = Job.objects.get(id=result.id)
    assert (job.state, job.result, job.attempts) == (JobState.SUCCEEDED, 42, 1)


def test_task_version__each_job_carries_its_enqueuers_version(pg: None) -> None:
    result = deploy_tasks.reworked.enqueue(1)
    assert Job.objects.get(id=result.id).task_version == "2"
