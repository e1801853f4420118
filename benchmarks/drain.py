"""W2 drain: N no-op jobs queued, then ``runworkers --burst`` started; jobs/s to the last one.

``--sleep S`` makes each job sleep S seconds instead (jobs waiting on I/O).

Run from the repository root:

    .venv/bin/python -m benchmarks.drain --jobs 20000 --runs 3 \
        --setting 1x4:"-p 1 -c 4" --setting 2x8:"-p 2 -c 8"

Each setting runs ``--runs`` times on a freshly emptied table; the median and
the min-max are printed, and JSON with every run goes to ``--json`` if given.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def setup_django() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "benchmarks.settings")
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()


def ensure_database() -> None:
    import psycopg
    from django.db import connection

    name = connection.settings_dict["NAME"]
    params = connection.get_connection_params()
    params["dbname"] = "postgres"
    with psycopg.connect(**params, autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone()
        if not exists:
            conn.execute(f'CREATE DATABASE "{name}"')
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def no_jobs() -> None:
    """Django set up on the benchmark settings, the database made and migrated, and no job in it."""
    setup_django()
    ensure_database()
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("TRUNCATE django_jobs_job CASCADE")


def queue_jobs(count: int, sleep: float = 0.0) -> None:
    from django.db import connection, transaction

    from benchmarks.benchapp.tasks import naps, noop
    from django_jobs import enqueue_many

    with connection.cursor() as cursor:
        cursor.execute(
            "TRUNCATE django_jobs_job, django_jobs_attempt, "
            "django_jobs_jobevent, django_jobs_worker, django_jobs_retrywindow CASCADE"
        )
    with transaction.atomic():
        if sleep:
            enqueue_many(naps, [((sleep,), {})] * count)
        else:
            enqueue_many(noop, [((), {})] * count)
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE django_jobs_job")


def drain(worker_args: list[str], receiver: bool = False) -> float:
    """Run workers until the queue is empty; return jobs/s from start to the last finish.

    ``receiver``: each worker connects a no-op ``job_transitioned`` receiver.
    """
    from django.db.models import Count, Max

    from django_jobs.models import Job

    env = {**os.environ, "PYTHONPATH": str(ROOT), "DJANGO_SETTINGS_MODULE": "benchmarks.settings"}
    if receiver:
        env["BENCH_TRANSITION_RECEIVER"] = "1"
    from django.utils import timezone

    started = timezone.now()
    subprocess.run(
        [sys.executable, "-m", "django", "runworkers", "--burst", "-v", "0", *worker_args],
        cwd=ROOT,
        env=env,
        check=True,
    )
    summary = Job.objects.aggregate(last=Max("finished_at"), n=Count("id"))
    states = set(Job.objects.values_list("state", flat=True).distinct())
    assert states == {"succeeded"}, states
    return float(summary["n"] / (summary["last"] - started).total_seconds())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--jobs", type=int, default=20000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument(
        "--setting",
        action="append",
        default=[],
        metavar='NAME:"ARGS"',
        help='a named runworkers setting, e.g. 1x4:"-p 1 -c 4" (repeatable)',
    )
    parser.add_argument(
        "--sleep", type=float, default=0.0, help="each job sleeps this many seconds (default: none)"
    )
    parser.add_argument("--json", type=Path)
    parser.add_argument(
        "--with-receiver",
        action="store_true",
        help="run every setting also with a catch-all job_transitioned receiver connected "
        "(named SETTING+receiver)",
    )
    options = parser.parse_args()
    settings = [s.split(":", 1) for s in options.setting] or [["1x4", "-p 1 -c 4"]]
    cases = [(name, args, False) for name, args in settings]
    if options.with_receiver:
        cases = [c for name, args in settings for c in ((name, args, False), (name, args, True))]
    setup_django()
    ensure_database()
    results: dict[str, list[float]] = {}
    for run in range(options.runs):
        for name, args, receiver in cases:  # interleaved, so drift hits every case alike
            label = f"{name}+receiver" if receiver else name
            queue_jobs(options.jobs, options.sleep)
            rate = drain(shlex.split(args), receiver)
            results.setdefault(label, []).append(rate)
            print(f"run {run + 1} {label}: {rate:,.0f} jobs/s", flush=True)
    print(f"\n{'setting':<10} {'median jobs/s':>14} {'min-max':>18}")
    for name, rates in results.items():
        print(
            f"{name:<10} {statistics.median(rates):>14,.0f} {min(rates):>8,.0f}-{max(rates):<8,.0f}"
        )
    for name, _ in settings:
        if f"{name}+receiver" in results:
            ratios = [
                w / wo for w, wo in zip(results[f"{name}+receiver"], results[name], strict=True)
            ]
            print(
                f"{name}: with / without a receiver {statistics.median(ratios):.2f} "
                f"(same-run ratios {', '.join(f'{r:.2f}' for r in ratios)})"
            )
    if options.json:
        options.json.write_text(
            json.dumps({"jobs": options.jobs, "runs": results, "at": time.time()}, indent=2)
        )


if __name__ == "__main__":
    main()
