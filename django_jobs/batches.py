"""Batches: jobs enqueued together, and callbacks enqueued once when they are all done.

::

    with django_jobs.batch(on_success=callback(report, month), on_finish=cleanup) as b:
        for account in accounts:
            bill.enqueue(account.id)

Every job enqueued in the block (``enqueue`` or ``enqueue_many``, on a
backend of the same database) is a *member*. The block is one transaction
(a savepoint inside yours): if it raises, the batch and every member are
rolled back with it; if it ends, the batch is *sealed* with its total.

A member *settles* when it reaches a final state: succeeded; failed,
exhausted, expired or quarantined (counted ``failed``); cancelled or
discarded (counted ``cancelled``). ``on_finish`` is enqueued once, when every
member has settled; ``on_success`` once, when every member has succeeded —
possibly later than ``on_finish``, if an operator retries the members that
failed and they succeed. Each callback is enqueued in the transaction of the
state change that made it due (``engine/batches.py``), with the batch's
counts as its ``batch`` keyword argument; never twice.

The rules where a choice had to be made (docs/batches.md has them too):

* The counters say where the members are *now*: an operator's retry (or
  release) of a settled member takes it out of its counter until it settles
  again. A callback already enqueued is not enqueued again.
* An empty batch is due when its block ends: both callbacks are enqueued
  with zero counts.
* Batches do not nest: a ``batch()`` inside another is refused.
* A job whose idempotency key returns an existing job is not a member: the
  existing job was not enqueued by the block.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from django.db import transaction
from django.utils import timezone

from .backend import JobsBackend, jobs_backend
from .exceptions import BatchError
from .framework import Task
from .membership import open_batch
from .payload import check_arguments

if TYPE_CHECKING:
    from .models import Batch

# Options a callback cannot take: they belong to one enqueue, not to "later, once".
_REFUSED_OPTIONS = ("run_after", "expires_at", "idempotency_key", "after")


@dataclass(frozen=True, slots=True)
class Callback:
    """A task to enqueue when a batch is done, with its own arguments.

    The callback also receives ``batch=``: the batch's id, label and counts
    (total, succeeded, failed, cancelled) when it became due.
    """

    task: Task[Any, Any]
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)


def callback(task: Task[Any, Any], /, *args: Any, **kwargs: Any) -> Callback:
    """``callback(report, month)``: call ``report(month, batch=...)`` when the batch is done."""
    return Callback(task, args, kwargs)


@contextmanager
def batch(
    *,
    on_success: Task[Any, Any] | Callback | None = None,
    on_finish: Task[Any, Any] | Callback | None = None,
    label: str = "",
    backend: str = "default",
) -> Iterator[Batch]:
    """Make every job enqueued in the block a member of a new batch; see the module docstring.

    The callbacks are checked before anything is written: a registered
    task of a backend on the same database, arguments it can be called
    with (plus ``batch=``), and no per-enqueue option (``run_after``,
    ``expires_at``, ``idempotency_key``, ``after``). Yields the ``Batch``;
    once the block ends, its ``total`` is set.
    """
    from .engine.batches import seal
    from .models import Batch
    from .states import BatchState

    jobs = jobs_backend(backend)
    outer = open_batch.get()
    if outer is not None:
        raise BatchError(
            f"Batches do not nest: this block is already inside batch {outer.id}. "
            "Enqueue the jobs in the outer batch, or end it first."
        )
    if not isinstance(label, str) or len(label) > 255:
        raise BatchError("label must be a string of at most 255 characters.")
    stored = {
        "on_success": _stored(jobs, "on_success", on_success),
        "on_finish": _stored(jobs, "on_finish", on_finish),
    }
    db = jobs.db
    with transaction.atomic(using=db):
        opened = Batch.objects.using(db).create(
            backend=backend,
            label=label,
            state=BatchState.OPEN,
            created_at=timezone.now(),
            **stored,
        )
        token = open_batch.set(opened)
        try:
            yield opened
        finally:
            open_batch.reset(token)
        seal(db, opened)


def _stored(
    jobs: JobsBackend, name: str, given: Task[Any, Any] | Callback | None
) -> dict[str, Any] | None:
    """A callback as the batch row keeps it: task name, stored arguments, job options."""
    if given is None:
        return None
    wanted = given if isinstance(given, Callback) else Callback(given)
    task = wanted.task
    if not isinstance(task, Task):
        raise BatchError(f"{name} must be a task or callback(task, ...), not {task!r}.")
    where = f"{name} ({task.module_path})"
    owner = jobs_backend(task.backend)
    if owner.db != jobs.db:
        raise BatchError(
            f"{where} runs on backend {task.backend!r}, whose jobs are in database "
            f"{owner.db!r}; the batch's are in {jobs.db!r}."
        )
    owner._check_task(task)
    for option in _REFUSED_OPTIONS:
        if getattr(task, option, None):
            raise BatchError(f"{where}: a callback does not take {option}; it runs once, when due.")
    if "batch" in wanted.kwargs:
        raise BatchError(f"{where}: the keyword argument batch is the batch's, not yours.")
    _check_signature(task, where, wanted)
    encoded = check_arguments(
        list(wanted.args), dict(wanted.kwargs), owner.settings.MAX_PAYLOAD_BYTES
    )
    template = owner._job_template(task)
    return {
        "task_name": task.module_path,
        "args": encoded.args,
        "kwargs": encoded.kwargs,
        "options": {
            "backend": task.backend,
            **{
                key: template[key]
                for key in (
                    "task_version",
                    "queue",
                    "priority",
                    "tenant",
                    "initiator",
                    "concurrency_key",
                    "max_attempts",
                    "timeout",
                )
            },
        },
    }


def _check_signature(task: Task[Any, Any], where: str, wanted: Callback) -> None:
    signature = inspect.signature(task.func)
    parameters = list(signature.parameters.values())
    if task.takes_context:
        parameters = parameters[1:]
    try:
        signature.replace(parameters=parameters).bind(*wanted.args, **wanted.kwargs, batch={})
    except TypeError as exc:
        raise BatchError(
            f"{where} cannot be called with these arguments and batch=: {exc}. "
            "Give it a batch parameter (or **kwargs)."
        ) from None
