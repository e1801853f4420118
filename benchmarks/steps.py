"""What a durable step costs: ``context.step`` of a no-op function against a plain call.

One attempt holds a real lease (claimed through the engine) and runs
``--steps`` steps through the same ``Steps`` object a task's context uses;
each one is one ``Engine.record_step`` round trip (the named statement,
prepared) in autocommit, so each record is its own commit. Reported:

* the overhead of one step, p50 and p95 in ms: a step's time minus a plain
  call's (the plain call is well under a microsecond);
* steps per second of one thread, and steps per CPU-second ("per core"):
  the CPU of this process and of its PostgreSQL backend together, from
  ``/proc`` (so the server must run on this machine), since on a small
  machine the two share the cores;
* the replay: the next attempt's run over the same steps, which reads every
  record in one query and calls nothing.

Run by hand on a quiet machine (not a test):

    BENCH_DATABASE_URL=postgres://root@127.0.0.1:5432/django_jobs_bench \\
        .venv/bin/python -m benchmarks.steps --steps 5000
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
import uuid

from benchmarks.cost import _cpu_seconds
from benchmarks.drain import ensure_database, setup_django


def noop() -> None:
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=5000)
    steps_count = parser.parse_args().steps
    setup_django()
    ensure_database()

    from django.db import connection

    from benchmarks.benchapp.tasks import noop as noop_task
    from django_jobs.backend import jobs_backend
    from django_jobs.steps import Steps
    from django_jobs.values import WorkerIdentity

    with connection.cursor() as cursor:
        cursor.execute(
            "TRUNCATE django_jobs_job, django_jobs_attempt, "
            "django_jobs_step, django_jobs_worker CASCADE"
        )
        cursor.execute("SELECT pg_backend_pid()")
        (backend_pid,) = cursor.fetchone() or (0,)
    backend = jobs_backend("default")
    engine = backend.engine
    noop_task.enqueue()
    me = WorkerIdentity(uuid.uuid4(), "benchmarks.steps")
    [claimed] = engine.claim(me, ["default"], 1)
    limit = backend.settings.MAX_RESULT_BYTES

    def attempt(token: int) -> Steps:
        return Steps(engine, me.id, claimed.job_id, token, limit)

    plain = []
    for _ in range(steps_count):
        start = time.perf_counter()
        noop()
        plain.append(time.perf_counter() - start)

    first = attempt(claimed.token)
    took = []
    cpu_before = time.process_time() + (_cpu_seconds(backend_pid) or 0.0)
    wall_before = time.perf_counter()
    for i in range(steps_count):
        start = time.perf_counter()
        first.run(f"step-{i}", noop)
        took.append(time.perf_counter() - start)
    wall = time.perf_counter() - wall_before
    cpu = time.process_time() + (_cpu_seconds(backend_pid) or 0.0) - cpu_before

    replay = attempt(claimed.token + 1)
    replay_before = time.perf_counter()
    for i in range(steps_count):
        replay.run(f"step-{i}", noop)
    replayed = time.perf_counter() - replay_before

    base = statistics.median(plain)
    overhead = sorted(t - base for t in took)
    print(f"steps: {steps_count}, one thread, pid {os.getpid()}, backend pid {backend_pid}")
    print(f"plain call p50: {base * 1e6:.2f} us")
    print(
        f"step overhead: p50 {statistics.median(overhead) * 1e3:.3f} ms, "
        f"p95 {overhead[int(0.95 * len(overhead))] * 1e3:.3f} ms"
    )
    print(f"steps/s (one thread): {steps_count / wall:,.0f}")
    print(f"steps per CPU-second (client + its backend): {steps_count / cpu:,.0f}")
    print(f"replay of {steps_count} recorded steps: {replayed * 1e3:.1f} ms in all")


if __name__ == "__main__":
    main()
