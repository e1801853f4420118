"""The operator verbs on jobs (``jobs cancel ID...`` ...) and on queues (``jobs pause QUEUE``).

The job verbs' subcommands are built from ``django_jobs.verbs.VERBS``: their
help, and whether ``--note`` is required. Each goes through
``django_jobs.control``, as the admin and the REST API do, with an actor
(``--actor``, by default ``cli:<os user>``) for the audit trail. A job verb
applies each id in its own transaction and exits 1 if any was refused (the
others were still applied).
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError

from django_jobs import control
from django_jobs.backend import JobsBackend
from django_jobs.exceptions import InvalidTransitionError, JobNotFoundError, OperatorRequestError
from django_jobs.states import TRANSITIONS
from django_jobs.verbs import VERBS

from .base import AddSubcommand, default_actor, parse_ids


def add_job_verbs(add: AddSubcommand) -> None:
    """A subcommand per verb of ``VERBS``; ``--note`` is required where the verb needs one."""
    for verb in VERBS.values():
        # argparse formats plain strings: the lazy translations are rendered now.
        sub = add(verb.name, str(verb.help), apply_verb, details=str(verb.description))
        sub.add_argument("ids", nargs="+", metavar="ID", help="Job ids (UUIDs).")
        sub.add_argument(
            "--note",
            required=verb.needs_note,
            default="",
            help="Why; kept in the job's audit trail"
            + (" (required)." if verb.needs_note else "."),
        )
        sub.add_argument("--actor", help="Who acts, for the audit trail (default: cli:<os user>).")


def add_queue_verbs(add: AddSubcommand) -> None:
    for verb, text, handler in (
        ("pause", "Stop every worker from claiming jobs of a queue; running jobs finish.", pause),
        ("resume", "Let workers claim jobs of a paused queue again.", resume),
    ):
        sub = add(verb, text, handler)
        sub.add_argument("queue", metavar="QUEUE", help="The queue's name.")
        sub.add_argument("--note", default="", help="Why; kept in the queue's audit trail.")
        sub.add_argument("--actor", help="Who acts, for the audit trail (default: cli:<os user>).")


def apply_verb(command: BaseCommand, backend: JobsBackend, options: dict[str, Any]) -> None:
    verb = VERBS[options["subcommand"]]
    try:
        ids = parse_ids(options["ids"])
    except CommandError as exc:
        raise CommandError(f"{exc} Nothing was changed.") from None
    note: str = options["note"]
    if verb.needs_note and not note.strip():
        raise CommandError(f"{verb.name} needs --note saying why. Nothing was changed.")
    actor: str = options["actor"] or default_actor()
    refused = 0
    for job_id in ids:
        try:
            transition = control.apply(
                verb.name, job_id, actor=actor, note=note, backend=backend.alias
            )
        except (InvalidTransitionError, JobNotFoundError) as exc:
            refused += 1
            command.stderr.write(f"{job_id}  refused: {exc}")
        except OperatorRequestError as exc:  # actor or note refused: the same for every id
            raise CommandError(str(exc)) from None
        else:
            target = TRANSITIONS[transition].target
            command.stdout.write(f"{job_id}  {target} ({transition})")
    if refused:
        raise CommandError(
            f"{verb.name}: {refused} of {len(ids)} job(s) refused; {len(ids) - refused} changed.",
            returncode=1,
        )
    if len(ids) > 1:
        command.stdout.write(f"{verb.name}: all {len(ids)} jobs changed.")


def pause(command: BaseCommand, backend: JobsBackend, options: dict[str, Any]) -> None:
    _set_paused(command, backend, options, paused=True)


def resume(command: BaseCommand, backend: JobsBackend, options: dict[str, Any]) -> None:
    _set_paused(command, backend, options, paused=False)


def _set_paused(
    command: BaseCommand, backend: JobsBackend, options: dict[str, Any], *, paused: bool
) -> None:
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
        command.stdout.write(f"{queue}  {'paused' if paused else 'resumed'}")
    else:
        state = "paused" if paused else "not paused"
        command.stdout.write(f"{queue}  already {state}; nothing changed")
