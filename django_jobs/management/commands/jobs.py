"""``manage.py jobs <subcommand>``: inspect, enqueue, repair and prune jobs.

Every state change goes through the same operator API as the admin and the
REST API (``django_jobs.control``), so the CLI can do nothing they cannot, and
everything it does is audited with an actor (``--actor``, by default
``cli:<os user>``). Failures exit non-zero: a ``CommandError`` for anything
that stopped the command, and exit code 1 after a bulk verb refused some ids
(the others were still applied, each in its own transaction).

The subcommands live in ``django_jobs.cli``, each module declaring its own
arguments and the function that runs it. See docs/cli.md for every subcommand
and docs/operations.md for what the verbs do.
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandError, CommandParser

from django_jobs.backend import jobs_backend
from django_jobs.cli import arguments, enqueue, health, listing, operate, prune, show
from django_jobs.cli.base import Handler


class Command(BaseCommand):
    help = (
        "Inspect, enqueue, repair and prune django-jobs jobs. "
        "Run 'manage.py jobs SUBCOMMAND --help' for each subcommand."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        subcommands = parser.add_subparsers(
            dest="subcommand", required=True, metavar="SUBCOMMAND", title="subcommands"
        )

        def add(
            name: str, text: str, handler: Handler, *, details: str | None = None
        ) -> CommandParser:
            sub: CommandParser = subcommands.add_parser(
                name, help=text, description=details or text
            )
            # Every option and argument given no type of its own is text:
            # checked once here, so that none reaches a query unchecked.
            sub.register("type", None, arguments.text)
            sub.add_argument(
                "--backend",
                default="default",
                help="TASKS alias whose database and options to use (default: default).",
            )
            sub.add_argument(
                "--json",
                action="store_true",
                help="Print one JSON document instead of text (docs/cli.md shows each).",
            )
            # argparse's own way to say which function runs the chosen subcommand.
            sub.set_defaults(handler=handler)
            return sub

        # In the order `manage.py jobs --help` lists them.
        listing.add_list(add)
        show.add_show(add)
        enqueue.add_enqueue(add)
        operate.add_job_verbs(add)
        operate.add_queue_verbs(add)
        listing.add_stats(add)
        prune.add_prune(add)
        health.add_health(add)

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            backend = jobs_backend(options["backend"])
        except ImproperlyConfigured as exc:
            raise CommandError(str(exc)) from None
        handler: Handler = options["handler"]
        handler(self, backend, options)
