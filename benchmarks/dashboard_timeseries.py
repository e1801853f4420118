"""How long the dashboard's charts take to compute on a year of history (PostgreSQL).

Fills a database with ``--jobs`` finished jobs spread over a year, each with
its attempt, then a busy last hour on top (``--hour`` jobs, one in twenty
retried once, and a ``--backlog`` of due jobs waiting), analyses, and times
``timeseries()`` plus its JSON encoding: what one poll of the admin's
timeseries view costs. Prints the median and the worst of ``--runs`` calls,
the rows one poll's queries return, and the plan of the ended-attempts read.

``--baseline MODULE`` times that module's ``timeseries()`` too, on the same
rows, alternating call by call with ours, so that a shared, noisy machine
weighs on both alike: for a before/after, copy the old ``timeseries.py`` out
of git into a module of its own (absolute imports) and name it.

    BENCH_DATABASE_URL=postgres://root@127.0.0.1:5432/some_db \\
        python -m benchmarks.dashboard_timeseries --jobs 1000000 --hour 360000

The database named there is dropped and made anew.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import statistics
import time
from collections.abc import Callable
from functools import partial
from typing import Any
from urllib.parse import urlparse

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "benchmarks.settings")

JOB_COLUMNS = """(id, backend, task_name, task_version, args, kwargs, queue, priority,
    run_after, tenant, initiator, dedup_scope, state, attempts, max_attempts, last_error,
    enqueued_at, started_at, finished_at, updated_at, attempt_budget, progress_message,
    lost_streak, waiting_on)"""
# One job per row of the series; $age is how long before now it was enqueued.
JOB_ROW = """gen_random_uuid(), 'default', 'benchmarks.benchapp.tasks.noop', '', '[]', '{{}}',
    'default', 0, now() - {age}, '', '', '', {state}, {attempts}, 3, '',
    now() - {age}, {started}, {finished}, now(), 3, '', 0, 0"""


def fill(jobs: int, hour: int, backlog: int) -> None:
    from django.db import connection

    year = "make_interval(secs => 3600 + random() * 365 * 86400)"
    recent = "make_interval(secs => 5 + random() * 3595)"
    with connection.cursor() as cursor:
        for count, age, retried in ((jobs, year, False), (hour, recent, True)):
            cursor.execute(
                f"""
                WITH made AS (
                    INSERT INTO django_jobs_job {JOB_COLUMNS}
                    SELECT {
                    JOB_ROW.format(
                        age="s.age",
                        state="'succeeded'",
                        attempts="CASE WHEN s.i %% 20 = 0 AND %(retried)s THEN 2 ELSE 1 END",
                        started="now() - s.age + interval '0.3 s'",
                        finished="now() - s.age + interval '0.5 s'",
                    )
                }
                    FROM (SELECT i, {age} AS age FROM generate_series(1, %(count)s) i) s
                    RETURNING id, attempts, enqueued_at, started_at, finished_at
                )
                INSERT INTO django_jobs_attempt
                    (job_id, number, worker_name, outcome, started_at, finished_at,
                     error_type, error_message, traceback)
                SELECT id, n, 'bench:1',
                       CASE WHEN n < attempts THEN 'failed' ELSE 'succeeded' END,
                       started_at + (n - 1) * interval '0.01 s',
                       finished_at - (attempts - n) * interval '0.01 s', '', '', ''
                FROM made, generate_series(1, made.attempts) n
                """,
                {"count": count, "retried": retried},
            )
        cursor.execute(
            f"""
            INSERT INTO django_jobs_job {JOB_COLUMNS}
            SELECT {
                JOB_ROW.format(
                    age="make_interval(secs => random() * 600)",
                    state="'queued'",
                    attempts="0",
                    started="NULL",
                    finished="NULL",
                )
            }
            FROM generate_series(1, %(count)s)
            """,
            {"count": backlog},
        )
        cursor.execute("ANALYZE django_jobs_job")
        cursor.execute("ANALYZE django_jobs_attempt")


def rows_returned(poll: Callable[[], str]) -> tuple[int, str]:
    """The rows all queries of one ``poll`` return (PostgreSQL's row count of each SELECT)."""
    from django.db import connection

    total = 0

    def count(execute: Callable[..., Any], sql: str, params: Any, many: bool, context: Any) -> Any:
        nonlocal total
        result = execute(sql, params, many, context)
        total += max(context["cursor"].rowcount, 0)
        return result

    with connection.execute_wrapper(count):
        body = poll()
    return total, body


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--hour", type=int, default=36_000)
    parser.add_argument("--backlog", type=int, default=5_000)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument(
        "--baseline", metavar="MODULE", help="also time MODULE.timeseries, interleaved with ours"
    )
    options = parser.parse_args()

    from benchmarks import pg

    url = os.environ.get("BENCH_DATABASE_URL", "postgres://root@127.0.0.1:5432/django_jobs_bench")
    pg.create_database(urlparse(url).path.lstrip("/"))
    django.setup()
    from django.core.management import call_command
    from django.db import connection
    from django.utils import timezone

    from django_jobs import timeseries
    from django_jobs.models import Job

    implementations = {"timeseries": timeseries.timeseries}
    if options.baseline:
        implementations[options.baseline] = importlib.import_module(options.baseline).timeseries

    call_command("migrate", verbosity=0)
    started = time.perf_counter()
    fill(options.jobs, options.hour, options.backlog)
    print(f"filled in {time.perf_counter() - started:.0f} s")
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM django_jobs_job")
        print(f"jobs: {cursor.fetchone()[0]}")
        cursor.execute(
            "EXPLAIN SELECT count(*) FROM django_jobs_attempt "
            "WHERE finished_at >= now() - interval '1 hour'"
        )
        print("\n".join(row[0] for row in cursor.fetchall()))

    def poll(name: str) -> str:
        return json.dumps(implementations[name](Job.objects.all(), timezone.now()).as_json())

    times: dict[str, list[float]] = {name: [] for name in implementations}
    for _ in range(options.runs):
        for name in implementations:
            began = time.perf_counter()
            poll(name)
            times[name].append(time.perf_counter() - began)
    for name, taken in times.items():
        rows, body = rows_returned(partial(poll, name))
        print(
            f"{name} + JSON ({len(body)} bytes, {rows} rows returned): "
            f"median {statistics.median(taken) * 1000:.0f} ms, "
            f"worst {max(taken) * 1000:.0f} ms over {options.runs} runs"
        )


if __name__ == "__main__":
    main()
