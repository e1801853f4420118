"""``jobs show ID``: one job, its attempts and its audit trail, as an operator reads them."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError

from django_jobs import dependencies
from django_jobs.backend import JobsBackend
from django_jobs.models import Attempt, Job, JobEvent

from . import render
from .base import AddSubcommand, parse_ids

ERROR_WIDTH = 120


def add_show(add: AddSubcommand) -> None:
    sub = add("show", "Show one job: its fields, progress, attempts and audit events.", show)
    sub.add_argument("id", help="The job's id (a UUID).")
    sub.add_argument("--full", action="store_true", help="Show tracebacks and the whole result.")


def show(command: BaseCommand, backend: JobsBackend, options: dict[str, Any]) -> None:
    (job_id,) = parse_ids([options["id"]])
    db = backend.db
    job = Job.objects.using(db).filter(id=job_id).first()
    if job is None:
        raise CommandError(f"No job with id {job_id} in database {db!r}.")
    if options["json"]:
        command.stdout.write(render.document(_document(db, job)))
        return
    full: bool = options["full"]
    fields: list[tuple[str, str]] = [
        (
            "task",
            job.task_name + (f" (version {job.task_version})" if job.task_version else ""),
        ),
        ("state", job.state),
        ("queue", f"{job.queue} (priority {job.priority})"),
        ("attempts", f"{job.attempts} of {job.max_attempts}"),
        ("args", render.as_json(job.args, None if full else 500)),
        ("kwargs", render.as_json(job.kwargs, None if full else 500)),
        ("tenant", job.tenant or "-"),
        ("initiator", job.initiator or "-"),
        ("idempotency key", job.idempotency_key or "-"),
        ("unique key", job.unique_key or "-"),
        ("concurrency key", job.concurrency_key or "-"),
        ("rerun of", str(job.rerun_of) if job.rerun_of else "-"),
        ("timeout", f"{job.timeout:g}s" if job.timeout is not None else "-"),
        ("enqueued", render.when(job.enqueued_at)),
        ("run after", render.when(job.run_after)),
        ("expires", render.when(job.expires_at)),
        ("started", render.when(job.started_at)),
        ("finished", render.when(job.finished_at)),
        ("updated", render.when(job.updated_at)),
    ]
    if job.cancel_requested_at is not None:
        fields.append(("cancel asked", render.when(job.cancel_requested_at)))
    for depends_on, state in dependencies.waits_for(job).values_list("id", "state"):
        fields.append(("after", f"{depends_on} ({state})"))
    if job.progress_done is not None:
        total = f"/{job.progress_total}" if job.progress_total is not None else ""
        message = f" {job.progress_message}" if job.progress_message else ""
        fields.append(
            (
                "progress",
                f"{job.progress_done}{total}{message} "
                f"(attempt {job.progress_attempt}, {render.when(job.progress_at)})",
            )
        )
    if job.result is not None:
        fields.append(("result", render.as_json(job.result, None if full else 500)))
    if job.last_error:
        fields.append(("last error", job.last_error))
    width = max(len(name) for name, _ in fields)
    command.stdout.write(f"Job {job.id}")
    for name, value in fields:
        command.stdout.write(f"  {name.ljust(width)}  {value}")
    _show_attempts(command, db, job, full)
    _show_events(command, db, job)


# The job's own columns in ``show --json``: all but the stored trace context.
_JOB_FIELDS = tuple(
    f.attname for f in Job._meta.concrete_fields if f.attname not in ("trace_context",)
)


def _document(db: str, job: Job) -> dict[str, Any]:
    """The whole job, attempts and audit events, for ``show --json``: nothing cut."""
    attempts = Attempt.objects.using(db).filter(job=job).order_by("number")
    events = JobEvent.objects.using(db).filter(job=job).order_by("at", "id")
    return {
        **{name: getattr(job, name) for name in _JOB_FIELDS},
        "waits_for": [
            {"id": other, "state": state}
            for other, state in dependencies.waits_for(job).values_list("id", "state")
        ],
        "attempts": [
            {
                "number": a.number,
                "outcome": a.outcome,
                "worker_id": a.worker_id,
                "worker_name": a.worker_name,
                "started_at": a.started_at,
                "finished_at": a.finished_at,
                "error_type": a.error_type,
                "error_message": a.error_message,
                "traceback": a.traceback,
                "late_report": a.late_report,
            }
            for a in attempts
        ],
        "events": [
            {
                "at": e.at,
                "transition": e.transition,
                "from_state": e.from_state,
                "to_state": e.to_state,
                "actor": e.actor,
                "note": e.note,
            }
            for e in events
        ],
    }


def _show_attempts(command: BaseCommand, db: str, job: Job, full: bool) -> None:
    attempts = list(Attempt.objects.using(db).filter(job=job).order_by("number"))
    command.stdout.write(f"\nAttempts ({len(attempts)})")
    if not attempts:
        command.stdout.write("  none yet")
        return
    rows = []
    for attempt in attempts:
        error = ""
        if attempt.error_type or attempt.error_message:
            error = render.one_line(f"{attempt.error_type}: {attempt.error_message}", ERROR_WIDTH)
        rows.append(
            (
                str(attempt.number),
                attempt.outcome,
                attempt.worker_name or "-",
                render.when(attempt.started_at),
                render.duration(attempt.duration),
                error or "-",
            )
        )
    command.stdout.write(
        _indent(render.table(("#", "OUTCOME", "WORKER", "STARTED", "TOOK", "ERROR"), rows))
    )
    for attempt in attempts:
        if attempt.late_report is not None:
            command.stdout.write(
                f"  attempt {attempt.number} reported after losing its lease (ignored): "
                f"{render.as_json(attempt.late_report, None if full else 300)}"
            )
        if full and attempt.traceback:
            command.stdout.write(f"\n  traceback of attempt {attempt.number}:")
            command.stdout.write(_indent(attempt.traceback.rstrip(), "    "))


def _show_events(command: BaseCommand, db: str, job: Job) -> None:
    events = list(JobEvent.objects.using(db).filter(job=job).order_by("at", "id"))
    command.stdout.write(f"\nAudit events ({len(events)})")
    if not events:
        command.stdout.write("  none")
        return
    command.stdout.write(
        _indent(
            render.table(
                ("AT", "TRANSITION", "CHANGE", "ACTOR", "NOTE"),
                (
                    (
                        render.when(e.at),
                        e.transition,
                        f"{e.from_state} -> {e.to_state}",
                        e.actor,
                        e.note or "-",
                    )
                    for e in events
                ),
            )
        )
    )


def _indent(text: str, prefix: str = "  ") -> str:
    return "\n".join(prefix + line if line else line for line in text.splitlines())
