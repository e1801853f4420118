"""django-q2 with its ORM broker: ``manage.py qcluster``.

A cluster is always several processes (sentinel, pusher, monitor, workers);
"one process" is ``workers=1``. No bulk path, no burst mode: the harness polls
the broker table. Its default ``save_limit`` (250) locks every kept result on
each save and prunes the oldest, so the best setting (and W4, which runs it)
keeps all results (``save_limit=0``).
"""

from __future__ import annotations

import sys
import time
from typing import ClassVar

from benchmarks import pg
from benchmarks.peers.base import PERSISTENT, Peer, WorkerSetting

QCLUSTER = [sys.executable, "-m", "django", "qcluster"]


class DjangoQ2(Peer):
    name = "django-q2"
    distribution = "django-q2"
    django_settings = "benchmarks.targets.django_settings"
    finished_table = "django_q_task"
    finished_where = "success"
    job_tables: ClassVar[list[str]] = ["django_q_ormq", "django_q_task"]

    def worker_env(self) -> dict[str, str]:
        return {**super().worker_env(), "BENCH_PEER": self.name}

    def settings(self) -> dict[str, WorkerSetting]:
        return {
            "defaults": WorkerSetting(
                "defaults", "qcluster, workers=1", QCLUSTER, env={"BENCH_Q2_WORKERS": "1"}
            ),
            "best": WorkerSetting(
                "best",
                "qcluster, workers=4, save_limit=0, CONN_MAX_AGE=600",
                QCLUSTER,
                env={"BENCH_Q2_WORKERS": "4", "BENCH_Q2_SAVE_LIMIT": "0", **PERSISTENT},
            ),
        }

    def setup_db(self) -> None:
        from django.core.management import call_command

        call_command("migrate", verbosity=0)

    def reset(self) -> None:
        pg.execute(self.db, "TRUNCATE django_q_ormq, django_q_task")

    def enqueue_one(self, count: int) -> None:
        from django.db import transaction
        from django_q.tasks import async_task

        for _ in range(count):
            with transaction.atomic():
                async_task("benchmarks.targets.plain.noop")

    def fill(self, count: int) -> None:
        from django.db import transaction
        from django_q.tasks import async_task

        with transaction.atomic():  # one transaction: not timed, just quicker
            for _ in range(count):
                async_task("benchmarks.targets.plain.noop")

    def enqueue_probe(self, probe: int) -> float:
        from django.db import transaction
        from django_q.tasks import async_task

        with transaction.atomic():
            async_task("benchmarks.targets.plain.probe", probe)
        return time.time()

    def pending(self) -> int:
        return int(pg.scalar(self.db, "SELECT count(*) FROM django_q_ormq"))

    def last_done(self) -> float | None:
        value = pg.scalar(
            self.db, "SELECT extract(epoch FROM max(stopped))::float8 FROM django_q_task"
        )
        return float(value) if value is not None else None
