"""The PostgreSQL engine's own promises: prepared statements, pinned plans, row locks.

The behaviour both engines share is in ``test_engine.py``; here is what only
PostgreSQL's statements do, and the statements run from several processes at
once.
"""

from __future__ import annotations

import uuid
from datetime import UTC
from typing import Any, NamedTuple

import psycopg
import pytest
from django.db import connections, transaction
from django.test import override_settings
from psycopg.types.json import Jsonb

from django_jobs import enqueue_many
from django_jobs.conf import JobsOptions
from django_jobs.engine import engine_for
from django_jobs.engine.postgres import statements
from django_jobs.engine.postgres.positions import Positions
from django_jobs.models import Attempt, FairClock, Job, Step
from django_jobs.states import AttemptOutcome, JobState
from django_jobs.unique import EnqueueOutcome
from django_jobs.values import Progress, Report, WorkerIdentity
from tests.conftest import run_in_processes
from tests.test_engine import ME, QUEUES, make_job
from tests.testapp import tasks

pytestmark = pytest.mark.postgres

DB = "default"


def _prepared_statements() -> list[str]:
    with connections[DB].cursor() as cursor:
        cursor.execute("SELECT statement FROM pg_prepared_statements")
        return [row[0] for row in cursor.fetchall()]


@pytest.mark.parametrize("prepare", [True, False])
def test_claim_and_complete__are_prepared_statements_only_when_asked(
    pg: None, prepare: bool
) -> None:
    make_job(DB)
    rules = JobsOptions.from_mapping("default", {"PREPARE_STATEMENTS": prepare})
    [claimed] = engine_for(DB, rules).claim(ME, QUEUES, 10)
    success = Report(claimed.job_id, claimed.token, claimed.attempt_id, AttemptOutcome.SUCCEEDED)
    done = engine_for(DB, rules).finish(ME.id, [success])
    prepared = " ".join(_prepared_statements())
    assert done.applied == [(success, JobState.SUCCEEDED)]
    # psycopg prepares them with $n placeholders, so look for their writes.
    assert (
        "INSERT INTO django_jobs_attempt" in prepared,
        "leased_by = NULL" in prepared,
    ) == (
        prepare,
        prepare,
    )


def test_prepared_statements__leave_other_queries_on_the_connection_unprepared(pg: None) -> None:
    make_job(DB)
    engine_for(DB).claim(ME, QUEUES, 10)
    # A server-binding cursor (Django's, with server_side_binding) could prepare
    # on its own; the threshold set for the claim must never let it.
    with psycopg.Cursor(connections[DB].connection) as cursor:
        for _ in range(10):
            cursor.execute("SELECT count(*) FROM django_jobs_job WHERE state = %s", ["running"])
    assert [s for s in _prepared_statements() if "count(*)" in s] == []


def test_claim__runs_on_the_new_connection_after_django_replaced_a_closed_one(pg: None) -> None:
    """Each statement keeps its cursor on its connection; a new connection makes new ones."""
    first, second = make_job(DB), make_job(DB)
    engine = engine_for(DB)
    [claimed_before] = engine.claim(ME, QUEUES, 1)
    connections[DB].close()
    [claimed_after] = engine.claim(ME, QUEUES, 1)
    assert [claimed_before.job_id, claimed_after.job_id] == [first.id, second.id]


def test_renew__skips_progress_of_a_job_the_completer_holds_instead_of_waiting_for_it(
    pg: None,
) -> None:
    """The completer locks the jobs it ends in its own order; waiting for them deadlocked."""
    busy = make_job(DB, JobState.RUNNING, attempts=1, leased_by=ME)
    idle = make_job(DB, JobState.RUNNING, attempts=1, leased_by=ME)
    progress = {(busy.id, 1): Progress(1, 2, "busy"), (idle.id, 1): Progress(1, 2, "idle")}
    params = connections[DB].get_connection_params()
    with psycopg.connect(**params) as completer:  # a transaction holding busy's row
        completer.execute("SELECT 1 FROM django_jobs_job WHERE id = %s FOR UPDATE", [busy.id])
        with connections[DB].cursor() as cursor:
            cursor.execute("SET lock_timeout = '2s'")  # waiting would fail the test, not hang it
        renewed = engine_for(DB).renew(ME.id, [(busy.id, 1), (idle.id, 1)], progress)
        completer.rollback()
    written = dict(Job.objects.values_list("id", "progress_message"))
    assert renewed.lost == set()
    assert (written[busy.id], written[idle.id]) == ("", "idle")


def _rows_updated_not_yet_reported(table: str) -> int:
    """Rows of ``table`` this transaction updated (``pg_stat_xact_user_tables``): exact."""
    with connections[DB].cursor() as cursor:
        cursor.execute("SELECT n_tup_upd FROM pg_stat_xact_user_tables WHERE relname = %s", [table])
        row = cursor.fetchone()
    return int(row[0]) if row else 0


def test_renew__keeps_every_lease_of_a_worker_with_one_row_written(pg: None) -> None:
    """The heartbeat of a worker running 50 jobs writes its worker row, and no job row."""
    for _ in range(50):
        make_job(DB, JobState.RUNNING, attempts=1, leased_by=ME)
    held = list(Job.objects.values_list("id", "attempts"))
    tables = ("django_jobs_job", "django_jobs_worker")

    with transaction.atomic(using=DB):
        before = [_rows_updated_not_yet_reported(t) for t in tables]
        renewed = engine_for(DB).renew(ME.id, held)
        after = [_rows_updated_not_yet_reported(t) for t in tables]

    updated = [a - b for a, b in zip(after, before, strict=True)]
    assert (renewed.lost, renewed.cancelling) == (set(), set())
    assert updated == [0, 1]


def test_record_step__holds_the_lease_against_the_reaper_until_the_step_commits(pg: None) -> None:
    """Else a step could commit after its lease was reaped, and the next attempt miss it."""
    job = make_job(DB, JobState.RUNNING, attempts=1, leased_by=ME, lease_expired=True)
    params = connections[DB].get_connection_params()
    with psycopg.connect(**params) as task:  # the task's transaction, the step just recorded
        task.execute(
            statements.RECORD_STEP,
            {
                "job_id": job.id,
                "token": 1,
                "worker_id": ME.id,
                "name": "charge",
                "result": Jsonb(1),
            },
        )
        while_recording = engine_for(DB).reap()
        task.commit()
    after = engine_for(DB).reap()
    attempt = Attempt.objects.get(job=job)
    assert (while_recording, after) == (0, 1)
    assert list(Step.objects.values_list("name", "attempt")) == [("charge", 1)]
    assert attempt.outcome == AttemptOutcome.LOST


# -- the same statements, from several processes at once -----------------------


def _claim_all(results: Any) -> None:
    connections.close_all()
    me = WorkerIdentity(uuid.uuid4(), "proc")
    engine = engine_for(DB)  # one per process, as a worker has: it keeps its claim positions
    mine: list[str] = []
    while batch := engine.claim(me, QUEUES, 7):
        mine.extend(str(c.job_id) for c in batch)
    results.put(mine)
    connections.close_all()


def _reap_all(results: Any) -> None:
    connections.close_all()
    total = 0
    while reaped := engine_for(DB).reap(batch=5):
        total += reaped
    results.put(total)
    connections.close_all()


def test_claim__concurrent_claimers_take_disjoint_batches(pg: None) -> None:
    ids = {str(make_job(DB).id) for _ in range(300)}
    batches = run_in_processes(_claim_all, 4)
    claimed = [job_id for batch in batches for job_id in batch]
    assert (len(claimed), set(claimed)) == (300, ids)
    assert Attempt.objects.count() == Job.objects.filter(leased_by__isnull=False).count() == 300


def test_reap__concurrent_reapers_reap_each_lease_once(pg: None) -> None:
    for _ in range(60):
        make_job(DB, JobState.RUNNING, attempts=1, leased_by=ME, lease_expired=True)
    counts = run_in_processes(_reap_all, 4)
    assert sum(counts) == 60
    assert Attempt.objects.filter(outcome=AttemptOutcome.LOST).count() == 60
    assert set(Job.objects.values_list("state", "attempts", "leased_by")) == {
        (JobState.QUEUED, 1, None)
    }


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
        cursor.execute("ANALYZE django_jobs_job, django_jobs_attempt")
    for _ in range(8):  # past PostgreSQL's five custom plans: the generic one from now on
        make_job(DB)
        [claimed] = engine_for(DB, rules).claim(ME, QUEUES, 10)
        success = Report(claimed.job_id, 1, claimed.attempt_id, AttemptOutcome.SUCCEEDED)
        engine_for(DB, rules).finish(ME.id, [success])
    history = make_job(DB, JobState.SUCCEEDED, attempts=1)
    with connections[DB].cursor() as cursor:  # 20,000 attempts of history, no ANALYZE
        cursor.execute(
            "INSERT INTO django_jobs_attempt (job_id, number, worker_id, worker_name, outcome,"
            " started_at, finished_at, error_type, error_message, traceback)"
            " SELECT %s, n, %s, '', 'succeeded', now(), now(), '', '', ''"
            " FROM generate_series(1, 20000) AS n",
            [history.id, ME.id],
        )
    make_job(DB)
    [claimed] = engine_for(DB, rules).claim(ME, QUEUES, 10)
    success = Report(claimed.job_id, 1, claimed.attempt_id, AttemptOutcome.SUCCEEDED)

    with transaction.atomic(using=DB):
        before = _seq_scans_not_yet_reported("django_jobs_attempt")
        done = engine_for(DB, rules).finish(ME.id, [success])
        seq_scans = _seq_scans_not_yet_reported("django_jobs_attempt") - before

    assert (done.applied, seq_scans) == ([(success, JobState.SUCCEEDED)], 0)


def test_claim__a_pinned_session_never_compiles_its_statements(pg: None) -> None:
    """Disabled scans cost 10^10 to the planner: without JIT off, that compiles every claim."""
    rules = JobsOptions.from_mapping("default", {"PREPARE_STATEMENTS": True})
    make_job(DB)
    engine_for(DB, rules).claim(ME, QUEUES, 10)  # pins the session's plans
    params = {"worker_id": ME.id, "worker_name": ME.name, **Positions().params(QUEUES)}

    with connections[DB].cursor() as cursor:
        cursor.execute(f"EXPLAIN (ANALYZE, COSTS) {statements.claim(QUEUES, 10)}", params)
        plan = "\n".join(row[0] for row in cursor.fetchall())

    assert "cost=10000000" in plan  # the session's sequential scans are off
    assert "JIT:" not in plan


class PreparedClaim(NamedTuple):
    custom_plans: int
    generic_plans: int


def prepared_claims() -> list[PreparedClaim]:
    """This session's prepared plain claims: the statements with their queues written in."""
    with connections[DB].cursor() as cursor:
        cursor.execute(
            "SELECT custom_plans, generic_plans FROM pg_prepared_statements "
            "WHERE statement LIKE '%%FROM(VALUES (%%UPDATE django_jobs_job AS job%%'"
        )
        return [PreparedClaim(*row) for row in cursor.fetchall()]


def test_claim__a_worker_plans_its_claim_five_times_then_runs_the_generic_plan(pg: None) -> None:
    """Planning was most of an idle claim: PostgreSQL must stop re-planning it."""
    rules = JobsOptions.from_mapping("default", {"PREPARE_STATEMENTS": True})
    # A backlog, its statistics fresh, as a busy table has them.
    enqueue_many(tasks.noop, [((), {})] * 2_000)
    with connections[DB].cursor() as cursor:
        cursor.execute("ANALYZE django_jobs_job")

    claimed = [len(engine_for(DB, rules).claim(ME, QUEUES, 16)) for _ in range(10)]

    plans = [(c.custom_plans, c.generic_plans) for c in prepared_claims()]
    assert (claimed, plans) == ([16] * 10, [(5, 5)])


@pytest.mark.parametrize(("backlog", "claimed"), [(100, 63), (50, 50)])
def test_claim__of_more_than_sixteen_takes_exactly_the_limit_or_what_is_queued(
    pg: None, backlog: int, claimed: int
) -> None:
    """63 is claimed as 48 and then 15 (statements.claim_sizes): never more, never fewer."""
    for _ in range(backlog):
        make_job(DB)
    rules = JobsOptions.from_mapping("default", {"PREPARE_STATEMENTS": True})

    got = engine_for(DB, rules).claim(ME, QUEUES, 63)

    assert (len(got), len({c.job_id for c in got})) == (claimed, claimed)


@pytest.mark.parametrize("use_tz", [True, False])
def test_claim__prepared_reads_each_timestamp_as_django_reads_it(pg: None, use_tz: bool) -> None:
    """Under USE_TZ the claim loads timestamps with psycopg's own loader: Django's values."""
    rules = JobsOptions.from_mapping("default", {"PREPARE_STATEMENTS": True})
    with override_settings(USE_TZ=use_tz):
        connections[DB].close()  # a session, and its kept cursors, in this zone
        make_job(DB)

        (claimed,) = engine_for(DB, rules).claim(ME, QUEUES, 1)

        read = Job.objects.values_list("enqueued_at", "started_at").get(id=claimed.job_id)
        zones = [at.tzinfo for at in (claimed.enqueued_at, claimed.started_at, *read)]
    connections[DB].close()
    assert ((claimed.enqueued_at, claimed.started_at), zones) == (read, [read[0].tzinfo] * 4)
    assert (read[0].tzinfo is UTC) is use_tz


def test_claim__a_worker_prepares_one_claim_per_size_of_a_bounded_set(pg: None) -> None:
    """Each prepared claim holds ~200 kB of the server process: a hundred would be 20 MB."""
    enqueue_many(tasks.noop, [((), {})] * sum(range(1, 101)))
    rules = JobsOptions.from_mapping("default", {"PREPARE_STATEMENTS": True})
    engine = engine_for(DB, rules)

    claimed = sum(len(engine.claim(ME, QUEUES, limit)) for limit in range(1, 101))

    prepared = len(prepared_claims())
    assert (claimed, prepared) == (sum(range(1, 101)), 21)  # 1 to 16, 32, 48, 64, 80, 96


def test_claim__queue_names_with_quotes_backslashes_and_percents(pg: None) -> None:
    """The queues are written into the claim's text: any name must stay one string."""
    queues = ("it's", "c:\\tmp", "100%", "%(worker_id)s")
    for queue in queues:
        make_job(DB, queue=queue)
    make_job(DB, queue="other")
    rules = JobsOptions.from_mapping("default", {"PREPARE_STATEMENTS": True})

    claimed = engine_for(DB, rules).claim(ME, queues, 10)

    assert sorted(c.queue for c in claimed) == sorted(queues)


# Results a batch of successes must store exactly, each on its own job.
RESULTS: list[Any] = [
    None,
    0,
    -1.5,
    "it's -- not a comment",
    "ünïcödé ✓",
    'quotes " and \\ backslashes',
    [1, [2, {"three": None}]],
    {"nested": {"list": [True, False]}, "empty": {}},
    "",
    [],
]


def test_complete__stores_each_result_on_its_own_job_batch_after_batch(pg: None) -> None:
    """The results go as one JSON array: each lands on its job, also under the generic plan."""
    engine = engine_for(DB, JobsOptions.from_mapping("default", {"PREPARE_STATEMENTS": True}))
    batches = 7  # a prepared statement runs its generic plan from the sixth execution
    for _ in range(batches * len(RESULTS)):
        make_job(DB)
    expected: dict[uuid.UUID, Any] = {}

    for _ in range(batches):
        claimed = engine.claim(ME, QUEUES, len(RESULTS))
        reports = [
            Report(c.job_id, c.token, c.attempt_id, AttemptOutcome.SUCCEEDED, result=result)
            for c, result in zip(claimed, RESULTS, strict=True)
        ]
        expected |= {c.job_id: result for c, result in zip(claimed, RESULTS, strict=True)}
        with transaction.atomic(using=DB):
            engine.finish(ME.id, reports)

    stored = dict(Job.objects.values_list("id", "result"))
    states = set(Job.objects.values_list("state", flat=True))
    assert (stored, states) == (expected, {JobState.SUCCEEDED})


def test_statements__are_sent_without_comments_and_short_enough_to_be_cached() -> None:
    """psycopg converts a statement's text once only when it is 4,096 characters or less."""
    sent = [statements.claim(("it's -- a queue",), 100), statements.COMPLETE]
    sent += [statements.CLAIM_FAIR, statements.RECORD_STEP, statements.FAIR_CANDIDATES]
    sent += [statements.RECORD_FAIR_CLAIMS]

    assert all(len(text) <= 4096 and "--" not in text.replace("-- a queue", "") for text in sent)
    assert "('it''s -- a queue', " in sent[0]


def test_record_served__concurrent_workers_add_up_every_claim_on_one_clock(pg: None) -> None:
    fair = JobsOptions.from_mapping("default", {"FAIR_QUEUES": {"q": {"b": 0.5}}})

    def record_many(results: Any) -> None:
        engine = engine_for(DB, fair)
        for _ in range(200):
            engine.record_served("q", {"a": (3, 0.0), "b": (1, 0.0)})
        connections.close_all()
        results.put(True)

    run_in_processes(record_many, 4)
    rows = {c.tenant: (c.claims, c.finish, c.weight) for c in FairClock.objects.filter(queue="q")}
    assert rows == {"a": (2400, 2400.0, 1.0), "b": (800, 1600.0, 0.5)}


def test_insert_now__one_statement_in_autocommit_and_a_held_key_writes_nothing(pg: None) -> None:
    engine = engine_for(DB)
    jobs = [make_job(DB) for _ in range(3)]
    Job.objects.filter(id__in=[job.id for job in jobs]).delete()
    plain, keyed, same_key = jobs
    keyed.idempotency_key = same_key.idempotency_key = "k"
    outcomes = [engine.insert_now(job, "[1, 2]", "{}") for job in jobs]
    assert outcomes == [EnqueueOutcome.CREATED, EnqueueOutcome.CREATED, EnqueueOutcome.EXISTING]
    assert dict(Job.objects.values_list("id", "args")) == {plain.id: [1, 2], keyed.id: [1, 2]}


def test_estimated_rows__is_the_planners_count_once_the_table_was_analysed(pg: None) -> None:
    for _ in range(5):
        make_job(DB)
    with connections[DB].cursor() as cursor:
        cursor.execute("ANALYZE django_jobs_job")
    assert engine_for(DB).estimated_rows("django_jobs_job") == 5
