"""A plain claim reads each queue from where the worker's last full claim ended.

``engine/postgres/positions.py``: while the vacuum horizon is held, every
claimed job's entry stays in the claim index, and a claim from the head
walks past all of them. Real PostgreSQL, a real transaction holding the
horizon, the engine with the options the docs give, real clocks.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from datetime import datetime, timedelta

import pytest
from django.db import connections, transaction
from django.db.models import Max
from django.utils import timezone

from django_jobs import enqueue_many
from django_jobs.engine import engine_for
from django_jobs.engine.postgres.positions import RESCAN_SECONDS
from django_jobs.models import Job
from django_jobs.values import Claimed
from tests.test_engine import ME, QUEUES, make_job
from tests.testapp import tasks

pytestmark = pytest.mark.postgres

DB = "default"


def claim_index_entries() -> int:
    """Entries of the claim index this transaction's scans have read, dead ones included."""
    with connections[DB].cursor() as cursor:
        cursor.execute("SELECT pg_stat_get_xact_tuples_returned('django_jobs_claim_idx'::regclass)")
        (count,) = cursor.fetchone()
    return int(count)


def entries_read(claim: Callable[[], list[Claimed]]) -> tuple[int, int]:
    """How many jobs ``claim`` took, and how many claim index entries it read for them."""
    with transaction.atomic(using=DB):
        before = claim_index_entries()
        got = claim()
        read = claim_index_entries() - before
    return len(got), read


def job_due_at(run_after: datetime) -> Job:
    """A queued job whose ``run_after`` lies before jobs claimed already."""
    job = make_job(DB)
    Job.objects.filter(id=job.id).update(run_after=run_after)
    return job


def test_claim__under_a_held_horizon_reads_its_batch_not_every_job_claimed_before(
    pg: None, horizon_held: None
) -> None:
    enqueue_many(tasks.noop, [((), {})] * 3_000)
    engine = engine_for(DB)
    engine.claim(ME, QUEUES, 2_000)  # dead entries at the head of the index, kept by the horizon

    taken, read = entries_read(lambda: engine.claim(ME, QUEUES, 64))

    assert taken == 64
    assert read <= 2 * 64, f"the claim read {read} index entries for 64 jobs"


def test_claim__under_a_held_horizon_a_worker_that_caught_up_reads_one_second_back_only(
    pg: None, horizon_held: None
) -> None:
    """Caught up, it reads from a second before its position: the jobs of that second, no more."""
    now = timezone.now()
    enqueue_many(tasks.noop.using(run_after=now - timedelta(hours=1)), [((), {})] * 2_000)
    enqueue_many(tasks.noop.using(run_after=now - timedelta(minutes=30)), [((), {})] * 100)
    engine = engine_for(DB)
    engine.claim(ME, QUEUES, 2_100)
    engine.claim(ME, QUEUES, 64)  # nothing left: it has caught up
    enqueue_many(tasks.noop, [((), {})] * 64)

    taken, read = entries_read(lambda: engine.claim(ME, QUEUES, 64))

    assert taken == 64
    assert read <= 100 + 2 * 64, f"the claim read {read} index entries for 64 jobs"


def test_claim__a_higher_priority_job_goes_first_under_a_backlog(pg: None) -> None:
    enqueue_many(tasks.noop, [((), {})] * 200)
    engine = engine_for(DB)
    engine.claim(ME, QUEUES, 64)
    urgent = make_job(DB, priority=10)

    [first] = engine.claim(ME, QUEUES, 1)

    assert first.job_id == urgent.id


def test_claim__lower_priorities_follow_in_the_same_claim_when_the_position_runs_out(
    pg: None,
) -> None:
    enqueue_many(tasks.noop.using(priority=5), [((), {})] * 100)
    enqueue_many(tasks.noop, [((), {})] * 100)
    engine = engine_for(DB)
    engine.claim(ME, QUEUES, 64)

    got = engine.claim(ME, QUEUES, 64)

    assert [job.priority for job in got] == [5] * 36 + [0] * 28


def test_claim__a_job_ready_behind_the_position_waits_for_the_next_rescan_only(
    pg: None,
) -> None:
    enqueue_many(tasks.noop, [((), {})] * 300)
    engine = engine_for(DB)
    engine.claim(ME, QUEUES, 64)
    late = job_due_at(timezone.now() - timedelta(hours=1))  # as if committed late

    before_rescan = {job.job_id for job in engine.claim(ME, QUEUES, 64)}
    # A busy worker claims without pause: the rescan must still come.
    until = time.monotonic() + 2 * RESCAN_SECONDS
    taken: list[uuid.UUID] = []
    while late.id not in taken and time.monotonic() < until:
        taken += [job.job_id for job in engine.claim(ME, QUEUES, 1)]
        time.sleep(0.05)

    assert (late.id in before_rescan, late.id in taken) == (False, True)


def test_claim__a_worker_that_caught_up_finds_a_job_committed_under_a_second_late_at_once(
    pg: None,
) -> None:
    enqueue_many(tasks.noop, [((), {})] * 64)
    engine = engine_for(DB)
    engine.claim(ME, QUEUES, 64)
    engine.claim(ME, QUEUES, 64)  # nothing left: it has caught up
    position = Job.objects.aggregate(last=Max("run_after"))["last"]
    late = job_due_at(position - timedelta(seconds=0.5))

    [first] = engine.claim(ME, QUEUES, 64)

    assert first.job_id == late.id


def test_claim__each_queue_resumes_from_its_own_position_and_nothing_is_skipped(
    pg: None,
) -> None:
    for _ in range(50):
        make_job(DB, queue="a")
        make_job(DB, queue="b")
    engine = engine_for(DB)

    got: list[Claimed] = []
    while batch := engine.claim(ME, ("a", "b"), 16):
        got += batch

    assert (len(got), len({job.job_id for job in got})) == (100, 100)
