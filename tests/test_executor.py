"""The executor runs one attempt, in a job thread or an isolated child, with no database at all.

Database access is refused in every test here, in every thread (pytest-django's
blocker); a query from the executor would raise instead of the outcome the
test expects. Isolated attempts run in real spawned children; the watchdog
stops real threads and kills real children.
"""

from __future__ import annotations

import dataclasses
import queue
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.db import connections
from django.utils import timezone

from django_jobs import AttemptOutcome
from django_jobs.attempt import AttemptControl
from django_jobs.backend import jobs_backend
from django_jobs.models import ERROR_TEXT_MAX_LENGTH
from django_jobs.retry import Verdict
from django_jobs.values import ChildDied, Claimed, Outcome, Report
from django_jobs.worker.executor import Executor, JobThreads
from django_jobs.worker.running import Running
from django_jobs.worker.watchdog import Watchdog
from tests.conftest import wait_until
from tests.testapp import tasks


@pytest.fixture(autouse=True)
def database_refused() -> None:
    with pytest.raises(RuntimeError, match="Database access not allowed"):
        connections["default"].ensure_connection()


class Harness:
    """An executor on the ``fast`` backend, the watchdog over its attempts, and their outcomes."""

    def __init__(self) -> None:
        self.outcomes: queue.SimpleQueue[Outcome] = queue.SimpleQueue()
        backend = jobs_backend("fast")
        self.executor = Executor(backend, uuid.uuid4(), self.outcomes.put, threads=2)
        self.running = Running()
        self.watchdog = Watchdog(backend.settings, self.running, self.executor.runner)
        self.given_up: list[Report] = []

    def start(self, claimed: Claimed) -> AttemptControl:
        control = self.running.start(claimed).control
        self.executor.start(claimed, control)
        return control

    def police_until_outcome(self, timeout: float = 30.0) -> Outcome:
        """Do what the producer does while an attempt runs: check the watchdog often."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.given_up += self.watchdog.check()
            try:
                return self.outcomes.get(timeout=0.05)
            except queue.Empty:
                continue
        raise AssertionError(f"no outcome within {timeout}s")


@pytest.fixture
def harness() -> Iterator[Harness]:
    harness = Harness()
    yield harness
    harness.executor.shutdown()


def claim_of(
    task: Any,
    *args: Any,
    token: int = 1,
    max_attempts: int = 3,
    timeout: float | None = None,
    suspect: bool = False,
) -> Claimed:
    now = timezone.now()
    return Claimed(
        job_id=uuid.uuid4(),
        attempt_id=token,
        token=token,
        task_name=task.module_path,
        args=list(args),
        kwargs={},
        queue="default",
        priority=0,
        max_attempts=max_attempts,
        timeout=timeout,
        tenant="",
        idempotency_key=None,
        backend="fast",
        enqueued_at=now,
        started_at=now,
        suspect=suspect,
    )


def run(harness: Harness, claimed: Claimed) -> Outcome:
    outcome = harness.executor.execute(claimed, AttemptControl(claimed.timeout))
    assert outcome is not None
    return outcome


def test_executor__a_success_is_a_report_with_the_result(harness: Harness) -> None:
    claimed = claim_of(tasks.add, 2, 3)
    outcome = run(harness, claimed)
    assert outcome == Report(
        job_id=claimed.job_id,
        token=1,
        attempt_id=1,
        outcome=AttemptOutcome.SUCCEEDED,
        result=5,
    )


def test_executor__an_attempt_cancelled_while_it_waited_for_a_thread_ends_without_running(
    harness: Harness,
) -> None:
    claimed = claim_of(tasks.record)
    control = AttemptControl(claimed.timeout)
    control.request_cancel()  # the job turned cancelling while the attempt waited
    outcome = harness.executor.execute(claimed, control)
    assert isinstance(outcome, Report)
    assert (outcome.outcome, outcome.error_message, control.result, control.finished) == (
        AttemptOutcome.CANCELLED,
        "the job was cancelled before it started",
        None,  # task_started never sent: the task was not called
        True,  # over: nothing may be raised into the thread any more
    )


def test_executor__an_attempt_given_back_while_it_waited_is_not_run(harness: Harness) -> None:
    claimed = claim_of(tasks.record)
    control = AttemptControl(claimed.timeout)
    control.give_back()
    assert (harness.executor.execute(claimed, control), control.result) == (None, None)


def test_executor__a_failure_carries_the_retry_policys_decision(harness: Harness) -> None:
    first = run(harness, claim_of(tasks.always_fails, "declined", token=1))
    last = run(harness, claim_of(tasks.always_fails, "declined", token=3))
    given_up = run(harness, claim_of(tasks.gives_up, max_attempts=5))
    assert isinstance(first, Report) and isinstance(last, Report) and isinstance(given_up, Report)
    assert (first.outcome, first.error_type, first.error_message) == (
        AttemptOutcome.FAILED,
        "builtins.ValueError",
        "declined",
    )
    assert "raise ValueError(message)" in first.traceback
    assert first.decision is not None and first.decision.verdict is Verdict.RETRY
    assert 0 < first.decision.delay <= 0.5  # the fast backend's backoff cap
    assert last.decision is not None and last.decision.verdict is Verdict.EXHAUSTED
    assert given_up.decision is not None and given_up.decision.verdict is Verdict.GIVE_UP


def test_executor__a_failures_message_and_traceback_are_kept_to_their_bound(
    harness: Harness,
) -> None:
    message = "declined: " + "the partner's whole response body " * 5_000  # 170,010 characters
    outcome = run(harness, claim_of(tasks.always_fails, message))
    assert isinstance(outcome, Report)
    assert outcome.error_message == message[: ERROR_TEXT_MAX_LENGTH - 1] + "…"
    assert len(outcome.traceback) == ERROR_TEXT_MAX_LENGTH
    assert outcome.traceback.startswith("Traceback (most recent call last):")
    assert "characters cut …]" in outcome.traceback
    assert outcome.traceback.endswith("the partner's whole response body \n")


def test_executor__an_unknown_task_is_not_run_and_is_postponed_within_its_grace(
    harness: Harness,
) -> None:
    claimed = dataclasses.replace(claim_of(tasks.add), task_name="os.system")
    outcome = run(harness, claimed)
    assert isinstance(outcome, Report) and outcome.decision is not None
    assert (outcome.outcome, outcome.error_type, outcome.decision.verdict) == (
        AttemptOutcome.FAILED,
        "django_jobs.exceptions.UnknownTaskError",
        Verdict.POSTPONE,
    )


def test_executor__an_unknown_task_past_its_grace_is_not_run_and_gives_up(
    harness: Harness,
) -> None:
    long_ago = timezone.now() - timedelta(hours=1)  # UNKNOWN_TASK_GRACE is 300s
    claimed = dataclasses.replace(claim_of(tasks.add), task_name="os.system", enqueued_at=long_ago)
    outcome = run(harness, claimed)
    assert isinstance(outcome, Report) and outcome.decision is not None
    assert (outcome.outcome, outcome.error_type, outcome.decision.verdict) == (
        AttemptOutcome.FAILED,
        "django_jobs.exceptions.UnknownTaskError",
        Verdict.GIVE_UP,
    )
    assert "failed for good" in outcome.error_message


def test_executor__a_thread_past_its_timeout_is_stopped_and_times_out(harness: Harness) -> None:
    harness.start(claim_of(tasks.spins, 20.0, timeout=0.3))
    started = time.monotonic()
    outcome = harness.police_until_outcome()
    assert time.monotonic() - started < 5
    assert isinstance(outcome, Report) and outcome.decision is not None
    assert (outcome.outcome, outcome.error_message) == (
        AttemptOutcome.TIMED_OUT,
        "the attempt outlived its timeout of 0.3s",
    )
    assert outcome.decision.verdict is Verdict.RETRY  # 1 of 3 attempts: a timeout may retry
    assert harness.given_up == []


def test_executor__a_cancel_ignored_past_its_grace_is_forced(harness: Harness) -> None:
    control = harness.start(claim_of(tasks.spins, 20.0))
    wait_until(lambda: control.thread_id is not None, timeout=10)
    control.request_cancel()  # what the lifeline does when the job turns cancelling
    outcome = harness.police_until_outcome()
    assert isinstance(outcome, Report)
    assert outcome.outcome == AttemptOutcome.CANCELLED
    assert "stopped by force" in outcome.error_message


def test_executor__an_isolated_attempt_runs_in_a_child_and_reports_from_there(
    harness: Harness,
) -> None:
    claimed = claim_of(tasks.add, 20, 22, suspect=True)
    control = AttemptControl(claimed.timeout)
    outcome = harness.executor.execute(claimed, control)
    assert isinstance(outcome, Report) and outcome.outcome == AttemptOutcome.SUCCEEDED
    assert outcome.result == 42
    assert control.child is not None and control.child.exitcode == 0


@pytest.mark.parametrize(
    ("task", "args", "exit_code", "reason"),
    [
        (tasks.exits, (3,), 3, "isolated attempt's process died (exit 3)"),
        (tasks.crashes_its_worker, (), -9, "isolated attempt's process died (killed by signal 9)"),
    ],
)
def test_executor__an_isolated_child_that_dies_is_a_child_died_outcome(
    harness: Harness, task: Any, args: tuple[Any, ...], exit_code: int, reason: str
) -> None:
    claimed = claim_of(task, *args, suspect=True)
    outcome = run(harness, claimed)
    assert outcome == ChildDied(job_id=claimed.job_id, token=1, attempt_id=1, exit_code=exit_code)
    assert isinstance(outcome, ChildDied) and outcome.reason == reason


def test_executor__an_isolated_child_past_its_timeout_is_killed_and_times_out(
    harness: Harness,
) -> None:
    harness.start(claim_of(tasks.sleeps, 60.0, timeout=0.5, suspect=True))
    outcome = harness.police_until_outcome()
    assert isinstance(outcome, Report)
    assert (outcome.outcome, outcome.error_message) == (
        AttemptOutcome.TIMED_OUT,
        "the attempt outlived its timeout of 0.5s",
    )


def test_executor__an_isolated_child_ignoring_a_cancel_is_killed_and_cancelled(
    harness: Harness,
) -> None:
    control = harness.start(claim_of(tasks.sleeps, 60.0, suspect=True))
    wait_until(lambda: control.child is not None, timeout=10)
    control.request_cancel()
    outcome = harness.police_until_outcome()
    assert isinstance(outcome, Report)
    assert outcome.outcome == AttemptOutcome.CANCELLED
    assert "stopped by force" in outcome.error_message
    assert control.child is not None and control.child.exitcode == -9


class Recorder:
    """Job threads whose work is held while asked, and which thread delivered which attempt."""

    def __init__(self, size: int) -> None:
        self.delivered: queue.SimpleQueue[tuple[str, uuid.UUID]] = queue.SimpleQueue()
        self.hold = threading.Event()
        self.hold.set()
        self.held = 0
        self.held_changed = threading.Condition()
        self.threads = JobThreads(size, self.run, self.deliver)

    def run(self, claimed: Claimed, control: AttemptControl) -> Outcome:
        with self.held_changed:
            self.held += 1
            self.held_changed.notify_all()
        self.hold.wait(30)
        with self.held_changed:
            self.held -= 1
        return ChildDied(job_id=claimed.job_id, token=1, attempt_id=1, exit_code=0)

    def deliver(self, outcome: Outcome) -> None:
        self.delivered.put((threading.current_thread().name, outcome.job_id))

    def start(self) -> Claimed:
        claimed = claim_of(tasks.add, 1, 2)
        self.threads.start(claimed, AttemptControl(None))
        return claimed

    def next(self) -> tuple[str, uuid.UUID]:
        return self.delivered.get(timeout=30)

    def await_held(self, count: int) -> None:
        """Wait until ``count`` attempts are inside ``run``: released sooner, a thread
        that finished early could take the attempt a new thread was started for."""
        with self.held_changed:
            assert self.held_changed.wait_for(lambda: self.held == count, timeout=30)


def test_job_threads__start_a_thread_only_when_none_is_idle() -> None:
    recorder = Recorder(size=4)
    one_at_a_time = []
    for _ in range(3):
        recorder.start()
        one_at_a_time.append(recorder.next()[0])
    recorder.hold.clear()
    for _ in range(3):
        recorder.start()
    recorder.await_held(3)
    recorder.hold.set()
    at_once = {recorder.next()[0] for _ in range(3)}

    recorder.threads.shutdown()
    assert (len(set(one_at_a_time)), len(at_once)) == (1, 3)


def test_job_threads__shutdown_drops_the_attempts_not_started_and_ends_every_thread() -> None:
    recorder = Recorder(size=1)
    recorder.hold.clear()
    first = recorder.start()
    recorder.start()

    recorder.threads.shutdown()
    recorder.hold.set()

    name, delivered = recorder.next()
    wait_until(lambda: name not in {thread.name for thread in threading.enumerate()})
    assert (delivered, recorder.delivered.empty()) == (first.job_id, True)
    with pytest.raises(RuntimeError, match="shut down"):
        recorder.start()
