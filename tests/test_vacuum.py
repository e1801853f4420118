"""Workers vacuum our tables when dead rows pile up faster than autovacuum removes them.

Real PostgreSQL (whose autovacuum is off on the test server, as it can be in
production or as a long transaction makes it), real dead rows from updates,
and the statistics PostgreSQL keeps for them; the end-to-end test drains jobs
with a real ``runworkers``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from datetime import UTC, datetime

import pytest
from django.db import connections

from django_jobs import enqueue_many
from django_jobs.engine import engine_for
from django_jobs.models import Job
from django_jobs.values import DeadRows
from django_jobs.worker.vacuum import Vacuums
from tests.conftest import WorkerProcess, wait_until
from tests.testapp.tasks import noop

pytestmark = pytest.mark.postgres

JOB_TABLE = Job._meta.db_table


def flush_statistics() -> None:
    """Send this session's pending counts now: PostgreSQL sends them at most once a second."""
    with connections["default"].cursor() as cursor:
        cursor.execute("SELECT pg_stat_force_next_flush()")


def kill_rows(count: int) -> None:
    """``count`` dead versions in the job table, counted in PostgreSQL's statistics now."""
    enqueue_many(noop, [((), {})] * count)
    with connections["default"].cursor() as cursor:
        cursor.execute(f"UPDATE {JOB_TABLE} SET priority = priority + 1")
    flush_statistics()


def dead_in_job_table() -> int:
    [row] = [r for r in engine_for("default").dead_rows() if r.table == JOB_TABLE]
    return row.dead


def vacuum_count() -> int:
    with connections["default"].cursor() as cursor:
        cursor.execute("SELECT pg_stat_get_vacuum_count(%s::regclass)", [JOB_TABLE])
        (count,) = cursor.fetchone()
    return int(count)


def test_dead_rows__counts_each_of_our_tables_dead_versions(pg: None) -> None:
    flush_statistics()  # earlier tests' rolled-back inserts are dead rows too
    before = dead_in_job_table()
    kill_rows(300)

    counts = {row.table: row for row in engine_for("default").dead_rows()}

    assert counts[JOB_TABLE].dead == before + 300
    assert set(counts) >= {JOB_TABLE, "django_jobs_attempt", "django_jobs_worker"}


@pytest.fixture
def stranger() -> Iterator[str]:
    """A role that owns none of our tables (dropped afterwards; roles are the server's)."""
    name = f"django_jobs_stranger_{os.getpid()}"
    with connections["default"].cursor() as cursor:
        cursor.execute(f"CREATE ROLE {name}")
    try:
        yield name
    finally:
        with connections["default"].cursor() as cursor:
            cursor.execute("RESET ROLE")
            cursor.execute(f"DROP ROLE {name}")


def test_dead_rows__leaves_out_the_tables_this_role_may_not_vacuum(pg: None, stranger: str) -> None:
    kill_rows(300)
    with connections["default"].cursor() as cursor:
        cursor.execute(f"SET ROLE {stranger}")

    counts = engine_for("default").dead_rows()

    assert counts == []


def test_vacuum__removes_the_dead_rows_and_says_it_ran(pg: None) -> None:
    kill_rows(300)
    before = vacuum_count()  # the count outlives the tests that emptied the table

    ran = engine_for("default").vacuum(JOB_TABLE)

    assert ran is True
    assert dead_in_job_table() == 0
    assert vacuum_count() == before + 1


def test_vacuums__a_table_is_due_once_it_gained_the_bound_since_it_was_first_seen() -> None:
    vacuums = Vacuums(engine_for("default"), bound=1000)
    never = DeadRows(JOB_TABLE, dead=999, vacuumed_at=None)

    first = vacuums.due([never])
    later = vacuums.due([DeadRows(JOB_TABLE, dead=1000, vacuumed_at=None)])

    assert (first, later) == ([], [DeadRows(JOB_TABLE, 1000, None)])


def test_vacuums__counts_from_what_the_latest_vacuum_left_not_from_zero() -> None:
    vacuums = Vacuums(engine_for("default"), bound=1000)
    vacuums.due([DeadRows(JOB_TABLE, dead=5000, vacuumed_at=None)])
    # A long transaction kept 4,500 of them: vacuuming again cannot help yet.
    vacuumed = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)
    after = vacuums.due([DeadRows(JOB_TABLE, dead=4500, vacuumed_at=vacuumed)])

    still = vacuums.due([DeadRows(JOB_TABLE, dead=5499, vacuumed_at=vacuumed)])
    again = vacuums.due([DeadRows(JOB_TABLE, dead=5500, vacuumed_at=vacuumed)])

    assert (after, still, again) == ([], [], [DeadRows(JOB_TABLE, 5500, vacuumed)])


def test_vacuums__a_vacuum_a_long_transaction_defeats_is_not_repeated(
    pg: None, horizon_held: None
) -> None:
    engine = engine_for("default")
    vacuums = Vacuums(engine, bound=200)
    kill_rows(300)
    [due] = vacuums.due(engine.dead_rows())
    assert engine.vacuum(due.table) is True

    left = dead_in_job_table()
    again = vacuums.due(engine.dead_rows())

    assert (left, again) == (300, [])


def test_runworkers_vacuums_the_job_table_once_its_dead_rows_pass_the_bound(
    pg: None, start_workers: Callable[..., WorkerProcess]
) -> None:
    enqueue_many(noop, [((), {})] * 400)  # claimed and finished: 800 dead versions, bound 500

    worker = start_workers(
        "--settings", "tests.ops_settings", "--backend", "vacuuming", "--concurrency", "4"
    )

    wait_until(lambda: not Job.objects.filter(state="queued").exists(), timeout=60)
    wait_until(lambda: vacuum_count() >= 1, timeout=60)
    wait_until(lambda: f"Vacuumed {JOB_TABLE}" in worker.output(), timeout=10)
    assert f"Vacuumed {JOB_TABLE}: " in worker.output()
