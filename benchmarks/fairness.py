"""The cost of tenant fairness: the same backlog drained from a plain and a fair queue.

Tenant A's jobs are queued first, tenant B's after. In the plain queue B waits
for all of A; in the fair queue B's jobs start among the first claims. The
figure that matters is the ratio of drain rates (fair / plain), measured in
the same run, for each worker setting: the best one (``-p 2 -c 64``) and one
free slot at a time (``-p 1 -c 1``), where a ranking by what runs now used
to starve B. The statistics are those of the empty table, as on a new
deployment: the tables are analysed before the backlog is queued, never after.

    .venv/bin/python -m benchmarks.fairness --a-jobs 20000 --b-jobs 100 --runs 3
"""

from __future__ import annotations

import argparse
import os
import shlex
import statistics
import subprocess
import sys

from benchmarks.drain import ROOT, ensure_database, setup_django


def queue_backlog(queue: str, a_jobs: int, b_jobs: int) -> None:
    from django.db import connection, transaction

    from benchmarks.benchapp.tasks import noop
    from django_jobs import enqueue_many

    tables = "django_jobs_job, django_jobs_worker, django_jobs_retrywindow, django_jobs_fairclock"
    with connection.cursor() as cursor:
        cursor.execute(f"TRUNCATE {tables} CASCADE")
        cursor.execute("ANALYZE")  # statistics of empty tables, kept while the backlog drains
    with transaction.atomic():
        for tenant, count in (("a", a_jobs), ("b", b_jobs)):
            task = noop.using(backend="fairness", queue_name=queue, tenant=tenant)
            enqueue_many(task, [((), {})] * count)


def drain(queue: str, worker_args: str) -> tuple[float, int]:
    """Jobs/s to the last finish, and how many jobs started before B's last one did."""
    from django.db.models import Count, Max, Min

    from django_jobs.models import Attempt, Job

    env = {**os.environ, "PYTHONPATH": str(ROOT), "DJANGO_SETTINGS_MODULE": "benchmarks.settings"}
    subprocess.run(
        [
            sys.executable,
            "-m",
            "django",
            "runworkers",
            "--backend",
            "fairness",
            "--burst",
            "-v",
            "0",
            "--queues",
            queue,
            *shlex.split(worker_args),
        ],
        cwd=ROOT,
        env=env,
        check=True,
    )
    span = Attempt.objects.aggregate(first=Min("started_at"), last=Max("finished_at"))
    total = Job.objects.aggregate(n=Count("id"))["n"]
    rate = total / (span["last"] - span["first"]).total_seconds()
    last_b = Attempt.objects.filter(job__tenant="b").aggregate(at=Max("started_at"))["at"]
    before = Attempt.objects.filter(started_at__lt=last_b).count()
    return rate, before


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--a-jobs", type=int, default=20000)
    parser.add_argument("--b-jobs", type=int, default=100)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument(
        "--workers",
        action="append",
        help="runworkers arguments; repeat for several settings "
        "(default: '-p 2 -c 64' and '-p 1 -c 1')",
    )
    options = parser.parse_args()
    setups = options.workers or ["-p 2 -c 64", "-p 1 -c 1"]
    setup_django()
    ensure_database()
    for workers in setups:
        rates: dict[str, list[float]] = {"plain": [], "fair": []}
        positions: dict[str, list[int]] = {"plain": [], "fair": []}
        for run in range(options.runs):
            for queue in ("plain", "fair"):  # interleaved, so drift hits both alike
                queue_backlog(queue, options.a_jobs, options.b_jobs)
                rate, before = drain(queue, workers)
                rates[queue].append(rate)
                positions[queue].append(before)
                print(
                    f"{workers}, run {run + 1} {queue}: {rate:,.0f} jobs/s; "
                    f"B's last job started after {before:,} claims",
                    flush=True,
                )
        plain, fair = statistics.median(rates["plain"]), statistics.median(rates["fair"])
        ratios = [f / p for f, p in zip(rates["fair"], rates["plain"], strict=True)]
        print(
            f"\n{workers}: plain {plain:,.0f} jobs/s (median), B done after "
            f"{statistics.median(positions['plain']):,.0f} claims; fair {fair:,.0f} jobs/s, "
            f"B done after {statistics.median(positions['fair']):,.0f} claims; "
            f"fair / plain {fair / plain:.2f} (same-run ratios "
            f"{', '.join(f'{r:.2f}' for r in ratios)})\n",
            flush=True,
        )


if __name__ == "__main__":
    main()
