"""django-jobs itself: ``manage.py runworkers`` on ``benchmarks.settings``.

W1 bulk and the queuing for W2/W4 go through ``django_jobs.enqueue_many``
(COPY in the caller's transaction), so they use the public API only.
"""

from __future__ import annotations

import sys
import time
from typing import ClassVar

from benchmarks import pg
from benchmarks.peers.base import Peer, WorkerSetting

RUNWORKERS = [sys.executable, "-m", "django", "runworkers", "-v", "0"]


class DjangoJobs(Peer):
    name = "django-jobs"
    distribution = "django-jobs"
    django_settings = "benchmarks.settings"
    burst_argv: ClassVar[list[str] | None] = ["--burst"]
    finished_table = "django_jobs_job"
    finished_where = "state = 'succeeded'"
    job_tables: ClassVar[list[str]] = [
        "django_jobs_job",
        "django_jobs_attempt",
        "django_jobs_worker",
    ]

    def settings(self) -> dict[str, WorkerSetting]:
        return {
            "defaults": WorkerSetting("defaults", "runworkers (-p 1, 16 threads)", RUNWORKERS),
            "best": WorkerSetting(
                "best", "runworkers -p 2 -c 64", [*RUNWORKERS, "-p", "2", "-c", "64"]
            ),
        }

    def setup_db(self) -> None:
        from django.core.management import call_command

        call_command("migrate", verbosity=0)

    def reset(self) -> None:
        tables = pg.execute(
            self.db,
            "SELECT tablename FROM pg_tables WHERE schemaname = current_schema() "
            "AND tablename LIKE 'django\\_jobs\\_%%'",
        )
        pg.execute(self.db, f"TRUNCATE {', '.join(t[0] for t in tables)} CASCADE")

    def enqueue_one(self, count: int) -> None:
        from django.db import transaction

        from benchmarks.benchapp.tasks import noop

        for _ in range(count):
            with transaction.atomic():
                noop.enqueue()

    def enqueue_bulk(self, count: int) -> bool:
        from django.db import transaction

        from benchmarks.benchapp.tasks import noop
        from django_jobs import enqueue_many

        with transaction.atomic():
            enqueue_many(noop, [((), {})] * count)
        return True

    def fill(self, count: int) -> None:
        if self.enqueue_bulk(count):
            return
        self.enqueue_one(1)
        if count > 1:
            pg.clone_rows(self.db, "django_jobs_job", count - 1, "state = 'queued'")

    def enqueue_probe(self, probe: int) -> float:
        from django.db import transaction

        from benchmarks.benchapp.tasks import probe as probe_task

        with transaction.atomic():
            probe_task.enqueue(probe)
        return time.time()

    def pending(self) -> int:
        return int(
            pg.scalar(self.db, "SELECT count(*) FROM django_jobs_job WHERE finished_at IS NULL")
        )

    def last_done(self) -> float | None:
        value = pg.scalar(
            self.db, "SELECT extract(epoch FROM max(finished_at))::float8 FROM django_jobs_job"
        )
        return float(value) if value is not None else None
