"""The NOTIFY side of waking idle workers: sent at commit, once per queue.

The NOTIFY is sent inside the enqueuing transaction: PostgreSQL delivers it
when that transaction commits and drops it on rollback, so a worker is woken
the moment the job becomes visible, with no statement (and no second commit)
after the caller's. It is sent once per queue per transaction: a loop that
enqueues 10,000 jobs in one ``atomic()`` block notifies once. On a database
that cannot (SQLite) workers poll, and nothing is sent.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.db import connections
from django.db.backends.base.base import BaseDatabaseWrapper

from ..wakeup import CHANNEL
from .vendors import listens


class _Notified:
    """The queues already notified in the transaction that holds ``hooks``."""

    def __init__(self, hooks: list[Any]) -> None:
        self.hooks = hooks
        self.queues: set[str] = set()


def wake_on_commit(db: str, queue: str) -> None:
    """Have ``queue``'s workers woken when the current transaction commits (now if none)."""
    if owes_notify(db, queue):
        notify(connections[db], {queue})


def owes_notify(db: str, queue: str) -> bool:
    """Whether ``queue``'s NOTIFY is still to be sent in the current transaction.

    A True answer counts it as sent, so the caller must send it: with
    ``notify`` or inside its own statement (the single enqueue's insert).
    """
    if not listens(db):
        return False
    connection = connections[db]
    if not connection.in_atomic_block:
        return True
    # Django replaces ``run_on_commit`` with a new list when a transaction
    # ends or a savepoint rolls back (which also discards a NOTIFY sent inside
    # it), and appends to it in place otherwise: the list's identity tells
    # whether our NOTIFY still belongs to the running transaction.
    notified: _Notified | None = getattr(connection, "_django_jobs_notified", None)
    if notified is None or notified.hooks is not connection.run_on_commit:
        notified = _Notified(connection.run_on_commit)
        connection._django_jobs_notified = notified  # type: ignore[attr-defined]
    if queue in notified.queues:
        return False
    notified.queues.add(queue)
    return True


def notify(connection: BaseDatabaseWrapper, queues: Iterable[str]) -> None:
    with connection.cursor() as cursor:
        for queue in sorted(queues):
            cursor.execute("SELECT pg_notify(%s, %s)", [CHANNEL, queue])
