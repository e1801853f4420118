"""Acceptance: a job exists iff its transaction commits, and bad input writes nothing."""

from __future__ import annotations

import dataclasses
import datetime as dt
import multiprocessing
import uuid
from typing import Any

import django.db
import psycopg
import pytest
from asgiref.sync import async_to_sync
from django.db import connections, transaction
from django.test import override_settings
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from django_jobs import (
    ArgumentsNotJSONError,
    EnqueueError,
    EnqueueOutcome,
    InvalidJobOptionError,
    JobState,
    PayloadTooLargeError,
    UnknownQueueError,
    UnknownTaskError,
    enqueue_many,
    task,
)
from django_jobs.framework import Task, TaskResultDoesNotExist, TaskResultStatus, task_enqueued
from django_jobs.models import Job
from django_jobs.results import JobResult
from django_jobs.testing import drain
from tests.conftest import (
    backend_settings,
    listen_for_wakeups,
    results_sent,
    terminate_backend_of,
)
from tests.testapp import tasks
from tests.testapp.models import Order

pytestmark = pytest.mark.postgres


def job_count(db: str = "default") -> int:
    return Job.objects.using(db).count()


def test_enqueue__rolled_back_transaction_leaves_no_job(pg: None) -> None:
    with pytest.raises(RuntimeError), transaction.atomic():
        Order.objects.create(number="A-1")
        tasks.add.enqueue(1, 2)
        raise RuntimeError("business logic failed")
    assert (Order.objects.count(), job_count()) == (0, 0)


def test_enqueue__committed_transaction_stores_the_job(pg: None) -> None:
    with transaction.atomic():
        Order.objects.create(number="A-1")
        result = tasks.add.using(priority=7, tenant="acme").enqueue(1, 2)
    job = Job.objects.get()
    assert isinstance(result, JobResult)
    assert result.id == str(job.id)
    assert (job.task_name, job.args, job.kwargs) == ("tests.testapp.tasks.add", [1, 2], {})
    assert (job.state, job.priority, job.tenant, job.attempts) == ("queued", 7, "acme", 0)
    assert (result.status, result.state) == (TaskResultStatus.READY, JobState.QUEUED)


def test_enqueue__sends_task_enqueued_only_after_commit(pg: None) -> None:
    with results_sent(task_enqueued) as sent:
        with transaction.atomic():
            result = tasks.add.enqueue(1, 2)
            assert sent == []
        assert [r.id for r in sent] == [result.id]


def test_enqueue__task_enqueued_carries_the_very_result_enqueue_returned(pg: None) -> None:
    with results_sent(task_enqueued) as sent, transaction.atomic():
        result = tasks.add.enqueue(1, 2)
    assert len(sent) == 1
    assert (sent[0] is result, result.enqueue_outcome) == (True, EnqueueOutcome.CREATED)


def test_enqueue__async_enqueue_stores_the_job(pg: None) -> None:
    result = async_to_sync(tasks.add.aenqueue)(4, 5)
    assert Job.objects.get().id == uuid.UUID(result.id)


@pytest.mark.parametrize(
    ("args", "kwargs", "message"),
    [
        ((dt.datetime(2025, 1, 31),), {}, r"args\[0\] is a naive datetime"),
        ((), {"when": {1: "a"}}, r"kwargs\['when'\] has the key 1 \(int\)"),
        (([1, (2, 3)],), {}, r"args\[0\]\[1\] is a tuple.*pass a list"),
        ((float("nan"),), {}, r"args\[0\] is nan"),
        (({1, 2},), {}, r"args\[0\] is a set"),
    ],
)
def test_enqueue__refuses_arguments_that_do_not_survive_json(
    pg: None, args: tuple[Any, ...], kwargs: dict[str, Any], message: str
) -> None:
    with pytest.raises(ArgumentsNotJSONError, match=message):
        tasks.add.enqueue(*args, **kwargs)
    assert job_count() == 0


def test_enqueue__refuses_a_payload_over_the_bound(pg: None) -> None:
    tasks_setting = {
        "default": {
            "BACKEND": "django_jobs.backend.JobsBackend",
            "QUEUES": ["default"],
            "OPTIONS": {"MAX_PAYLOAD_BYTES": 100},
        }
    }
    with (
        override_settings(TASKS=tasks_setting),
        pytest.raises(
            PayloadTooLargeError, match=r"take 206 bytes .* over MAX_PAYLOAD_BYTES \(100\)"
        ),
    ):
        tasks.big_result.enqueue("x" * 200)
    assert job_count() == 0


def test_enqueue__refuses_an_unknown_queue(pg: None) -> None:
    with pytest.raises(UnknownQueueError, match=r"Queue 'nope' is not one of .*default, other"):
        tasks.add.using(queue_name="nope").enqueue(1, 2)
    assert job_count() == 0


def plain_function() -> None:
    """Wrapped in Django's own Task class below, so django_jobs never registered it."""


def test_enqueue__refuses_a_task_that_is_not_registered(pg: None) -> None:
    # Every field given: Django 6.0's Task has no defaults for them.
    unregistered = Task(
        func=plain_function, backend="default", priority=0, queue_name="default", run_after=None
    )
    with pytest.raises(UnknownTaskError, match=r"'tests\.test_enqueue\.plain_function' is not reg"):
        tasks.add.get_backend().enqueue(unregistered, [1, 2], {})
    assert job_count() == 0


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"idempotency_key": ""}, "idempotency_key must not be empty"),
        ({"tenant": "t" * 256}, "tenant is 256 characters long; at most 255 fit"),
        ({"tenant": "a\x00b"}, r"tenant must not contain a NUL character \(\\x00\): 'a\\x00b'"),
        ({"idempotency_key": "k" + chr(0xDC80)}, r"idempotency_key must not contain a lone surr"),
        ({"expires_at": dt.datetime(2030, 1, 1)}, "expires_at must be an aware datetime"),
    ],
)
def test_enqueue__refuses_invalid_job_options(
    pg: None, options: dict[str, Any], message: str
) -> None:
    with pytest.raises(InvalidJobOptionError, match=message):
        tasks.add.using(**options).enqueue(1, 2)
    assert job_count() == 0


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"timeout": float("nan")}, r"timeout must be a positive number of seconds.*not nan"),
        ({"timeout": float("inf")}, r"timeout must be a positive number of seconds.*not inf"),
        ({"timeout": 0}, r"timeout must be a positive number of seconds.*not 0"),
        ({"max_attempts": 2**31}, r"max_attempts must be a whole number from 1 to 2147483647"),
        ({"max_attempts": 0}, r"max_attempts must be a whole number from 1 to 2147483647"),
    ],
)
def test_task__refuses_a_timeout_or_max_attempts_it_could_not_keep(
    options: dict[str, Any], message: str
) -> None:
    with pytest.raises(InvalidJobOptionError, match=message):
        task(**options)(plain_function)


def test_enqueue__a_refused_option_leaves_the_callers_transaction_usable(pg: None) -> None:
    # Inside the caller's transaction: the refusal comes before any statement.
    with transaction.atomic():
        with pytest.raises(InvalidJobOptionError, match="max_attempts"):
            dataclasses.replace(tasks.add, max_attempts=2**31).enqueue(1, 2)
        tasks.add.enqueue(1, 2)
    assert job_count() == 1


def test_enqueue__same_idempotency_key_returns_the_existing_job(pg: None) -> None:
    first = tasks.add.using(idempotency_key="order-1").enqueue(1, 2)
    second = tasks.add.using(idempotency_key="order-1").enqueue(1, 2)
    assert (second.id, job_count()) == (first.id, 1)


def test_enqueue__a_key_taken_in_the_same_transaction_returns_its_job_announced_once(
    pg: None,
) -> None:
    with results_sent(task_enqueued) as sent, listen_for_wakeups() as listener:
        with transaction.atomic():
            first = tasks.add.using(idempotency_key="order-2").enqueue(1, 2)
            second = tasks.add.using(idempotency_key="order-2").enqueue(3, 4)
        notes = [n.payload for n in listener.notifies(timeout=0.5)]
    assert (second.id, second.args, job_count()) == (first.id, [1, 2], 1)
    assert ([r.id for r in sent], notes) == ([first.id], ["default"])


def test_enqueue__idempotency_scope_is_task_and_tenant(pg: None) -> None:
    a = tasks.add.using(idempotency_key="k", tenant="a").enqueue(1, 2)
    b = tasks.add.using(idempotency_key="k", tenant="b").enqueue(1, 2)
    c = tasks.noop.using(idempotency_key="k", tenant="a").enqueue()
    assert len({a.id, b.id, c.id}) == 3


def _enqueue_with_key(barrier: Any, results: Any, hold: float) -> None:
    import time

    connections.close_all()
    barrier.wait()
    with transaction.atomic():
        result = tasks.add.using(idempotency_key="race").enqueue(1, 2)
        time.sleep(hold)  # keep the transaction open while the other process inserts
    results.put(result.id)
    connections.close_all()


def test_enqueue__two_processes_racing_with_one_key_create_one_job(pg: None) -> None:
    context = multiprocessing.get_context("fork")
    barrier = context.Barrier(2)
    results = context.Queue()
    connections.close_all()
    processes = [
        context.Process(target=_enqueue_with_key, args=(barrier, results, hold))
        for hold in (0.5, 0.0)
    ]
    for process in processes:
        process.start()
    for process in processes:
        process.join(30)
    ids = {results.get(timeout=5), results.get(timeout=5)}
    assert [p.exitcode for p in processes] == [0, 0]
    assert (len(ids), job_count()) == (1, 1)


@pytest.mark.django_db(databases=["default", "sqlite"], transaction=True)
def test_enqueue__jobs_in_another_database_wait_for_the_business_commit() -> None:
    with transaction.atomic():
        Order.objects.create(number="A-1")
        result = tasks.add.using(backend="sqlite").enqueue(1, 2)
        assert job_count("sqlite") == 0
    assert Job.objects.using("sqlite").get().id == uuid.UUID(result.id)


@pytest.mark.django_db(databases=["default", "sqlite"], transaction=True)
def test_enqueue__jobs_in_another_database_vanish_with_a_business_rollback() -> None:
    with pytest.raises(RuntimeError), transaction.atomic():
        tasks.add.using(backend="sqlite").enqueue(1, 2)
        raise RuntimeError("rolled back")
    assert job_count("sqlite") == 0


def test_enqueue__wakes_workers_once_per_commit(pg: None) -> None:
    with listen_for_wakeups() as listener, CaptureQueriesContext(connections["default"]) as queries:
        with transaction.atomic():
            for n in range(5):
                tasks.add.enqueue(n, n)
            tasks.add.using(queue_name="other").enqueue(0, 0)
        notes = [n.payload for n in listener.notifies(timeout=0.5)]
    # PostgreSQL folds duplicate notifications itself; we also send only one per queue.
    assert sorted(notes) == ["default", "other"]
    assert sum("pg_notify" in q["sql"] for q in queries.captured_queries) == 2


def test_enqueue__rollback_wakes_nobody_and_the_next_commit_does(pg: None) -> None:
    with listen_for_wakeups() as listener:
        with pytest.raises(RuntimeError), transaction.atomic():
            tasks.add.enqueue(1, 1)
            raise RuntimeError
        assert [n.payload for n in listener.notifies(timeout=0.3)] == []
        with transaction.atomic():
            tasks.add.enqueue(2, 2)
        assert [n.payload for n in listener.notifies(timeout=0.5)] == ["default"]


def test_enqueue__wakes_nobody_before_the_commit(pg: None) -> None:
    with listen_for_wakeups() as listener:
        with transaction.atomic():
            tasks.add.enqueue(1, 1)
            before = [n.payload for n in listener.notifies(timeout=0.3)]
        after = [n.payload for n in listener.notifies(timeout=0.5)]
    assert (before, after) == ([], ["default"])


def test_enqueue__a_savepoint_rollback_does_not_swallow_the_wake_of_later_jobs(pg: None) -> None:
    with listen_for_wakeups() as listener:
        with transaction.atomic():
            with pytest.raises(RuntimeError), transaction.atomic():
                tasks.add.enqueue(1, 1)
                raise RuntimeError
            tasks.add.enqueue(2, 2)
        notes = [n.payload for n in listener.notifies(timeout=0.5)]
    assert notes == ["default"]


def test_enqueue__outside_a_transaction_still_wakes_workers(pg: None) -> None:
    with listen_for_wakeups() as listener:
        tasks.add.enqueue(1, 1)
        notes = [n.payload for n in listener.notifies(timeout=0.5)]
    assert (notes, job_count()) == (["default"], 1)


def test_enqueue__outside_a_transaction_is_one_statement_that_commits(pg: None) -> None:
    with listen_for_wakeups() as listener, CaptureQueriesContext(connections["default"]) as queries:
        result = tasks.add.enqueue(1, 2)
        notes = [n.payload for n in listener.notifies(timeout=0.5)]
    with psycopg.connect(**connections["default"].get_connection_params()) as other:
        seen = other.execute("SELECT args::text FROM django_jobs_job WHERE id = %s", [result.id])
        stored = seen.fetchall()
    assert (len(queries.captured_queries), notes, stored) == (1, ["default"], [("[1, 2]",)])


def _prepared_inserts() -> int:
    """The job inserts prepared on this thread's connection to ``default``."""
    with connections["default"].cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_prepared_statements"
            " WHERE statement LIKE '%%INSERT INTO django_jobs_job%%'"
        )
        return int(cursor.fetchone()[0])


@pytest.mark.parametrize(("prepare", "expected"), [(True, 1), (False, 0)])
def test_enqueue__the_insert_is_prepared_unless_statements_are_not(
    pg: None, prepare: bool, expected: int
) -> None:
    with override_settings(TASKS=backend_settings(PREPARE_STATEMENTS=prepare)):
        for n in range(3):
            with transaction.atomic():
                tasks.add.enqueue(n, n)
        prepared = _prepared_inserts()
    assert (prepared, job_count()) == (expected, 3)


def test_enqueue__runs_on_the_new_connection_after_django_closed_the_one_it_used(
    pg: None,
) -> None:
    """The insert keeps its cursor on its connection; a new connection makes a new one."""
    first = tasks.add.enqueue(1, 2)
    connections["default"].close()
    second = tasks.add.enqueue(3, 4)
    stored = set(Job.objects.values_list("id", flat=True))
    assert stored == {uuid.UUID(first.id), uuid.UUID(second.id)}


def test_enqueue__while_queries_are_logged_the_insert_is_djangos_own_and_readable(
    pg: None,
) -> None:
    with CaptureQueriesContext(connections["default"]) as queries, transaction.atomic():
        tasks.add.enqueue(4, 5)
    inserts = [q["sql"] for q in queries.captured_queries if "django_jobs_job" in str(q["sql"])]
    assert len(inserts) == 1
    assert inserts[0].startswith("WITH job AS (INSERT INTO django_jobs_job ")
    assert "'[4,5]'::jsonb" in inserts[0]
    assert _prepared_inserts() == 0


def test_enqueue__first_in_a_request_reconnects_a_dead_connection_under_health_checks(
    pg: None,
) -> None:
    connection = connections["default"]
    kept = {key: connection.settings_dict[key] for key in ("CONN_HEALTH_CHECKS", "CONN_MAX_AGE")}
    connection.settings_dict.update(CONN_HEALTH_CHECKS=True, CONN_MAX_AGE=None)
    try:
        connection.close()
        connection.ensure_connection()  # persistent, health-checked: both are read here
        backend_pid = connection.connection.info.backend_pid
        with psycopg.connect(**connection.get_connection_params()) as other:
            other.execute("SELECT pg_terminate_backend(%s)", [backend_pid])
        django.db.close_old_connections()  # what Django does as a request starts
        result = tasks.add.enqueue(1, 2)
    finally:
        connection.settings_dict.update(kept)
        connection.close()
    assert list(Job.objects.values_list("id", flat=True)) == [uuid.UUID(result.id)]


def test_enqueue__the_insert_passes_the_applications_execute_wrappers(pg: None) -> None:
    seen: list[str] = []

    def instrument(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        seen.append(sql[:41])
        return execute(sql, params, many, context)

    with connections["default"].execute_wrapper(instrument), transaction.atomic():
        tasks.add.enqueue(1, 2)
    assert seen == ["WITH job AS (INSERT INTO django_jobs_job "]


def test_enqueue__a_refused_insert_raises_djangos_error_and_writes_nothing(pg: None) -> None:
    with connections["default"].cursor() as cursor:
        cursor.execute(
            "ALTER TABLE django_jobs_job ADD CONSTRAINT refuse_other CHECK (queue <> 'other')"
        )
    try:
        with transaction.atomic():
            tasks.add.enqueue(1, 1)
            with (
                pytest.raises(django.db.IntegrityError, match="refuse_other"),
                transaction.atomic(),
            ):
                tasks.add.using(queue_name="other").enqueue(2, 2)
    finally:
        with connections["default"].cursor() as cursor:
            cursor.execute("ALTER TABLE django_jobs_job DROP CONSTRAINT refuse_other")
    with transaction.atomic():
        tasks.add.using(queue_name="other").enqueue(3, 3)  # the same statement, afterwards
    assert sorted(Job.objects.values_list("queue", "args")) == [
        ("default", [1, 1]),
        ("other", [3, 3]),
    ]


def test_enqueue__stores_the_row_the_orm_path_stores(pg: None) -> None:
    later = timezone.now() + dt.timedelta(hours=1)
    options = {
        "priority": 7,
        "tenant": "acme",
        "queue_name": "other",
        "run_after": later,
        "concurrency_key": "account-9",
        "expires_at": later + dt.timedelta(hours=1),
    }
    one_statement = tasks.add.using(**options).enqueue(1, b={"c": [1.5, None]})
    keyed = tasks.add.using(**options, idempotency_key="k").enqueue(1, b={"c": [1.5, None]})
    # A job enqueued after another takes the ORM's save(); after a finished
    # one it is queued at once, as the others are.
    done = tasks.noop.using(tenant="acme").enqueue()  # a job waits for its own tenant's
    drain("default")
    orm = tasks.add.using(**options, after=[done]).enqueue(1, b={"c": [1.5, None]})
    columns = [
        f.attname
        for f in Job._meta.concrete_fields
        if f.attname not in {*_PER_JOB, "run_after", "idempotency_key"}
    ]
    rows = {
        str(row["id"]): {k: row[k] for k in columns} for row in Job.objects.values("id", *columns)
    }
    assert rows[one_statement.id] == rows[keyed.id] == rows[orm.id]


def test_get_result__unknown_and_malformed_ids_do_not_exist(pg: None) -> None:
    backend = tasks.add.get_backend()
    with pytest.raises(TaskResultDoesNotExist, match="No job with id"):
        backend.get_result(str(uuid.uuid4()))
    with pytest.raises(TaskResultDoesNotExist, match="is not a job id"):
        backend.get_result("not-a-uuid")


def test_enqueue_many__writes_every_job_in_the_callers_transaction(pg: None) -> None:
    with transaction.atomic():
        results = enqueue_many(tasks.add, [((n, n), {}) for n in range(2500)])
        assert job_count() == 2500
    assert {r.id for r in results} == {str(i) for i in Job.objects.values_list("id", flat=True)}


def test_enqueue_many__writes_the_same_row_as_enqueue(pg: None) -> None:
    later = timezone.now() + dt.timedelta(hours=1)
    task = tasks.add.using(
        priority=7,
        tenant="acme",
        queue_name="other",
        run_after=later,
        concurrency_key="account-9",
        expires_at=later + dt.timedelta(hours=1),
    )
    one = task.enqueue(1, b=2)
    [many] = enqueue_many(task, [((1,), {"b": 2})])
    columns = [f.attname for f in Job._meta.concrete_fields if f.attname not in _PER_JOB]
    rows = {
        str(row["id"]): {k: row[k] for k in columns} for row in Job.objects.values("id", *columns)
    }
    assert rows[many.id] == rows[one.id]
    assert Job.objects.filter(result__isnull=True).count() == 2


_PER_JOB = {"id", "enqueued_at", "updated_at"}


@pytest.mark.parametrize(
    ("call", "shape"),
    [
        (({"a": 1, "b": 2}, {}), r"a tuple of 2: \(dict, dict\)"),
        (("12", {}), r"a tuple of 2: \(str, dict\)"),
        (((1, 2), [("b", 2)]), r"a tuple of 2: \(tuple, list\)"),
        ((1, 2, 3, 4), r"a tuple of 4: \(int, int, int, \.\.\.\)"),
        (7, r"a value of type int"),
    ],
)
def test_enqueue_many__refuses_a_call_that_is_not_an_args_kwargs_pair_and_writes_nothing(
    pg: None, call: Any, shape: str
) -> None:
    with pytest.raises(EnqueueError, match=rf"^call 1: each call must be a pair .* not {shape}\.$"):
        enqueue_many(tasks.add, [((1, 2), {}), call])
    assert job_count() == 0


@pytest.mark.parametrize("use_tz", [True, False])
def test_enqueue_many__stamps_each_job_now_as_enqueue_does_with_use_tz_on_and_off(
    pg: None, use_tz: bool
) -> None:
    with override_settings(USE_TZ=use_tz):
        before = timezone.now()
        [many] = enqueue_many(tasks.add, [((1, 2), {})])
        one = tasks.add.enqueue(1, 2)
        after = timezone.now()

        assert before <= many.enqueued_at <= one.enqueued_at <= after
        assert (many.enqueued_at.tzinfo is not None, many.run_after) == (use_tz, many.enqueued_at)


def test_enqueue_many__writes_tabs_newlines_and_backslashes_as_given(pg: None) -> None:
    awkward = "a\tb\nc\rd\\N e\\"
    task = tasks.add.using(tenant=awkward, initiator="\\N", concurrency_key="k\\t\u00e9")
    [result] = enqueue_many(task, [((awkward, ["\\", "\u2713"]), {"k\tey": {"x\\": "\n"}})])
    job = Job.objects.get(id=result.id)
    assert (job.tenant, job.initiator, job.concurrency_key) == (awkward, "\\N", "k\\t\u00e9")
    assert (job.args, job.kwargs) == ([awkward, ["\\", "\u2713"]], {"k\tey": {"x\\": "\n"}})


def test_enqueue_many__returns_what_get_result_reads_back(pg: None) -> None:
    task = tasks.add.using(priority=3, tenant="acme")
    results = enqueue_many(task, [((n,), {"b": n}) for n in range(3)])
    stored = [task.get_backend().get_result(r.id) for r in results]
    assert [_but_task(r) for r in results] == [_but_task(r) for r in stored]


def _but_task(result: JobResult) -> dict[str, Any]:
    """A result's fields; get_result gives the registered task, not the ``using`` copy.

    Nor what only enqueue knows: whether it wrote the job (``enqueue_outcome``).
    """
    left_out = {"task", "enqueue_outcome"}
    return {
        f.name: getattr(result, f.name)
        for f in dataclasses.fields(result)
        if f.name not in left_out
    }


def test_enqueue_many__a_bad_call_after_rows_were_sent_leaves_the_callers_transaction_usable(
    pg: None,
) -> None:
    calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = [((n, n), {}) for n in range(2500)]
    calls[2400] = ((1, {2}), {})  # past two COPY writes of 1,000 lines
    with transaction.atomic():
        Order.objects.create(number="A-1")
        with pytest.raises(ArgumentsNotJSONError, match=r"^call 2400: args\[1\] is a set"):
            enqueue_many(tasks.add, calls)
        Order.objects.create(number="A-2")
    assert (Order.objects.count(), job_count()) == (2, 0)


class DropsTheConnection(tuple[Any, ...]):
    """A call's args; reading them terminates the enqueuing connection's backend."""

    def __iter__(self) -> Any:
        terminate_backend_of("default")
        return super().__iter__()


def test_enqueue_many__a_connection_dropped_mid_copy_raises_djangos_error(pg: None) -> None:
    calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = [((n, n), {}) for n in range(2500)]
    calls[2400] = (DropsTheConnection((1, 2)), {})  # past two COPY writes of 1,000 lines
    connections["default"].ensure_connection()

    with pytest.raises(django.db.OperationalError) as raised:
        enqueue_many(tasks.add, calls)

    assert isinstance(raised.value.__cause__, psycopg.OperationalError)
    connections["default"].close()
    assert job_count() == 0


def test_enqueue__a_dropped_connection_raises_djangos_error(pg: None) -> None:
    connections["default"].ensure_connection()
    terminate_backend_of("default")

    with pytest.raises(django.db.OperationalError):
        tasks.add.enqueue(1, 2)

    connections["default"].close()
    assert job_count() == 0


@pytest.mark.django_db(databases=["default", "sqlite"], transaction=True)
def test_enqueue_many__jobs_wait_for_the_commit_of_another_database() -> None:
    with transaction.atomic(using="sqlite"):
        results = enqueue_many(tasks.add, [((n, n), {}) for n in range(3)])
        assert job_count() == 0
    assert {str(i) for i in Job.objects.values_list("id", flat=True)} == {r.id for r in results}


@pytest.mark.django_db(databases=["default", "sqlite"], transaction=True)
def test_enqueue_many__a_bad_call_raises_before_another_databases_commit() -> None:
    bad = [((1, 2), {}), ((b"raw", 2), {})]
    with (
        transaction.atomic(using="sqlite"),
        pytest.raises(ArgumentsNotJSONError, match=r"^call 1: args\[0\] is a bytes"),
    ):
        enqueue_many(tasks.add, bad)
    assert job_count() == 0


def test_enqueue_many__vanishes_with_a_rollback(pg: None) -> None:
    with pytest.raises(RuntimeError), transaction.atomic():
        enqueue_many(tasks.add, [((n, n), {}) for n in range(10)])
        raise RuntimeError
    assert job_count() == 0


def test_enqueue_many__one_bad_call_writes_nothing_and_is_named(pg: None) -> None:
    calls = [((1, 2), {}), ((1, 2), {}), ((b"raw", 2), {})]
    with pytest.raises(ArgumentsNotJSONError, match=r"^call 2: args\[0\] is a bytes"):
        enqueue_many(tasks.add, calls)
    assert job_count() == 0


def test_enqueue_many__refuses_idempotency_keys(pg: None) -> None:
    with pytest.raises(InvalidJobOptionError, match="does not take an idempotency key"):
        enqueue_many(tasks.add.using(idempotency_key="k"), [((1, 2), {})])
    assert job_count() == 0


def test_enqueue_many__wakes_workers_once(pg: None) -> None:
    with listen_for_wakeups() as listener:
        enqueue_many(tasks.add, [((n, n), {}) for n in range(50)])
        notes = [n.payload for n in listener.notifies(timeout=0.5)]
    assert notes == ["default"]


def test_enqueue_many__sends_task_enqueued_for_each_job_after_commit(pg: None) -> None:
    with results_sent(task_enqueued) as sent, transaction.atomic():
        results = enqueue_many(tasks.add, [((n, n), {}) for n in range(3)])
        assert sent == []
    assert [r.id for r in sent] == [r.id for r in results]


def test_enqueue_many__sends_task_enqueued_to_sync_and_async_receivers_alike(pg: None) -> None:
    seen: list[tuple[str, str, Any]] = []

    def in_sync(signal: Any, sender: Any, task_result: Any, **kwargs: Any) -> None:
        seen.append(("sync", task_result.id, signal))

    async def in_async(signal: Any, sender: Any, task_result: Any, **kwargs: Any) -> None:
        seen.append(("async", task_result.id, signal))

    task_enqueued.connect(in_sync)
    task_enqueued.connect(in_async)
    try:
        results = enqueue_many(tasks.add, [((n, n), {}) for n in range(3)])
    finally:
        task_enqueued.disconnect(in_sync)
        task_enqueued.disconnect(in_async)
    assert seen == [(kind, r.id, task_enqueued) for r in results for kind in ("sync", "async")]
