"""Capturing the jobs a block of code enqueued.

From the rows, not from ``task_enqueued``: that signal is sent after commit,
which never comes inside a ``TestCase``. The jobs present before the block are
noted, and those present after it and not before are the block's, in the
order they were enqueued. An idempotent enqueue that returned an existing
job enqueued nothing, so it is not captured; a job the block enqueued and a
drain in the block already ran is.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from .. import registry
from ..backend import jobs_backend
from ..models import Job
from ..results import JobResult, build


@contextmanager
def captured_jobs(*, backend: str = "default") -> Iterator[list[JobResult[Any, Any]]]:
    """``with captured_jobs() as jobs:``: once the block ends, ``jobs`` holds its jobs' results."""
    db = jobs_backend(backend).db
    before = set(Job.objects.using(db).filter(backend=backend).values_list("id", flat=True))
    captured: list[JobResult[Any, Any]] = []
    yield captured
    new = (
        Job.objects.using(db)
        .filter(backend=backend)
        .exclude(id__in=before)
        .order_by("enqueued_at", "id")
        .prefetch_related("attempt_set")
    )
    for job in new:
        task = registry.get(job.task_name)
        if task is None:  # enqueue refuses unregistered tasks: only a hand-made row
            raise LookupError(f"Job {job.id} has the unregistered task {job.task_name!r}.")
        captured.append(build(task, job, sorted(job.attempt_set.all(), key=lambda a: a.number)))
