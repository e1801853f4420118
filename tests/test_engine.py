"""The engines' conformance suite: every engine call, on PostgreSQL and on SQLite.

What one engine does, the other must do: each test runs once per engine
(``alias``), and the engine-specific tests (prepared statements, plans, row
locks across processes) are in ``test_engine_postgres.py``.
"""

from __future__ import annotations

import json
import time
import uuid
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.db import connections, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from django_jobs.bulk import Call
from django_jobs.codec import to_json
from django_jobs.conf import JobsOptions
from django_jobs.engine import engine_for
from django_jobs.engine.base import Engine
from django_jobs.exceptions import InvalidTransitionError
from django_jobs.models import (
    Attempt,
    Dependency,
    FairClock,
    Job,
    JobEvent,
    Step,
    Worker,
)
from django_jobs.retry import Decision, Verdict
from django_jobs.states import TRANSITIONS, AttemptOutcome, JobState, Transition
from django_jobs.values import Progress, Report, StepWrite, Unheard, WorkerIdentity
from django_jobs.verbs import VERBS
from django_jobs.worker.runner import given_back

# Every test takes ``alias`` (tests/conftest.py): it runs on both engines.


QUEUES = ("default",)
ME = WorkerIdentity(uuid.uuid4(), "test:1")


def make_job(
    alias: str,
    state: JobState = JobState.QUEUED,
    *,
    attempts: int = 0,
    max_attempts: int = 3,
    priority: int = 0,
    run_after_seconds: float = -1,
    queue: str = "default",
    leased_by: WorkerIdentity | None = None,
    lease_expired: bool = False,
) -> Job:
    """A job row in any state, written directly: test set-up, not a transition."""
    now = timezone.now()
    job = Job.objects.using(alias).create(
        task_name="tests.testapp.tasks.add",
        args=[1, 2],
        queue=queue,
        priority=priority,
        run_after=now + timedelta(seconds=run_after_seconds),
        state=state,
        attempts=attempts,
        max_attempts=max_attempts,
        enqueued_at=now,
        updated_at=now,
    )
    if leased_by is not None:
        Attempt.objects.using(alias).create(
            job=job, number=attempts, worker_id=leased_by.id, started_at=now
        )
        # An expired lease: taken a minute ago by a worker silent since then.
        age = timedelta(seconds=60 if lease_expired else 0)
        Job.objects.using(alias).filter(id=job.id).update(
            leased_by=leased_by.id, leased_at=now - age
        )
        job.leased_by, job.leased_at = leased_by.id, now - age
        heartbeat(alias, leased_by, now - age)
    return job


def heartbeat(alias: str, worker: WorkerIdentity, at: datetime) -> None:
    """The worker row of ``worker``, last heartbeat ``at``."""
    Worker.objects.using(alias).update_or_create(
        id=worker.id,
        defaults={"heartbeat_at": at},
        create_defaults={
            "host": "test",
            "pid": 1,
            "concurrency": 1,
            "started_at": at,
            "heartbeat_at": at,
        },
    )


def expire_lease(job: Job) -> None:
    """Make ``job``'s lease expire: taken a minute ago, its worker silent since."""
    db = job._state.db
    past = timezone.now() - timedelta(seconds=60)
    Job.objects.using(db).filter(id=job.id).update(leased_at=past)
    Worker.objects.using(db).filter(id=Job.objects.using(db).get(id=job.id).leased_by).update(
        heartbeat_at=past
    )


def report_for(job: Job, transition: Transition) -> Report:
    attempt = Attempt.objects.using(job._state.db).get(job=job, number=job.attempts)
    if transition is Transition.COMPLETE:
        return Report(job.id, job.attempts, attempt.pk, AttemptOutcome.SUCCEEDED, result=3)
    if transition is Transition.SLEEP:
        wake_at = timezone.now() + timedelta(hours=1)
        return Report(
            job.id,
            job.attempts,
            attempt.pk,
            AttemptOutcome.SLEPT,
            wake_at=wake_at,
            sleep_step="sleep-1",
        )
    if transition is Transition.GIVE_BACK:
        return given_back((job.id, job.attempts), attempt.pk, "claimed ahead")
    verdict = {
        Transition.SCHEDULE_RETRY: Verdict.RETRY,
        Transition.EXHAUST: Verdict.EXHAUSTED,
        Transition.FAIL: Verdict.GIVE_UP,
    }[transition]
    return Report(
        job.id,
        job.attempts,
        attempt.pk,
        AttemptOutcome.FAILED,
        error_type="builtins.ValueError",
        error_message="boom",
        decision=Decision(verdict, 0.0),
    )


WORKER_REPORTS = [
    Transition.COMPLETE,
    Transition.SCHEDULE_RETRY,
    Transition.EXHAUST,
    Transition.FAIL,
    Transition.GIVE_BACK,
]


@pytest.mark.parametrize("state", list(JobState))
@pytest.mark.parametrize("transition", WORKER_REPORTS)
def test_finish__applies_only_from_the_states_the_table_allows(
    alias: str, transition: Transition, state: JobState
) -> None:
    job = make_job(alias, state, attempts=1, leased_by=ME)
    done = engine_for(alias).finish(ME.id, [report_for(job, transition)])
    job.refresh_from_db()
    if state is JobState.CANCELLING and transition is not Transition.COMPLETE:
        transition = Transition.CONFIRM_CANCEL  # a cancelled job is not retried
    if state in TRANSITIONS[transition].sources:
        assert (len(done.applied), job.state) == (1, TRANSITIONS[transition].target)
    else:
        assert (len(done.stale), job.state) == (1, state)


@pytest.mark.parametrize("state", list(JobState))
def test_claim__takes_only_queued_jobs(alias: str, state: JobState) -> None:
    make_job(alias, state, attempts=0)
    claimed = engine_for(alias).claim(ME, QUEUES, 10)
    assert len(claimed) == (1 if state is JobState.QUEUED else 0)


REAPED = {
    JobState.RUNNING: TRANSITIONS[Transition.REAP].target,
    JobState.CANCELLING: TRANSITIONS[Transition.REAP_CANCEL].target,
}


@pytest.mark.parametrize("state", list(JobState))
def test_reap__moves_only_leased_states(alias: str, state: JobState) -> None:
    job = make_job(alias, state, attempts=1, leased_by=ME, lease_expired=True)
    engine_for(alias).reap()
    job.refresh_from_db()
    assert job.state == REAPED.get(state, state)


@pytest.mark.parametrize("state", list(JobState))
@pytest.mark.parametrize("verb", list(VERBS))
def test_operate__applies_each_verb_only_where_the_table_allows(
    alias: str, verb: str, state: JobState
) -> None:
    # Scheduled for later, so run_now finds what it moves; no other verb looks at it.
    job = make_job(alias, state, attempts=1, run_after_seconds=3600)
    allowed_here = [t for t in VERBS[verb].transitions if state in TRANSITIONS[t].sources]
    if allowed_here:
        done = engine_for(alias).operate(job.id, verb, "ops", "walk")
        job.refresh_from_db()
        event = JobEvent.objects.using(alias).get(job=job)
        assert (done.transition, job.state) == (
            allowed_here[0],
            TRANSITIONS[allowed_here[0]].target,
        )
        assert (event.actor, event.from_state, event.to_state) == ("ops", state, job.state)
    elif state in VERBS[verb].copies_from:
        done = engine_for(alias).operate(job.id, verb, "ops", "walk")
        job.refresh_from_db()
        copy = Job.objects.using(alias).get(rerun_of=job.id)
        assert (done.transition, done.rerun, job.state) == (Transition.RERUN, copy.id, state)
        assert (copy.state, copy.attempts, copy.task_name, copy.args) == (
            JobState.QUEUED,
            0,
            job.task_name,
            job.args,
        )
    else:
        with pytest.raises(InvalidTransitionError, match=f"Cannot {verb} job .*: it is {state}"):
            engine_for(alias).operate(job.id, verb, "ops", "walk")
        job.refresh_from_db()
        assert (job.state, JobEvent.objects.using(alias).count()) == (state, 0)
        assert Job.objects.using(alias).count() == 1


def test_operate__run_now_refuses_a_queued_job_already_due(alias: str) -> None:
    job = make_job(alias, JobState.QUEUED, run_after_seconds=-5)
    before = Job.objects.using(alias).get(id=job.id).run_after
    with pytest.raises(InvalidTransitionError, match="it is queued and already due"):
        engine_for(alias).operate(job.id, "run_now", "ops")
    job.refresh_from_db()
    assert (job.run_after, JobEvent.objects.using(alias).count()) == (before, 0)


def test_operate__run_now_makes_a_scheduled_job_claimable_at_once(alias: str) -> None:
    job = make_job(alias, JobState.QUEUED, run_after_seconds=3600)
    before = engine_for(alias).claim(ME, QUEUES, 10)
    engine_for(alias).operate(job.id, "run_now", "ops")
    after = engine_for(alias).claim(ME, QUEUES, 10)
    event = JobEvent.objects.using(alias).get(job=job)
    assert (before, [c.job_id for c in after]) == ([], [job.id])
    assert (event.transition, event.from_state, event.to_state) == ("run_now", "queued", "queued")


def test_operate__rerun_copies_the_work_not_the_identity_and_links_both_ways(alias: str) -> None:
    job = make_job(alias, JobState.SUCCEEDED, attempts=2)
    Job.objects.using(alias).filter(id=job.id).update(
        kwargs={"x": 1},
        queue="default",
        priority=7,
        tenant="acme",
        idempotency_key="once",
        dedup_scope="tests.testapp.tasks.add|acme",
        attempt_budget=4,
        result=3,
        finished_at=timezone.now(),
    )
    done = engine_for(alias).operate(job.id, "rerun", "alice", "customer asked")
    copy = Job.objects.using(alias).get(id=done.rerun)
    copied = ("task_name", "args", "kwargs", "queue", "priority", "tenant", "dedup_scope")
    assert {f: getattr(copy, f) for f in copied} == {
        f: getattr(Job.objects.using(alias).get(id=job.id), f) for f in copied
    }
    assert (copy.idempotency_key, copy.rerun_of, copy.initiator) == (None, job.id, "alice")
    assert (copy.state, copy.attempts, copy.max_attempts, copy.result) == ("queued", 0, 4, None)
    notes = dict(JobEvent.objects.using(alias).values_list("job_id", "note"))
    assert notes == {
        job.id: f"rerun as job {copy.id}: customer asked",
        copy.id: f"rerun of job {job.id}: customer asked",
    }


def test_transition_table__every_state_is_reachable_and_every_rule_has_sources() -> None:
    targets = {rule.target for rule in TRANSITIONS.values()}
    # Enqueue writes the first state: queued, or waiting (after=).
    assert targets | {JobState.QUEUED, JobState.WAITING} == set(JobState)
    assert all(rule.sources for rule in TRANSITIONS.values())


def test_claim__orders_by_priority_then_age_and_skips_future_jobs(alias: str) -> None:
    old_low = make_job(alias, priority=0, run_after_seconds=-30)
    new_high = make_job(alias, priority=5, run_after_seconds=-1)
    old_high = make_job(alias, priority=5, run_after_seconds=-20)
    make_job(alias, priority=100, run_after_seconds=+60)
    make_job(alias, priority=100, queue="other")
    claimed = engine_for(alias).claim(ME, QUEUES, 10)
    assert [c.job_id for c in claimed] == [old_high.id, new_high.id, old_low.id]


def test_claim__in_a_long_transaction_takes_jobs_due_since_it_began(alias: str) -> None:
    """As inside a TestCase: the claim reads the statement's clock, not the transaction's."""
    with transaction.atomic(using=alias):
        Job.objects.using(alias).count()  # the transaction has begun
        time.sleep(0.05)  # the job becomes due only after it began
        job = make_job(alias, run_after_seconds=0)
        claimed = engine_for(alias).claim(ME, QUEUES, 10)
    assert [c.job_id for c in claimed] == [job.id]


def test_claim__writes_attempt_and_lease_with_the_attempt_number_as_token(alias: str) -> None:
    job = make_job(alias, attempts=2, max_attempts=5)
    [claimed] = engine_for(alias).claim(ME, QUEUES, 10)
    row = Job.objects.using(alias).get(id=job.id)
    attempt = Attempt.objects.using(alias).get(job=job)
    assert (claimed.token, row.attempts, attempt.number) == (3, 3, 3)
    assert (row.state, row.leased_by, attempt.outcome) == (
        JobState.RUNNING,
        ME.id,
        AttemptOutcome.RUNNING,
    )
    assert row.leased_at is not None


def test_renew__stamps_the_worker_and_reports_lost_leases(alias: str) -> None:
    kept = make_job(alias, JobState.RUNNING, attempts=1, leased_by=ME)
    gone = make_job(alias, JobState.RUNNING, attempts=1, leased_by=ME)
    before = timezone.now() - timedelta(seconds=5)
    heartbeat(alias, ME, before)
    engine_for(alias).release_lease(ME.id, gone.id, 1, "gone")
    renewed = engine_for(alias).renew(ME.id, [(kept.id, 1), (gone.id, 1)])
    assert (renewed.lost, renewed.cancelling) == ({(gone.id, 1)}, set())
    assert Worker.objects.using(alias).get(id=ME.id).heartbeat_at > before


def test_renew__names_leases_held_a_lease_long_that_the_worker_did_not_name(
    alias: str,
) -> None:
    engine = engine_for(alias)
    unheard, fresh, named = (make_job(alias) for _ in range(3))
    claimed = {c.job_id: c for c in engine.claim(ME, QUEUES, 10)}
    Job.objects.using(alias).filter(id__in=[unheard.id, named.id]).update(
        leased_at=timezone.now() - timedelta(seconds=60)
    )
    renewed = engine.renew(ME.id, [(named.id, 1)])
    assert renewed.unknown == {
        (unheard.id, 1): Unheard(
            claimed[unheard.id].attempt_id, "tests.testapp.tasks.add", "default"
        )
    }
    assert fresh.id in claimed  # leased just now: a claim the worker is about to start


def test_renew__a_lease_the_worker_is_about_to_start_costs_the_beat_no_query(alias: str) -> None:
    engine = engine_for(alias)
    make_job(alias)
    (claimed,) = engine.claim(ME, QUEUES, 1)
    with CaptureQueriesContext(connections[alias]) as named:
        engine.renew(ME.id, [(claimed.job_id, claimed.token)])
    with CaptureQueriesContext(connections[alias]) as unnamed:
        renewed = engine.renew(ME.id, [])  # claimed a moment ago, not started yet
    assert (len(unnamed), renewed.unknown) == (len(named), {})


def test_reap__takes_the_jobs_of_a_silent_worker_and_never_a_live_ones(alias: str) -> None:
    silent = WorkerIdentity(uuid.uuid4(), "silent:1")
    stopped = WorkerIdentity(uuid.uuid4(), "stopped:1")
    gone = WorkerIdentity(uuid.uuid4(), "gone:1")
    lost = [
        make_job(alias, JobState.RUNNING, attempts=1, leased_by=w, lease_expired=True)
        for w in (silent, stopped, gone)
    ]
    Worker.objects.using(alias).filter(id=stopped.id).update(
        heartbeat_at=timezone.now(), stopped_at=timezone.now()
    )
    Worker.objects.using(alias).filter(id=gone.id).delete()
    # Leased a minute ago, by a worker that heartbeats: kept however old.
    live = make_job(alias, JobState.RUNNING, attempts=1, leased_by=ME, lease_expired=True)
    heartbeat(alias, ME, timezone.now())
    # Just leased, by a worker silent for a minute: kept LEASE_SECONDS from its claim.
    fresh = make_job(alias, JobState.RUNNING, attempts=1, leased_by=silent)
    heartbeat(alias, silent, timezone.now() - timedelta(seconds=60))

    reaped = engine_for(alias).reap()

    states = dict(Job.objects.using(alias).values_list("id", "state"))
    assert reaped == 3
    assert {job.id: states[job.id] for job in lost} == {job.id: JobState.QUEUED for job in lost}
    assert (states[live.id], states[fresh.id]) == (JobState.RUNNING, JobState.RUNNING)


def test_reap__fences_the_old_holder_out(alias: str) -> None:
    """After a reap, the old attempt can neither complete, record a step, report progress,
    nor keep the job when it is claimed again."""
    job = make_job(alias, JobState.RUNNING, attempts=1, leased_by=ME, lease_expired=True)
    late = report_for(job, Transition.COMPLETE)
    engine = engine_for(alias)
    engine.reap()
    other = WorkerIdentity(uuid.uuid4(), "other:1")
    [again] = engine.claim(other, QUEUES, 1)

    renewed = engine.renew(ME.id, [(job.id, 1)], {(job.id, 1): Progress(1, 2, "late")})
    step = engine.record_step(ME.id, job.id, 1, "charge", "late")
    done = engine.finish(ME.id, [late])

    row = Job.objects.using(alias).get(id=job.id)
    assert (renewed.lost, step, done.stale) == ({(job.id, 1)}, StepWrite.STALE, [late])
    assert (row.state, row.attempts, row.leased_by, row.progress_done) == (
        JobState.RUNNING,
        again.token,
        other.id,
        None,
    )


def test_finish__rejects_stale_lease_and_keeps_the_late_report(alias: str) -> None:
    job = make_job(alias, JobState.RUNNING, attempts=1, leased_by=ME, lease_expired=True)
    late = report_for(job, Transition.COMPLETE)
    engine_for(alias).reap()
    done = engine_for(alias).finish(ME.id, [late])
    job.refresh_from_db()
    attempt = Attempt.objects.using(alias).get(job=job, number=1)
    assert (done.applied, done.stale) == ([], [late])
    assert (job.state, job.result, job.attempts) == (JobState.QUEUED, None, 1)
    assert attempt.outcome == AttemptOutcome.LOST
    assert attempt.late_report is not None and attempt.late_report["outcome"] == "succeeded"


def test_finish__a_sleep_queues_the_job_for_its_wake_time_and_gives_the_attempt_back(
    alias: str,
) -> None:
    job = make_job(alias, JobState.RUNNING, attempts=1, max_attempts=1, leased_by=ME)
    sleep = report_for(job, Transition.SLEEP)
    done = engine_for(alias).finish(ME.id, [sleep])
    job.refresh_from_db()
    step = Step.objects.using(alias).get(job=job)
    attempt = Attempt.objects.using(alias).get(job=job)
    assert done.applied == [(sleep, JobState.QUEUED)]
    assert (job.state, job.run_after, job.attempts, job.max_attempts) == (
        JobState.QUEUED,
        sleep.wake_at,
        1,
        2,
    )
    assert (step.name, step.attempt, step.result) == ("sleep-1", 1, to_json(sleep.wake_at, ""))
    assert attempt.outcome == AttemptOutcome.SLEPT
    assert (job.leased_by, job.leased_at) == (None, None)


def test_finish__a_sleep_of_a_job_asked_to_cancel_confirms_the_cancel(alias: str) -> None:
    job = make_job(alias, JobState.CANCELLING, attempts=1, leased_by=ME)
    engine_for(alias).finish(ME.id, [report_for(job, Transition.SLEEP)])
    job.refresh_from_db()
    assert (job.state, Step.objects.using(alias).count()) == (JobState.CANCELLED, 0)


def test_record_step__records_under_the_held_lease_once_per_name(alias: str) -> None:
    job = make_job(alias, JobState.RUNNING, attempts=1, leased_by=ME)
    engine = engine_for(alias)
    first = engine.record_step(ME.id, job.id, 1, "charge", {"charge_id": "ch_1"})
    again = engine.record_step(ME.id, job.id, 1, "charge", {"charge_id": "ch_2"})
    step = Step.objects.using(alias).get(job=job)
    assert (first, again) == (StepWrite.RECORDED, StepWrite.DUPLICATE)
    assert (step.name, step.attempt, step.result) == ("charge", 1, {"charge_id": "ch_1"})


def test_record_step__refuses_an_attempt_that_no_longer_holds_the_lease(alias: str) -> None:
    job = make_job(alias, JobState.RUNNING, attempts=1, leased_by=ME, lease_expired=True)
    engine = engine_for(alias)
    engine.reap()
    [again] = engine.claim(ME, QUEUES, 1)
    other = uuid.uuid4()
    refused = [
        engine.record_step(ME.id, job.id, 1, "charge", "old token"),
        engine.record_step(other, job.id, 2, "charge", "another worker"),
    ]
    held = engine.record_step(ME.id, job.id, again.token, "charge", "current")
    assert refused == [StepWrite.STALE, StepWrite.STALE]
    assert held == StepWrite.RECORDED
    assert list(Step.objects.using(alias).values_list("attempt", "result")) == [(2, "current")]


def test_finish__rejects_an_old_token_after_the_job_was_reclaimed(alias: str) -> None:
    job = make_job(alias, JobState.RUNNING, attempts=1, leased_by=ME, lease_expired=True)
    old = report_for(job, Transition.COMPLETE)
    engine_for(alias).reap()
    [again] = engine_for(alias).claim(ME, QUEUES, 1)
    done = engine_for(alias).finish(ME.id, [old])
    assert (again.token, done.stale) == (2, [old])
    row = Job.objects.using(alias).get()
    assert (row.state, row.attempts, row.leased_by) == (JobState.RUNNING, 2, ME.id)


def test_reap__exhausts_a_job_whose_last_attempt_was_lost(alias: str) -> None:
    job = make_job(
        alias, JobState.RUNNING, attempts=3, max_attempts=3, leased_by=ME, lease_expired=True
    )
    engine_for(alias).reap()
    job.refresh_from_db()
    assert job.state == JobState.EXHAUSTED
    assert job.last_error.startswith("lost: ")


def test_release_worker__loses_its_attempts_and_requeues_at_once(alias: str) -> None:
    other = WorkerIdentity(uuid.uuid4(), "other:2")
    mine = make_job(alias, JobState.RUNNING, attempts=1, leased_by=ME)
    theirs = make_job(alias, JobState.RUNNING, attempts=1, leased_by=other)
    released = engine_for(alias).release_worker(ME.id, "worker process died")
    mine.refresh_from_db()
    theirs.refresh_from_db()
    assert (released, mine.state, theirs.state) == (1, JobState.QUEUED, JobState.RUNNING)
    assert Attempt.objects.using(alias).get(job=mine).error_message == "worker process died"


# -- every way a job moves leaves its derived fields consistent ------------------

FINISHED_ATTEMPT = {
    JobState.SUCCEEDED: AttemptOutcome.SUCCEEDED,
    JobState.FAILED: AttemptOutcome.FAILED,
    JobState.EXHAUSTED: AttemptOutcome.FAILED,
    JobState.CANCELLED: AttemptOutcome.CANCELLED,
    JobState.QUARANTINED: AttemptOutcome.LOST,
    JobState.DISCARDED: AttemptOutcome.FAILED,
}


def consistent_row(alias: str, state: JobState) -> Job:
    """A job as the engine leaves it in ``state``: the derived fields agree with it."""
    now = timezone.now()
    leased = state in (JobState.RUNNING, JobState.CANCELLING)
    ran = leased or state in FINISHED_ATTEMPT
    attempts = 3 if state is JobState.EXHAUSTED else int(ran)
    job = make_job(alias, state, attempts=attempts, leased_by=ME if leased else None)
    job.started_at = now if ran else None
    job.finished_at = None if state in (JobState.WAITING, JobState.QUEUED) or leased else now
    job.cancel_requested_at = now if state in (JobState.CANCELLING, JobState.CANCELLED) else None
    job.expires_at = now - timedelta(seconds=1) if state is JobState.QUEUED else None
    job.waiting_on = 1 if state is JobState.WAITING else 0
    job.save()
    if ran and not leased:
        Attempt.objects.using(alias).create(
            job=job,
            number=attempts,
            worker_id=ME.id,
            started_at=now,
            finished_at=now,
            outcome=FINISHED_ATTEMPT[state],
        )
    return job


def inconsistencies(job: Job) -> list[str]:
    """What in the row disagrees with its state; the spec every transition must keep."""
    job.refresh_from_db()
    state = JobState(job.state)
    leased = state in (JobState.RUNNING, JobState.CANCELLING)
    live = state in (JobState.WAITING, JobState.QUEUED) or leased
    db = job._state.db
    running = list(Attempt.objects.using(db).filter(job=job, outcome=AttemptOutcome.RUNNING))
    problems = []
    if (job.finished_at is None) != live:
        problems.append(f"finished_at {job.finished_at} in {state}")
    if (job.started_at is None) != (job.attempts == 0):
        problems.append(f"started_at {job.started_at} after {job.attempts} attempts")
    if (job.leased_by is not None) != leased or (job.leased_at is not None) != leased:
        problems.append(f"lease of {job.leased_by} since {job.leased_at} in {state}")
    if [a.number for a in running] != ([job.attempts] if leased else []):
        problems.append(f"running attempts {[a.number for a in running]} in {state}")
    if (job.cancel_requested_at is not None) and state in (
        JobState.WAITING,
        JobState.QUEUED,
        JobState.RUNNING,
    ):
        problems.append(f"cancel_requested_at {job.cancel_requested_at} in {state}")
    if state is JobState.QUEUED and job.attempts >= job.max_attempts:
        problems.append(f"queued with {job.attempts} of {job.max_attempts} attempts used")
    return problems


def engine_of(job: Job) -> Engine:
    """The engine of the database ``job`` was written to."""
    return engine_for(job._state.db or "default")


def _verb(verb: str) -> Any:
    def act(job: Job) -> None:
        if VERBS[verb].only_scheduled:  # run_now moves only a job scheduled for later
            later = timezone.now() + timedelta(hours=1)
            Job.objects.using(job._state.db).filter(id=job.id).update(run_after=later)
        done = engine_of(job).operate(job.id, verb, "ops", "walk")
        if done.rerun is not None:  # the copy is a row the engine could write, too
            assert inconsistencies(Job.objects.using(job._state.db).get(id=done.rerun)) == []

    return act


def _report(transition: Transition) -> Any:
    def report(job: Job) -> None:
        if (
            Attempt.objects.using(job._state.db).filter(job=job, number=job.attempts).exists()
        ):  # else none can report
            engine_of(job).finish(ME.id, [report_for(job, transition)])

    return report


def _reap(job: Job) -> None:
    expire_lease(job)
    engine_of(job).reap()


def _poison(job: Job) -> None:
    Job.objects.using(job._state.db).filter(id=job.id).update(lost_streak=2)
    _reap(job)


LEASED = frozenset({JobState.RUNNING, JobState.CANCELLING})
# Every event, with the states it moves a job out of (elsewhere it is refused,
# which the tests above cover).
EVENTS: dict[str, tuple[Any, frozenset[JobState]]] = {
    **{
        f"verb {name}": (_verb(name), frozenset(verb.source_states()))
        for name, verb in VERBS.items()
    },
    **{f"report {t}": (_report(t), LEASED) for t in WORKER_REPORTS},
    "reap": (_reap, LEASED),
    "reap, poison": (_poison, LEASED),
    "claim": (lambda job: engine_of(job).claim(ME, QUEUES, 1), frozenset({JobState.QUEUED})),
    "expire": (lambda job: engine_of(job).expire_overdue(), frozenset({JobState.QUEUED})),
}


@pytest.mark.parametrize(
    ("event", "state"),
    [(event, state) for event, (_, sources) in EVENTS.items() for state in sorted(sources)],
)
def test_every_transition__leaves_the_derived_fields_consistent_with_the_state(
    alias: str, event: str, state: JobState
) -> None:
    job = consistent_row(alias, state)
    assert inconsistencies(job) == []  # the walk starts from a row the engine could write

    EVENTS[event][0](job)

    assert inconsistencies(job) == []


# -- queues, expiry, presence ------------------------------------------------------


def test_set_queue_paused__a_paused_queue_is_not_claimed_until_resumed(alias: str) -> None:
    job = make_job(alias)
    engine = engine_for(alias)
    changed = engine.set_queue_paused("default", True, "ops", "deploy")
    while_paused = engine.claim(ME, QUEUES, 10)
    again = engine.set_queue_paused("default", True, "ops")
    engine.set_queue_paused("default", False, "ops")
    after = engine.claim(ME, QUEUES, 10)
    assert (changed, while_paused, again) == (True, [], False)
    assert [c.job_id for c in after] == [job.id]


def test_expire_overdue__expires_queued_jobs_past_their_deadline_only(alias: str) -> None:
    overdue = make_job(alias)
    later = make_job(alias)
    Job.objects.using(alias).filter(id=overdue.id).update(
        expires_at=timezone.now() - timedelta(seconds=1)
    )
    Job.objects.using(alias).filter(id=later.id).update(
        expires_at=timezone.now() + timedelta(hours=1)
    )
    expired = engine_for(alias).expire_overdue()
    states = dict(Job.objects.using(alias).values_list("id", "state"))
    assert (expired, states) == (1, {overdue.id: JobState.EXPIRED, later.id: JobState.QUEUED})


def test_release_lease__loses_that_attempt_only_and_requeues_its_job(alias: str) -> None:
    died = make_job(alias, JobState.RUNNING, attempts=1, leased_by=ME)
    alive = make_job(alias, JobState.RUNNING, attempts=1, leased_by=ME)
    released = engine_for(alias).release_lease(ME.id, died.id, 1, "isolated child died")
    states = dict(Job.objects.using(alias).values_list("id", "state"))
    attempt = Attempt.objects.using(alias).get(job=died)
    assert (released, states) == (1, {died.id: JobState.QUEUED, alive.id: JobState.RUNNING})
    assert (attempt.outcome, attempt.error_message) == (
        AttemptOutcome.LOST,
        "isolated child died",
    )


def test_register_and_stop_worker__record_its_presence(alias: str) -> None:
    engine = engine_for(alias)
    engine.register_worker(ME, "default", "host", 42, ["default"], 4)
    registered = Worker.objects.using(alias).get(id=ME.id)
    engine.stop_worker(ME.id)
    stopped = Worker.objects.using(alias).get(id=ME.id)
    assert (registered.pid, registered.concurrency, registered.stopped_at) == (42, 4, None)
    assert stopped.stopped_at is not None


@pytest.mark.parametrize("state", list(JobState))
def test_idle__only_when_no_job_of_the_queues_is_queued_or_leased(
    alias: str, state: JobState
) -> None:
    """A waiting job does not keep a burst worker: what it waits for may never succeed."""
    make_job(alias, state, attempts=1)
    in_flight = {JobState.QUEUED, JobState.RUNNING, JobState.CANCELLING}
    assert engine_for(alias).idle(QUEUES) is (state not in in_flight)
    assert engine_for(alias).idle(["other"]) is True


# -- fair queues -------------------------------------------------------------------

FAIR = JobsOptions.from_mapping("default", {"FAIR_QUEUES": {"default": {"b": 0.5}}})


def test_fair_heads__each_tenants_next_jobs_leaving_out_blocked_keys(alias: str) -> None:
    for tenant, key in [("a", None), ("a", "busy"), ("a", None), ("a", None), ("b", "busy")]:
        job = make_job(alias)
        Job.objects.using(alias).filter(id=job.id).update(tenant=tenant, concurrency_key=key)
    heads = engine_for(alias, FAIR).fair_heads("default", 2, ["busy"])
    assert sorted(h.tenant for h in heads) == ["a", "a"]
    assert all(h.concurrency_key is None for h in heads)


def test_record_served__moves_each_tenants_clock_by_its_claims_over_its_weight(
    alias: str,
) -> None:
    engine = engine_for(alias, FAIR)
    engine.record_served("default", {"a": (3, 10.0), "b": (1, 10.0)})
    engine.record_served("default", {"a": (2, 11.0)})
    rows = {
        c.tenant: (c.claims, c.start, c.finish, c.weight)
        for c in FairClock.objects.using(alias).filter(queue="default")
    }
    assert rows == {"a": (5, 14.0, 15.0, 1.0), "b": (1, 10.0, 12.0, 0.5)}


# -- enqueue -------------------------------------------------------------------------


def test_dependencies__are_written_and_read_back_with_their_states_and_tenants(alias: str) -> None:
    done = make_job(alias, JobState.SUCCEEDED, attempts=1)
    pending = make_job(alias)
    new = make_job(alias, JobState.WAITING)
    engine = engine_for(alias)
    with transaction.atomic(using=alias):
        engine.add_dependencies([new.id], [done.id, pending.id])
        found = engine.depended_on([done.id, pending.id], lock=True)
    rows = set(Dependency.objects.using(alias).values_list("job_id", "depends_on_id"))
    assert rows == {(new.id, done.id), (new.id, pending.id)}
    assert found == {done.id: (JobState.SUCCEEDED, ""), pending.id: (JobState.QUEUED, "")}


def test_bulk_insert__writes_one_job_per_call_from_the_prototype(alias: str) -> None:
    prototype = make_job(alias, priority=7)
    Job.objects.using(alias).filter(id=prototype.id).delete()
    now = timezone.now()
    calls = [Call(str(uuid.uuid4()), [n], {}, json.dumps([n]), "{}", now, now) for n in range(3)]
    with transaction.atomic(using=alias):
        engine_for(alias).bulk_insert(prototype, iter(calls))
    rows = sorted(Job.objects.using(alias).values_list("args", "priority", "task_name"))
    assert rows == [([n], 7, "tests.testapp.tasks.add") for n in range(3)]
