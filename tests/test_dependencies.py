"""Dependencies: a job enqueued ``after=`` others runs once every one of them has succeeded."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import pytest
from django.db import connections, transaction

from django_jobs import (
    ArgumentsNotJSONError,
    DependencyError,
    InvalidJobOptionError,
    JobState,
    control,
    enqueue_many,
)
from django_jobs.engine import engine_for
from django_jobs.models import Dependency, Job, JobEvent
from django_jobs.signals import job_transitioned
from django_jobs.states import AttemptOutcome
from django_jobs.values import Claimed, Progress, Report, WorkerIdentity
from tests.conftest import listen_for_wakeups, run_in_processes, statement_plans
from tests.testapp import tasks

pytestmark = pytest.mark.postgres

Burst = Callable[..., str]
DB = "default"
ME = WorkerIdentity(uuid.uuid4(), "test:1")


def state_of(result: Any) -> tuple[str, int]:
    job = Job.objects.get(id=result.id)
    return job.state, job.waiting_on


def claim_all() -> list[Claimed]:
    return engine_for(DB).claim(ME, ["default"], 100)


def succeed(claimed: list[Claimed], worker: WorkerIdentity = ME) -> None:
    reports = [
        Report(c.job_id, c.token, c.attempt_id, AttemptOutcome.SUCCEEDED, result=None)
        for c in claimed
    ]
    engine_for(DB).finish(worker.id, reports)


Succeed = Callable[[list[Claimed]], None]


@pytest.fixture(params=["one statement", "orm"])
def completion_path(request: pytest.FixtureRequest) -> Succeed:
    """Both ways a success is written: the COMPLETE statement for a batch of plain
    successes, and the ORM, job by job, for one that also carries its last
    progress."""
    if request.param == "one statement":
        return succeed

    def succeed_with_progress(claimed: list[Claimed]) -> None:
        reports = [
            Report(
                c.job_id,
                c.token,
                c.attempt_id,
                AttemptOutcome.SUCCEEDED,
                progress=Progress(1, 1, "done"),
            )
            for c in claimed
        ]
        engine_for(DB).finish(ME.id, reports)

    return succeed_with_progress


# -- enqueue ------------------------------------------------------------------------------------


def test_after__a_job_waits_while_its_dependency_has_not_succeeded(pg: None) -> None:
    parent = tasks.add.enqueue(1, 2)

    child = tasks.add.using(after=[parent]).enqueue(3, 4)

    assert state_of(child) == (JobState.WAITING, 1)
    assert list(Dependency.objects.values_list("job_id", "depends_on_id")) == [
        (uuid.UUID(child.id), uuid.UUID(parent.id))
    ]


def test_after__a_dependency_that_already_succeeded_leaves_the_job_queued(pg: None) -> None:
    parent = tasks.add.enqueue(1, 2)
    succeed(claim_all())

    child = tasks.add.using(after=parent.id).enqueue(3, 4)

    assert state_of(child) == (JobState.QUEUED, 0)


def test_after__takes_job_ids_results_and_rows_and_counts_each_job_once(pg: None) -> None:
    one, two = tasks.add.enqueue(1, 2), tasks.add.enqueue(3, 4)
    row = Job.objects.get(id=two.id)

    child = tasks.add.using(after=[one, uuid.UUID(one.id), row, two.id]).enqueue(5, 6)

    assert state_of(child) == (JobState.WAITING, 2)


def test_after__a_job_that_does_not_exist_is_refused_and_the_transaction_goes_on(
    pg: None,
) -> None:
    missing = uuid.uuid4()
    with transaction.atomic():
        with pytest.raises(DependencyError) as error:
            tasks.add.using(after=[missing]).enqueue(1, 2)
        tasks.noop.enqueue()  # the caller's transaction is still usable
    assert str(error.value) == f"after: there is no job {missing}; nothing was enqueued."
    assert list(Job.objects.values_list("task_name", flat=True)) == ["tests.testapp.tasks.noop"]


def test_after__a_discarded_dependency_is_refused(pg: None) -> None:
    parent = tasks.add.enqueue(1, 2)
    control.apply("discard", parent.id, actor="ops", note="not needed")

    with pytest.raises(DependencyError, match="was discarded and can never succeed"):
        tasks.add.using(after=[parent]).enqueue(3, 4)
    assert Job.objects.count() == 1


@pytest.mark.parametrize("tenant", ["", "acme"])  # untenanted waiting for a tenant's, and back
def test_after__a_job_of_another_tenant_is_refused_and_nothing_is_written(
    pg: None, tenant: str
) -> None:
    parent = tasks.add.using(tenant="globex" if tenant else "acme").enqueue(1, 2)

    with pytest.raises(DependencyError, match=r"a job waits only for jobs of its own tenant"):
        tasks.add.using(tenant=tenant, after=[parent]).enqueue(3, 4)
    with pytest.raises(DependencyError, match=r"a job waits only for jobs of its own tenant"):
        enqueue_many(tasks.add.using(tenant=tenant, after=[parent]), [((3, 4), {})])
    assert (Job.objects.count(), Dependency.objects.count()) == (1, 0)


def test_after__a_job_of_the_same_tenant_is_waited_for(pg: None) -> None:
    parent = tasks.add.using(tenant="acme").enqueue(1, 2)

    child = tasks.add.using(tenant="acme", after=[parent]).enqueue(3, 4)

    assert Job.objects.get(id=child.id).state == JobState.WAITING


@pytest.mark.parametrize(
    ("after", "message"),
    [
        (["not-a-uuid"], "after[0]: 'not-a-uuid' is not a job id (a UUID)."),
        ([12], "after[0] must be a job id, a TaskResult or a Job, not int."),
        ([str(uuid.uuid4()) for _ in range(101)], "after names 101 jobs; at most 100 are allowed."),
    ],
)
def test_after__malformed_values_are_refused_before_anything_is_written(
    pg: None, after: Any, message: str
) -> None:
    with pytest.raises(InvalidJobOptionError) as error:
        tasks.add.using(after=after).enqueue(1, 2)
    assert str(error.value) == f"tests.testapp.tasks.add: {message}"
    assert Job.objects.count() == 0


def test_after__enqueue_many_makes_every_job_of_the_batch_wait(pg: None) -> None:
    parent = tasks.add.enqueue(1, 2)

    results = enqueue_many(tasks.add.using(after=[parent]), [((n, n), {}) for n in range(3)])

    assert [r.state for r in results] == [JobState.WAITING] * 3
    assert [state_of(r) for r in results] == [(JobState.WAITING, 1)] * 3
    assert set(Dependency.objects.values_list("job_id", "depends_on_id")) == {
        (uuid.UUID(r.id), uuid.UUID(parent.id)) for r in results
    }


def test_after__enqueue_many_with_a_bad_call_writes_neither_jobs_nor_dependencies(
    pg: None,
) -> None:
    parent = tasks.add.enqueue(1, 2)

    with pytest.raises(ArgumentsNotJSONError):
        enqueue_many(tasks.add.using(after=[parent]), [((1, 1), {}), (({1},), {})])

    assert (Job.objects.count(), Dependency.objects.count()) == (1, 0)


def test_after__enqueue_many_after_a_missing_job_is_refused(pg: None) -> None:
    missing = uuid.uuid4()

    with pytest.raises(DependencyError, match=f"there is no job {missing}"):
        enqueue_many(tasks.add.using(after=[missing]), [((1, 1), {})])
    assert Job.objects.count() == 0


# -- completion ---------------------------------------------------------------------------------


def test_after__the_last_dependency_to_succeed_queues_the_job(
    pg: None, completion_path: Succeed
) -> None:
    first, second = tasks.add.enqueue(1, 2), tasks.add.enqueue(3, 4)
    child = tasks.add.using(after=[first, second]).enqueue(5, 6)
    claimed = {str(c.job_id): c for c in claim_all()}

    completion_path([claimed[first.id]])
    after_one = state_of(child)
    completion_path([claimed[second.id]])

    assert (after_one, state_of(child)) == ((JobState.WAITING, 1), (JobState.QUEUED, 0))


def test_after__the_success_that_queues_a_job_wakes_its_queues_workers_at_commit(
    pg: None, completion_path: Succeed
) -> None:
    parent = tasks.add.enqueue(1, 2)
    tasks.add.using(after=[parent], queue_name="other").enqueue(3, 4)
    claimed = claim_all()

    with listen_for_wakeups() as listener:
        completion_path(claimed)
        notes = [n.payload for n in listener.notifies(timeout=0.5)]

    assert notes == ["other"]


def test_after__a_receiver_gets_every_success_and_release_and_the_batch_stays_one_statement(
    pg: None,
) -> None:
    parents = [tasks.add.enqueue(n, n) for n in range(3)]
    child = tasks.add.using(after=parents).enqueue(1, 2)
    claimed = claim_all()
    heard: list[tuple[str, str, str]] = []

    def receiver(job_id: uuid.UUID, from_state: str, to_state: str, **kwargs: Any) -> None:
        heard.append((str(job_id), from_state, to_state))

    job_transitioned.connect(receiver)
    try:
        with statement_plans() as plans:
            succeed(claimed)
    finally:
        job_transitioned.disconnect(receiver)

    job_writes = [p["Query Text"] for p in plans if "django_jobs_job" in p["Query Text"]]
    assert (len(job_writes), job_writes[0].lstrip().startswith("WITH report AS")) == (1, True)
    assert sorted(heard) == sorted(
        [(p.id, JobState.RUNNING, JobState.SUCCEEDED) for p in parents]
        + [(child.id, JobState.WAITING, JobState.QUEUED)]
    )


def test_after__a_failed_dependency_leaves_the_job_waiting_for_a_retry(
    pg: None, run_burst: Burst
) -> None:
    parent = tasks.flaky.enqueue(4)  # attempts 1-3 fail: exhausted; a retry's 2nd succeeds
    child = tasks.add.using(after=[parent]).enqueue(1, 2)
    run_burst()
    waiting = (state_of(parent)[0], state_of(child))

    control.apply("retry", parent.id, actor="ops")
    run_burst()

    assert waiting == (JobState.EXHAUSTED, (JobState.WAITING, 1))
    assert (state_of(parent)[0], state_of(child)) == (JobState.SUCCEEDED, (JobState.SUCCEEDED, 0))


def test_after__chains_run_in_order_in_a_real_worker(pg: None, run_burst: Burst) -> None:
    first = tasks.record.enqueue()
    second = tasks.record.using(after=[first]).enqueue()
    third = tasks.record.using(after=[second]).enqueue()

    run_burst()

    jobs = {str(j.id): j for j in Job.objects.all()}
    order = sorted(jobs.values(), key=lambda j: j.started_at)
    assert [str(j.id) for j in order] == [first.id, second.id, third.id]
    assert {j.state for j in order} == {JobState.SUCCEEDED}
    assert jobs[second.id].started_at >= jobs[first.id].finished_at


def _finish_what_you_claim(results: Any) -> None:
    connections.close_all()
    me = WorkerIdentity(uuid.uuid4(), "proc")
    done = 0
    while batch := engine_for(DB).claim(me, ["default"], 5):
        succeed(batch, me)
        done += len(batch)
    results.put(done)
    connections.close_all()


def test_after__concurrent_completions_of_a_jobs_dependencies_queue_it_exactly_once(
    pg: None,
) -> None:
    children = []
    for n in range(100):
        left, right = tasks.add.enqueue(n, 0), tasks.add.enqueue(0, n)
        children.append(tasks.add.using(after=[left, right], queue_name="other").enqueue(n, n))

    finished = run_in_processes(_finish_what_you_claim, 4)

    assert sum(finished) == 200
    assert set(Job.objects.filter(queue="other").values_list("state", "waiting_on")) == {
        (JobState.QUEUED, 0)
    }


# -- operators ----------------------------------------------------------------------------------


def test_after__discarding_a_dependency_cancels_every_job_waiting_on_it_in_turn(pg: None) -> None:
    parent = tasks.add.enqueue(1, 2)
    child = tasks.add.using(after=[parent]).enqueue(3, 4)
    grandchild = tasks.add.using(after=[child]).enqueue(5, 6)

    control.apply("discard", parent.id, actor="ops", note="bad data")

    assert (state_of(child)[0], state_of(grandchild)[0]) == (
        JobState.CANCELLED,
        JobState.CANCELLED,
    )
    assert list(
        JobEvent.objects.filter(transition="dependency_discarded")
        .order_by("at", "id")
        .values_list("job_id", "actor", "note")
    ) == [
        (uuid.UUID(child.id), "ops", f"job {parent.id}, which it waited for, was discarded"),
        (uuid.UUID(grandchild.id), "ops", f"job {child.id}, which it waited for, was discarded"),
    ]


def test_after__a_waiting_job_can_be_cancelled_and_its_dependency_still_runs(
    pg: None, run_burst: Burst
) -> None:
    parent = tasks.add.enqueue(1, 2)
    child = tasks.add.using(after=[parent]).enqueue(3, 4)

    control.apply("cancel", child.id, actor="ops")
    run_burst()

    assert (state_of(parent)[0], state_of(child)[0]) == (JobState.SUCCEEDED, JobState.CANCELLED)


def test_after__retrying_a_job_cancelled_while_it_waited_queues_it_at_once(pg: None) -> None:
    parent = tasks.add.enqueue(1, 2)
    child = tasks.add.using(after=[parent]).enqueue(3, 4)
    control.apply("cancel", child.id, actor="ops")

    control.apply("retry", child.id, actor="ops")

    assert (state_of(parent), state_of(child)) == ((JobState.QUEUED, 0), (JobState.QUEUED, 0))
