"""What one claim costs with a short queue and with a long one, for each claim path.

A queue must not get slower to claim from as work piles up. For each claim
path (plain, fair, limited, per-key limited) this times claims the way a
worker makes them — in a session with prepared statements, on tables whose
statistics were taken while they were empty (a new deployment; no ANALYZE
after the backlog arrives) — with a backlog of 100 jobs and of 100,000. Each
claimed batch is completed and replaced by as many new jobs, untimed, so the
backlog stays the size it is said to be. The figure is the ratio of the
median claim times (long / short); the target is at most 2.

    .venv/bin/python -m benchmarks.claim_cost --claims 300
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid
from collections import Counter

from benchmarks.drain import ensure_database, setup_django

PATHS = ("plain", "fair", "limited", "keyed")


def fill(queue: str, backlog: int) -> None:
    """Empty tables, analysed; then ``backlog`` jobs: 10 for tenant (and key) b, the rest for a."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "TRUNCATE django_jobs_job, django_jobs_attempt, "
            "django_jobs_worker, django_jobs_fairclock CASCADE"
        )
        cursor.execute("ANALYZE")
    enqueue(queue, {"a": backlog - 10, "b": 10})


def enqueue(queue: str, tenants: dict[str, int]) -> None:
    from benchmarks.benchapp.tasks import noop
    from django_jobs import enqueue_many

    task = noop.using(backend="claims", queue_name=queue)
    for tenant, count in tenants.items():
        if count:
            enqueue_many(task.using(tenant=tenant, concurrency_key=tenant), [((), {})] * count)


def time_claims(queue: str, batch: int, claims: int) -> list[float]:
    from django.db import transaction
    from django.tasks import task_backends

    from django_jobs import AttemptOutcome
    from django_jobs.engine import engine_for
    from django_jobs.values import Report, WorkerIdentity

    rules = task_backends["claims"].settings  # type: ignore[attr-defined]
    me = WorkerIdentity(uuid.uuid4(), "claim-cost")
    times = []
    for _ in range(claims):
        start = time.perf_counter()
        with transaction.atomic():
            got = engine_for("default", rules).claim(me, [queue], batch)
        times.append((time.perf_counter() - start) * 1000)
        reports = [Report(c.job_id, c.token, c.attempt_id, AttemptOutcome.SUCCEEDED) for c in got]
        engine_for("default", rules).finish(me.id, reports)
        enqueue(queue, Counter(c.tenant for c in got))
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--claims", type=int, default=300, help="timed claims per case")
    parser.add_argument("--short", type=int, default=100)
    parser.add_argument("--long", type=int, default=100_000)
    parser.add_argument("--batches", default="1,64", help="claim sizes, comma-separated")
    parser.add_argument("--paths", default=",".join(PATHS), help="claim paths, comma-separated")
    options = parser.parse_args()
    setup_django()
    ensure_database()
    print("| path | batch | short backlog ms (median) | long backlog ms (median) | long / short |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for path in options.paths.split(","):
        for batch in (int(b) for b in options.batches.split(",")):
            medians = []
            for backlog in (options.short, options.long):
                fill(path, backlog)
                medians.append(statistics.median(time_claims(path, batch, options.claims)))
            print(
                f"| {path} | {batch} | {medians[0]:.2f} | {medians[1]:.2f} | "
                f"{medians[1] / medians[0]:.2f} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
