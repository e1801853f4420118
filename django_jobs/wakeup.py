"""Waking idle workers when work arrives: the LISTEN side, in workers.

The notification is only a hint. Workers also poll every ``POLL_SECONDS``, so
a lost notification (listener reconnecting, a pooler that cannot LISTEN, SQLite)
costs latency, never a job. The NOTIFY side is ``engine/wakeups.py``.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable, Iterable

from django.db import connections

logger = logging.getLogger("django_jobs.wakeup")

CHANNEL = "django_jobs"
# The listener's connection names itself after its worker, so ``jobs health``
# can see in pg_stat_activity which workers have a live LISTEN connection.
LISTENER_PREFIX = "django_jobs listen "


def listener_name(worker_id: uuid.UUID) -> str:
    """The ``application_name`` of a worker's LISTEN connection (PostgreSQL keeps 63 bytes)."""
    return f"{LISTENER_PREFIX}{worker_id}"


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
        application_name: str,
    ) -> None:
        super().__init__(name="django-jobs-listener", daemon=True)
        self.db = db
        self.queues = frozenset(queues)
        self.on_wake = on_wake
        self.stopping = stopping
        self.application_name = application_name
        self.connected = threading.Event()

    def run(self) -> None:
        import psycopg

        delay = 0.2
        failed = False
        while not self.stopping.is_set():
            try:
                wrapper = connections[self.db]
                params = {
                    **wrapper.get_connection_params(),
                    "application_name": self.application_name,
                }
                with psycopg.connect(**params, autocommit=True) as conn:
                    conn.execute(f"LISTEN {CHANNEL}")
                    self.connected.set()
                    if failed:
                        logger.warning("LISTEN connection is back; wake-ups resume.")
                        failed = False
                    # Anything enqueued while we were not listening is found by this poke.
                    self.on_wake()
                    delay = 0.2
                    while not self.stopping.is_set():
                        for note in conn.notifies(timeout=0.5):
                            if note.payload in self.queues:
                                self.on_wake()
            except Exception as exc:
                self.connected.clear()
                failed = True
                logger.warning("LISTEN connection failed (%s); retrying in %.1fs", exc, delay)
                self.stopping.wait(delay)
                delay = min(delay * 2, 5.0)
        self.connected.clear()
