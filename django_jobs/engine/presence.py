"""Workers' presence: registered at start, stamped by the heartbeat, stopped at exit."""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from django.db.models.functions import Now
from django.utils import timezone

from ..models import Job, Worker
from ..states import IN_FLIGHT_STATES
from ..values import WorkerIdentity


def register_worker(
    db: str,
    worker: WorkerIdentity,
    backend: str,
    host: str,
    pid: int,
    queues: Sequence[str],
    concurrency: int,
) -> None:
    now = timezone.now()
    Worker.objects.using(db).create(
        id=worker.id,
        backend=backend,
        host=host,
        pid=pid,
        queues=list(queues),
        concurrency=concurrency,
        started_at=now,
        heartbeat_at=now,
    )


def stop_worker(db: str, worker_id: uuid.UUID) -> None:
    Worker.objects.using(db).filter(id=worker_id, stopped_at=None).update(stopped_at=Now())


def idle(db: str, queues: Sequence[str]) -> bool:
    return not (
        Job.objects.using(db)
        .filter(queue__in=queues, state__in=[str(s) for s in IN_FLIGHT_STATES])
        .exists()
    )
