"""The completer: each outcome becomes exactly one engine call, and none is lost to a fault.

Real PostgreSQL throughout; the jobs are enqueued and claimed through the
engine, the dead child is a real spawned process, and the database fault is
the server terminating the completer's connection.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import socket
import threading
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from django.db import connections
from django.db.models.functions import Now

from django_jobs import AttemptOutcome, JobState, control
from django_jobs.backend import jobs_backend
from django_jobs.engine.postgres import PostgresEngine
from django_jobs.metrics.instruments import (
    MULTIPROCESS_ENV,
    Instruments,
    instruments,
    worker_instruments,
)
from django_jobs.models import Attempt, Job, Worker
from django_jobs.retry import Decision, Verdict
from django_jobs.signals import job_given_back
from django_jobs.states import Transition
from django_jobs.values import ChildDied, Claimed, Finished, Outcome, Report, WorkerIdentity
from django_jobs.worker.completer import Completer
from django_jobs.worker.executor import Executor
from django_jobs.worker.faults import Faults
from django_jobs.worker.runner import given_back
from django_jobs.worker.running import Running
from tests.conftest import terminate_backend_of
from tests.testapp import tasks

pytestmark = pytest.mark.postgres

Key = tuple[uuid.UUID, int]


class RecordingEngine(PostgresEngine):
    """The real PostgreSQL engine, noting which attempts each completing call was given."""

    def __init__(self) -> None:
        real = jobs_backend("default").engine
        super().__init__(real.db, real.options)
        self.calls: list[tuple[str, list[Key]]] = []

    def finish(self, worker_id: uuid.UUID, reports: Sequence[Report]) -> Finished:
        self.calls.append(("finish", [(r.job_id, r.token) for r in reports]))
        return super().finish(worker_id, reports)

    def release_lease(
        self, worker_id: uuid.UUID, job_id: uuid.UUID, token: int, reason: str
    ) -> int:
        self.calls.append(("release_lease", [(job_id, token)]))
        return super().release_lease(worker_id, job_id, token, reason)

    def release_worker(self, worker_id: uuid.UUID, reason: str) -> int:
        self.calls.append(("release_worker", []))
        return super().release_worker(worker_id, reason)


class Setup:
    """A registered worker identity, its running attempts and a completer writing for it."""

    def __init__(self) -> None:
        self.engine = RecordingEngine()
        self.me = WorkerIdentity(uuid.uuid4(), "test:completer")
        self.engine.register_worker(
            self.me, "default", socket.gethostname(), os.getpid(), ["default"], 4
        )
        self.running = Running()
        self.retries: list[float] = []
        self.completer = Completer(
            self.engine,
            self.me.id,
            self.running,
            Faults(self.engine.db, threading.Event()),
            sender=type(jobs_backend("default")),
            on_retry=self.retries.append,
        )

    def claim(self, count: int) -> list[Claimed]:
        got = self.engine.claim(self.me, ["default"], count)
        for claimed in got:
            self.running.start(claimed)
        return got

    def write(self, *outcomes: Outcome) -> list[str]:
        for outcome in outcomes:
            self.completer.submit(outcome)
        self.completer.collect()
        return self.completer.write(lambda: ["claimed"], otherwise=[])


@pytest.fixture
def setup(pg: None) -> Setup:
    return Setup()


def report(claimed: Claimed, outcome: AttemptOutcome, verdict: Verdict | None = None) -> Report:
    return Report(
        job_id=claimed.job_id,
        token=claimed.token,
        attempt_id=claimed.attempt_id,
        outcome=outcome,
        error_type="" if verdict is None else "builtins.ValueError",
        error_message="" if verdict is None else "no",
        decision=None if verdict is None else Decision(verdict, 30.0),
    )


def state(claimed: Claimed) -> tuple[str, str]:
    job = Job.objects.get(id=claimed.job_id)
    return (job.state, Attempt.objects.get(id=claimed.attempt_id).outcome)


def test_completer__every_outcome_is_one_engine_call_in_one_batch(setup: Setup) -> None:
    for n in range(5):
        tasks.add.enqueue(n, n)
    done, retried, timed_out, cancelled, died = setup.claim(5)
    control.cancel(str(cancelled.job_id), actor="ops")  # running: it turns cancelling
    written = setup.write(
        report(done, AttemptOutcome.SUCCEEDED),
        report(retried, AttemptOutcome.FAILED, Verdict.RETRY),
        report(timed_out, AttemptOutcome.TIMED_OUT, Verdict.EXHAUSTED),
        report(cancelled, AttemptOutcome.CANCELLED, Verdict.GIVE_UP),
        ChildDied(died.job_id, died.token, died.attempt_id, exit_code=-9),
    )
    keys = [(c.job_id, c.token) for c in (done, retried, timed_out, cancelled)]
    assert setup.engine.calls == [
        ("finish", keys),
        ("release_lease", [(died.job_id, died.token)]),
    ]
    assert written == ["claimed"]
    assert [state(c) for c in (done, retried, timed_out, cancelled, died)] == [
        (JobState.SUCCEEDED, AttemptOutcome.SUCCEEDED),
        (JobState.QUEUED, AttemptOutcome.FAILED),
        (JobState.EXHAUSTED, AttemptOutcome.TIMED_OUT),
        (JobState.CANCELLED, AttemptOutcome.CANCELLED),
        (JobState.QUEUED, AttemptOutcome.LOST),
    ]
    assert len(setup.running) == 0 and setup.completer.pending == 0
    assert setup.completer.jobs_done == 4
    assert len(setup.retries) == 1  # the producer is told when the retry is due
    assert not Job.objects.filter(leased_by__isnull=False).exists()


def test_completer__an_attempt_given_back_unstarted_keeps_the_jobs_run_of_lost_attempts(
    setup: Setup,
) -> None:
    tasks.add.enqueue(1, 1)
    for _ in range(2):
        (lost,) = setup.engine.claim(setup.me, ["default"], 1)
        setup.engine.release_lease(setup.me.id, lost.job_id, lost.token, "its process died")
    (unstarted,) = setup.claim(1)
    setup.write(given_back((unstarted.job_id, unstarted.token), unstarted.attempt_id, "not run"))
    (again,) = setup.engine.claim(setup.me, ["default"], 1)
    setup.engine.release_lease(setup.me.id, again.job_id, again.token, "its process died")
    outcomes = Attempt.objects.filter(job_id=again.job_id).order_by("number")
    assert (again.suspect, Job.objects.get(id=again.job_id).state) == (True, JobState.QUARANTINED)
    assert [a.outcome for a in outcomes] == ["lost", "lost", "not_started", "lost"]


def test_completer__an_attempt_given_back_unstarted_is_signalled_as_given_back(
    setup: Setup,
) -> None:
    tasks.add.enqueue(1, 1)
    (unstarted,) = setup.claim(1)
    heard: list[tuple[str, str]] = []

    def receiver(transition: str, to_state: str, **kwargs: Any) -> None:
        heard.append((transition, to_state))

    job_given_back.connect(receiver)
    try:
        setup.write(given_back((unstarted.job_id, unstarted.token), unstarted.attempt_id, "no"))
    finally:
        job_given_back.disconnect(receiver)

    assert heard == [(Transition.GIVE_BACK, JobState.QUEUED)]


def test_completer__an_attempt_given_back_unstarted_is_no_job_done(setup: Setup) -> None:
    tasks.add.enqueue(1, 1)
    (unstarted,) = setup.claim(1)

    setup.write(given_back((unstarted.job_id, unstarted.token), unstarted.attempt_id, "no"))

    registered = Worker.objects.get(id=setup.me.id)
    assert (setup.completer.jobs_done, registered.jobs_done) == (0, 0)  # what --max-jobs counts


@pytest.fixture
def worker_metrics(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Instruments]:
    """The worker's metrics recorded in this process, as ``runworkers --metrics-port`` has them.

    Made before the variable is set: prometheus-client picks where values live
    when it is imported, and the rest of the suite's stay in memory.
    """
    instruments()
    monkeypatch.setenv(MULTIPROCESS_ENV, str(tmp_path))
    worker_instruments.cache_clear()
    metrics = worker_instruments()
    assert metrics is not None
    yield metrics
    monkeypatch.undo()
    worker_instruments.cache_clear()


def test_completer__an_attempt_given_back_unstarted_is_no_error_no_retry_and_no_run_time(
    setup: Setup, worker_metrics: Instruments
) -> None:
    job = tasks.add.enqueue(1, 1)
    (failed,) = setup.claim(1)
    setup.write(report(failed, AttemptOutcome.FAILED, Verdict.RETRY))
    Job.objects.filter(id=job.id).update(run_after=Now())  # its backoff over
    (unstarted,) = setup.claim(1)
    before = _counts(worker_metrics)

    setup.write(given_back((unstarted.job_id, unstarted.token), unstarted.attempt_id, "not run"))

    after = _counts(worker_metrics)
    job.refresh()
    ran = Attempt.objects.get(id=failed.attempt_id)
    assert (Job.objects.get(id=job.id).last_error, len(job.errors), job.worker_ids) == (
        "builtins.ValueError: no",
        1,
        [str(setup.me.id)],
    )
    assert (job.last_attempted_at, len(job.attempt_log)) == (ran.started_at, 2)
    assert {name: after[name] - before[name] for name in after} == {
        "finished not_started": 1,
        "finished failed": 0,
        "retries": 0,
        "duration": 0,
    }


def _counts(metrics: Instruments) -> dict[str, float]:
    """The worker's counts of attempts of tests.testapp.tasks.add, as they stand."""
    labels = ("default", "tests.testapp.tasks.add")
    duration = metrics.duration.labels(*labels).collect()[0].samples
    return {
        "finished not_started": metrics.finished.labels(*labels, "not_started")._value.get(),
        "finished failed": metrics.finished.labels(*labels, "failed")._value.get(),
        "retries": metrics.retries.labels(*labels)._value.get(),
        "duration": next(s.value for s in duration if s.name.endswith("_count")),
    }


def test_completer__outcomes_and_the_next_claim_share_one_transaction(setup: Setup) -> None:
    tasks.add.enqueue(1, 1)
    (claimed,) = setup.claim(1)
    connection = connections["default"]
    setup.completer.submit(report(claimed, AttemptOutcome.SUCCEEDED))
    setup.completer.collect()
    with_outcomes = setup.completer.write(lambda: connection.in_atomic_block, otherwise=None)
    alone = setup.completer.write(lambda: connection.in_atomic_block, otherwise=None)
    assert (with_outcomes, alone) == (True, False)  # a claim alone runs in autocommit


def test_completer__a_dead_child_loses_its_attempt_and_requeues_the_job(setup: Setup) -> None:
    tasks.exits.enqueue(3)
    (claimed,) = setup.claim(1)
    suspect = dataclasses.replace(claimed, suspect=True)
    executor = Executor(jobs_backend("default"), setup.me.id, deliver=lambda outcome: None)
    outcome = executor.execute(suspect, setup.running.snapshot()[(claimed.job_id, 1)].control)
    setup.write(outcome)
    job = Job.objects.get(id=claimed.job_id)
    attempt = Attempt.objects.get(id=claimed.attempt_id)
    assert isinstance(outcome, ChildDied)
    assert (job.state, job.lost_streak, attempt.outcome) == (JobState.QUEUED, 1, "lost")
    assert attempt.error_message == "isolated attempt's process died (exit 3)"
    assert setup.engine.calls == [("release_lease", [(claimed.job_id, 1)])]
    (again,) = setup.engine.claim(setup.me, ["default"], 1)
    assert (again.job_id, again.token, again.suspect) == (claimed.job_id, 2, True)


def test_completer__outcomes_survive_a_database_fault_and_are_written_later(
    setup: Setup, caplog: pytest.LogCaptureFixture
) -> None:
    tasks.add.enqueue(1, 1)
    tasks.exits.enqueue(1)
    done, died = setup.claim(2)
    terminate_backend_of("default")
    with caplog.at_level(logging.WARNING, logger="django_jobs.worker"):
        first = setup.write(
            report(done, AttemptOutcome.SUCCEEDED),
            ChildDied(died.job_id, died.token, died.attempt_id, exit_code=1),
        )
    assert first == []
    assert "Database unavailable during report and claim" in caplog.text
    assert (setup.completer.pending, len(setup.running)) == (2, 2)
    assert [state(c) for c in (done, died)] == [(JobState.RUNNING, AttemptOutcome.RUNNING)] * 2
    assert setup.write() == ["claimed"]
    assert [state(c) for c in (done, died)] == [
        (JobState.SUCCEEDED, AttemptOutcome.SUCCEEDED),
        (JobState.QUEUED, AttemptOutcome.LOST),
    ]
    assert (setup.completer.pending, len(setup.running)) == (0, 0)


def test_completer__an_abandoned_attempt_is_written_once_from_its_held_report(
    setup: Setup,
) -> None:
    tasks.add.enqueue(1, 1)
    (claimed,) = setup.claim(1)
    key = (claimed.job_id, claimed.token)
    setup.running.abandon(key)
    setup.completer.hold(report(claimed, AttemptOutcome.TIMED_OUT, Verdict.GIVE_UP))
    # The thread ends after all: its outcome must not be written as well.
    setup.write(report(claimed, AttemptOutcome.SUCCEEDED))
    assert setup.engine.calls == [] and setup.completer.pending == 0
    setup.completer.write_held()
    assert setup.engine.calls == [("finish", [key])]
    assert state(claimed) == (JobState.FAILED, AttemptOutcome.TIMED_OUT)
    assert len(setup.running) == 0


RESULTS_CAPPED = "octet_length(result::text) <= 100"  # below MAX_RESULT_BYTES


def capped_out(claimed: Claimed) -> Report:
    """A success whose result RESULTS_CAPPED refuses."""
    return dataclasses.replace(report(claimed, AttemptOutcome.SUCCEEDED), result="x" * 200)


def test_completer__a_report_the_database_refuses_fails_its_job_and_holds_no_other(
    setup: Setup, job_check: Callable[[str], str], caplog: pytest.LogCaptureFixture
) -> None:
    capped = job_check(RESULTS_CAPPED)
    for n in range(3):
        tasks.add.enqueue(n, n)
    before, refused, after = setup.claim(3)
    with caplog.at_level(logging.WARNING, logger="django_jobs.worker"):
        written = setup.write(
            report(before, AttemptOutcome.SUCCEEDED),
            capped_out(refused),
            report(after, AttemptOutcome.SUCCEEDED),
        )
    job, attempt = Job.objects.get(id=refused.job_id), Attempt.objects.get(id=refused.attempt_id)
    assert written == ["claimed"]
    assert "The database refused a batch of 3 reports (IntegrityError" in caplog.text
    assert [state(c) for c in (before, refused, after)] == [
        (JobState.SUCCEEDED, AttemptOutcome.SUCCEEDED),
        (JobState.FAILED, AttemptOutcome.FAILED),
        (JobState.SUCCEEDED, AttemptOutcome.SUCCEEDED),
    ]
    assert (job.result, attempt.error_type) == (None, "django_jobs.exceptions.ReportRefusedError")
    assert f'violates check constraint "{capped}"' in attempt.error_message
    assert "The attempt ended succeeded; what it reported is not stored." in job.last_error
    assert (setup.completer.pending, len(setup.running)) == (0, 0)


def test_completer__a_report_refused_even_as_a_failure_stays_to_be_written_and_its_row_unlogged(
    setup: Setup, job_check: Callable[[str], str], caplog: pytest.LogCaptureFixture
) -> None:
    job_check(RESULTS_CAPPED)
    job_check("state <> 'failed'")  # nor may a job fail
    tasks.echo.enqueue("a secret argument")
    (claimed,) = setup.claim(1)
    with caplog.at_level(logging.DEBUG, logger="django_jobs.worker"):
        written = setup.write(capped_out(claimed))
    assert written == []
    assert state(claimed) == (JobState.RUNNING, AttemptOutcome.RUNNING)
    assert setup.completer.pending == 1
    assert (
        "Database refusing a write during report and claim (IntegrityError: new row for relation "
        '"django_jobs_job" violates check constraint "dba_check_1"); retrying.'
    ) in caplog.text
    assert "secret" not in caplog.text


def test_completer__a_batch_written_after_a_refused_one_is_one_engine_call_again(
    setup: Setup, job_check: Callable[[str], str]
) -> None:
    job_check(RESULTS_CAPPED)
    for n in range(4):
        tasks.add.enqueue(n, n)
    refused, *rest = setup.claim(4)
    setup.write(capped_out(refused))
    setup.engine.calls.clear()
    setup.write(*(report(c, AttemptOutcome.SUCCEEDED) for c in rest))
    assert setup.engine.calls == [("finish", [(c.job_id, c.token) for c in rest])]


def test_completer__a_held_report_the_database_refuses_is_written_as_a_failure(
    setup: Setup, job_check: Callable[[str], str]
) -> None:
    job_check(RESULTS_CAPPED)
    tasks.add.enqueue(1, 1)
    (claimed,) = setup.claim(1)
    setup.running.abandon((claimed.job_id, claimed.token))
    setup.completer.hold(capped_out(claimed))
    setup.completer.write_held()
    attempt = Attempt.objects.get(id=claimed.attempt_id)
    assert state(claimed) == (JobState.FAILED, AttemptOutcome.FAILED)
    assert attempt.error_type == "django_jobs.exceptions.ReportRefusedError"


def test_completer__task_finished_carries_the_running_result_but_for_how_it_ended(
    setup: Setup,
) -> None:
    from django_jobs.framework import task_finished
    from django_jobs.worker.runner import TaskRunner

    tasks.add.using(priority=7).enqueue(2, b=3)
    (claimed,) = setup.claim(1)
    attempt = setup.running.snapshot()[(claimed.job_id, claimed.token)]
    outcome = TaskRunner(jobs_backend("default"), setup.me.id).run(claimed, attempt.control)
    seen: list[Any] = []

    def receiver(sender: Any, task_result: Any, **kwargs: Any) -> None:
        seen.append(task_result)

    task_finished.connect(receiver)
    try:
        setup.write(outcome)
    finally:
        task_finished.disconnect(receiver)
    [sent] = seen
    ended = {"status", "state", "finished_at", "errors", "last_error", "_return_value"}

    def kept(result: Any) -> dict[str, Any]:
        return {f.name: getattr(result, f.name) for f in dataclasses.fields(result)} | {
            name: None for name in ended
        }

    assert kept(sent) == kept(attempt.control.result)
    assert (sent.status, sent.return_value, sent.errors) == ("SUCCESSFUL", 5, [])


def test_completer__sends_djangos_task_finished_for_what_it_wrote(setup: Setup) -> None:
    from django_jobs.framework import task_finished
    from django_jobs.worker.runner import TaskRunner

    tasks.add.enqueue(2, 3)
    (claimed,) = setup.claim(1)
    attempt = setup.running.snapshot()[(claimed.job_id, claimed.token)]
    outcome = TaskRunner(jobs_backend("default"), setup.me.id).run(claimed, attempt.control)
    seen: list[Any] = []

    def receiver(sender: Any, task_result: Any, **kwargs: Any) -> None:
        seen.append((task_result.id, task_result.status, task_result.return_value))

    task_finished.connect(receiver)
    try:
        setup.write(outcome)
    finally:
        task_finished.disconnect(receiver)
    assert seen == [(str(claimed.job_id), "SUCCESSFUL", 5)]
