"""Procrastinate (plain app, psycopg connector): ``procrastinate worker``.

Documented defaults: concurrency 1, LISTEN/NOTIFY on. Bulk path: ``batch_defer``.
Drains run with ``--one-shot`` (exit once no job is left).
"""

from __future__ import annotations

import sys
import time
from typing import Any, ClassVar

from benchmarks import pg
from benchmarks.peers.base import Peer, WorkerSetting

WORKER = [
    sys.executable,
    "-m",
    "procrastinate",
    "--app=benchmarks.targets.procrastinate_app.app",
    "worker",
]


class Procrastinate(Peer):
    name = "procrastinate"
    distribution = "procrastinate"
    burst_argv: ClassVar[list[str] | None] = ["--one-shot"]
    finished_table = "procrastinate_jobs"
    finished_where = "status = 'succeeded'"
    job_tables: ClassVar[list[str]] = ["procrastinate_jobs", "procrastinate_events"]

    def __init__(self, db: str) -> None:
        super().__init__(db)
        self._app: Any = None

    @property
    def app(self) -> Any:
        if self._app is None:
            from benchmarks.targets import procrastinate_app

            self._app = procrastinate_app.app
            self._app.open()
        return self._app

    def settings(self) -> dict[str, WorkerSetting]:
        return {
            "defaults": WorkerSetting("defaults", "worker (concurrency 1)", WORKER),
            "best": WorkerSetting(
                "best",
                "2 x worker --concurrency 10",
                [*WORKER, "--concurrency", "10"],
                processes=2,
            ),
        }

    def setup_db(self) -> None:
        self.app.schema_manager.apply_schema()

    def reset(self) -> None:
        pg.execute(self.db, "TRUNCATE procrastinate_jobs, procrastinate_workers CASCADE")

    def enqueue_one(self, count: int) -> None:
        from benchmarks.targets.procrastinate_app import noop

        self.app  # noqa: B018 - opens the app
        for _ in range(count):
            noop.defer()

    def enqueue_bulk(self, count: int) -> bool:
        from benchmarks.targets.procrastinate_app import noop

        self.app  # noqa: B018
        noop.batch_defer(*[{}] * count)
        return True

    def enqueue_probe(self, probe: int) -> float:
        from benchmarks.targets.procrastinate_app import probe as probe_task

        self.app  # noqa: B018
        probe_task.defer(number=probe)
        return time.time()

    def pending(self) -> int:
        return int(
            pg.scalar(
                self.db,
                "SELECT count(*) FROM procrastinate_jobs WHERE status IN ('todo', 'doing')",
            )
        )

    def last_done(self) -> float | None:
        value = pg.scalar(
            self.db,
            "SELECT extract(epoch FROM max(at))::float8 FROM procrastinate_events "
            "WHERE type = 'succeeded'",
        )
        return float(value) if value is not None else None

    def teardown(self) -> None:
        if self._app is not None:
            self._app.close()
