"""``jobs enqueue TASK_NAME``: enqueue a registered task from a shell, as ``enqueue()`` would."""

from __future__ import annotations

import difflib
import json
from datetime import timedelta
from typing import Any

from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from django_jobs import registry
from django_jobs.backend import JobsBackend
from django_jobs.codec import from_json
from django_jobs.exceptions import PayloadNotDecodableError
from django_jobs.models import Job
from django_jobs.tasks import JobTask
from django_jobs.unique import EnqueueOutcome

from ..framework import InvalidTask
from . import render
from .arguments import non_negative_seconds, positive_seconds
from .base import AddSubcommand, default_actor


def add_enqueue(add: AddSubcommand) -> None:
    sub = add("enqueue", "Enqueue a registered task, as the backend's enqueue() would.", enqueue)
    sub.add_argument("task_name", metavar="TASK_NAME", help="The task's full dotted path.")
    sub.add_argument(
        "--args",
        dest="task_args",
        default="[]",
        help='Positional arguments, a JSON array; tags such as {"$uuid": "..."} are decoded.',
    )
    sub.add_argument(
        "--kwargs",
        dest="task_kwargs",
        default="{}",
        help="Keyword arguments, a JSON object; tags are decoded as in --args.",
    )
    sub.add_argument("--queue", help="Queue (default: the task's).")
    sub.add_argument("--priority", type=int, help="-100..100, higher first.")
    sub.add_argument("--tenant", help="Tenant (authority scope) of the job.")
    sub.add_argument("--idempotency-key", help="Enqueue once per key and tenant.")
    sub.add_argument(
        "--unique-key",
        help="Return the job of this key (per task and tenant) while it is live, "
        "instead of enqueuing another.",
    )
    sub.add_argument(
        "--unique-for",
        type=positive_seconds,
        metavar="SECONDS",
        help="With --unique-key: a job of the key enqueued this recently holds it too.",
    )
    sub.add_argument(
        "--unique-states",
        metavar="STATE,...",
        help="With --unique-key: the states in which a job holds the key "
        "(comma-separated; default: the live states).",
    )
    sub.add_argument(
        "--debounce",
        type=positive_seconds,
        metavar="SECONDS",
        help="With --unique-key: replace the arguments of the key's job not yet started "
        "and start it this many seconds from now (or enqueue one that starts then).",
    )
    sub.add_argument(
        "--delay",
        type=non_negative_seconds,
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
    sub.add_argument("--actor", help="Recorded as the job's initiator (default: cli:<os user>).")
    sub.add_argument("--quiet", action="store_true", help="Print only the job's id.")


def _json(option: str, text: str, kind: type[list[Any]] | type[dict[str, Any]]) -> Any:
    # Parsing and decoding both recurse once per level: JSON nested deeper than
    # Python's recursion limit ended the command with a bare RecursionError.
    too_deep = f"{option} is nested too deep to decode."
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise CommandError(f"{option} is not valid JSON: {exc}.") from None
    except RecursionError:
        raise CommandError(too_deep) from None
    if not isinstance(value, kind):
        expected = "a JSON array" if kind is list else "a JSON object"
        raise CommandError(f"{option} must be {expected}, not {type(value).__name__}.")
    # The stored form (docs/concepts.md), so that a job's arguments as `jobs show`
    # prints them can be given back, UUIDs and datetimes included.
    try:
        return from_json(value, option)
    except PayloadNotDecodableError as exc:
        raise CommandError(str(exc)) from None
    except RecursionError:
        raise CommandError(too_deep) from None


def enqueue(command: BaseCommand, backend: JobsBackend, options: dict[str, Any]) -> None:
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
    # The registry only holds tasks our backend built; checked, not asserted,
    # so that it holds under python -O too.
    if not isinstance(task, JobTask):
        raise CommandError(f"{name} is registered, but not by a django-jobs backend.")
    using: dict[str, Any] = {
        "backend": backend.alias,
        "initiator": options["actor"] or default_actor(),
    }
    for option, keyword in (
        ("queue", "queue_name"),
        ("priority", "priority"),
        ("tenant", "tenant"),
        ("idempotency_key", "idempotency_key"),
        ("unique_key", "unique_key"),
    ):
        if options[option] is not None:
            using[keyword] = options[option]
    for option in ("unique_for", "debounce"):
        if options[option] is not None:
            using[option] = timedelta(seconds=options[option])
    if options["unique_states"] is not None:
        using["unique_states"] = [s.strip() for s in options["unique_states"].split(",") if s]
    if options["delay"]:
        using["run_after"] = timezone.now() + timedelta(seconds=options["delay"])
    if options["after"]:
        using["after"] = options["after"]  # each id is checked by enqueue
    try:
        result = task.using(**using).enqueue(*args, **kwargs)
    except InvalidTask as exc:  # every refusal of enqueue, ours and Django's
        raise CommandError(f"Enqueue refused, nothing written: {exc}") from None
    if options["quiet"] and not options["json"]:
        command.stdout.write(str(result.id))
        return
    job = Job.objects.using(backend.db).only("state", "queue", "run_after").get(id=result.id)
    if options["json"]:
        document = {"id": job.id, "state": job.state, "queue": job.queue}
        command.stdout.write(render.document({**document, "run_after": job.run_after}))
        return
    command.stdout.write(
        f"{result.id}  {job.state} on {job.queue}, runs after {render.when(job.run_after)}"
        + _OUTCOMES.get(result.enqueue_outcome or EnqueueOutcome.CREATED, "")
    )


# What the line says when enqueue wrote nothing new.
_OUTCOMES = {
    EnqueueOutcome.EXISTING: "  (an existing job; nothing written)",
    EnqueueOutcome.DEBOUNCED: "  (debounced: this call's arguments, started later)",
}
