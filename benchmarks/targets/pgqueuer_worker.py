"""A PgQueuer worker: ``QueueManager.run`` with the entrypoints ``noop`` and ``probe``.

    python -m benchmarks.targets.pgqueuer_worker [--batch-size 10] [--drain]

Defaults are PgQueuer's own (batch size 10, continuous mode).
"""

from __future__ import annotations

import argparse
import asyncio
import os

import asyncpg
from pgqueuer import AsyncpgDriver, Job, Queries, QueueManager
from pgqueuer.types import QueueExecutionMode

from benchmarks.targets import plain


async def main(batch_size: int, drain: bool) -> None:
    connection = await asyncpg.connect(os.environ["BENCH_DATABASE_URL"])
    qm = QueueManager(Queries(AsyncpgDriver(connection)))

    @qm.entrypoint("noop")
    async def noop(job: Job) -> None:
        plain.noop()

    @qm.entrypoint("probe")
    async def probe(job: Job) -> None:
        plain.probe(int(job.payload or b"0"))

    mode = QueueExecutionMode.drain if drain else QueueExecutionMode.continuous
    await qm.run(batch_size=batch_size, mode=mode)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch-size", type=int, default=10)
    parser.add_argument("--drain", action="store_true")
    options = parser.parse_args()
    asyncio.run(main(options.batch_size, options.drain))
