"""Job ids grow with time, so a new job's index entries go to the right edge of each index."""

from __future__ import annotations

import time
import uuid
from datetime import UTC, datetime

import pytest

from django_jobs import enqueue_many
from django_jobs.ids import new_id, new_ids
from django_jobs.models import Job
from tests.testapp import tasks

pytestmark = pytest.mark.postgres


def written_at(job_id: uuid.UUID) -> datetime:
    """The id's time: its first 48 bits, Unix milliseconds (RFC 9562, version 7)."""
    return datetime.fromtimestamp((job_id.int >> 80) / 1000, tz=UTC)


def test_new_ids__a_batch_is_ascending_unique_version_7_uuids_across_its_counter_steps() -> None:
    ids = new_ids(40_000)  # the counter's high bits step every 16,384 ids

    parsed = [uuid.UUID(text) for text in ids]

    assert ids == sorted(ids) and len(set(ids)) == 40_000
    assert {(u.version, u.variant) for u in parsed} == {(7, uuid.RFC_4122)}
    assert [str(u) for u in parsed] == ids


def test_new_id__a_version_7_uuid_of_this_millisecond_with_random_bits() -> None:
    before = time.time_ns() // 1_000_000
    ids = [new_id() for _ in range(1_000)]
    after = time.time_ns() // 1_000_000

    assert {(u.version, u.variant) for u in ids} == {(7, uuid.RFC_4122)}
    assert all(before <= u.int >> 80 <= after for u in ids)
    assert len(set(ids)) == 1_000


def test_enqueue__jobs_sort_by_id_in_the_order_they_were_enqueued(pg: None) -> None:
    enqueued: list[str] = []
    for _ in range(3):
        enqueued += [r.id for r in enqueue_many(tasks.noop, [((), {})] * 500)]
        time.sleep(0.002)  # batches of one millisecond may interleave
        enqueued.append(tasks.noop.enqueue().id)
        time.sleep(0.002)

    by_id = [str(i) for i in Job.objects.order_by("id").values_list("id", flat=True)]

    assert by_id == enqueued


def test_enqueue__an_ids_time_is_its_enqueue_time(pg: None) -> None:
    start = datetime.now(UTC)
    before = start.replace(microsecond=start.microsecond // 1000 * 1000)  # whole milliseconds
    tasks.noop.enqueue()
    enqueue_many(tasks.noop, [((), {})] * 10)
    after = datetime.now(UTC)

    # Made before its stamp, in whole milliseconds: no tolerance a busy machine could exceed.
    wrong = [
        (written_at(job.id), job.enqueued_at)
        for job in Job.objects.only("id", "enqueued_at")
        if not before <= written_at(job.id) <= job.enqueued_at <= after
    ]

    assert (wrong, Job.objects.count()) == ([], 11)
