"""Building a job row from a call's options: the one place that knows every column's start.

Apart from ``enqueue`` (which needs the engine) so that the engine itself can
build rows too (a batch's callback, in ``engine/batches.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from functools import cache
from typing import Any

from django.utils import timezone

from .ids import new_id
from .models import Job


def dedup_scope(task_name: str, tenant: str) -> str:
    return f"{task_name}|{tenant}"


def new_job(
    *,
    backend: str,
    task_name: str,
    task_version: str,
    args: list[Any],
    kwargs: dict[str, Any],
    queue: str,
    priority: int,
    run_after: datetime | None,
    expires_at: datetime | None,
    tenant: str,
    initiator: str,
    idempotency_key: str | None,
    unique_key: str | None,
    concurrency_key: str | None,
    max_attempts: int,
    timeout: float | None,
    now: datetime | None = None,
) -> Job:
    # The id first: its time (whole milliseconds) is then never after the
    # enqueue's stamp, however long the process waits for a core in between.
    job_id = new_id()
    now = now or timezone.now()
    given = {
        "id": job_id,
        "backend": backend,
        "task_name": task_name,
        "task_version": task_version,
        "args": args,
        "kwargs": kwargs,
        "queue": queue,
        "priority": priority,
        "run_after": run_after or now,
        "expires_at": expires_at,
        "tenant": tenant,
        "initiator": initiator,
        "idempotency_key": idempotency_key,
        "dedup_scope": dedup_scope(task_name, tenant),
        "unique_key": unique_key,
        "concurrency_key": concurrency_key,
        "max_attempts": max_attempts,
        "attempt_budget": max_attempts,
        "timeout": timeout,
        "enqueued_at": now,
        "updated_at": now,
    }
    # Positional, every field in order: Django's keyword path looks up and pops
    # each field's default, which was most of enqueue_many's time (0.60 against
    # 0.16 s for 20,000 jobs).
    values = [given[name] if name in given else default() for name, default in columns()]
    positional: Callable[..., Job] = Job  # django-stubs types keyword construction only
    return positional(*values)


@cache
def columns() -> list[tuple[str, Callable[[], Any]]]:
    return [(f.attname, f.get_default) for f in Job._meta.concrete_fields]
