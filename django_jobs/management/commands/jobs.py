"""``manage.py jobs <subcommand>``: inspect, enqueue, repair and prune jobs.

Every state change goes through the same operator API as the admin and the
REST API (``django_jobs.control``), so the CLI can do nothing they cannot, and
everything it does is audited with an actor (``--actor``, by default
``cli:<os user>``). Failures exit non-zero: a ``CommandError`` for anything
that stopped the command, and exit code 1 after a bulk verb refused some ids
(the others were still applied, each in its own transaction).

See docs/cli.md for every subcommand and docs/operations.md for what the
verbs do.
"""

from __future__ import annotations

import difflib
import getpass
import json
import os
import uuid
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.tasks.exceptions import InvalidTask
from django.utils import timezone

from django_jobs import control, dependencies, registry, retention
from django_jobs.backend import JobsBackend, jobs_backend
from django_jobs.cli import render
from django_jobs.cli.arguments import non_negative_float, positive_float, positive_int
from django_jobs.exceptions import InvalidTransitionError, JobNotFoundError, OperatorRequestError
from django_jobs.models import Attempt, Job, JobEvent, paused_queues
from django_jobs.states import TRANSITIONS, VERBS, JobState
from django_jobs.statistics import queue_stats, worker_stats
from django_jobs.tasks import JobTask

LIST_LIMIT = 50
TASK_WIDTH = 48
ERROR_WIDTH = 120


def default_actor() -> str:
    """``cli:<os user>``: who ran the command, as far as this host knows."""
    try:
        user = getpass.getuser()
    except (OSError, KeyError):  # no login name and no passwd entry (some containers)
        user = f"uid{os.getuid()}"
    return f"cli:{user}"


def parse_ids(values: Sequence[str]) -> list[uuid.UUID]:
    """All ids, or a CommandError naming every malformed one before anything is changed."""
    ids: list[uuid.UUID] = []
    bad: list[str] = []
    for value in values:
        try:
            ids.append(uuid.UUID(value))
        except ValueError:
            bad.append(value)
    if bad:
        raise CommandError(
            f"Not a job id (a UUID): {', '.join(repr(b) for b in bad)}.", returncode=1
        )
    return list(dict.fromkeys(ids))  # the same id twice would be refused the second time


def _json(option: str, text: str, kind: type[list[Any]] | type[dict[str, Any]]) -> Any:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise CommandError(f"{option} is not valid JSON: {exc}.") from None
    if not isinstance(value, kind):
        expected = "a JSON array" if kind is list else "a JSON object"
        raise CommandError(f"{option} must be {expected}, not {type(value).__name__}.")
    return value


class Command(BaseCommand):
    help = (
        "Inspect, enqueue, repair and prune django-jobs jobs. "
        "Run 'manage.py jobs SUBCOMMAND --help' for each subcommand."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        subcommands = parser.add_subparsers(
            dest="subcommand", required=True, metavar="SUBCOMMAND", title="subcommands"
        )

        def add(name: str, text: str) -> CommandParser:
            sub: CommandParser = subcommands.add_parser(name, help=text, description=text)
            sub.add_argument(
                "--backend",
                default="default",
                help="TASKS alias whose database and options to use (default: default).",
            )
            return sub

        sub = add("list", "List jobs, newest first, as a compact table.")
        sub.add_argument(
            "--state",
            action="append",
            choices=list(JobState.values),
            help="Only jobs in this state; repeat for several.",
        )
        sub.add_argument("--queue", help="Only jobs of this queue.")
        sub.add_argument("--task", help="Only jobs of this task (its full dotted path).")
        sub.add_argument("--tenant", help="Only jobs of this tenant.")
        sub.add_argument(
            "--limit",
            type=positive_int,
            default=LIST_LIMIT,
            help=f"Show at most this many jobs (default: {LIST_LIMIT}).",
        )

        sub = add("show", "Show one job: its fields, progress, attempts and audit events.")
        sub.add_argument("id", help="The job's id (a UUID).")
        sub.add_argument(
            "--full", action="store_true", help="Show tracebacks and the whole result."
        )

        sub = add("enqueue", "Enqueue a registered task, as the backend's enqueue() would.")
        sub.add_argument("task_name", metavar="TASK_NAME", help="The task's full dotted path.")
        sub.add_argument(
            "--args", dest="task_args", default="[]", help="Positional arguments, a JSON array."
        )
        sub.add_argument(
            "--kwargs", dest="task_kwargs", default="{}", help="Keyword arguments, a JSON object."
        )
        sub.add_argument("--queue", help="Queue (default: the task's).")
        sub.add_argument("--priority", type=int, help="-100..100, higher first.")
        sub.add_argument("--tenant", help="Tenant (authority scope) of the job.")
        sub.add_argument("--idempotency-key", help="Enqueue once per key and tenant.")
        sub.add_argument(
            "--delay",
            type=non_negative_float,
            metavar="SECONDS",
            help="Do not run before this many seconds from now.",
        )
        sub.add_argument(
            "--after",
            action="append",
            default=[],
            metavar="ID",
            help="Run only once this job has succeeded (repeatable).",
        )
        sub.add_argument(
            "--actor", help="Recorded as the job's initiator (default: cli:<os user>)."
        )
        sub.add_argument("--quiet", action="store_true", help="Print only the job's id.")

        for verb, text in (
            ("cancel", "Cancel jobs: queued at once, running cooperatively then by force."),
            ("retry", "Queue failed, exhausted, cancelled, expired or quarantined jobs again."),
            ("release", "Queue quarantined jobs again."),
            ("quarantine", "Hold jobs so they never run until released (a note is required)."),
            ("discard", "Accept the loss of jobs that will not succeed (a note is required)."),
        ):
            sub = add(verb, text)
            sub.add_argument("ids", nargs="+", metavar="ID", help="Job ids (UUIDs).")
            required = verb in control.NOTE_REQUIRED
            sub.add_argument(
                "--note",
                required=required,
                default="",
                help="Why; kept in the job's audit trail" + (" (required)." if required else "."),
            )
            sub.add_argument(
                "--actor", help="Who acts, for the audit trail (default: cli:<os user>)."
            )

        for verb, text in (
            ("pause", "Stop every worker from claiming jobs of a queue; running jobs finish."),
            ("resume", "Let workers claim jobs of a paused queue again."),
        ):
            sub = add(verb, text)
            sub.add_argument("queue", metavar="QUEUE", help="The queue's name.")
            sub.add_argument("--note", default="", help="Why; kept in the queue's audit trail.")
            sub.add_argument(
                "--actor", help="Who acts, for the audit trail (default: cli:<os user>)."
            )

        add("stats", "Per queue: jobs by state, backlog age, running, last hour's outcomes.")

        sub = add("prune", "Delete finished jobs older than the retention period, in batches.")
        sub.add_argument(
            "--older-than",
            type=positive_float,
            metavar="DAYS",
            help="Delete jobs finished more than this many days ago "
            "(default: the backend's RETENTION_DAYS).",
        )
        sub.add_argument(
            "--include-held",
            action="store_true",
            help="Also delete exhausted and quarantined jobs (held for an operator).",
        )
        sub.add_argument(
            "--batch-size",
            type=positive_int,
            default=retention.DEFAULT_BATCH_SIZE,
            help=f"Jobs deleted per transaction (default: {retention.DEFAULT_BATCH_SIZE}).",
        )
        sub.add_argument(
            "--dry-run", action="store_true", help="Count what would be deleted; delete nothing."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        subcommand: str = options["subcommand"]
        try:
            backend = jobs_backend(options["backend"])
        except ImproperlyConfigured as exc:
            raise CommandError(str(exc)) from None
        handler: Callable[[JobsBackend, dict[str, Any]], None]
        handler = self._verb if subcommand in VERBS else getattr(self, f"_{subcommand}")
        handler(backend, options)

    # -- reading ------------------------------------------------------------

    def _list(self, backend: JobsBackend, options: dict[str, Any]) -> None:
        jobs = Job.objects.using(backend.db).order_by("-enqueued_at", "id")
        if options["state"]:
            jobs = jobs.filter(state__in=options["state"])
        for name, column in (("queue", "queue"), ("task", "task_name"), ("tenant", "tenant")):
            if options[name] is not None:
                jobs = jobs.filter(**{column: options[name]})
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
            )[: limit + 1]
        )
        if not rows:
            self.stdout.write("No jobs match.")
            return
        now = timezone.now()
        self.stdout.write(
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
            self.stdout.write(f"(first {limit} shown; more match: narrow the filters or --limit)")

    def _show(self, backend: JobsBackend, options: dict[str, Any]) -> None:
        (job_id,) = parse_ids([options["id"]])
        db = backend.db
        job = Job.objects.using(db).filter(id=job_id).first()
        if job is None:
            raise CommandError(f"No job with id {job_id} in database {db!r}.")
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
            ("concurrency key", job.concurrency_key or "-"),
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
        self.stdout.write(f"Job {job.id}")
        for name, value in fields:
            self.stdout.write(f"  {name.ljust(width)}  {value}")
        self._show_attempts(db, job, full)
        self._show_events(db, job)

    def _show_attempts(self, db: str, job: Job, full: bool) -> None:
        attempts = list(Attempt.objects.using(db).filter(job=job).order_by("number"))
        self.stdout.write(f"\nAttempts ({len(attempts)})")
        if not attempts:
            self.stdout.write("  none yet")
            return
        rows = []
        for attempt in attempts:
            error = ""
            if attempt.error_type or attempt.error_message:
                error = render.one_line(
                    f"{attempt.error_type}: {attempt.error_message}", ERROR_WIDTH
                )
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
        self.stdout.write(
            _indent(render.table(("#", "OUTCOME", "WORKER", "STARTED", "TOOK", "ERROR"), rows))
        )
        for attempt in attempts:
            if attempt.late_report is not None:
                self.stdout.write(
                    f"  attempt {attempt.number} reported after losing its lease (ignored): "
                    f"{render.as_json(attempt.late_report, None if full else 300)}"
                )
            if full and attempt.traceback:
                self.stdout.write(f"\n  traceback of attempt {attempt.number}:")
                self.stdout.write(_indent(attempt.traceback.rstrip(), "    "))

    def _show_events(self, db: str, job: Job) -> None:
        events = list(JobEvent.objects.using(db).filter(job=job).order_by("at", "id"))
        self.stdout.write(f"\nAudit events ({len(events)})")
        if not events:
            self.stdout.write("  none")
            return
        self.stdout.write(
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

    def _stats(self, backend: JobsBackend, options: dict[str, Any]) -> None:
        now = timezone.now()
        stats = queue_stats(Job.objects.using(backend.db), backend.queues, now)
        states = list(JobState.values)
        paused = paused_queues(backend.db)
        self.stdout.write(
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
                    for q in stats
                ),
            )
        )
        workers = worker_stats(backend.db, now, backend.settings.WORKER_STALE_SECONDS)
        running = sum(q.running for q in stats)
        self.stdout.write(
            f"\n{running} job(s) running or cancelling; workers: {workers.live} live, "
            f"{workers.stale} stale (no heartbeat for "
            f"{backend.settings.WORKER_STALE_SECONDS:g}s, not stopped)."
        )

    # -- writing ------------------------------------------------------------

    def _pause(self, backend: JobsBackend, options: dict[str, Any]) -> None:
        self._set_paused(backend, options, paused=True)

    def _resume(self, backend: JobsBackend, options: dict[str, Any]) -> None:
        self._set_paused(backend, options, paused=False)

    def _set_paused(self, backend: JobsBackend, options: dict[str, Any], *, paused: bool) -> None:
        queue: str = options["queue"]
        change = control.pause_queue if paused else control.resume_queue
        try:
            changed = change(
                queue,
                actor=options["actor"] or default_actor(),
                note=options["note"],
                backend=backend.alias,
            )
        except OperatorRequestError as exc:  # an unknown queue, or a blank actor
            raise CommandError(f"{exc} Nothing was changed.") from None
        if changed:
            self.stdout.write(f"{queue}  {'paused' if paused else 'resumed'}")
        else:
            state = "paused" if paused else "not paused"
            self.stdout.write(f"{queue}  already {state}; nothing changed")

    def _enqueue(self, backend: JobsBackend, options: dict[str, Any]) -> None:
        name: str = options["task_name"]
        args = _json("--args", options["task_args"], list)
        kwargs = _json("--kwargs", options["task_kwargs"], dict)
        registry.discover(backend.settings.TASK_MODULES)
        task = registry.get(name)
        if task is None:
            known = registry.names()
            close = difflib.get_close_matches(name, known, n=3)
            hint = f" Did you mean {', '.join(close)}?" if close else ""
            raise CommandError(
                f"Unknown task {name!r}: it is not registered with django_jobs.{hint} "
                f"Registered tasks: {', '.join(known) or 'none'}."
            )
        # The registry only holds tasks our backend built, so they are JobTasks.
        assert isinstance(task, JobTask), f"{name} is registered but is not a JobTask"
        using: dict[str, Any] = {
            "backend": backend.alias,
            "initiator": options["actor"] or default_actor(),
        }
        for option, keyword in (
            ("queue", "queue_name"),
            ("priority", "priority"),
            ("tenant", "tenant"),
            ("idempotency_key", "idempotency_key"),
        ):
            if options[option] is not None:
                using[keyword] = options[option]
        if options["delay"]:
            using["run_after"] = timezone.now() + timedelta(seconds=options["delay"])
        if options["after"]:
            using["after"] = options["after"]  # each id is checked by enqueue
        try:
            result = task.using(**using).enqueue(*args, **kwargs)
        except InvalidTask as exc:  # every refusal of enqueue, ours and Django's
            raise CommandError(f"Enqueue refused, nothing written: {exc}") from None
        if options["quiet"]:
            self.stdout.write(str(result.id))
            return
        job = Job.objects.using(backend.db).only("state", "queue", "run_after").get(id=result.id)
        self.stdout.write(
            f"{result.id}  {job.state} on {job.queue}, runs after {render.when(job.run_after)}"
        )

    def _verb(self, backend: JobsBackend, options: dict[str, Any]) -> None:
        verb: str = options["subcommand"]
        try:
            ids = parse_ids(options["ids"])
        except CommandError as exc:
            raise CommandError(f"{exc} Nothing was changed.") from None
        note: str = options["note"]
        if verb in control.NOTE_REQUIRED and not note.strip():
            raise CommandError(f"{verb} needs --note saying why. Nothing was changed.")
        actor: str = options["actor"] or default_actor()
        refused = 0
        for job_id in ids:
            try:
                transition = control.apply(
                    verb, job_id, actor=actor, note=note, backend=backend.alias
                )
            except (InvalidTransitionError, JobNotFoundError) as exc:
                refused += 1
                self.stderr.write(f"{job_id}  refused: {exc}")
            except OperatorRequestError as exc:  # actor or note refused: the same for every id
                raise CommandError(str(exc)) from None
            else:
                target = TRANSITIONS[transition].target
                self.stdout.write(f"{job_id}  {target} ({transition})")
        if refused:
            raise CommandError(
                f"{verb}: {refused} of {len(ids)} job(s) refused; {len(ids) - refused} changed.",
                returncode=1,
            )
        if len(ids) > 1:
            self.stdout.write(f"{verb}: all {len(ids)} jobs changed.")

    def _prune(self, backend: JobsBackend, options: dict[str, Any]) -> None:
        days: float = options["older_than"] or backend.settings.RETENTION_DAYS
        budgets = backend.settings.RETRY_BUDGET.values()
        # A retry window longer than a day is still being counted after a day.
        keep_windows = max(
            [retention.RETRY_WINDOW_KEEP, *(timedelta(seconds=w) for _, w in budgets)]
        )
        result = retention.prune(
            backend.db,
            older_than=timedelta(days=days),
            include_held=options["include_held"],
            batch_size=options["batch_size"],
            dry_run=options["dry_run"],
            keep_retry_windows=keep_windows,
        )
        by_state = ", ".join(f"{s} {n}" for s, n in sorted(result.jobs_by_state.items()))
        verb = "Would delete" if result.dry_run else "Deleted"
        held = "" if options["include_held"] else " (exhausted and quarantined kept)"
        self.stdout.write(
            f"{verb} {result.jobs} job(s) finished before {render.when(result.cutoff)}"
            f"{held}" + (f": {by_state}" if by_state else "") + "."
        )
        batches = "" if result.dry_run else f" in {result.batches} batch(es)"
        self.stdout.write(
            f"{verb} with them {result.attempts} attempt(s) and {result.events} audit "
            f"event(s){batches}; also {result.retry_windows} retry window(s), "
            f"{result.rate_windows} rate window(s) and {result.workers} worker row(s)."
        )


def _indent(text: str, prefix: str = "  ") -> str:
    return "\n".join(prefix + line if line else line for line in text.splitlines())
