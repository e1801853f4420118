"""Waking idle workers when work arrives: NOTIFY at commit, LISTEN in workers.

The notification is only a hint. Workers also poll every ``POLL_SECONDS``, so
a lost notification (listener reconnecting, a pooler that cannot LISTEN, SQLite)
costs latency, never a job.

The NOTIFY is sent inside the enqueuing transaction: PostgreSQL delivers it
when that transaction commits and drops it on rollback, so a worker is woken
the moment the job becomes visible, with no statement (and no second commit)
after the caller's. It is sent once per queue per transaction: a loop that
enqueues 10,000 jobs in one ``atomic()`` block notifies once.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from typing import Any

from django.db import connections
from django.db.backends.base.base import BaseDatabaseWrapper

logger = logging.getLogger("django_jobs.wakeup")

CHANNEL = "django_jobs"


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
    connection = connections[db]
    if connection.vendor != "postgresql":
        return False
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


class Listener(threading.Thread):
    """LISTENs on its own connection and calls ``on_wake`` for our queues.

    It reconnects by itself after a database restart; while it is down the
    worker simply polls.
    """

    def __init__(
        self,
        db: str,
        queues: Iterable[str],
        on_wake: Callable[[], None],
        stopping: threading.Event,
    ) -> None:
        super().__init__(name="django-jobs-listener", daemon=True)
        self.db = db
        self.queues = frozenset(queues)
        self.on_wake = on_wake
        self.stopping = stopping
        self.connected = threading.Event()

    def run(self) -> None:
        import psycopg

        delay = 0.2
        while not self.stopping.is_set():
            try:
                wrapper = connections[self.db]
                params = wrapper.get_connection_params()
                with psycopg.connect(**params, autocommit=True) as conn:
                    conn.execute(f"LISTEN {CHANNEL}")
                    self.connected.set()
                    # Anything enqueued while we were not listening is found by this poke.
                    self.on_wake()
                    delay = 0.2
                    while not self.stopping.is_set():
                        for note in conn.notifies(timeout=0.5):
                            if note.payload in self.queues:
                                self.on_wake()
            except Exception as exc:
                self.connected.clear()
                logger.warning("LISTEN connection failed (%s); retrying in %.1fs", exc, delay)
                self.stopping.wait(delay)
                delay = min(delay * 2, 5.0)
        self.connected.clear()
