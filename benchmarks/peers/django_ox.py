"""django-ox: a ``django.tasks`` database backend, ``manage.py ox_worker``.

Bulk path: ``django_ox.bulk.enqueue_many`` (one INSERT per chunk, one transaction).
"""

from __future__ import annotations

from typing import ClassVar

from benchmarks.peers.base import PERSISTENT, WorkerSetting
from benchmarks.peers.django_tasks_common import MANAGE, DjangoTasksPeer

OX_WORKER = [*MANAGE, "ox_worker"]


class DjangoOx(DjangoTasksPeer):
    name = "django-ox"
    distribution = "django-ox"
    table = "django_ox_oxtask"
    finished_where = "status = 'SUCCESSFUL'"
    burst_argv: ClassVar[list[str] | None] = ["--batch"]

    def settings(self) -> dict[str, WorkerSetting]:
        return {
            "defaults": WorkerSetting(
                "defaults", "ox_worker (1 process, concurrency 1)", OX_WORKER
            ),
            "best": WorkerSetting(
                "best",
                "2 x ox_worker --concurrency 4, CONN_MAX_AGE=600",
                [*OX_WORKER, "--concurrency", "4"],
                processes=2,  # its own --processes cannot be combined with --batch
                env=PERSISTENT,
            ),
        }

    def enqueue_bulk(self, count: int) -> bool:
        from django_ox.bulk import enqueue_many

        from benchmarks.benchapp.tasks import noop

        enqueue_many(noop, [((), {})] * count)
        return True
