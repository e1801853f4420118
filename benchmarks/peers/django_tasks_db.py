"""django-tasks-db: the ORM ``DatabaseBackend`` of ``django.tasks``, ``manage.py db_worker``.

No bulk enqueue API. Its worker polls every ``--interval`` (1 s) when idle and
runs one task at a time; the best setting on 2 cores is two worker processes.
"""

from __future__ import annotations

from typing import ClassVar

from benchmarks.peers.base import PERSISTENT, WorkerSetting
from benchmarks.peers.django_tasks_common import MANAGE, DjangoTasksPeer

DB_WORKER = [*MANAGE, "db_worker", "--no-reload"]


class DjangoTasksDb(DjangoTasksPeer):
    name = "django-tasks-db"
    distribution = "django-tasks-db"
    table = "django_tasks_database_dbtaskresult"
    finished_where = "status = 'SUCCESSFUL'"
    burst_argv: ClassVar[list[str] | None] = ["--batch"]

    def settings(self) -> dict[str, WorkerSetting]:
        return {
            "defaults": WorkerSetting("defaults", "db_worker (interval 1 s)", DB_WORKER),
            "best": WorkerSetting(
                "best",
                "2 x db_worker --interval 0.1 --no-startup-delay, CONN_MAX_AGE=600",
                [*DB_WORKER, "--interval", "0.1", "--no-startup-delay"],
                processes=2,
                env=PERSISTENT,
            ),
        }
