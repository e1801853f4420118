"""What the W3 probe task does: note the moment it started, keyed by the probe number.

Workers of every peer call :func:`record_start` first thing in the probe task.
The time is taken before any I/O; it goes to a ``bench_latency`` table in the
peer's own database (``BENCH_RECORD_DSN``), or to a Redis hash when that
variable is a ``redis://`` URL (Celery). One connection per thread, opened on
first use, so a task never waits on another's connection.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

TABLE = "bench_latency"
REDIS_KEY = "bench:latency"
CREATE_TABLE = (
    f"CREATE TABLE IF NOT EXISTS {TABLE} "
    "(probe integer PRIMARY KEY, started double precision NOT NULL)"
)

# One connection per process, not per thread: a worker of 64 threads must not
# open 64 connections for its probes (the server allows 100 in all).
_lock = threading.Lock()
_conns: dict[int, Any] = {}  # by pid: a forked child opens its own


def _target() -> str:
    return os.environ["BENCH_RECORD_DSN"]


def record_start(probe: int) -> None:
    started = time.time()
    target = _target()
    with _lock:
        conn: Any = _conns.get(os.getpid())
        if target.startswith("redis://"):
            if conn is None:
                import redis

                conn = _conns[os.getpid()] = redis.Redis.from_url(target)
            conn.hset(REDIS_KEY, str(probe), repr(started))
            return
        if conn is None:
            import psycopg

            conn = _conns[os.getpid()] = psycopg.connect(target, autocommit=True)
        conn.execute(f"INSERT INTO {TABLE} (probe, started) VALUES (%s, %s)", [probe, started])


def read_starts(target: str) -> dict[int, float]:
    """The start times recorded so far, by probe number."""
    if target.startswith("redis://"):
        import redis

        client = redis.Redis.from_url(target)
        return {int(k): float(v) for k, v in client.hgetall(REDIS_KEY).items()}
    import psycopg

    with psycopg.connect(target, autocommit=True) as conn:
        conn.execute(CREATE_TABLE)
        return dict(conn.execute(f"SELECT probe, started FROM {TABLE}").fetchall())


def clear(target: str) -> None:
    if target.startswith("redis://"):
        import redis

        redis.Redis.from_url(target).delete(REDIS_KEY)
        return
    import psycopg

    with psycopg.connect(target, autocommit=True) as conn:
        conn.execute(CREATE_TABLE)
        conn.execute(f"TRUNCATE {TABLE}")
