"""The operator verbs on jobs (``jobs cancel ID...`` ...) and on queues (``jobs pause QUEUE``).

The job verbs' subcommands are built from ``django_jobs.verbs.VERBS``: their
help, and whether ``--note`` is required. Each goes through
``django_jobs.control``, as the admin and the REST API do, with an actor
(``--actor``, by default ``cli:<os user>``) for the audit trail. A job verb
applies each id in its own transaction and exits 1 if any was refused (the
others were still applied); given the filters of ``jobs list`` instead of ids,
it applies to every matching job once the count is confirmed.
"""

from __future__ import annotations

import sys
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from django_jobs import control
from django_jobs.backend import JobsBackend
from django_jobs.exceptions import InvalidTransitionError, JobNotFoundError, OperatorRequestError
from django_jobs.models import Job
from django_jobs.verbs import VERBS

from . import render
from .arguments import non_negative_int, positive_int
from .base import AddSubcommand, default_actor, parse_ids
from .listing import add_filters, filtered, has_filter


def add_job_verbs(add: AddSubcommand) -> None:
    """A subcommand per verb of ``VERBS``; ``--note`` is required where the verb needs one.

    Each takes job ids, or the filters of ``jobs list`` (never both): with a
    filter the matching jobs are counted and the count confirmed (asked on a
    terminal; ``--yes`` or ``--expect N`` in scripts) before the verb walks them
    in batches (``control.apply_matching``).
    """
    for verb in VERBS.values():
        # argparse formats plain strings: the lazy translations are rendered now.
        sub = add(verb.name, str(verb.help), apply_verb, details=str(verb.description))
        sub.add_argument(
            "ids", nargs="*", metavar="ID", help="Job ids (UUIDs); or use the filters."
        )
        sub.add_argument(
            "--note",
            required=verb.needs_note,
            default="",
            help="Why; kept in the job's audit trail"
            + (" (required)." if verb.needs_note else "."),
        )
        sub.add_argument("--actor", help="Who acts, for the audit trail (default: cli:<os user>).")
        add_filters(sub)
        sub.add_argument(
            "--yes",
            action="store_true",
            help="With a filter: act on whatever it matches, without asking.",
        )
        sub.add_argument(
            "--expect",
            type=non_negative_int,
            metavar="N",
            help="With a filter: act only if it matches exactly N jobs (else change nothing).",
        )
        sub.add_argument(
            "--batch-size",
            type=positive_int,
            default=control.BATCH_SIZE,
            help=f"With a filter: jobs per transaction (default: {control.BATCH_SIZE}).",
        )


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
    note: str = options["note"]
    if verb.needs_note and not note.strip():
        raise CommandError(f"{verb.name} needs --note saying why. Nothing was changed.")
    if options["ids"] and has_filter(options):
        raise CommandError(f"{verb.name} takes job ids or filters, not both. Nothing was changed.")
    if has_filter(options):
        _apply_to_filter(command, backend, options)
        return
    if not options["ids"]:
        raise CommandError(
            f"{verb.name} needs job ids, or a filter (--state, --queue, --task, --tenant). "
            "Nothing was changed."
        )
    try:
        ids = parse_ids(options["ids"])
    except CommandError as exc:
        raise CommandError(f"{exc} Nothing was changed.") from None
    actor: str = options["actor"] or default_actor()
    done: list[dict[str, Any]] = []
    refused: dict[str, str] = {}
    for job_id in ids:
        try:
            result = control.perform(
                verb.name, job_id, actor=actor, note=note, backend=backend.alias
            )
        except (InvalidTransitionError, JobNotFoundError) as exc:
            refused[str(job_id)] = str(exc)
            if not options["json"]:
                command.stderr.write(f"{job_id}  refused: {exc}")
        except OperatorRequestError as exc:  # actor or note refused: the same for every id
            raise CommandError(str(exc)) from None
        else:
            done.append(
                {
                    "id": job_id,
                    "transition": result.transition,
                    "state": result.to_state,
                    "rerun": result.rerun,
                }
            )
            if not options["json"]:
                rerun = f"; new job {result.rerun}" if result.rerun else ""
                command.stdout.write(f"{job_id}  {result.to_state} ({result.transition}){rerun}")
    if options["json"]:
        command.stdout.write(render.document({"verb": verb.name, "jobs": done, "refused": refused}))
    if refused:
        raise CommandError(
            f"{verb.name}: {len(refused)} of {len(ids)} job(s) refused; {len(done)} changed.",
            returncode=1,
        )
    if len(ids) > 1 and not options["json"]:
        command.stdout.write(f"{verb.name}: all {len(ids)} jobs changed.")


def _apply_to_filter(command: BaseCommand, backend: JobsBackend, options: dict[str, Any]) -> None:
    """The verb on every job the filter matches, once the count is confirmed."""
    verb = VERBS[options["subcommand"]]
    jobs = filtered(Job.objects.using(backend.db), options)
    expected: int | None = options["expect"]
    if expected is None and not options["yes"]:
        counts = control.count_matching(verb.name, jobs)
        question = (
            f"{verb.name}: the filter matches {counts.matched} job(s); {verb.name} applies "
            f"to {counts.applicable} of them now. Go on? [y/N] "
        )
        if not sys.stdin.isatty():
            raise CommandError(
                f"{question.removesuffix(' Go on? [y/N] ')} Nothing was changed: confirm with "
                f"--expect {counts.matched} (or --yes) when not at a terminal."
            )
        command.stderr.write(question, ending="")
        if input().strip().lower() not in ("y", "yes"):
            raise CommandError("Nothing was changed.")
        expected = counts.matched
    try:
        result = control.apply_matching(
            verb.name,
            jobs,
            actor=options["actor"] or default_actor(),
            note=options["note"],
            expected=expected,
            batch_size=options["batch_size"],
            backend=backend.alias,
        )
    except OperatorRequestError as exc:  # a stale count, the actor, the note
        raise CommandError(str(exc)) from None
    if options["json"]:
        command.stdout.write(render.document(result.report(verb.name)))
        return
    for original, copy in result.reruns.items():
        command.stdout.write(f"{original}  rerun as {copy}")
    # Running jobs cancel only asked to stop are not cancelled, and may still succeed.
    stopping = len(result.stopping)
    asked = f"; {stopping} running job(s) asked to stop (cancelling)" if stopping else ""
    command.stdout.write(
        f"{verb.name}: {len(result.changed) - stopping} of {result.matched} matching job(s) "
        f"{verb.done}{asked}; {result.skipped} skipped."
    )


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
    if options["json"]:
        command.stdout.write(
            render.document({"queue": queue, "paused": paused, "changed": changed})
        )
    elif changed:
        command.stdout.write(f"{queue}  {'paused' if paused else 'resumed'}")
    else:
        state = "paused" if paused else "not paused"
        command.stdout.write(f"{queue}  already {state}; nothing changed")
