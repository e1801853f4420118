"""PgQueuer: a plain-Python PostgreSQL queue (asyncpg), ``QueueManager.run``.

Finished jobs leave the queue table for ``pgqueuer_log``: that is W4's backlog.
Bulk path: ``Queries.enqueue`` with lists.
"""

from __future__ import annotations

import sys
import time
from typing import Any, ClassVar

from benchmarks import pg
from benchmarks.peers.base import Peer, WorkerSetting

WORKER = [sys.executable, "-m", "benchmarks.targets.pgqueuer_worker"]


class PgQueuer(Peer):
    name = "pgqueuer"
    distribution = "pgqueuer"
    burst_argv: ClassVar[list[str] | None] = ["--drain"]
    finished_table = "pgqueuer_log"
    finished_where = "status = 'successful'"
    job_tables: ClassVar[list[str]] = ["pgqueuer"]

    def settings(self) -> dict[str, WorkerSetting]:
        return {
            "defaults": WorkerSetting("defaults", "QueueManager.run() (batch 10)", WORKER),
            "best": WorkerSetting(
                "best",
                "2 x QueueManager.run(batch_size=50)",
                [*WORKER, "--batch-size", "50"],
                processes=2,
            ),
        }

    async def _with_queries(self, fn: Any) -> Any:
        import asyncpg
        from pgqueuer import AsyncpgDriver, Queries

        connection = await asyncpg.connect(self.dsn)
        try:
            return await fn(Queries(AsyncpgDriver(connection)))
        finally:
            await connection.close()

    def setup_db(self) -> None:
        async def install(queries: Any) -> None:
            await queries.install()

        self.run_sync(self._with_queries(install))

    def reset(self) -> None:
        tables = pg.execute(
            self.db,
            "SELECT tablename FROM pg_tables WHERE schemaname = current_schema() "
            "AND tablename LIKE 'pgqueuer%%'",
        )
        pg.execute(self.db, f"TRUNCATE {', '.join(t[0] for t in tables)}")

    def enqueue_one(self, count: int) -> None:
        async def each(queries: Any) -> None:
            for _ in range(count):
                await queries.enqueue("noop", None)

        self.run_sync(self._with_queries(each))

    def enqueue_bulk(self, count: int) -> bool:
        async def bulk(queries: Any) -> None:
            await queries.enqueue(["noop"] * count, [None] * count, [0] * count)

        self.run_sync(self._with_queries(bulk))
        return True

    def enqueue_probe(self, probe: int) -> float:
        # Autocommit: committed when enqueue returns, before the connection
        # and the event loop are closed (about a millisecond more).
        async def one(queries: Any) -> float:
            await queries.enqueue("probe", str(probe).encode())
            return time.time()

        return float(self.run_sync(self._with_queries(one)))

    def pending(self) -> int:
        return int(pg.scalar(self.db, "SELECT count(*) FROM pgqueuer"))

    def last_done(self) -> float | None:
        value = pg.scalar(
            self.db,
            "SELECT extract(epoch FROM max(created))::float8 FROM pgqueuer_log "
            "WHERE status = 'successful'",
        )
        return float(value) if value is not None else None
