"""Tasks the tests of django_jobs.testing drain (tests/test_testing.py)."""

from __future__ import annotations

import time
from typing import Any

from django.db import connection

from django_jobs import Backoff, task
from django_jobs.tasks import JobContext

from . import tasks


@task(takes_context=True, max_attempts=3, backoff=Backoff(base=3600, cap=7200))
def fails_first(context: JobContext, failures: int) -> int:
    """Fail the first ``failures`` attempts, with a backoff no test could sleep through."""
    if context.attempt <= failures:
        raise ConnectionError(f"attempt {context.attempt} could not reach the service")
    return context.attempt


@task(timeout=0.2, max_attempts=1)
def spins_past_timeout() -> str:
    """Busy in Python, so the timeout's exception lands at once; gives up after 30s."""
    end = time.monotonic() + 30
    while time.monotonic() < end:
        pass
    return "never stopped"


@task(takes_context=True)
def context_summary(context: JobContext) -> dict[str, Any]:
    return {
        "job_id": str(context.job_id),
        "attempt": context.attempt,
        "last": context.is_last_attempt,
    }


@task
def enqueues_itself() -> None:
    enqueues_itself.enqueue()


@task
def fans_out(count: int, backend: str) -> None:
    for _ in range(count):
        tasks.noop.using(backend=backend).enqueue()


@task(max_attempts=2)
def divides_by_zero_in_sql() -> None:
    """A database error of the task's own: in a TestCase it aborts the test's transaction."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1/0")
