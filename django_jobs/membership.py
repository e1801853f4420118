"""Which batch a job enqueued now joins: the open ``batch()`` block of this context.

Apart from ``batches`` so that enqueue (``backend``) can ask without importing
what ``batch()`` itself needs from the backend.
"""

from __future__ import annotations

from contextvars import ContextVar
from typing import TYPE_CHECKING

from .exceptions import BatchError

if TYPE_CHECKING:
    import uuid

    from .backend import JobsBackend
    from .models import Batch

open_batch: ContextVar[Batch | None] = ContextVar("django_jobs_open_batch", default=None)


def member_of(backend: JobsBackend) -> uuid.UUID | None:
    """The batch a job enqueued now on ``backend`` joins, if a ``batch()`` block is open.

    Refuses, before anything is written, a job the batch could not count: one
    in another database, or one whose insert would wait for another
    database's commit (and so land after the batch was sealed).
    """
    from .enqueue import open_transactions_elsewhere

    opened = open_batch.get()
    if opened is None:
        return None
    if backend.db != opened._state.db:
        raise BatchError(
            f"Backend {backend.alias!r} keeps its jobs in database {backend.db!r}, and "
            f"batch {opened.id} is in {opened._state.db!r}: a batch's members share its "
            "database. Nothing was enqueued."
        )
    elsewhere = open_transactions_elsewhere(backend.db)
    if elsewhere:
        raise BatchError(
            f"A transaction of database {elsewhere[0]!r} is open, so this job would be "
            f"written only after it commits, after batch {opened.id} is sealed. Open the "
            "batch outside that transaction. Nothing was enqueued."
        )
    return opened.id
