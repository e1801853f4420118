"""``jobs list`` and ``jobs stats``: what is in the queues, at a glance."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser
from django.db.models import QuerySet
from django.utils import timezone

from django_jobs.backend import JobsBackend
from django_jobs.models import Job, paused_queues
from django_jobs.states import JobState
from django_jobs.statistics import queue_stats, worker_stats

from . import render
from .arguments import positive_int
from .base import AddSubcommand

LIST_LIMIT = 50
TASK_WIDTH = 48


def add_filters(sub: CommandParser) -> None:
    """The filters of ``jobs list``, which the job verbs take too."""
    sub.add_argument(
        "--state",
        action="append",
        choices=list(JobState.values),
        help="Only jobs in this state; repeat for several.",
    )
    sub.add_argument("--queue", help="Only jobs of this queue.")
    sub.add_argument("--task", help="Only jobs of this task (its full dotted path).")
    sub.add_argument("--tenant", help="Only jobs of this tenant.")


FILTERS = ("state", "queue", "task", "tenant")


def has_filter(options: dict[str, Any]) -> bool:
    return any(options[name] for name in FILTERS)


def filtered(jobs: QuerySet[Job], options: dict[str, Any]) -> QuerySet[Job]:
    """``jobs`` narrowed by the filter options given."""
    if options["state"]:
        jobs = jobs.filter(state__in=options["state"])
    for name, column in (("queue", "queue"), ("task", "task_name"), ("tenant", "tenant")):
        if options[name] is not None:
            jobs = jobs.filter(**{column: options[name]})
    return jobs


def add_list(add: AddSubcommand) -> None:
    sub = add("list", "List jobs, newest first, as a compact table.", list_jobs)
    add_filters(sub)
    sub.add_argument(
        "--limit",
        type=positive_int,
        default=LIST_LIMIT,
        help=f"Show at most this many jobs (default: {LIST_LIMIT}).",
    )


def add_stats(add: AddSubcommand) -> None:
    add("stats", "Per queue: jobs by state, backlog age, running, last hour's outcomes.", stats)


def list_jobs(command: BaseCommand, backend: JobsBackend, options: dict[str, Any]) -> None:
    jobs = filtered(Job.objects.using(backend.db).order_by("-enqueued_at", "id"), options)
    limit: int = options["limit"]
    # One more than shown, to say whether there are more without a count(*).
    rows = list(
        jobs.only(
            "id",
            "state",
            "queue",
            "priority",
            "attempts",
            "max_attempts",
            "task_name",
            "tenant",
            "enqueued_at",
            "run_after",
        )[: limit + 1]
    )
    if options["json"]:
        fields = ("id", "state", "queue", "priority", "attempts", "max_attempts", "tenant")
        listed = [
            {
                **{name: getattr(job, name) for name in fields},
                "task": job.task_name,
                "enqueued_at": job.enqueued_at,
                "run_after": job.run_after,
            }
            for job in rows[:limit]
        ]
        command.stdout.write(render.document({"jobs": listed, "more": len(rows) > limit}))
        return
    if not rows:
        command.stdout.write("No jobs match.")
        return
    now = timezone.now()
    command.stdout.write(
        render.table(
            ("ID", "STATE", "QUEUE", "PRI", "TRIES", "AGE", "TENANT", "TASK"),
            (
                (
                    str(job.id),
                    job.state,
                    job.queue,
                    str(job.priority),
                    f"{job.attempts}/{job.max_attempts}",
                    render.age(now - job.enqueued_at),
                    job.tenant or "-",
                    render.one_line(job.task_name, TASK_WIDTH),
                )
                for job in rows[:limit]
            ),
        )
    )
    if len(rows) > limit:
        command.stdout.write(f"(first {limit} shown; more match: narrow the filters or --limit)")


def stats(command: BaseCommand, backend: JobsBackend, options: dict[str, Any]) -> None:
    now = timezone.now()
    queues = queue_stats(Job.objects.using(backend.db), backend.queues, now)
    states = list(JobState.values)
    paused = paused_queues(backend.db)
    workers = worker_stats(backend.db, now, backend.settings.WORKER_STALE_SECONDS)
    running = sum(q.running for q in queues)
    if options["json"]:
        command.stdout.write(
            render.document(
                {
                    "queues": [
                        {
                            "queue": q.queue,
                            "depth": {s: q.by_state[s] for s in states},
                            "scheduled": q.scheduled,
                            "oldest_ready_age": None
                            if (waited := q.waited(now)) is None
                            else max(0.0, waited.total_seconds()),
                            "succeeded_last_hour": q.succeeded["1h"],
                            "failed_last_hour": q.failed["1h"],
                            "paused": q.queue in paused,
                        }
                        for q in queues
                    ],
                    "running": running,
                    "workers": {"live": workers.live, "stale": workers.stale},
                }
            )
        )
        return
    command.stdout.write(
        render.table(
            (
                "QUEUE",
                *(s.upper() for s in states),
                "SCHEDULED",
                "OLDEST-READY",
                "SUCCEEDED-1H",
                "FAILED-1H",
                "PAUSED",
            ),
            (
                (
                    q.queue,
                    *(str(q.by_state[s]) for s in states),
                    str(q.scheduled),
                    render.age(waited) if (waited := q.waited(now)) is not None else "-",
                    str(q.succeeded["1h"]),
                    str(q.failed["1h"]),
                    "yes" if q.queue in paused else "no",
                )
                for q in queues
            ),
        )
    )
    command.stdout.write(
        f"\n{running} job(s) running or cancelling; workers: {workers.live} live, "
        f"{workers.stale} stale (no heartbeat for "
        f"{backend.settings.WORKER_STALE_SECONDS:g}s, not stopped)."
    )
