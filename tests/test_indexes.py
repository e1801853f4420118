"""What the job table's list indexes hold: every entry is a write on each new row version.

A job's row is written three times (enqueue, claim, completion), and every
non-partial index takes an entry each time; a vacuum then reads each whole
index. So an index holds only the rows its readers look for.
"""

from __future__ import annotations

import pytest
from django.db import connection

from django_jobs import enqueue_many
from django_jobs.models import Job
from tests.testapp import tasks

pytestmark = pytest.mark.postgres


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
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE django_jobs_job")
    newest = Job.objects.filter(tenant="acme").order_by("-enqueued_at", "-id")[:20]

    plan = newest.explain()

    assert "django_jobs_tenant_recent_idx" in plan and "Sort" not in plan, plan
