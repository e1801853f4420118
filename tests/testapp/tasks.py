"""Tasks the test suite enqueues; workers import them as this app's tasks module."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from typing import Any

from django.db import IntegrityError

from django_jobs import RetryLater, task
from django_jobs.tasks import JobContext

from .models import Ledger, Probe


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


@task(takes_context=True, max_attempts=1)
def cooperative(context: JobContext, seconds: float) -> str:
    """Checks for cancellation between small steps, as a well-behaved task does."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        context.raise_if_cancelled()
        time.sleep(0.02)
    return "finished"


@task(max_attempts=1)
def spins(seconds: float) -> str:
    """Pure-Python busy work that never looks at cancellation."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass
    return "finished"


@task(max_attempts=1)
def sleeps(seconds: float) -> str:
    time.sleep(seconds)
    return "finished"


@task(timeout=0.5, max_attempts=1)
def sleeps_within_half_a_second(seconds: float) -> str:
    """Sleeps under a timeout of 0.5 s."""
    time.sleep(seconds)
    return "finished"


@task(timeout=1.0, max_attempts=1)
def busy_forever() -> None:
    while True:
        pass


@task(timeout=0.5, max_attempts=1)
def blocked_past_timeout() -> None:
    time.sleep(60)  # a blocking C call: the stop exception cannot land until it returns


@task(timeout=0.5, max_attempts=2)
def hangs_twice(seconds: float) -> None:
    """Like blocked_past_timeout, with an attempt to spare for a lost one before it."""
    time.sleep(seconds)


@task(max_attempts=10)
def crashes_its_worker() -> None:
    """Poison: every attempt takes the worker process down with it."""
    os.kill(os.getpid(), signal.SIGKILL)


@task(max_attempts=3)
def exits(code: int) -> None:
    """End the process at once, as a crash in C would: no exception, no report.

    Only ever run isolated: in a job thread it would end the worker (or the test).
    """
    os._exit(code)


@task(takes_context=True)
def reports_progress(context: JobContext, steps: int) -> str:
    for step in range(1, steps + 1):
        context.set_progress(step, steps, f"step {step}")
    try:
        context.set_progress(1, steps)
    except ValueError as exc:
        return str(exc)
    return "a decrease was accepted"


@task
def summary(order: str) -> dict[str, Any]:
    return {"order": order, "lines": [1, 2, 3], "paid": True}


@task(takes_context=True)
def probe(context: JobContext, seconds: float, key: str = "") -> None:
    """Record the interval this job ran in (see Probe)."""
    started = time.time()
    time.sleep(seconds)
    Probe.objects.create(job_id=context.job_id, key=key, started=started, ended=time.time())


@task
def echo(*args: Any, **kwargs: Any) -> dict[str, Any]:
    """Return what it was called with, so a test sees the types the task received."""
    return {"args": list(args), "kwargs": kwargs}


@task
def batch_done(note: str = "", *, batch: dict[str, Any]) -> dict[str, Any]:
    """A batch callback: returns what it received, so a test reads the counts it was given."""
    return {"note": note, "batch": batch}


@task(max_attempts=20)
def naps(seconds: float) -> None:
    """Long enough that a worker killed mid-batch holds some of its members."""
    time.sleep(seconds)


def _ledger_step(context: JobContext, name: str) -> str:
    Ledger.objects.create(job_key=f"{context.job_id}:{name}", attempt=context.attempt)
    return name


@task(takes_context=True, max_attempts=3)
def steps_until_killed(context: JobContext) -> list[str]:
    """Three steps, each a ledger row; the first attempt waits between two and three.

    The test SIGKILLs its worker there: the re-run must find steps one and two
    recorded and run only step three (a second ledger row of a step would raise).
    """
    done = [context.step(name, _ledger_step, context, name) for name in ("one", "two")]
    if context.attempt == 1:
        time.sleep(60)
    done.append(context.step("three", _ledger_step, context, "three"))
    return done


class Unprintable(Exception):
    """An exception whose message cannot be read: its ``__str__`` raises."""

    def __str__(self) -> str:
        raise RuntimeError("this exception cannot say what went wrong")


@task(max_attempts=1)
def raises_unprintable() -> None:
    raise Unprintable()


@task(max_attempts=1)
def returns_nul() -> str:
    return "a" + chr(0) + "b"


@task(max_attempts=1)
def raises_nul() -> None:
    raise ValueError("bad" + chr(0) + "message")


@task(max_attempts=1)
def returns_surrogate() -> str:
    return "a" + chr(0xD800) + "b"  # half of a UTF-16 pair, alone


@task(max_attempts=1)
def raises_surrogate() -> None:
    raise ValueError("bad" + chr(0xD800) + "message")


@task(max_attempts=1)
def retries_in_nan_seconds() -> None:
    raise RetryLater(float("nan"))


@task(takes_context=True, max_attempts=1)
def counts_past_a_bigint(context: JobContext) -> None:
    context.set_progress(2**63, None, "")


# An exception class whose dotted path is longer than an attempt's error_type column.
LongNamed = type("Long" + "Named" * 60 + "Error", (Exception,), {"__module__": __name__})


@task(max_attempts=1)
def raises_long_named() -> None:
    raise LongNamed("its class's path is 330 characters long")
