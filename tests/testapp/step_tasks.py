"""Tasks the tests of durable steps drain (tests/test_steps.py).

Each step's side effect is a ``Ledger`` row keyed by the job and the step's
name: the unique key makes a second run of one step raise.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from django_jobs import task
from django_jobs.backend import jobs_backend
from django_jobs.models import Job
from django_jobs.tasks import JobContext

from .models import Ledger


def database(context: JobContext) -> str:
    """The database of the job's backend: the tests run on PostgreSQL and on SQLite."""
    return jobs_backend(context.task_result.backend).engine.db


def effect(context: JobContext, name: str) -> str:
    """The side effect of one step: it may happen once per job."""
    Ledger.objects.using(database(context)).create(
        job_key=f"{context.job_id}:{name}", attempt=context.attempt
    )
    return name


@task(takes_context=True, max_attempts=3)
def three_steps(context: JobContext, fail_after: int) -> list[Any]:
    """Steps one, two, three; the first attempt fails after step ``fail_after``."""
    one = context.step("one", effect, context, "one")
    two = context.step("two", lambda: (effect(context, "two"), Decimal("9.90"))[1])
    if context.attempt == 1 and fail_after == 2:
        raise ConnectionError("the partner is down")
    three = context.step("three", effect, context, "three")
    return [one, str(two), type(two).__name__, three]


@task(takes_context=True, max_attempts=2)
def big_number_step(context: JobContext) -> str:
    """Step "big" returns 1e16, which jsonb keeps as an integer; attempt 1 fails after it.

    Each attempt reports the type its step returned: attempt 1 as its error.
    """
    seen = type(context.step("big", lambda: 1e16)).__name__
    if context.attempt == 1:
        raise RuntimeError(seen)
    return seen


@task(takes_context=True, max_attempts=1)
def same_name_twice(context: JobContext) -> None:
    context.step("send", effect, context, "first")
    context.step("send", effect, context, "second")


@task(takes_context=True, max_attempts=3)
def step_returns_a_set(context: JobContext) -> None:
    context.step("tags", lambda: {"a", "b"})


@task(takes_context=True, max_attempts=1)
def sleeps_between_steps(context: JobContext) -> str:
    """Must sleep and wake with one attempt allowed: a sleep does not use one up."""
    context.step("before", effect, context, "before")
    context.sleep(3600)
    context.step("after", effect, context, "after")
    return "woke"


@task(takes_context=True, max_attempts=2)
def loses_its_lease_after_step_one(context: JobContext) -> str:
    """On its first attempt, its lease is released (as the reaper would) after step one."""
    context.step("one", effect, context, "one")
    if context.attempt == 1:
        job = Job.objects.using(database(context)).get(id=context.job_id)
        assert job.leased_by is not None
        reason = "test: released as the reaper would"
        jobs_backend(context.task_result.backend).engine.release_lease(
            job.leased_by, context.job_id, job.attempts, reason
        )
    try:
        # The stale attempt runs the function (it is under way when the lease
        # goes), but cannot record what it returned.
        two = context.step("two", lambda: context.attempt)
    except Exception:  # a task that swallows errors cannot swallow this refusal
        return "swallowed"
    return f"two by attempt {two}"


@task(takes_context=True, max_attempts=1)
def fails_after_charging(context: JobContext) -> str:
    """Charges in a step, then fails on its first attempt only."""
    context.step("charge", effect, context, "charge")
    if context.attempt == 1:
        raise ValueError("the shipping service refused the address")
    return "shipped"
