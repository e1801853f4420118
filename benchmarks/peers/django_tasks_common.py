"""What the ``django.tasks`` database backends (django-tasks-db, django-ox) share.

Both store one row per task with ``status`` and ``finished_at``; both enqueue
with ``task.enqueue()`` inside ``transaction.atomic()``, like django-jobs.
"""

from __future__ import annotations

import sys
import time
from typing import ClassVar

from benchmarks import pg
from benchmarks.peers.base import Peer

MANAGE = [sys.executable, "-m", "django"]


class DjangoTasksPeer(Peer):
    django_settings = "benchmarks.targets.django_settings"
    table: ClassVar[str]
    queued_where: ClassVar[str] = "status = 'READY'"  # the row ``fill`` clones

    def worker_env(self) -> dict[str, str]:
        return {**super().worker_env(), "BENCH_PEER": self.name}

    @property
    def job_tables(self) -> list[str]:  # type: ignore[override]
        return [self.table]

    @property
    def finished_table(self) -> str:  # type: ignore[override]
        return self.table

    def setup_db(self) -> None:
        from django.core.management import call_command

        call_command("migrate", verbosity=0)

    def reset(self) -> None:
        pg.execute(self.db, f"TRUNCATE {self.table} CASCADE")

    def enqueue_one(self, count: int) -> None:
        from django.db import transaction

        from benchmarks.benchapp.tasks import noop

        for _ in range(count):
            with transaction.atomic():
                noop.enqueue()

    def fill(self, count: int) -> None:
        if self.enqueue_bulk(count):
            return
        self.enqueue_one(1)
        if count > 1:
            pg.clone_rows(self.db, self.table, count - 1, self.queued_where)

    def enqueue_probe(self, probe: int) -> float:
        from django.db import transaction

        from benchmarks.benchapp.tasks import probe as probe_task

        with transaction.atomic():
            probe_task.enqueue(probe)
        return time.time()

    def pending(self) -> int:
        return int(
            pg.scalar(self.db, f"SELECT count(*) FROM {self.table} WHERE finished_at IS NULL")
        )

    def last_done(self) -> float | None:
        value = pg.scalar(
            self.db, f"SELECT extract(epoch FROM max(finished_at))::float8 FROM {self.table}"
        )
        return float(value) if value is not None else None
