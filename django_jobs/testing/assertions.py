"""Asserting what is enqueued, from the jobs table, with a message that shows what is there.

They read the rows, not a record kept by a test backend: a job enqueued in
the test's transaction (not committed, inside a ``TestCase``) counts, and so
does one a task enqueued during a drain. "Enqueued" is a job not started
yet: ``queued`` (due now or scheduled) or ``waiting`` for other jobs. When an
assertion fails, its message lists every such job of the task, as Oban's
``assert_enqueued`` does, so a wrong argument is seen at once.

Arguments are compared as they are stored, as JSON: ``args=(1, 2)`` matches a
job enqueued with ``enqueue(1, 2)``.
"""

from __future__ import annotations

import json
from typing import Any

from ..backend import jobs_backend
from ..codec import to_json
from ..framework import Task
from ..models import Job
from ..states import JobState

# Not started yet: what "enqueued" means here.
ENQUEUED_STATES = (JobState.QUEUED, JobState.WAITING)


def enqueued_jobs(
    task: Task[Any, Any] | str | None = None, *, backend: str = "default"
) -> list[Job]:
    """The jobs of ``task`` (every task's, if None) not started yet, oldest first."""
    jobs = (
        Job.objects.using(jobs_backend(backend).db)
        .filter(backend=backend, state__in=ENQUEUED_STATES)
        .order_by("enqueued_at", "id")
    )
    if task is not None:
        jobs = jobs.filter(task_name=_task_name(task))
    return list(jobs)


def assert_enqueued(
    task: Task[Any, Any] | str,
    *,
    args: Any = None,
    kwargs: Any = None,
    queue: str | None = None,
    count: int | None = None,
    backend: str = "default",
) -> list[Job]:
    """Fail unless jobs of ``task`` with these arguments are enqueued; return them.

    ``args`` and ``kwargs`` are compared exactly; one left out matches any.
    ``count`` asks for exactly that many; by default, at least one.
    """
    _task_name(task)  # None would match every task's jobs
    if count is not None and (isinstance(count, bool) or not isinstance(count, int) or count < 0):
        raise ValueError(f"count must be a whole number >= 0, not {count!r}.")
    wanted = _wanted(args, kwargs, queue)
    found = _matching(task, wanted, backend)
    if (count is None and found) or count == len(found):
        return found
    expected = "at least 1 job" if count is None else f"{count} job(s)"
    raise AssertionError(
        f"Expected {expected} of {_task_name(task)}{_described(wanted)} enqueued on backend "
        f"{backend!r}; found {len(found)}.\n{_listing(task, backend)}"
    )


def assert_not_enqueued(
    task: Task[Any, Any] | str,
    *,
    args: Any = None,
    kwargs: Any = None,
    queue: str | None = None,
    backend: str = "default",
) -> None:
    """Fail if any job of ``task`` with these arguments is enqueued (any, if none given)."""
    _task_name(task)  # None would match every task's jobs
    wanted = _wanted(args, kwargs, queue)
    found = _matching(task, wanted, backend)
    if found:
        raise AssertionError(
            f"Expected no job of {_task_name(task)}{_described(wanted)} enqueued on backend "
            f"{backend!r}; found {len(found)}.\n{_listing(task, backend)}"
        )


def _task_name(task: Task[Any, Any] | str) -> str:
    if isinstance(task, Task):
        return task.module_path
    if isinstance(task, str) and task:
        return task
    raise TypeError(f"task must be a task or its dotted name, not {task!r}.")


def _wanted(args: Any, kwargs: Any, queue: str | None) -> dict[str, Any]:
    """The fields to match, as the jobs table stores them."""
    wanted: dict[str, Any] = {}
    if args is not None:
        if isinstance(args, str | bytes | dict) or not hasattr(args, "__iter__"):
            raise TypeError(f"args must be a list or tuple of arguments, not {args!r}.")
        wanted["args"] = _as_stored("args", list(args))
    if kwargs is not None:
        if not isinstance(kwargs, dict):
            raise TypeError(f"kwargs must be a dict, not {kwargs!r}.")
        wanted["kwargs"] = _as_stored("kwargs", kwargs)
    if queue is not None:
        if not isinstance(queue, str) or not queue:
            raise TypeError(f"queue must be a queue name, not {queue!r}.")
        wanted["queue"] = queue
    return wanted


def _as_stored(name: str, value: Any) -> Any:
    """As the row holds it: the stored form (a UUID as its tag, codec.py), through JSON."""
    return json.loads(json.dumps(to_json(value, name, TypeError)))


def _matching(task: Task[Any, Any] | str, wanted: dict[str, Any], backend: str) -> list[Job]:
    return [
        job
        for job in enqueued_jobs(task, backend=backend)
        if all(_same(getattr(job, name), value) for name, value in wanted.items())
    ]


def _same(stored: Any, wanted: Any) -> bool:
    """Equal as JSON: Python's ``==`` takes ``True`` for ``1`` and ``1.0`` for ``1``."""
    return json.dumps(stored, sort_keys=True) == json.dumps(wanted, sort_keys=True)


def _described(wanted: dict[str, Any]) -> str:
    return "".join(f" {name}={value!r}" for name, value in wanted.items())


def _listing(task: Task[Any, Any] | str, backend: str) -> str:
    """Every job of the task not started yet, one a line: what the caller gets to compare."""
    jobs = enqueued_jobs(task, backend=backend)
    if not jobs:
        return f"No job of {_task_name(task)} is enqueued."
    lines = [
        f"  queue={job.queue!r} args={job.args!r} kwargs={job.kwargs!r} state={job.state}"
        f" run_after={job.run_after.isoformat()}"
        for job in jobs
    ]
    return f"Enqueued jobs of {_task_name(task)} ({len(jobs)}):\n" + "\n".join(lines)
