"""What one scrape of the database gauges costs on a 1,000,000-row jobs table.

The metrics collector (``django_jobs.metrics.collector``) queries the jobs
table at every scrape. It must stay cheap however large the history grows:
it reads live rows through the partial indexes, never the finished ones.
Two tables of 1,000,000 rows are timed:

* ``history``: 990,000 finished jobs and 10,000 live ones (queued, due and
  scheduled, running, waiting, quarantined) over three queues — a
  production table whose pruning keeps weeks of history;
* ``backlog``: 1,000,000 queued jobs over three queues — a pile-up, the
  worst case, where every queued entry is counted.

The figure is the median of ``--scrapes`` collector runs, after a VACUUM
ANALYZE (as autovacuum leaves a table at rest).

    .venv/bin/python -m benchmarks.metrics_scrape --scrapes 20
"""

from __future__ import annotations

import argparse
import statistics
import time

from benchmarks.drain import ensure_database, setup_django

ROWS = 1_000_000
QUEUES = ("default", "emails", "reports")


def fill(live: int) -> None:
    """ROWS jobs, ``live`` of them live (or all queued when live == ROWS), the rest finished."""
    from django.db import connection, transaction

    from benchmarks.benchapp.tasks import noop
    from django_jobs import enqueue_many

    with connection.cursor() as cursor:
        cursor.execute(
            "TRUNCATE django_jobs_job, django_jobs_attempt, "
            "django_jobs_jobevent, django_jobs_worker CASCADE"
        )
    with transaction.atomic():
        enqueue_many(noop, [((), {})] * ROWS)
    with connection.cursor() as cursor:
        # Spread over the queues; then set up states directly (a fixture, not transitions).
        cursor.execute(
            "UPDATE django_jobs_job SET queue = (%s::text[])[1 + abs(hashtext(id::text)) %% 3]",
            [list(QUEUES)],
        )
        if live < ROWS:
            cursor.execute(
                "WITH picked AS (SELECT id, row_number() OVER () AS n FROM django_jobs_job) "
                "UPDATE django_jobs_job AS job SET "
                "state = CASE WHEN n <= %(finished)s THEN 'succeeded' "
                "  WHEN n <= %(finished)s + %(live)s * 0.6 THEN 'queued' "
                "  WHEN n <= %(finished)s + %(live)s * 0.8 THEN 'queued' "
                "  WHEN n <= %(finished)s + %(live)s * 0.9 THEN 'running' "
                "  WHEN n <= %(finished)s + %(live)s * 0.95 THEN 'waiting' "
                "  ELSE 'quarantined' END, "
                "finished_at = CASE WHEN n <= %(finished)s THEN now() END, "
                "run_after = CASE WHEN n > %(finished)s + %(live)s * 0.6 "
                "  AND n <= %(finished)s + %(live)s * 0.8 THEN now() + interval '1 hour' "
                "  ELSE job.run_after END "
                "FROM picked WHERE picked.id = job.id",
                {"finished": ROWS - live, "live": live},
            )
        cursor.execute("VACUUM ANALYZE django_jobs_job")


def time_scrapes(scrapes: int) -> tuple[float, float]:
    """Median and max seconds of one collector run."""
    from django_jobs.backend import jobs_backend
    from django_jobs.metrics.collector import JobsCollector

    backend = jobs_backend("default")
    collector = JobsCollector(backend.db, QUEUES, stale_after=30.0)
    took = []
    for _ in range(scrapes):
        began = time.perf_counter()
        list(collector.collect())
        took.append(time.perf_counter() - began)
    return statistics.median(took), max(took)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--scrapes", type=int, default=20)
    options = parser.parse_args()
    setup_django()
    ensure_database()
    for name, live in (("history", 10_000), ("backlog", ROWS)):
        fill(live)
        median, worst = time_scrapes(options.scrapes)
        print(
            f"{name}: {ROWS:,} rows, {live:,} live: scrape median {median * 1000:.1f} ms, "
            f"max {worst * 1000:.1f} ms",
            flush=True,
        )


if __name__ == "__main__":
    main()
