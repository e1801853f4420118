"""Every documented use of tasks and results, as a user's code would write it.

Type-checked by tests/test_typing.py, never run. ``assert_type`` pins what the
checker infers, so a typing that silently falls back to ``Any`` fails too; a
task's parameters, which carry their names, are pinned by assignment (and
their checking by ``wrong_calls.py``).
"""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import assert_type

from django.db import transaction
from django.utils import timezone

from django_jobs import (
    AttemptOutcome,
    Backoff,
    EnqueueOutcome,
    JobState,
    JobTask,
    control,
    enqueue_many,
)
from django_jobs.models import Job
from django_jobs.results import AttemptInfo, JobResult, ProgressInfo

from .tasks import (
    add,
    count_words,
    fetch_page,
    ping,
    poll_export,
    rebuild_index,
    send_receipt,
    summarise,
)


def declared_tasks() -> None:
    adds: JobTask[[int, int], int] = add
    pings: JobTask[[], None] = ping
    # A context task's parameters are the function's but the context.
    rebuilds: JobTask[[list[int]], int] = rebuild_index
    # A coroutine function's result is what it returns once awaited.
    fetches: JobTask[[str], bytes] = fetch_page
    counts: JobTask[[str], int] = count_words
    summaries: JobTask[[str], dict[str, object]] = summarise
    print(adds, pings, rebuilds, fetches, counts, summaries)
    assert_type(add.max_attempts, int | None)
    assert_type(add.backoff, Backoff | float | None)


def enqueue_in_a_transaction(order_id: int) -> JobResult[[int], str]:
    """A result's parameters carry the task's: this annotation drops ``resend``."""
    with transaction.atomic():
        return send_receipt.enqueue(order_id, resend=True)


def results() -> None:
    result: JobResult[[int, int], int] = add.enqueue(1, 2)
    assert_type(result.state, JobState)
    assert_type(result.return_value, int)
    assert_type(result.progress, ProgressInfo | None)
    assert_type(result.attempt_log, tuple[AttemptInfo, ...])
    if result.progress is not None:
        assert_type(result.progress.fraction, float | None)
    for attempt in result.attempt_log:
        assert_type(attempt.outcome, AttemptOutcome)
        print(attempt.number, attempt.error_type, attempt.error_message, attempt.traceback)
    print(result.id, result.status, result.errors, result.attempts, result.is_finished)
    print(result.queue, result.tenant, result.last_error, result.cancel_requested_at)
    result.refresh()

    again: JobResult[[int, int], int] = add.get_result(result.id)
    assert_type(again.return_value, int)
    assert_type(rebuild_index.enqueue([1, 2]).return_value, int)
    assert_type(poll_export.enqueue("e-1").state, JobState)
    ping.enqueue()


async def async_results() -> None:
    result: JobResult[[str], bytes] = await fetch_page.aenqueue("https://example.com")
    assert_type(result.return_value, bytes)
    await result.arefresh()
    again = await fetch_page.aget_result(result.id)
    assert_type(again.return_value, bytes)


def per_call_options(job: Job) -> None:
    first = add.enqueue(1, 2)
    second = add.enqueue(3, 4)
    configured = send_receipt.using(
        priority=50,
        queue_name="emails",
        run_after=timezone.now() + timedelta(hours=1),
        backend="default",
        tenant="acme",
        initiator="user:42",
        idempotency_key="receipt:A-1",
        concurrency_key="account:7",
        expires_at=timezone.now() + timedelta(days=1),
        after=[first, second],
    )
    assert_type(configured.enqueue(7).return_value, str)
    # after= takes one job or several: results, job ids (text or UUID), Job rows.
    add.using(after=first).enqueue(5, 6)
    add.using(after=str(first.id)).enqueue(5, 6)
    add.using(after=[uuid.UUID(first.id), job, "0b5e…"]).enqueue(5, 6)
    add.using(tenant="acme").using(priority=1).enqueue(7, 8)


def unique_jobs() -> None:
    # One live job per key; a finished one holds it for an hour more.
    synced = add.using(
        unique_key="sync:account-7",
        unique_for=timedelta(hours=1),
        unique_states=[JobState.QUEUED, "running"],
    ).enqueue(1, 2)
    assert_type(synced.enqueue_outcome, EnqueueOutcome | None)
    if synced.enqueue_outcome is EnqueueOutcome.EXISTING:
        print("already on its way:", synced.id)
    # The last call within five minutes wins.
    send_receipt.using(unique_key="receipt:A-1", debounce=timedelta(minutes=5)).enqueue(7)


def many() -> None:
    with transaction.atomic():
        batch = enqueue_many(send_receipt, [((order_id,), {}) for order_id in range(3)])
    assert_type(batch[0].return_value, str)
    enqueue_many(add.using(tenant="acme"), [((1, 2), {}), ((3,), {"b": 4})])


def operator_verbs(job_id: uuid.UUID) -> None:
    control.cancel(job_id, actor="ops", note="customer withdrew the order")
    control.retry(str(job_id), actor="ops")
    control.quarantine(job_id, actor="ops", note="poison?")
    control.release(job_id, actor="ops")
    control.discard(job_id, actor="ops", note="accepted loss")
    paused: bool = control.pause_queue("emails", actor="ops", note="provider outage")
    resumed: bool = control.resume_queue("emails", actor="ops")
    bulk = control.apply_many("retry", [job_id], actor="ops")
    print(paused, resumed, bulk.changed, bulk.refused)
    transition = control.apply("cancel", job_id, actor="ops")
    print(transition)


def backoff() -> None:
    policy = Backoff(base=1.0, cap=60.0)
    assert_type(policy.ceiling(3), float)
    assert_type(policy.delay(3), float)
