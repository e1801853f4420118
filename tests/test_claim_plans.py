"""Every claim path keeps its indexed plan when the statistics are stale.

A deployment starts on empty tables; PostgreSQL's statistics say "empty"
until autovacuum next analyses them (never, on a server with autovacuum off,
or while a long transaction pins it), and a worker's prepared statements keep
the plan they got first. A claim's cost must not depend on that: each test
here analyses the empty tables, fills a 20,000-job backlog without analysing
again, and reads the plans PostgreSQL really ran (``auto_explain``) for
several full batches in a row, past the point where prepared statements
switch to their generic plan. A claim that reads the heads of its index reads
a few hundred job rows; one planned for the empty table reads the backlog.
A plan made while the table held a hundred jobs is kept as the table fills
with finished ones (nothing tells PostgreSQL to plan again): it must not read
them either.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connection, transaction

from django_jobs import enqueue_many
from django_jobs.conf import JobsOptions
from django_jobs.engine import engine_for
from django_jobs.values import WorkerIdentity
from tests.conftest import analyse_empty_tables, statement_plans
from tests.testapp import tasks

pytestmark = pytest.mark.postgres

BACKLOG = 20_000
FINISHED = 5_000


def nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield plan
    for child in plan.get("Plans", []):
        yield from nodes(child)


def job_rows_read(entry: dict[str, Any]) -> int:
    """Rows of the job table a statement's scans produced or threw away, over all their loops.

    A scan kept in memory (``Materialize``) and read again on every loop of
    a join counts as read on every loop: it is compared row by row each time.
    """
    read = 0
    for node in nodes(entry["Plan"]):
        loops = int(node.get("Actual Loops", 1))
        if node.get("Relation Name") == "django_jobs_job":
            kept = int(node.get("Actual Rows", 0))
            thrown = int(node.get("Rows Removed by Filter", 0))
            read += (kept + thrown + int(node.get("Rows Removed by Index Recheck", 0))) * loops
        elif node["Node Type"] == "Materialize" and loops > 1 and reads_jobs(node):
            read += int(node.get("Actual Rows", 0)) * (loops - 1)
    return read


def reads_jobs(plan: dict[str, Any]) -> bool:
    return any(node.get("Relation Name") == "django_jobs_job" for node in nodes(plan))


def queue_for_tenants(**counts: int) -> None:
    """Queue no-op jobs on the queue "other": so many for each tenant, in order."""
    job = tasks.noop.using(queue_name="other")
    for tenant, count in counts.items():
        enqueue_many(job.using(tenant=tenant), [((), {})] * count)


RULES = {
    "plain": {},
    "fair": {"FAIR_QUEUES": {"other": {}}},
    "fair-limited": {"FAIR_QUEUES": {"other": {}}, "QUEUE_CONCURRENCY": {"other": 10_000}},
    "limited": {"QUEUE_CONCURRENCY": {"other": 10_000}},
    "keyed": {"KEY_CONCURRENCY": {"other": 5}},
    "rated": {"RATE_LIMITS": {"other": (10_000, 60.0)}},
    "keyrated": {"KEY_RATE_LIMITS": {"other": (5, 60.0)}},
}


@pytest.mark.parametrize("batch", [1, 10, 100])  # one free slot … CLAIM_BATCH
@pytest.mark.parametrize("path", list(RULES))
def test_claim__reads_only_the_heads_of_its_index_when_statistics_were_taken_on_an_empty_table(
    pg: None, path: str, batch: int
) -> None:
    analyse_empty_tables()
    queue_for_tenants(a=BACKLOG, b=100)
    if "key" in path:  # 2,000 concurrency keys, interleaved as many senders make them
        with connection.cursor() as cursor:
            cursor.execute(
                "UPDATE django_jobs_job SET concurrency_key = 'k' || (random() * 2000)::int"
            )
    rules = JobsOptions.from_mapping("default", RULES[path])
    me = WorkerIdentity(uuid.uuid4(), "plans")
    batches = []
    with statement_plans() as plans:
        for _ in range(8):  # prepared statements switch to a generic plan after five
            with transaction.atomic():
                batches.append(len(engine_for("default", rules).claim(me, ["other"], batch)))
    worst = max(plans, key=job_rows_read)
    assert batches == [batch] * 8
    assert job_rows_read(worst) < 2_000, json.dumps(worst, indent=1)


def test_reap_and_renew__read_only_the_running_jobs_when_statistics_were_taken_on_an_empty_table(
    pg: None,
) -> None:
    """The lifeline's statements: a backlog of queued jobs is never theirs to read."""
    analyse_empty_tables()
    enqueue_many(tasks.noop.using(queue_name="other"), [((), {})] * BACKLOG)
    engine = engine_for("default")
    live, dead = WorkerIdentity(uuid.uuid4(), "live"), WorkerIdentity(uuid.uuid4(), "dead")
    for worker in (live, dead):
        engine.register_worker(worker, "default", "host", 1, ["other"], 50)
        engine.claim(worker, ["other"], 50)
    with connection.cursor() as cursor:  # the dead one fell silent a minute ago
        cursor.execute(
            "UPDATE django_jobs_worker SET heartbeat_at = now() - interval '60 s' WHERE id = %s",
            [dead.id],
        )
        cursor.execute(
            "UPDATE django_jobs_job SET leased_at = now() - interval '60 s' WHERE leased_by = %s",
            [dead.id],
        )

    with statement_plans() as plans:
        engine.renew(live.id, [])
        reaped = engine.reap(batch=100)

    worst = max(plans, key=job_rows_read)
    assert reaped == 50
    assert job_rows_read(worst) <= 100, json.dumps(worst, indent=1)  # the jobs running


def test_claim__a_fair_queue_with_limits_reads_only_heads_on_a_generic_plan_too(pg: None) -> None:
    """PostgreSQL moves a prepared statement to its generic plan once that looks no costlier."""
    analyse_empty_tables()
    queue_for_tenants(a=BACKLOG, b=100)
    rules = JobsOptions.from_mapping("default", RULES["fair-limited"])
    me = WorkerIdentity(uuid.uuid4(), "plans")
    with connection.cursor() as cursor:
        cursor.execute("SET plan_cache_mode = force_generic_plan")
    try:
        with statement_plans() as plans:
            for _ in range(3):
                with transaction.atomic():
                    engine_for("default", rules).claim(me, ["other"], 10)
    finally:
        with connection.cursor() as cursor:
            cursor.execute("RESET plan_cache_mode")

    worst = max(plans, key=job_rows_read)
    assert job_rows_read(worst) < 2_000, json.dumps(worst, indent=1)


@pytest.mark.parametrize("batch", [1, 64])
@pytest.mark.parametrize("path", list(RULES))
def test_claim__a_plan_made_on_a_small_table_reads_only_heads_once_it_has_grown(
    pg: None, path: str, batch: int
) -> None:
    """A worker keeps its generic plan while the table grows: it must not grow with the table."""
    analyse_empty_tables()
    queue_for_tenants(a=90, b=10)
    rules = JobsOptions.from_mapping("default", RULES[path])
    me = WorkerIdentity(uuid.uuid4(), "plans")
    with connection.cursor() as cursor:
        cursor.execute("SET plan_cache_mode = force_generic_plan")
    try:
        with transaction.atomic():  # the plan is made now, on a table of a hundred jobs
            engine_for("default", rules).claim(me, ["other"], batch)
        queue_for_tenants(done=FINISHED)
        with connection.cursor() as cursor:
            cursor.execute(
                "UPDATE django_jobs_job SET state = 'succeeded', finished_at = now() "
                "WHERE tenant = 'done'"
            )
        with statement_plans() as plans:
            for _ in range(3):
                with transaction.atomic():
                    engine_for("default", rules).claim(me, ["other"], batch)
    finally:
        with connection.cursor() as cursor:
            cursor.execute("RESET plan_cache_mode")

    worst = max(plans, key=job_rows_read)
    assert job_rows_read(worst) < 2_000, json.dumps(worst, indent=1)
