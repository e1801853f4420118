"""Tasks the test suite enqueues; workers import them as this app's tasks module."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from typing import Any

from django.db import IntegrityError
from django.tasks import task

from django_jobs import RetryLater
from django_jobs.tasks import JobContext

from .models import Ledger


@task
def noop() -> None:
    return None


@task
def add(a: int, b: int) -> int:
    return a + b


@task(takes_context=True)
def record(context: JobContext) -> str:
    """Insert a ledger row keyed by the job; a second run of one job raises."""
    Ledger.objects.create(job_key=context.stable_key, attempt=context.attempt)
    return context.stable_key


@task(takes_context=True, max_attempts=10)
def record_once(context: JobContext, seconds: float = 0.0) -> str:
    """Idempotent on the job's stable key, so a re-run after a lost report is harmless."""
    time.sleep(seconds)
    Ledger.objects.get_or_create(job_key=context.stable_key, defaults={"attempt": context.attempt})
    return context.stable_key


@task(takes_context=True, max_attempts=5)
def slow_record(context: JobContext, seconds: float) -> str:
    time.sleep(seconds)
    with contextlib.suppress(IntegrityError):
        Ledger.objects.create(
            job_key=f"{context.stable_key}:{context.attempt}", attempt=context.attempt
        )
    return context.stable_key


@task(takes_context=True, max_attempts=4, backoff=0.05)
def flaky(context: JobContext, failures: int) -> int:
    """Fail with a retryable error on the first ``failures`` attempts."""
    if context.attempt <= failures:
        raise ConnectionError(f"attempt {context.attempt} could not reach the service")
    return context.attempt


@task(max_attempts=3, backoff=0.05)
def always_fails(message: str) -> None:
    raise ValueError(message)


@task(max_attempts=5, give_up_on=(KeyError,))
def gives_up() -> None:
    raise KeyError("no such account")


@task(takes_context=True, max_attempts=2)
def asks_later(context: JobContext) -> int:
    if context.attempt == 1:
        raise RetryLater(0.1, "rate limited")
    return context.attempt


@task
def big_result(size: int) -> str:
    return "x" * size


@task
def returns_set() -> Any:
    return {1, 2}


@task(takes_context=True, max_attempts=3)
def kill_own_worker_once(context: JobContext) -> int:
    """SIGKILL the worker process on the first attempt: the crash the reaper must see."""
    if context.attempt == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    return context.attempt


@task
async def async_add(a: int, b: int) -> int:
    return a + b
