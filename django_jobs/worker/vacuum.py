"""Vacuuming our tables when dead rows pile up faster than autovacuum removes them.

Each claimed job leaves a dead entry at the head of the claim index, and each
finished one dead versions in the job table and its lease indexes. Until a
VACUUM removes them, every claim walks past the dead entries at the head and
every reaper pass through the dead leases, so the drain rate falls as work
piles up, which is when it matters most. Autovacuum, where it is on, starts
on a table once a fifth of its rows are dead (400,000 in a table holding two
million jobs) and then runs throttled; where it is off, nothing ever does.

So the lifeline looks at the counts on each reaper pass and, when one of our
tables has gained ``VACUUM_DEAD_ROWS`` dead rows since its latest vacuum (by
anyone), vacuums it on a thread and a connection of its own, so heartbeats
never wait for it. Dead rows a vacuum could not remove (a long transaction
holds the horizon) are not counted again: the next vacuum waits for as many
new ones, instead of repeating one that cannot help.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from django.db import DatabaseError, connections

from ..engine.base import Engine
from ..values import DeadRows

logger = logging.getLogger("django_jobs.worker")


class Vacuums:
    def __init__(self, engine: Engine, bound: int) -> None:
        self.engine = engine
        self.bound = bound
        # Table -> (its latest vacuum as last seen, its dead rows just after it).
        self.baselines: dict[str, tuple[datetime | None, int]] = {}
        self.thread: threading.Thread | None = None
        self.raw: Any = None  # the vacuuming thread's psycopg connection, to cancel it
        self.stopping = threading.Event()

    def due(self, counts: Sequence[DeadRows]) -> list[DeadRows]:
        """The tables that gained ``bound`` dead rows since their latest vacuum, most first.

        A table seen for the first time counts from zero; one vacuumed since
        the last look counts from what it holds now, which is what the vacuum
        left plus the little that died since.
        """
        due = []
        for row in counts:
            seen = self.baselines.get(row.table)
            if seen is None:
                self.baselines[row.table] = (row.vacuumed_at, 0)
            elif seen[0] != row.vacuumed_at:
                self.baselines[row.table] = (row.vacuumed_at, row.dead)
            if row.dead - self.baselines[row.table][1] >= self.bound:
                due.append(row)
        return sorted(due, key=lambda row: -row.dead)

    def check(self) -> None:
        """Start vacuuming what is due, unless this process is already at it."""
        if not self.bound or (self.thread is not None and self.thread.is_alive()):
            return
        due = self.due(self.engine.dead_rows())
        if due:
            self.thread = threading.Thread(
                target=self.run, args=(due,), name="django-jobs-vacuum", daemon=True
            )
            self.thread.start()

    def run(self, due: Sequence[DeadRows]) -> None:
        wrapper = connections[self.engine.db]
        try:
            wrapper.ensure_connection()
            self.raw = wrapper.connection
            for row in due:
                if self.stopping.is_set():
                    break
                started = time.monotonic()
                if self.engine.vacuum(row.table):
                    logger.info(
                        "Vacuumed %s: %s dead row versions, in %.2f s (VACUUM_DEAD_ROWS %d).",
                        row.table,
                        f"{row.dead:,}",
                        time.monotonic() - started,
                        self.bound,
                    )
        except DatabaseError as exc:
            if not self.stopping.is_set():
                logger.warning("Vacuuming %s failed: %s", ", ".join(r.table for r in due), exc)
        finally:
            self.raw = None
            connections.close_all()

    def stop(self, timeout: float = 5.0) -> None:
        """Cancel a vacuum under way (the server would finish it otherwise) and wait for it."""
        self.stopping.set()
        thread, raw = self.thread, self.raw
        if thread is None or not thread.is_alive():
            return
        if raw is not None:
            try:
                raw.cancel_safe()
            except Exception:  # the connection may be closing as we cancel
                logger.debug("Could not cancel the vacuum under way", exc_info=True)
        thread.join(timeout)
