"""Waiting out database faults: a restart or a dropped connection must not end a worker.

Each step that hits the database catches ``DatabaseError``, drops the broken
connection (Django would keep handing it out) and tries again after 0.5 to 1 s,
cut short when the worker stops.

An outage is logged as one, not once per try: a WARNING when it starts, a
reminder every ``REMIND_SECONDS`` while it lasts, and a WARNING when a step
gets through again, with how long it took (the tries in between are DEBUG). A
write the database refuses (a constraint, a trigger) is said as a refusal, and
its end as the write accepted, not as the database available again.
The claim loop and the heartbeat thread share one ``Faults``, so a process
reports each outage once.
"""

from __future__ import annotations

import contextlib
import logging
import random
import threading
import time
from collections.abc import Callable

from django.db import DatabaseError, DataError, IntegrityError, connections

logger = logging.getLogger("django_jobs.worker")

# A value the database would not store (a constraint, a trigger), as opposed
# to a database that is down: trying the same write again fails the same way.
REFUSED = (DataError, IntegrityError)

REMIND_SECONDS = 60.0


class Faults:
    def __init__(self, db: str, stopping: threading.Event) -> None:
        self.db = db
        self.stopping = stopping
        self._lock = threading.Lock()
        self._down_since: float | None = None  # monotonic start of the current outage
        self._reminded = 0.0
        self._tries = 0
        self._outage = False  # whether the current run of faults had one that was no refusal

    def fault(self, what: str, exc: BaseException) -> None:
        """Note the fault, drop the connection, and wait a little before the next try."""
        self.note(what, exc)
        self.stopping.wait(0.5 + random.random() * 0.5)

    def note(self, what: str, exc: BaseException) -> None:
        """Note the fault and drop this thread's connection, without waiting."""
        now = time.monotonic()
        # A refusal (a constraint, a trigger) is no outage: said as what it is,
        # by its first line, since its DETAIL would repeat the refused row.
        refused = isinstance(exc, REFUSED)
        how = "refusing a write" if refused else "unavailable"
        why = said(exc) if refused else exc
        with self._lock:
            self._tries += 1
            self._outage |= not refused
            if self._down_since is None:
                self._down_since = self._reminded = now
                level, text = logging.WARNING, f"Database {how} during %s (%s); retrying."
            elif now - self._reminded >= REMIND_SECONDS:
                self._reminded = now
                level = logging.WARNING
                text = f"Database still {how} after {now - self._down_since:.0f}s, "
                text += "during %s (%s); retrying."
            else:
                level, text = logging.DEBUG, f"Database {how} during %s (%s); retrying."
        logger.log(level, text, what, why, extra={"db": self.db})
        with contextlib.suppress(DatabaseError):
            connections[self.db].close()

    def recovered(self) -> None:
        """A step got through: if it had failed, say the database is back and after how long."""
        if self._down_since is None:  # the common case, without taking the lock
            return
        with self._lock:
            if self._down_since is None:
                return
            lasted, tries = time.monotonic() - self._down_since, self._tries
            back = "available again" if self._outage else "accepting the refused write"
            self._down_since, self._tries, self._outage = None, 0, False
        logger.warning(
            f"Database {back} after %.1fs (%d failed tries).",
            lasted,
            tries,
            extra={"db": self.db, "outage_seconds": round(lasted, 3)},
        )

    def retry[T](self, step: Callable[[], T], tries: int | None = None) -> T | None:
        """Run ``step`` until it gets through; None after ``tries`` faults, if given.

        Without ``tries`` (start-up), a stop signal ends the waiting too: a
        worker that never reached its database has nothing to finish, and an
        operator's SIGTERM must not wait for the supervisor's SIGKILL.
        """
        attempt = 0
        while True:
            attempt += 1
            try:
                got = step()
            except DatabaseError as exc:
                if tries is not None and attempt >= tries:
                    logger.error("Giving up after %d tries: %s", attempt, exc)
                    return None
                if tries is None and self.stopping.is_set():
                    logger.warning("Stopped before the database answered: %s", exc)
                    return None
                self.fault("start-up" if tries is None else "shutdown", exc)
            else:
                self.recovered()
                return got


def said(exc: BaseException) -> str:
    """The error's class and first line: PostgreSQL's DETAIL would repeat the refused row."""
    first = str(exc).strip().partition("\n")[0]
    return f"{type(exc).__name__}: {first}"
