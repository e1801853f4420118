"""The notifier: Django's task_finished for written outcomes, sent from a thread of its own."""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.utils import timezone

from django_jobs.backend import JobsBackend
from django_jobs.framework import task_finished
from django_jobs.results import JobResult
from django_jobs.states import AttemptOutcome, JobState, django_status
from django_jobs.values import Report
from django_jobs.worker.notifier import BACKLOG_BATCHES, Ended, Notifier
from tests.conftest import wait_until
from tests.testapp import tasks


def ended(number: int) -> Ended:
    """A written success of the echo task, returning ``number``, as the completer hands it over."""
    job_id = uuid.uuid4()
    now = timezone.now()
    started = JobResult(
        task=tasks.echo,
        id=str(job_id),
        status=django_status(JobState.RUNNING),
        enqueued_at=now,
        started_at=now,
        finished_at=None,
        last_attempted_at=now,
        args=[number],
        kwargs={},
        backend="default",
        errors=[],
        worker_ids=["w"],
        state=JobState.RUNNING,
        queue="default",
        priority=0,
        tenant="",
        idempotency_key=None,
        max_attempts=1,
        run_after=now,
        last_error="",
    )
    report = Report(
        job_id=job_id, token=1, attempt_id=number, outcome=AttemptOutcome.SUCCEEDED, result=number
    )
    return (report, JobState.SUCCEEDED, started)


Receiver = Callable[..., object]


@pytest.fixture
def connect() -> Iterator[Callable[[Receiver], None]]:
    """Connect receivers to task_finished for this test only."""
    connected: list[Receiver] = []

    def add(receiver: Receiver) -> None:
        task_finished.connect(receiver, weak=False)
        connected.append(receiver)

    yield add
    for receiver in connected:
        task_finished.disconnect(receiver)


@pytest.fixture
def notifier() -> Iterator[Notifier]:
    started = Notifier(sender=JobsBackend)
    started.start()
    yield started
    started.close(timeout=5)


def test_notifier__sends_every_batch_in_order_from_its_own_thread_before_close_returns(
    connect: Callable[[Receiver], None], notifier: Notifier
) -> None:
    seen: list[tuple[Any, ...]] = []

    def receiver(sender: Any, task_result: JobResult, **kwargs: Any) -> None:
        seen.append((task_result.return_value, task_result.status, threading.current_thread().name))

    connect(receiver)
    for batch in ([1, 2], [3], [4, 5, 6]):
        notifier.send([ended(n) for n in batch])
    notifier.close(timeout=5)
    assert seen == [(n, "SUCCESSFUL", "django-jobs-notifier") for n in range(1, 7)]


def test_notifier__a_receiver_that_raises_is_logged_and_every_other_call_is_still_made(
    connect: Callable[[Receiver], None], notifier: Notifier, caplog: pytest.LogCaptureFixture
) -> None:
    broken: list[int] = []
    sound: list[int] = []

    def breaks_on_two(sender: Any, task_result: JobResult, **kwargs: Any) -> None:
        broken.append(task_result.return_value)
        if task_result.return_value == 2:
            raise RuntimeError("receiver bug")

    def records(sender: Any, task_result: JobResult, **kwargs: Any) -> None:
        sound.append(task_result.return_value)

    connect(breaks_on_two)
    connect(records)
    with caplog.at_level(logging.ERROR, logger="django_jobs.worker"):
        notifier.send([ended(1), ended(2), ended(3)])
        notifier.send([ended(4)])
        notifier.close(timeout=5)
    assert (broken, sound) == ([1, 2, 3, 4], [1, 2, 3, 4])
    [record] = [r for r in caplog.records if r.name == "django_jobs.worker"]
    assert record.getMessage() == (
        "A task_finished receiver raised; the job's outcome is written, and the other "
        "receivers and jobs are sent it"
    )
    assert record.exc_info is not None and str(record.exc_info[1]) == "receiver bug"


def test_notifier__a_full_backlog_makes_the_sender_wait_for_the_receivers(
    connect: Callable[[Receiver], None], notifier: Notifier
) -> None:
    release = threading.Event()
    connect(lambda sender, task_result, **kwargs: release.wait(10))
    handed: list[int] = []

    def producer() -> None:
        for number in range(BACKLOG_BATCHES + 2):
            notifier.send([ended(number)])
            handed.append(number)

    thread = threading.Thread(target=producer)
    thread.start()
    # One batch is in the receiver, BACKLOG_BATCHES wait: the next send waits.
    wait_until(lambda: len(handed) == BACKLOG_BATCHES + 1)
    thread.join(0.3)
    assert (thread.is_alive(), len(handed)) == (True, BACKLOG_BATCHES + 1)
    release.set()
    thread.join(10)
    assert len(handed) == BACKLOG_BATCHES + 2


def test_notifier__close_gives_up_on_a_receiver_that_does_not_return_and_says_what_is_unsent(
    connect: Callable[[Receiver], None], caplog: pytest.LogCaptureFixture
) -> None:
    entered = threading.Event()
    release = threading.Event()

    def stuck(sender: Any, task_result: JobResult, **kwargs: Any) -> None:
        entered.set()
        release.wait(10)

    connect(stuck)
    notifier = Notifier(sender=JobsBackend)
    notifier.start()
    notifier.send([ended(0)])
    entered.wait(5)
    for number in range(BACKLOG_BATCHES):  # the backlog full: close cannot even queue its end
        notifier.send([ended(number)])
    try:
        with caplog.at_level(logging.WARNING, logger="django_jobs.worker"):
            notifier.close(timeout=0.2)
    finally:
        release.set()
    assert [r.getMessage() for r in caplog.records if r.name == "django_jobs.worker"] == [
        "A task_finished receiver did not return within 0.2s; the worker exits without "
        f"sending task_finished for the batch it is in and {BACKLOG_BATCHES} more."
    ]
