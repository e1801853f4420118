"""Waiting out database faults: a restart or a dropped connection must not end a worker.

Each step that hits the database catches ``DatabaseError``, drops the broken
connection (Django would keep handing it out) and tries again after 0.5 to 1 s,
cut short when the worker stops.
"""

from __future__ import annotations

import contextlib
import logging
import random
import threading
from collections.abc import Callable

from django.db import DatabaseError, connections

logger = logging.getLogger("django_jobs.worker")


class Faults:
    def __init__(self, db: str, stopping: threading.Event) -> None:
        self.db = db
        self.stopping = stopping

    def fault(self, what: str, exc: BaseException) -> None:
        """Log the fault, drop the connection, and wait a little before the next try."""
        logger.warning("Database unavailable during %s (%s); retrying.", what, exc)
        with contextlib.suppress(DatabaseError):
            connections[self.db].close()
        self.stopping.wait(0.5 + random.random() * 0.5)

    def retry[T](self, step: Callable[[], T], tries: int | None = None) -> T | None:
        """Run ``step`` until it gets through; None after ``tries`` faults, if given."""
        attempt = 0
        while True:
            attempt += 1
            try:
                return step()
            except DatabaseError as exc:
                if tries is not None and attempt >= tries:
                    logger.error("Giving up after %d tries: %s", attempt, exc)
                    return None
                self.fault("start-up" if tries is None else "shutdown", exc)
