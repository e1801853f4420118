"""Logs that carry the error: the job's fields, the traceback, and nothing per success.

What a real ``runworkers`` prints at its default verbosity, and the records
behind it (their ``extra=`` fields, through ``JSONFormatter``).
"""

from __future__ import annotations

import json
import logging
import socket
import threading
import uuid
from collections.abc import Callable

import pytest
from django.db import IntegrityError, OperationalError
from django.utils import timezone

from django_jobs import AttemptOutcome, JobState
from django_jobs.logging import JSONFormatter
from django_jobs.retry import Decision, Verdict
from django_jobs.values import Claimed, Report
from django_jobs.worker.faults import Faults
from django_jobs.worker.outcome_logs import log_applied
from django_jobs.worker.runner import given_back
from tests.testapp import tasks

Burst = Callable[..., str]


@pytest.mark.postgres
def test_runworkers__a_final_failure_is_logged_with_the_job_and_the_traceback(
    pg: None, run_burst: Burst
) -> None:
    result = tasks.always_fails.enqueue("the ledger is closed")

    output = run_burst()

    lines = output.splitlines()
    final = next(i for i, line in enumerate(lines) if " ERROR " in line and result.id in line)
    assert lines[final].endswith(
        f"django_jobs.jobs: Job {result.id} (tests.testapp.tasks.always_fails, queue default) "
        "attempt 3 failed: builtins.ValueError: the ledger is closed; exhausted: no attempt "
        "left of 3"
    )
    assert lines[final + 1] == "Traceback (most recent call last):"
    traceback = "\n".join(lines[final + 1 : final + 12])
    assert "raise ValueError(message)" in traceback
    assert "ValueError: the ledger is closed" in traceback
    retries = [line for line in lines if " WARNING " in line and result.id in line]
    assert [line.split(" attempt ")[1].split(" ")[0] for line in retries] == ["1", "2"]


@pytest.mark.postgres
def test_runworkers__logs_its_start_and_stop_and_no_line_per_successful_job(
    pg: None, run_burst: Burst
) -> None:
    result = tasks.add.enqueue(1, 2)

    output = run_burst("--concurrency", "3")

    assert result.id not in output
    assert f"Worker {socket.gethostname()}:" in output
    assert (
        "backend default): queues=default,other concurrency=3 burst; wake-ups by LISTEN" in output
    )
    assert "starting 1 worker process(es) for backend default: queues=all concurrency=3" in output
    assert "stopped after 1 jobs (exit code 0)." in output


def failed_attempt() -> tuple[Claimed, Report]:
    now = timezone.now()
    claimed = Claimed(
        job_id=uuid.uuid4(),
        attempt_id=7,
        token=2,
        task_name="billing.tasks.charge",
        args=[],
        kwargs={},
        queue="payments",
        priority=0,
        max_attempts=5,
        timeout=None,
        tenant="",
        idempotency_key=None,
        backend="default",
        enqueued_at=now,
        started_at=now,
    )
    try:
        raise ConnectionError("card processor unreachable")
    except ConnectionError as exc:
        error = exc
    report = Report(
        job_id=claimed.job_id,
        token=claimed.token,
        attempt_id=claimed.attempt_id,
        outcome=AttemptOutcome.FAILED,
        error_type="builtins.ConnectionError",
        error_message=str(error),
        traceback="",
        decision=Decision(Verdict.RETRY, 4.0),
        exception=error,
    )
    return claimed, report


def test_log_applied__a_retry_is_a_warning_with_the_fields_and_the_exception(
    caplog: pytest.LogCaptureFixture,
) -> None:
    claimed, report = failed_attempt()

    with caplog.at_level(logging.INFO, logger="django_jobs.jobs"):
        log_applied(report, JobState.QUEUED, claimed)

    [record] = caplog.records
    assert (record.levelname, record.getMessage()) == (
        "WARNING",
        f"Job {claimed.job_id} (billing.tasks.charge, queue payments) attempt 2 failed: "
        "builtins.ConnectionError: card processor unreachable; retry scheduled in 4.0s",
    )
    fields = {name: getattr(record, name) for name in ("job_id", "task", "queue", "attempt")}
    assert fields == {
        "job_id": str(claimed.job_id),
        "task": "billing.tasks.charge",
        "queue": "payments",
        "attempt": 2,
    }
    assert record.exc_info is not None and record.exc_info[1] is report.exception


def test_log_applied__an_attempt_given_back_unstarted_is_info_without_a_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    claimed, _ = failed_attempt()
    report = given_back((claimed.job_id, claimed.token), claimed.attempt_id, "claimed ahead")

    with caplog.at_level(logging.INFO, logger="django_jobs.jobs"):
        log_applied(report, JobState.QUEUED, claimed)

    [record] = caplog.records
    assert (record.levelname, record.getMessage(), record.exc_info) == (
        "INFO",
        f"Job {claimed.job_id} (billing.tasks.charge, queue payments) attempt 2 did not start: "
        "django_jobs.exceptions.AttemptNotStartedError: claimed ahead; given back to its "
        "queue; the attempt is not counted",
        None,
    )


def test_json_formatter__writes_the_fields_and_the_traceback_as_one_object(
    caplog: pytest.LogCaptureFixture,
) -> None:
    claimed, report = failed_attempt()
    with caplog.at_level(logging.INFO, logger="django_jobs.jobs"):
        log_applied(report, JobState.EXHAUSTED, claimed)

    entry = json.loads(JSONFormatter().format(caplog.records[0]))

    assert {key: entry[key] for key in ("level", "logger", "job_id", "task", "queue")} == {
        "level": "ERROR",
        "logger": "django_jobs.jobs",
        "job_id": str(claimed.job_id),
        "task": "billing.tasks.charge",
        "queue": "payments",
    }
    assert (entry["attempt"], entry["state"], entry["exc_type"]) == (
        2,
        "exhausted",
        "ConnectionError",
    )
    assert entry["traceback"].startswith("Traceback (most recent call last):")
    assert entry["traceback"].endswith("ConnectionError: card processor unreachable")


def test_faults__an_outage_is_logged_once_and_its_end_with_how_long_it_took(
    caplog: pytest.LogCaptureFixture, pg: None
) -> None:
    faults = Faults("default", stopping=threading.Event())
    refused = OperationalError("connection refused")

    with caplog.at_level(logging.WARNING, logger="django_jobs.worker"):
        faults.note("report and claim", refused)
        faults.note("heartbeat", refused)
        faults.recovered()
        faults.recovered()

    messages = [record.getMessage() for record in caplog.records]
    assert (
        messages[0]
        == "Database unavailable during report and claim (connection refused); retrying."
    )
    assert messages[1].startswith("Database available again after ")
    assert messages[1].endswith("s (2 failed tries).")
    assert len(messages) == 2


@pytest.mark.parametrize(
    ("errors", "end"),
    [
        ([IntegrityError("a check constraint")], "Database accepting the refused write after "),
        (
            [IntegrityError("a check constraint"), OperationalError("connection refused")],
            "Database available again after ",
        ),
    ],
)
def test_faults__the_end_of_refused_writes_is_not_said_as_the_database_back(
    caplog: pytest.LogCaptureFixture, pg: None, errors: list[Exception], end: str
) -> None:
    """A database that answered all along only refused: it was never unavailable."""
    faults = Faults("default", stopping=threading.Event())

    with caplog.at_level(logging.WARNING, logger="django_jobs.worker"):
        for error in errors:
            faults.note("report and claim", error)
        faults.recovered()

    assert caplog.records[-1].getMessage().startswith(end)
