"""What the job table's list indexes hold: every entry is a write on each new row version.

A job's row is written three times (enqueue, claim, completion), and every
non-partial index takes an entry each time; a vacuum then reads each whole
index. So an index holds only the rows its readers look for.
"""

from __future__ import annotations

import pytest
from django.db import connection

from django_jobs import enqueue_many
from django_jobs.engine import engine_for
from django_jobs.models import Job
from django_jobs.testing import drain
from tests.test_engine import ME, QUEUES
from tests.testapp import tasks

pytestmark = pytest.mark.postgres


def analyse_jobs() -> None:
    """Statistics as autovacuum leaves a busy table: taken after the rows below were written."""
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE django_jobs_job")


def index_bytes(name: str) -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_relation_size(%s::regclass)", [name])
        return int(cursor.fetchone()[0])


def test_tenant_index__untenanted_jobs_write_no_entry(pg: None) -> None:
    before = index_bytes("django_jobs_tenant_recent_idx")  # a page holds ~200 entries

    enqueue_many(tasks.noop, [((), {})] * 5_000)

    assert index_bytes("django_jobs_tenant_recent_idx") == before


def test_tenant_index__one_tenants_list_reads_it_newest_first(pg: None) -> None:
    enqueue_many(tasks.noop, [((), {})] * 5_000)
    enqueue_many(tasks.noop.using(tenant="acme"), [((), {})] * 50)
    analyse_jobs()
    newest = Job.objects.filter(tenant="acme").order_by("-enqueued_at", "-id")[:20]

    plan = newest.explain()

    assert "django_jobs_tenant_recent_idx" in plan and "Sort" not in plan, plan


def test_state_index__enqueue_and_claim_write_no_entry(pg: None) -> None:
    before = index_bytes("django_jobs_state_recent_idx")  # a page holds ~200 entries
    enqueue_many(tasks.noop, [((), {})] * 1_000)

    assert len(engine_for("default").claim(ME, QUEUES, 1_000)) == 1_000

    assert index_bytes("django_jobs_state_recent_idx") == before


def newest_first_plan(state: str) -> str:
    return Job.objects.filter(state=state).order_by("-enqueued_at", "-id")[:20].explain()


def test_state_lists__finished_states_read_their_index_running_ones_the_lease_index(
    pg: None,
) -> None:
    enqueue_many(tasks.noop, [((), {})] * 1_000)
    drain(max_attempts=2_000)
    enqueue_many(tasks.gives_up, [((), {})] * 50)
    assert drain().failed == 50
    analyse_jobs()

    plans = {state: newest_first_plan(state) for state in ("succeeded", "failed", "running")}

    assert "Sort" not in plans["succeeded"] and "Seq Scan" not in plans["succeeded"]
    assert "django_jobs_state_recent_idx" in plans["failed"], plans["failed"]
    assert "Sort" not in plans["failed"], plans["failed"]
    assert "django_jobs_leased_idx" in plans["running"], plans["running"]


def test_lists_under_a_backlog__queued_walk_the_whole_list_succeeded_their_own(
    pg: None,
) -> None:
    enqueue_many(tasks.noop, [((), {})] * 100)
    drain()
    enqueue_many(tasks.noop, [((), {})] * 3_000)
    analyse_jobs()

    queued, succeeded = newest_first_plan("queued"), newest_first_plan("succeeded")

    assert "django_jobs_recent_idx" in queued and "Sort" not in queued, queued
    assert "django_jobs_state_recent_idx" in succeeded and "Sort" not in succeeded, succeeded


def test_queued_list__a_few_queued_jobs_are_read_through_a_claim_index(pg: None) -> None:
    enqueue_many(tasks.noop, [((), {})] * 2_000)
    drain(max_attempts=3_000)
    enqueue_many(tasks.noop, [((), {})] * 5)
    analyse_jobs()

    plan = newest_first_plan("queued")

    assert "django_jobs_recent_idx" not in plan and "Seq Scan" not in plan, plan
