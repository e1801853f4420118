"""The SQLite engine: the ORM, every transaction serialised by BEGIN IMMEDIATE.

There are no row locks: ``skip_locked`` is a no-op and correctness comes from
one writer at a time (the system check ``django_jobs.E004`` requires the
``transaction_mode``). One host's scale, so simple queries serve.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from django.db import connections
from django.db.backends.sqlite3.creation import DatabaseCreation

from ..bulk import Call
from ..fairness import Head
from ..models import Dependency, Job
from ..states import JobState
from ..values import Claimed, StepWrite, WorkerIdentity
from . import claims, fair_clocks, steps
from .base import Engine

# A window function over the queue's ready jobs: each tenant's next jobs.
FAIR_CANDIDATES = """
SELECT id, tenant, priority, run_after, concurrency_key FROM (
    SELECT id, tenant, priority, run_after, concurrency_key,
           row_number() OVER (PARTITION BY tenant ORDER BY priority DESC, run_after) AS turn
    FROM django_jobs_job
    WHERE state = %(state)s AND queue = %(queue)s
      AND run_after <= STRFTIME('%%Y-%%m-%%d %%H:%%M:%%f', 'NOW')
      AND (expires_at IS NULL OR expires_at > STRFTIME('%%Y-%%m-%%d %%H:%%M:%%f', 'NOW'))
      -- keys already at their limit (limits.KeyCounts.at_limit)
      AND (concurrency_key IS NULL
           OR concurrency_key NOT IN (SELECT value FROM json_each(%(blocked)s)))
)
WHERE turn <= %(k)s
"""


class SqliteEngine(Engine):
    def claim_plain(
        self, worker: WorkerIdentity, queues: Sequence[str], limit: int
    ) -> list[Claimed]:
        return claims.claim_plain(self.db, worker, queues, limit)

    def lock_queue(self, queue: str) -> None:
        """Nothing to do: BEGIN IMMEDIATE already serialises every claim."""

    def lock_unique(self, scope: str, key: str) -> None:
        """Nothing to do: BEGIN IMMEDIATE already serialises every enqueue."""

    def fair_heads(self, queue: str, want: int, blocked: Sequence[str]) -> list[Head]:
        params: dict[str, str | int] = {
            "queue": queue,
            "state": str(JobState.QUEUED),
            "k": want,
            "blocked": json.dumps(list(blocked)),
        }
        with connections[self.db].cursor() as cursor:
            cursor.execute(FAIR_CANDIDATES, params)
            rows = cursor.fetchall()
        return [
            Head(uuid.UUID(str(job_id)), tenant, priority, run_after, key)
            for job_id, tenant, priority, run_after, key in rows
        ]

    def record_served(self, queue: str, served: Mapping[str, tuple[int, float]]) -> None:
        fair_clocks.record(self.db, queue, served, self.options.FAIR_QUEUES.get(queue, {}))

    def record_step(
        self,
        worker_id: uuid.UUID,
        job_id: uuid.UUID,
        token: int,
        name: str,
        result: Any,
    ) -> StepWrite:
        return steps.record_step(self.db, worker_id, job_id, token, name, result)

    def unusable_for_workers(self) -> str | None:
        """An in-memory database: each worker process would work on a copy of its own.

        It would claim and finish jobs that the parent, the web process and
        the test never see, and log success while every job stays queued. This
        is what a ``TransactionTestCase`` on SQLite gets by default.
        """
        name = connections[self.db].settings_dict["NAME"]
        if not DatabaseCreation.is_in_memory_db(name):
            return None
        return (
            f"DATABASES[{self.db!r}] is an in-memory SQLite database ({name!r}): each worker "
            "process would work on a copy of its own, and no job would change for anyone "
            f"else. Give DATABASES[{self.db!r}] a file NAME (in tests, set "
            f"DATABASES[{self.db!r}]['TEST']['NAME'] to a file path)."
        )

    def bulk_insert(self, prototype: Job, calls: Iterator[Call]) -> None:
        from ..enqueue import job_of

        jobs = [job_of(prototype, call) for call in calls]
        Job.objects.using(self.db).bulk_create(jobs, batch_size=1000)

    def add_dependencies(
        self, job_ids: Sequence[uuid.UUID | str], ids: Sequence[uuid.UUID]
    ) -> None:
        rows = [Dependency(job_id=job, depends_on_id=on) for job in job_ids for on in ids]
        Dependency.objects.using(self.db).bulk_create(rows, batch_size=1000)

    def depended_on(
        self, ids: Sequence[uuid.UUID], *, lock: bool
    ) -> dict[uuid.UUID, tuple[str, str]]:
        # One writer at a time: there is nothing finer to lock.
        rows = Job.objects.using(self.db).filter(id__in=ids).values_list("id", "state", "tenant")
        return {job_id: (state, tenant) for job_id, state, tenant in rows}
