"""The same engine on SQLite: one host, claims serialised, no server needed."""

from __future__ import annotations

import datetime as dt
from collections import Counter
from collections.abc import Callable

import pytest
from django.db import transaction
from django.utils import timezone

from django_jobs import JobState, enqueue_many
from django_jobs.models import Attempt, Dependency, Job
from tests.conftest import one_slot_fair_order
from tests.testapp import tasks

Burst = Callable[..., str]
pytestmark = pytest.mark.django_db(databases=["sqlite"], transaction=True)
SQLITE = ("--backend", "sqlite")


def test_sqlite__rolled_back_transaction_leaves_no_job() -> None:
    with pytest.raises(RuntimeError), transaction.atomic(using="sqlite"):
        tasks.add.using(backend="sqlite").enqueue(1, 2)
        raise RuntimeError("business logic failed")
    assert Job.objects.using("sqlite").count() == 0


def test_sqlite__committed_job_is_processed(run_burst: Burst) -> None:
    with transaction.atomic(using="sqlite"):
        result = tasks.add.using(backend="sqlite").enqueue(2, 3)
    run_burst(*SQLITE)
    result.refresh()
    assert (result.state, result.return_value) == (JobState.SUCCEEDED, 5)


def test_sqlite__retries_then_succeeds(run_burst: Burst) -> None:
    result = tasks.flaky.using(backend="sqlite").enqueue(2)
    run_burst(*SQLITE)
    result.refresh()
    assert (result.state, result.attempts) == (JobState.SUCCEEDED, 3)
    assert [a.outcome for a in result.attempt_log] == ["failed", "failed", "succeeded"]


def test_sqlite__exhausts_keeping_every_error(run_burst: Burst) -> None:
    result = tasks.always_fails.using(backend="sqlite").enqueue("nope")
    run_burst(*SQLITE)
    result.refresh()
    assert (result.state, result.attempts) == (JobState.EXHAUSTED, 3)
    assert [a.error_message for a in result.attempt_log] == ["nope"] * 3


def test_sqlite__two_processes_share_the_work_without_duplicates(
    start_workers: Callable[..., object],
) -> None:
    results = [tasks.add.using(backend="sqlite").enqueue(n, n) for n in range(200)]
    workers = [start_workers("--burst", *SQLITE, "--concurrency", "2") for _ in range(2)]
    codes = [w.wait(120) for w in workers]  # type: ignore[attr-defined]
    states = set(Job.objects.using("sqlite").values_list("state", "attempts"))
    assert codes == [0, 0]
    assert states == {(JobState.SUCCEEDED, 1)}
    assert len(results) == Attempt.objects.using("sqlite").count()


def test_sqlite__enqueue_many_writes_the_same_rows_as_enqueue() -> None:
    later = timezone.now() + dt.timedelta(hours=1)
    task = tasks.add.using(backend="sqlite", priority=7, tenant="acme", run_after=later)
    one = task.enqueue(1, b=2)
    [many] = enqueue_many(task, [((1,), {"b": 2})])
    columns = [f.attname for f in Job._meta.concrete_fields if f.attname not in _PER_JOB]
    rows = {
        str(row["id"]): {k: row[k] for k in columns}
        for row in Job.objects.using("sqlite").values("id", *columns)
    }
    assert rows[many.id] == rows[one.id]


_PER_JOB = {"id", "enqueued_at", "updated_at"}


def test_sqlite__a_job_enqueued_after_another_runs_once_it_has_succeeded(
    run_burst: Burst,
) -> None:
    first = tasks.record.using(backend="sqlite").enqueue()
    second = tasks.record.using(backend="sqlite", after=[first]).enqueue()
    waiting = Job.objects.using("sqlite").get(id=second.id).state

    run_burst(*SQLITE)

    jobs = {str(j.id): j for j in Job.objects.using("sqlite")}
    assert (waiting, jobs[first.id].state, jobs[second.id].state) == (
        JobState.WAITING,
        JobState.SUCCEEDED,
        JobState.SUCCEEDED,
    )
    assert jobs[second.id].started_at >= jobs[first.id].finished_at


def test_sqlite__enqueue_many_after_a_job_writes_waiting_jobs_and_their_dependencies() -> None:
    parent = tasks.add.using(backend="sqlite").enqueue(1, 2)

    results = enqueue_many(tasks.add.using(backend="sqlite", after=[parent]), [((3, 4), {})] * 2)

    jobs = Job.objects.using("sqlite")
    assert [jobs.get(id=r.id).state for r in results] == [JobState.WAITING] * 2
    assert Dependency.objects.using("sqlite").count() == 2


def test_sqlite__with_one_free_slot_a_late_tenant_takes_every_other_claim() -> None:
    order = one_slot_fair_order("sqlite", "sqlite", "default", {"FAIR_QUEUES": {"default": {}}})
    assert (order[:3], Counter(order[3:])) == (["a"] * 3, {"a": 100, "c": 100})


def test_sqlite__the_engine_takes_the_general_paths_and_refuses_a_memory_database() -> None:
    from django_jobs.engine import engine_for

    engine = engine_for("sqlite")
    job = tasks.add.using(backend="sqlite").enqueue(1, 2)
    stored = Job.objects.using("sqlite").get(id=job.id)
    assert (engine.listens, engine.streams_bulk) == (False, False)
    assert engine.insert_now(stored, "[1, 2]", "{}") is None
    assert engine.estimated_rows("django_jobs_job") is None
    assert engine.unusable_for_workers() is None
