"""W1 one by one against its floor: what a transaction of one INSERT costs, under any enqueue.

W1 times each django-jobs enqueue inside ``transaction.atomic()`` (the way a
Django view enqueues: with its own writes), and the PostgreSQL peers defer in
autocommit, one statement each. This measures, in one process and on one
server, how far each of those is from what the database itself asks for:

* ``bare`` cases: psycopg alone, a one-column table with a serial key, no
  Python of ours: ``BEGIN; INSERT; COMMIT`` (three round trips and a commit,
  what any enqueue inside a transaction costs at least), and the same INSERT
  in autocommit (one round trip and a commit);
* ``job row`` cases: psycopg alone, django-jobs' own prepared INSERT of a job
  with its NOTIFY (``statements.insert_job``), the values a real enqueue sent,
  in a transaction and in autocommit: the database's part of an enqueue;
* ``django-jobs`` cases: ``noop.enqueue()`` inside ``atomic()`` (W1) and
  in autocommit;
* ``pgqueuer``: ``Queries.enqueue`` over asyncpg, as W1 runs it, timed
  inside the event loop (only where pgqueuer is installed:
  ``benchmarks/.venv``).

The cases take turns in runs of ``--run`` calls, so a noisy neighbour spreads
over all of them while each case's connection stays as busy as in W1's loop
(alternated call by call, every connection waited idle between its calls,
and waking its server process added 100-250 µs to each case); each row gives
the median and 95th percentile in microseconds and the rate the median makes.
Run with the benchmark virtualenv:

    benchmarks/.venv/bin/python -m benchmarks.enqueue_floor --calls 3000
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from benchmarks import pg
from benchmarks.drain import no_jobs

PGQUEUER_DB = "bench_enqueue_floor_pgqueuer"


def job_row_statement() -> tuple[str, list[Any]]:
    """django-jobs' single-enqueue statement, and the row one real enqueue wrote with it."""
    from django.db import connection
    from psycopg.types.json import Jsonb

    from benchmarks.benchapp.tasks import noop
    from django_jobs.engine.postgres import statements
    from django_jobs.models import Job
    from django_jobs.wakeup import CHANNEL

    job = noop.enqueue()
    columns = ", ".join(f'"{field.column}"' for field in Job._meta.concrete_fields)
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {columns} FROM django_jobs_job WHERE id = %s", [job.id])
        row = cursor.fetchone()
    values = [Jsonb(v) if isinstance(v, dict | list) else v for v in row]
    return statements.insert_job(notify=True), [*values, CHANNEL, noop.queue_name]


def bare_cases(conn: Any, auto: Any) -> dict[str, Callable[[], object]]:
    conn.execute("CREATE TABLE IF NOT EXISTS enqueue_floor (id bigserial PRIMARY KEY, v text)")
    conn.commit()
    insert = "INSERT INTO enqueue_floor (v) VALUES (%s)"

    def in_transaction() -> None:
        with conn.transaction():
            conn.execute(insert, ["x"], prepare=True)

    return {
        "bare INSERT, BEGIN/COMMIT": in_transaction,
        "bare INSERT, autocommit": lambda: auto.execute(insert, ["x"], prepare=True),
    }


def job_row_cases(conn: Any, auto: Any) -> dict[str, Callable[[], object]]:
    from django_jobs.engine.postgres import statements
    from django_jobs.ids import new_id

    sql, params = job_row_statement()
    quiet = statements.insert_job(notify=False)

    def fresh(notify: bool = True) -> list[Any]:
        # The id comes first (model order), time-ordered; the NOTIFY's two last.
        return [new_id(), *params[1 : None if notify else -2]]

    def in_transaction(notify: bool = True) -> None:
        with conn.transaction():
            conn.execute(sql if notify else quiet, fresh(notify), prepare=True)

    return {
        "job row + NOTIFY, BEGIN/COMMIT": in_transaction,
        "job row alone, BEGIN/COMMIT": lambda: in_transaction(notify=False),
        "job row + NOTIFY, autocommit": lambda: auto.execute(sql, fresh(), prepare=True),
    }


def django_jobs_cases() -> dict[str, Callable[[], object]]:
    from django.db import transaction

    from benchmarks.benchapp.tasks import noop

    def in_atomic() -> None:
        with transaction.atomic():
            noop.enqueue()

    return {"django-jobs, in atomic() (W1)": in_atomic, "django-jobs, autocommit": noop.enqueue}


@contextmanager
def pgqueuer_case() -> Iterator[dict[str, Callable[[], object]]]:
    if importlib.util.find_spec("pgqueuer") is None:
        yield {}
        return
    import asyncpg
    from pgqueuer import AsyncpgDriver, Queries

    pg.create_database(PGQUEUER_DB)
    loop = asyncio.new_event_loop()
    connection = loop.run_until_complete(asyncpg.connect(pg.dsn(PGQUEUER_DB)))
    try:
        queries = Queries(AsyncpgDriver(connection))
        loop.run_until_complete(queries.install())

        async def enqueue() -> float:
            # Timed inside the loop: W1 runs every call in one coroutine, and
            # starting the loop for each call is no cost of PgQueuer's.
            start = time.perf_counter()
            await queries.enqueue("noop", None)
            return time.perf_counter() - start

        yield {"pgqueuer, autocommit (W1)": lambda: loop.run_until_complete(enqueue())}
    finally:
        loop.run_until_complete(connection.close())
        loop.close()
        pg.drop_database(PGQUEUER_DB)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=3000, help="timed calls per case")
    parser.add_argument("--run", type=int, default=100, help="calls of a case in a row")
    options = parser.parse_args()
    no_jobs()
    import psycopg
    from django.db import connection

    dsn = pg.dsn(connection.settings_dict["NAME"])
    with (
        psycopg.connect(dsn) as conn,
        psycopg.connect(dsn, autocommit=True) as auto,
        pgqueuer_case() as peer,
    ):
        timed = {
            **bare_cases(conn, auto),
            **job_row_cases(conn, auto),
            **django_jobs_cases(),
            **peer,
        }
        for call in timed.values():  # warm up: statements prepared, caches filled
            for _ in range(100):
                call()
        times: dict[str, list[float]] = {name: [] for name in timed}
        for _ in range(max(1, options.calls // options.run)):
            for name, call in timed.items():
                for _ in range(options.run):
                    start = time.perf_counter()
                    inside = call()
                    took = inside if isinstance(inside, float) else time.perf_counter() - start
                    times[name].append(took * 1e6)
        conn.execute("DROP TABLE enqueue_floor")
        conn.commit()
    print("| enqueue | p50 µs | p95 µs | jobs/s at p50 |")
    print("| --- | ---: | ---: | ---: |")
    for name, got in times.items():
        p50, p95 = statistics.median(got), statistics.quantiles(got, n=20)[-1]
        print(f"| {name} | {p50:.0f} | {p95:.0f} | {1e6 / p50:,.0f} |")


if __name__ == "__main__":
    main()
