"""The Celery app the workers load: Redis broker, no result backend (Celery's default).

Celery keeps no record of finished tasks, so each worker process counts its
own in memory (``task_postrun``) and a thread publishes the count and the
time of the last finish to Redis every 20 ms: one Redis write per process per
20 ms, not one per task.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

import redis
from celery import Celery
from celery.signals import task_postrun

from benchmarks.targets import plain

BROKER = os.environ.get("BENCH_CELERY_BROKER", "redis://127.0.0.1:6379/9")
DONE_KEY = "bench:done"
LAST_KEY = "bench:last"

app = Celery("bench", broker=BROKER)
noop = app.task(name="noop")(plain.noop)
probe = app.task(name="probe")(plain.probe)


class _Counter:
    def __init__(self) -> None:
        self.done = 0
        self.last = 0.0
        self.pid = 0
        self.lock = threading.Lock()

    def add(self) -> None:
        now = time.time()
        with self.lock:
            if self.pid != os.getpid():  # first task in this (forked) process
                self.pid = os.getpid()
                self.done = 0
                threading.Thread(target=self._publish, daemon=True).start()
            self.done += 1
            self.last = now

    def _publish(self) -> None:
        client = redis.Redis.from_url(BROKER)
        sent = -1
        while True:
            time.sleep(0.02)
            with self.lock:
                done, last = self.done, self.last
            if done != sent:
                pipe = client.pipeline()
                pipe.hset(DONE_KEY, str(self.pid), done)
                pipe.hset(LAST_KEY, str(self.pid), repr(last))
                pipe.execute()
                sent = done


_counter = _Counter()


@task_postrun.connect
def _count(**_: Any) -> None:
    _counter.add()
