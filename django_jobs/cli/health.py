"""``jobs health``: one line and an exit code for a monitoring system.

Exit 0 ok, 1 warning, 2 critical (the monitoring-plugin convention); what
each check looks at and which status it can give is in ``django_jobs.health``
and docs/operations.md#health. ``--json`` prints the whole report instead.
"""

from __future__ import annotations

import socket
from typing import Any

from django.core.management.base import BaseCommand

from django_jobs.backend import JobsBackend
from django_jobs.health import Status, check_health

from . import render
from .arguments import positive_float, positive_int
from .base import AddSubcommand

DEFAULT_MAX_AGE = 300.0


def add_health(add: AddSubcommand) -> None:
    sub = add(
        "health",
        "Check the database, this host's workers and the backlog; exit 0 ok, 1 warning, "
        "2 critical.",
        health,
    )
    sub.add_argument(
        "--max-age",
        type=positive_float,
        default=DEFAULT_MAX_AGE,
        metavar="SECONDS",
        help="Warn when a queue's oldest due job has waited longer than this "
        f"(default: {DEFAULT_MAX_AGE:g}).",
    )
    sub.add_argument(
        "--max-depth",
        type=positive_int,
        default=None,
        metavar="JOBS",
        help="Warn when a queue holds more ready jobs than this (default: no limit).",
    )
    sub.add_argument(
        "--host",
        default=None,
        help="Check the workers registered by this host name (default: this host's).",
    )


def health(command: BaseCommand, backend: JobsBackend, options: dict[str, Any]) -> None:
    host = options["host"] or socket.gethostname()
    report = check_health(backend, host, options["max_age"], options["max_depth"])
    if options["json"]:
        command.stdout.write(
            render.document({**report.as_dict(), "host": host, "backend": backend.alias})
        )
    else:
        command.stdout.write(report.reason)
    if report.status is not Status.OK:
        # Not a CommandError: the line above is the whole message, and 1 means warning.
        raise SystemExit(int(report.status))
