"""Celery with a Redis broker (``redis://127.0.0.1:6379/9``), ``celery worker``.

One process: ``--pool solo``. Best on 2 cores: Celery's own default, prefork
with one child per core. No bulk path, no table of finished jobs (W4 n/a);
the harness's database holds only the W3 probe times... which go to Redis.
"""

from __future__ import annotations

import sys
import time

from benchmarks.peers.base import Peer, WorkerSetting
from benchmarks.targets.celery_app import BROKER, DONE_KEY, LAST_KEY

WORKER = [
    sys.executable,
    "-m",
    "celery",
    "-A",
    "benchmarks.targets.celery_app",
    "worker",
    "--loglevel",
    "WARNING",
]


class CeleryRedis(Peer):
    name = "celery"
    distribution = "celery"
    has_backlog_table = False

    def __init__(self, db: str) -> None:
        super().__init__(db)
        import redis

        self.redis = redis.Redis.from_url(BROKER)
        self.expected = 0

    def record_target(self) -> str:
        return BROKER

    def versions(self) -> dict[str, str]:
        from importlib.metadata import version

        server = self.redis.info("server")["redis_version"]
        return {"celery": version("celery"), "kombu": version("kombu"), "redis-server": server}

    def settings(self) -> dict[str, WorkerSetting]:
        return {
            "defaults": WorkerSetting("defaults", "worker --pool solo", [*WORKER, "-P", "solo"]),
            "best": WorkerSetting(
                "best",
                "worker --pool prefork -c 2 (its default on 2 cores)",
                [*WORKER, "-P", "prefork", "-c", "2"],
            ),
        }

    def setup_db(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.redis.flushdb()
        self.expected = 0

    def enqueue_one(self, count: int) -> None:
        from benchmarks.targets.celery_app import noop

        for _ in range(count):
            noop.delay()
        self.expected += count

    def enqueue_probe(self, probe: int) -> float:
        from benchmarks.targets.celery_app import probe as probe_task

        probe_task.delay(probe)
        return time.time()

    def pending(self) -> int:
        done = sum(int(v) for v in self.redis.hvals(DONE_KEY))
        return max(0, self.expected - done)

    def last_done(self) -> float | None:
        values = [float(v) for v in self.redis.hvals(LAST_KEY)]
        return max(values) if values else None
