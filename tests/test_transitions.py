"""The one writer of job state: guarded, fenced, and safe under concurrency."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from django.db import connections, transaction
from django.utils import timezone

from django_jobs import pgsql, transitions
from django_jobs.conf import JobsOptions
from django_jobs.exceptions import InvalidTransitionError
from django_jobs.models import Attempt, Job, JobEvent, Lease
from django_jobs.retry import Decision, Verdict
from django_jobs.states import TRANSITIONS, AttemptOutcome, JobState, Transition
from django_jobs.values import Report, WorkerIdentity
from django_jobs.verbs import VERBS
from tests.conftest import run_in_processes

pytestmark = pytest.mark.postgres

DB = "default"
QUEUES = ("default",)
ME = WorkerIdentity(uuid.uuid4(), "test:1")


def make_job(
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
    job = Job.objects.create(
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
        attempt = Attempt.objects.create(
            job=job, number=attempts, worker_id=leased_by.id, started_at=now
        )
        expires = now + timedelta(seconds=-5 if lease_expired else 30)
        Lease.objects.create(
            job=job,
            attempt=attempt,
            token=attempts,
            worker_id=leased_by.id,
            acquired_at=now,
            renewed_at=now,
            expires_at=expires,
        )
    return job


def report_for(job: Job, transition: Transition) -> Report:
    attempt = Attempt.objects.get(job=job, number=job.attempts)
    if transition is Transition.COMPLETE:
        return Report(job.id, job.attempts, attempt.pk, AttemptOutcome.SUCCEEDED, result=3)
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
]


@pytest.mark.parametrize("state", list(JobState))
@pytest.mark.parametrize("transition", WORKER_REPORTS)
def test_finish__applies_only_from_the_states_the_table_allows(
    pg: None, transition: Transition, state: JobState
) -> None:
    job = make_job(state, attempts=1, leased_by=ME)
    done = transitions.finish(DB, ME.id, [report_for(job, transition)])
    job.refresh_from_db()
    if state is JobState.CANCELLING and transition is not Transition.COMPLETE:
        transition = Transition.CONFIRM_CANCEL  # a cancelled job is not retried
    if state in TRANSITIONS[transition].sources:
        assert (len(done.applied), job.state) == (1, TRANSITIONS[transition].target)
    else:
        assert (len(done.stale), job.state) == (1, state)


@pytest.mark.parametrize("state", list(JobState))
def test_claim__takes_only_queued_jobs(pg: None, state: JobState) -> None:
    make_job(state, attempts=0)
    claimed = transitions.claim(DB, ME, QUEUES, 10, lease_seconds=10)
    assert len(claimed) == (1 if state is JobState.QUEUED else 0)


REAPED = {
    JobState.RUNNING: TRANSITIONS[Transition.REAP].target,
    JobState.CANCELLING: TRANSITIONS[Transition.REAP_CANCEL].target,
}


@pytest.mark.parametrize("state", list(JobState))
def test_reap__moves_only_leased_states(pg: None, state: JobState) -> None:
    job = make_job(state, attempts=1, leased_by=ME, lease_expired=True)
    transitions.reap(DB)
    job.refresh_from_db()
    assert job.state == REAPED.get(state, state)


@pytest.mark.parametrize("state", list(JobState))
@pytest.mark.parametrize("verb", list(VERBS))
def test_operate__applies_each_verb_only_where_the_table_allows(
    pg: None, verb: str, state: JobState
) -> None:
    job = make_job(state, attempts=1)
    allowed_here = [t for t in VERBS[verb].transitions if state in TRANSITIONS[t].sources]
    if allowed_here:
        taken = transitions.operate(DB, job.id, verb, "ops", "walk")
        job.refresh_from_db()
        event = JobEvent.objects.get(job=job)
        assert (taken, job.state) == (allowed_here[0], TRANSITIONS[allowed_here[0]].target)
        assert (event.actor, event.from_state, event.to_state) == ("ops", state, job.state)
    else:
        with pytest.raises(InvalidTransitionError, match=f"Cannot {verb} job .*: it is {state}"):
            transitions.operate(DB, job.id, verb, "ops", "walk")
        job.refresh_from_db()
        assert (job.state, JobEvent.objects.count()) == (state, 0)


def test_transition_table__every_state_is_reachable_and_every_rule_has_sources() -> None:
    targets = {rule.target for rule in TRANSITIONS.values()}
    # Enqueue writes the first state: queued, or waiting (after=).
    assert targets | {JobState.QUEUED, JobState.WAITING} == set(JobState)
    assert all(rule.sources for rule in TRANSITIONS.values())


def test_claim__orders_by_priority_then_age_and_skips_future_jobs(pg: None) -> None:
    old_low = make_job(priority=0, run_after_seconds=-30)
    new_high = make_job(priority=5, run_after_seconds=-1)
    old_high = make_job(priority=5, run_after_seconds=-20)
    make_job(priority=100, run_after_seconds=+60)
    make_job(priority=100, queue="other")
    claimed = transitions.claim(DB, ME, QUEUES, 10, lease_seconds=10)
    assert [c.job_id for c in claimed] == [old_high.id, new_high.id, old_low.id]


def test_claim__writes_attempt_and_lease_with_the_attempt_number_as_token(pg: None) -> None:
    job = make_job(attempts=2, max_attempts=5)
    [claimed] = transitions.claim(DB, ME, QUEUES, 10, lease_seconds=10)
    lease = Lease.objects.get(job=job)
    attempt = Attempt.objects.get(job=job)
    assert (claimed.token, lease.token, attempt.number) == (3, 3, 3)
    assert (lease.worker_id, attempt.outcome) == (ME.id, AttemptOutcome.RUNNING)
    assert Job.objects.get().state == JobState.RUNNING


def _prepared_statements() -> list[str]:
    with connections[DB].cursor() as cursor:
        cursor.execute("SELECT statement FROM pg_prepared_statements")
        return [row[0] for row in cursor.fetchall()]


@pytest.mark.parametrize("prepare", [True, False])
def test_claim_and_complete__are_prepared_statements_only_when_asked(
    pg: None, prepare: bool
) -> None:
    make_job()
    rules = JobsOptions.from_mapping("default", {"PREPARE_STATEMENTS": prepare})
    [claimed] = transitions.claim(DB, ME, QUEUES, 10, 10, rules)
    success = Report(claimed.job_id, claimed.token, claimed.attempt_id, AttemptOutcome.SUCCEEDED)
    done = transitions.finish(DB, ME.id, [success], rules)
    prepared = " ".join(_prepared_statements())
    assert done.applied == [(success, JobState.SUCCEEDED)]
    # psycopg prepares them with $n placeholders, so look for their writes.
    assert (
        "INSERT INTO django_jobs_lease" in prepared,
        "DELETE FROM django_jobs_lease" in prepared,
    ) == (
        prepare,
        prepare,
    )


def test_prepared_statements__leave_other_queries_on_the_connection_unprepared(pg: None) -> None:
    make_job()
    transitions.claim(DB, ME, QUEUES, 10, 10)
    # A server-binding cursor (Django's, with server_side_binding) could prepare
    # on its own; the threshold set for the claim must never let it.
    with psycopg.Cursor(connections[DB].connection) as cursor:
        for _ in range(10):
            cursor.execute("SELECT count(*) FROM django_jobs_job WHERE state = %s", ["running"])
    assert [s for s in _prepared_statements() if "count(*)" in s] == []


def test_renew__extends_held_leases_and_reports_lost_ones(pg: None) -> None:
    kept = make_job(JobState.RUNNING, attempts=1, leased_by=ME)
    gone = make_job(JobState.RUNNING, attempts=1, leased_by=ME)
    before = Lease.objects.get(job=kept).expires_at
    Lease.objects.filter(job=gone).delete()
    renewed = transitions.renew(DB, ME.id, [(kept.id, 1), (gone.id, 1)], lease_seconds=60)
    assert (renewed.lost, renewed.cancelling) == ({(gone.id, 1)}, set())
    assert Lease.objects.get(job=kept).expires_at > before


def test_renew__skips_a_lease_the_completer_holds_instead_of_waiting_for_it(pg: None) -> None:
    """The completer locks the leases it ends in its own order; waiting for them deadlocked."""
    busy = make_job(JobState.RUNNING, attempts=1, leased_by=ME)
    idle = make_job(JobState.RUNNING, attempts=1, leased_by=ME)
    before = {lease.job_id: lease.expires_at for lease in Lease.objects.all()}
    params = connections[DB].get_connection_params()
    with psycopg.connect(**params) as completer:  # a transaction holding busy's lease
        completer.execute("SELECT 1 FROM django_jobs_lease WHERE job_id = %s FOR UPDATE", [busy.id])
        with connections[DB].cursor() as cursor:
            cursor.execute("SET lock_timeout = '2s'")  # waiting would fail the test, not hang it
        renewed = transitions.renew(DB, ME.id, [(busy.id, 1), (idle.id, 1)], lease_seconds=60)
        completer.rollback()
    after = {lease.job_id: lease.expires_at for lease in Lease.objects.all()}
    assert renewed.lost == set()
    assert (after[busy.id] == before[busy.id], after[idle.id] > before[idle.id]) == (True, True)


def test_finish__rejects_stale_lease_and_keeps_the_late_report(pg: None) -> None:
    job = make_job(JobState.RUNNING, attempts=1, leased_by=ME, lease_expired=True)
    late = report_for(job, Transition.COMPLETE)
    transitions.reap(DB)
    done = transitions.finish(DB, ME.id, [late])
    job.refresh_from_db()
    attempt = Attempt.objects.get(job=job, number=1)
    assert (done.applied, done.stale) == ([], [late])
    assert (job.state, job.result, job.attempts) == (JobState.QUEUED, None, 1)
    assert attempt.outcome == AttemptOutcome.LOST
    assert attempt.late_report is not None and attempt.late_report["outcome"] == "succeeded"


def test_finish__rejects_an_old_token_after_the_job_was_reclaimed(pg: None) -> None:
    job = make_job(JobState.RUNNING, attempts=1, leased_by=ME, lease_expired=True)
    old = report_for(job, Transition.COMPLETE)
    transitions.reap(DB)
    [again] = transitions.claim(DB, ME, QUEUES, 1, lease_seconds=10)
    done = transitions.finish(DB, ME.id, [old])
    assert (again.token, done.stale) == (2, [old])
    assert Job.objects.get().state == JobState.RUNNING
    assert Lease.objects.get().token == 2


def test_reap__exhausts_a_job_whose_last_attempt_was_lost(pg: None) -> None:
    job = make_job(JobState.RUNNING, attempts=3, max_attempts=3, leased_by=ME, lease_expired=True)
    transitions.reap(DB)
    job.refresh_from_db()
    assert job.state == JobState.EXHAUSTED
    assert job.last_error.startswith("lost: ")


def test_release_worker__loses_its_attempts_and_requeues_at_once(pg: None) -> None:
    other = WorkerIdentity(uuid.uuid4(), "other:2")
    mine = make_job(JobState.RUNNING, attempts=1, leased_by=ME)
    theirs = make_job(JobState.RUNNING, attempts=1, leased_by=other)
    released = transitions.release_worker(DB, ME.id, "worker process died")
    mine.refresh_from_db()
    theirs.refresh_from_db()
    assert (released, mine.state, theirs.state) == (1, JobState.QUEUED, JobState.RUNNING)
    assert Attempt.objects.get(job=mine).error_message == "worker process died"


# -- the same statements, from several processes at once -----------------------


def _claim_all(results: Any) -> None:
    connections.close_all()
    me = WorkerIdentity(uuid.uuid4(), "proc")
    mine: list[str] = []
    while batch := transitions.claim(DB, me, QUEUES, 7, lease_seconds=30):
        mine.extend(str(c.job_id) for c in batch)
    results.put(mine)
    connections.close_all()


def _reap_all(results: Any) -> None:
    connections.close_all()
    total = 0
    while reaped := transitions.reap(DB, batch=5):
        total += reaped
    results.put(total)
    connections.close_all()


def test_claim__concurrent_claimers_take_disjoint_batches(pg: None) -> None:
    ids = {str(make_job().id) for _ in range(300)}
    batches = run_in_processes(_claim_all, 4)
    claimed = [job_id for batch in batches for job_id in batch]
    assert (len(claimed), set(claimed)) == (300, ids)
    assert Attempt.objects.count() == Lease.objects.count() == 300


def test_reap__concurrent_reapers_reap_each_lease_once(pg: None) -> None:
    for _ in range(60):
        make_job(JobState.RUNNING, attempts=1, leased_by=ME, lease_expired=True)
    counts = run_in_processes(_reap_all, 4)
    assert sum(counts) == 60
    assert Attempt.objects.filter(outcome=AttemptOutcome.LOST).count() == 60
    assert set(Job.objects.values_list("state", "attempts")) == {(JobState.QUEUED, 1)}
    assert Lease.objects.count() == 0


# -- every way a job moves leaves its derived fields consistent ------------------

FINISHED_ATTEMPT = {
    JobState.SUCCEEDED: AttemptOutcome.SUCCEEDED,
    JobState.FAILED: AttemptOutcome.FAILED,
    JobState.EXHAUSTED: AttemptOutcome.FAILED,
    JobState.CANCELLED: AttemptOutcome.CANCELLED,
    JobState.QUARANTINED: AttemptOutcome.LOST,
    JobState.DISCARDED: AttemptOutcome.FAILED,
}


def consistent_row(state: JobState) -> Job:
    """A job as the engine leaves it in ``state``: the derived fields agree with it."""
    now = timezone.now()
    leased = state in (JobState.RUNNING, JobState.CANCELLING)
    ran = leased or state in FINISHED_ATTEMPT
    attempts = 3 if state is JobState.EXHAUSTED else int(ran)
    job = make_job(state, attempts=attempts, leased_by=ME if leased else None)
    job.started_at = now if ran else None
    job.finished_at = None if state in (JobState.WAITING, JobState.QUEUED) or leased else now
    job.cancel_requested_at = now if state in (JobState.CANCELLING, JobState.CANCELLED) else None
    job.expires_at = now - timedelta(seconds=1) if state is JobState.QUEUED else None
    job.waiting_on = 1 if state is JobState.WAITING else 0
    job.save()
    if ran and not leased:
        Attempt.objects.create(
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
    lease = Lease.objects.filter(job=job).first()
    running = list(Attempt.objects.filter(job=job, outcome=AttemptOutcome.RUNNING))
    problems = []
    if (job.finished_at is None) != live:
        problems.append(f"finished_at {job.finished_at} in {state}")
    if (job.started_at is None) != (job.attempts == 0):
        problems.append(f"started_at {job.started_at} after {job.attempts} attempts")
    if (lease is not None) != leased or (lease is not None and lease.token != job.attempts):
        problems.append(f"lease {lease and lease.token} in {state} at attempt {job.attempts}")
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


def _verb(verb: str) -> Any:
    return lambda job: transitions.operate(DB, job.id, verb, "ops", "walk")


def _report(transition: Transition) -> Any:
    def report(job: Job) -> None:
        if Attempt.objects.filter(job=job, number=job.attempts).exists():  # else none can report
            transitions.finish(DB, ME.id, [report_for(job, transition)])

    return report


def _reap(job: Job) -> None:
    Lease.objects.filter(job=job).update(expires_at=timezone.now() - timedelta(seconds=5))
    transitions.reap(DB)


def _poison(job: Job) -> None:
    Job.objects.filter(id=job.id).update(lost_streak=2)
    _reap(job)


LEASED = frozenset({JobState.RUNNING, JobState.CANCELLING})
# Every event, with the states it moves a job out of (elsewhere it is refused,
# which the tests above cover).
EVENTS: dict[str, tuple[Any, frozenset[JobState]]] = {
    **{
        f"verb {verb}": (_verb(verb), frozenset().union(*(TRANSITIONS[t].sources for t in ts)))
        for verb, ts in ((name, verb.transitions) for name, verb in VERBS.items())
    },
    **{f"report {t}": (_report(t), LEASED) for t in WORKER_REPORTS},
    "reap": (_reap, LEASED),
    "reap, poison": (_poison, LEASED),
    "claim": (lambda job: transitions.claim(DB, ME, QUEUES, 1, 10), frozenset({JobState.QUEUED})),
    "expire": (lambda job: transitions.expire_overdue(DB), frozenset({JobState.QUEUED})),
}


@pytest.mark.parametrize(
    ("event", "state"),
    [(event, state) for event, (_, sources) in EVENTS.items() for state in sorted(sources)],
)
def test_every_transition__leaves_the_derived_fields_consistent_with_the_state(
    pg: None, event: str, state: JobState
) -> None:
    job = consistent_row(state)
    assert inconsistencies(job) == []  # the walk starts from a row the engine could write

    EVENTS[event][0](job)

    assert inconsistencies(job) == []


def _seq_scans_not_yet_reported(table: str) -> int:
    """This backend's sequential scans of ``table`` that it has not sent to the statistics yet.

    PostgreSQL 15 sends them at most once a second, so only a difference
    taken within one transaction is exact.
    """
    with connections[DB].cursor() as cursor:
        cursor.execute("SELECT seq_scan FROM pg_stat_xact_user_tables WHERE relname = %s", [table])
        row = cursor.fetchone()
    return int(row[0]) if row else 0


def test_completion__a_plan_made_on_empty_tables_still_uses_the_indexes_when_they_grow(
    pg: None,
) -> None:
    """A worker started on a new deployment keeps its prepared plans for its life."""
    rules = JobsOptions.from_mapping("default", {"PREPARE_STATEMENTS": True})
    with connections[DB].cursor() as cursor:
        cursor.execute("ANALYZE django_jobs_job, django_jobs_attempt, django_jobs_lease")
    for _ in range(8):  # past PostgreSQL's five custom plans: the generic one from now on
        make_job()
        [claimed] = transitions.claim(DB, ME, QUEUES, 10, 10, rules)
        success = Report(claimed.job_id, 1, claimed.attempt_id, AttemptOutcome.SUCCEEDED)
        transitions.finish(DB, ME.id, [success], rules)
    history = make_job(JobState.SUCCEEDED, attempts=1)
    with connections[DB].cursor() as cursor:  # 20,000 attempts of history, no ANALYZE
        cursor.execute(
            "INSERT INTO django_jobs_attempt (job_id, number, worker_id, worker_name, outcome,"
            " started_at, finished_at, error_type, error_message, traceback)"
            " SELECT %s, n, %s, '', 'succeeded', now(), now(), '', '', ''"
            " FROM generate_series(1, 20000) AS n",
            [history.id, ME.id],
        )
    make_job()
    [claimed] = transitions.claim(DB, ME, QUEUES, 10, 10, rules)
    success = Report(claimed.job_id, 1, claimed.attempt_id, AttemptOutcome.SUCCEEDED)

    with transaction.atomic(using=DB):
        before = _seq_scans_not_yet_reported("django_jobs_attempt")
        done = transitions.finish(DB, ME.id, [success], rules)
        seq_scans = _seq_scans_not_yet_reported("django_jobs_attempt") - before

    assert (done.applied, seq_scans) == ([(success, JobState.SUCCEEDED)], 0)


def test_claim__a_pinned_session_never_compiles_its_statements(pg: None) -> None:
    """Disabled scans cost 10^10 to the planner: without JIT off, that compiles every claim."""
    rules = JobsOptions.from_mapping("default", {"PREPARE_STATEMENTS": True})
    make_job()
    transitions.claim(DB, ME, QUEUES, 10, 10, rules)  # pins the session's plans
    params = {
        "queues": list(QUEUES),
        "limit": 10,
        "worker_id": ME.id,
        "worker_name": ME.name,
        "lease_seconds": 10,
    }

    with connections[DB].cursor() as cursor:
        cursor.execute(f"EXPLAIN (ANALYZE, COSTS) {pgsql.CLAIM}", params)
        plan = "\n".join(row[0] for row in cursor.fetchall())

    assert "cost=10000000" in plan  # the session's sequential scans are off
    assert "JIT:" not in plan
