"""Retention: finished history is deleted by age, in batches; held and live jobs are kept."""

from __future__ import annotations

import io
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.test import override_settings
from django.utils import timezone

from django_jobs import retention
from django_jobs.models import (
    Attempt,
    Dependency,
    FairClock,
    Job,
    JobEvent,
    RateWindow,
    RetryWindow,
    Step,
    Worker,
)
from django_jobs.states import AttemptOutcome, JobState
from tests.conftest import backend_settings

pytestmark = pytest.mark.postgres

DB = "default"
WEEK = timedelta(days=7)


def finished_job(
    state: JobState = JobState.SUCCEEDED,
    *,
    days_ago: float,
    changed_days_ago: float | None = None,
    finished: bool = True,
) -> Job:
    """A job that ended ``days_ago``, with one attempt and one audit event: test set-up."""
    now = timezone.now()
    ended = now - timedelta(days=days_ago)
    changed = now - timedelta(days=changed_days_ago) if changed_days_ago is not None else ended
    job = Job.objects.create(
        task_name="tests.testapp.tasks.add",
        args=[1, 2],
        state=state,
        attempts=1,
        max_attempts=3,
        run_after=ended,
        enqueued_at=ended,
        finished_at=ended if finished else None,
        updated_at=changed,
    )
    Attempt.objects.create(
        job=job, number=1, outcome=AttemptOutcome.FAILED, started_at=ended, finished_at=ended
    )
    JobEvent.objects.create(
        job=job,
        at=changed,
        transition="quarantine",
        from_state=JobState.FAILED,
        to_state=state,
        actor="tester",
    )
    return job


def worker(*, stopped_days_ago: float | None, heartbeat_days_ago: float) -> Worker:
    now = timezone.now()
    return Worker.objects.create(
        host="host",
        pid=1,
        concurrency=1,
        started_at=now - timedelta(days=30),
        heartbeat_at=now - timedelta(days=heartbeat_days_ago),
        stopped_at=now - timedelta(days=stopped_days_ago) if stopped_days_ago is not None else None,
    )


def remaining() -> set[str]:
    return {str(pk) for pk in Job.objects.values_list("id", flat=True)}


@pytest.mark.parametrize(
    "state",
    [
        JobState.SUCCEEDED,
        JobState.FAILED,
        JobState.CANCELLED,
        JobState.DISCARDED,
        JobState.EXPIRED,
    ],
)
def test_prune__deletes_finished_jobs_older_than_the_cutoff_with_their_attempts_and_events(
    pg: None, state: JobState
) -> None:
    finished_job(state, days_ago=8)

    result = retention.prune(DB, older_than=WEEK)

    assert (result.jobs, dict(result.jobs_by_state), result.attempts, result.events) == (
        1,
        {state.value: 1},
        1,
        1,
    )
    assert (Job.objects.count(), Attempt.objects.count(), JobEvent.objects.count()) == (0, 0, 0)


def test_prune__deletes_the_steps_of_the_jobs_it_deletes(pg: None) -> None:
    old = finished_job(days_ago=8)
    young = finished_job(days_ago=6)
    for job in (old, young):
        Step.objects.create(
            job=job, name="charge", attempt=1, result=1, recorded_at=job.enqueued_at
        )

    retention.prune(DB, older_than=WEEK)

    assert list(Step.objects.values_list("job_id", flat=True)) == [young.id]


def test_prune__keeps_jobs_that_finished_after_the_cutoff(pg: None) -> None:
    young = finished_job(days_ago=6)

    result = retention.prune(DB, older_than=WEEK)

    assert (result.jobs, remaining()) == (0, {str(young.id)})


@pytest.mark.parametrize(
    "state", [JobState.WAITING, JobState.QUEUED, JobState.RUNNING, JobState.CANCELLING]
)
def test_prune__never_deletes_live_jobs_whatever_their_dates(pg: None, state: JobState) -> None:
    live = finished_job(state, days_ago=30)

    retention.prune(DB, older_than=WEEK, include_held=True)

    assert remaining() == {str(live.id)}


@pytest.mark.parametrize("state", [JobState.FAILED, JobState.EXHAUSTED])
def test_prune__keeps_an_old_finished_job_that_a_waiting_job_waits_for(
    pg: None, state: JobState
) -> None:
    awaited = finished_job(state, days_ago=30)
    waiting = finished_job(JobState.WAITING, days_ago=30)
    Dependency.objects.create(job=waiting, depends_on=awaited)

    retention.prune(DB, older_than=WEEK, include_held=True)

    assert remaining() == {str(awaited.id), str(waiting.id)}


@pytest.mark.parametrize("state", [JobState.EXHAUSTED, JobState.QUARANTINED])
def test_prune__keeps_held_jobs_unless_asked(pg: None, state: JobState) -> None:
    held = finished_job(state, days_ago=30)

    result = retention.prune(DB, older_than=WEEK)

    assert (result.jobs, remaining()) == (0, {str(held.id)})


@pytest.mark.parametrize("state", [JobState.EXHAUSTED, JobState.QUARANTINED])
def test_prune__include_held_deletes_old_held_jobs(pg: None, state: JobState) -> None:
    finished_job(state, days_ago=30)

    result = retention.prune(DB, older_than=WEEK, include_held=True)

    assert (dict(result.jobs_by_state), remaining()) == ({state.value: 1}, set())


def test_prune__include_held_measures_a_quarantined_job_without_finished_at_by_its_last_change(
    pg: None,
) -> None:
    finished_job(JobState.QUARANTINED, days_ago=30, finished=False)

    result = retention.prune(DB, older_than=WEEK, include_held=True)

    assert (result.jobs, remaining()) == (1, set())


def test_prune__include_held_keeps_a_job_put_on_hold_recently_though_it_failed_long_ago(
    pg: None,
) -> None:
    held = finished_job(JobState.QUARANTINED, days_ago=30, changed_days_ago=1)

    result = retention.prune(DB, older_than=WEEK, include_held=True)

    assert (result.jobs, remaining()) == (0, {str(held.id)})


def test_prune__deletes_in_batches_of_the_given_size(pg: None) -> None:
    for _ in range(5):
        finished_job(days_ago=8)

    result = retention.prune(DB, older_than=WEEK, batch_size=2)

    assert (result.jobs, result.batches, Job.objects.count()) == (5, 3, 0)


def test_prune__dry_run_deletes_nothing_and_counts_what_it_would_delete(pg: None) -> None:
    old = {finished_job(days_ago=8).id, finished_job(JobState.FAILED, days_ago=9).id}
    kept = {finished_job(JobState.EXHAUSTED, days_ago=9).id, finished_job(days_ago=1).id}
    RetryWindow.objects.create(queue="default", window_start=timezone.now() - timedelta(days=2))
    worker(stopped_days_ago=8, heartbeat_days_ago=8)

    result = retention.prune(DB, older_than=WEEK, dry_run=True)

    assert (
        result.dry_run,
        dict(result.jobs_by_state),
        result.attempts,
        result.events,
        result.retry_windows,
        result.workers,
    ) == (True, {"succeeded": 1, "failed": 1}, 2, 2, 1, 1)
    assert (remaining(), RetryWindow.objects.count(), Worker.objects.count()) == (
        {str(pk) for pk in old | kept},
        1,
        1,
    )


def test_prune__deletes_retry_windows_that_started_more_than_a_day_ago(pg: None) -> None:
    now = timezone.now()
    RetryWindow.objects.create(queue="default", window_start=now - timedelta(hours=25))
    current = RetryWindow.objects.create(queue="default", window_start=now - timedelta(hours=1))

    result = retention.prune(DB, older_than=WEEK)

    assert (result.retry_windows, list(RetryWindow.objects.values_list("id", flat=True))) == (
        1,
        [current.id],
    )


def test_prune__deletes_rate_windows_that_started_more_than_a_day_ago(pg: None) -> None:
    now = timezone.now()
    RateWindow.objects.create(queue="sms", window_start=now - timedelta(hours=25))
    current = RateWindow.objects.create(queue="sms", window_start=now - timedelta(seconds=1))

    result = retention.prune(DB, older_than=WEEK)

    assert (result.rate_windows, list(RateWindow.objects.values_list("id", flat=True))) == (
        1,
        [current.id],
    )


@pytest.mark.parametrize(
    ("option", "window"),
    [("RETRY_BUDGET", RetryWindow), ("RATE_LIMITS", RateWindow), ("KEY_RATE_LIMITS", RateWindow)],
)
def test_prune_command__keeps_a_window_as_long_as_the_longest_configured_one(
    pg: None, option: str, window: type[RetryWindow] | type[RateWindow]
) -> None:
    now = timezone.now()
    this_week = window.objects.create(queue="default", window_start=now - timedelta(days=3))
    window.objects.create(queue="default", window_start=now - timedelta(days=8))

    with override_settings(
        TASKS=backend_settings(**{option: {"default": (1, WEEK.total_seconds())}})
    ):
        call_command("jobs", "prune", stdout=io.StringIO())

    assert list(window.objects.values_list("id", flat=True)) == [this_week.id]


def test_prune__deletes_fair_clocks_of_tenants_served_nothing_since_the_cutoff(pg: None) -> None:
    now = timezone.now()
    values = {"start": 1.0, "finish": 2.0, "claims": 2, "weight": 1.0}
    FairClock.objects.create(queue="q", tenant="gone", updated_at=now - WEEK * 2, **values)
    served = FairClock.objects.create(queue="q", tenant="busy", updated_at=now, **values)

    result = retention.prune(DB, older_than=WEEK)

    assert (result.fair_clocks, list(FairClock.objects.values_list("id", flat=True))) == (
        1,
        [served.id],
    )


def test_prune__deletes_workers_stopped_or_silent_since_before_the_cutoff(pg: None) -> None:
    worker(stopped_days_ago=8, heartbeat_days_ago=8)  # stopped long ago
    worker(stopped_days_ago=None, heartbeat_days_ago=8)  # killed long ago, never said so
    stopped_recently = worker(stopped_days_ago=1, heartbeat_days_ago=1)
    alive = worker(stopped_days_ago=None, heartbeat_days_ago=0)

    result = retention.prune(DB, older_than=WEEK)

    assert (result.workers, set(Worker.objects.values_list("id", flat=True))) == (
        2,
        {stopped_recently.id, alive.id},
    )


def test_prune__refuses_an_age_of_zero(pg: None) -> None:
    finished_job(days_ago=0)

    with pytest.raises(ValueError, match="older_than must be positive"):
        retention.prune(DB, older_than=timedelta(0))

    assert Job.objects.count() == 1
