"""``manage.py runworkers``: run the supervisor and its worker processes."""

from __future__ import annotations

import logging
import sys
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandError, CommandParser

from django_jobs.backend import jobs_backend
from django_jobs.cli.arguments import positive_int
from django_jobs.engine import engine_for
from django_jobs.reloader import run_reloading
from django_jobs.supervisor import Supervisor
from django_jobs.worker import WorkerConfig


class Command(BaseCommand):
    help = (
        "Run django-jobs workers: a supervisor that starts --processes worker "
        "processes, each running up to --concurrency jobs at once in threads."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--backend", default="default", help="TASKS alias to work for (default: default)."
        )
        parser.add_argument(
            "-Q",
            "--queues",
            default="",
            help="Comma-separated queues to take jobs from (default: all of the backend's).",
        )
        parser.add_argument(
            "-p",
            "--processes",
            type=positive_int,
            default=1,
            help="Worker processes to run (default: 1).",
        )
        parser.add_argument(
            "-c",
            "--concurrency",
            type=positive_int,
            default=16,
            help="Jobs each process runs at once, in threads (default: 16).",
        )
        parser.add_argument(
            "--burst",
            action="store_true",
            help="Exit once no job of these queues is queued (including scheduled "
            "retries) or running.",
        )
        parser.add_argument(
            "--max-jobs",
            type=positive_int,
            default=None,
            help="Replace a worker process after it has run this many jobs.",
        )
        parser.add_argument(
            "--max-memory",
            type=positive_int,
            default=None,
            metavar="MB",
            help="Replace a worker process once its resident memory exceeds this many MB.",
        )
        parser.add_argument(
            "--reload",
            action="store_true",
            help="For development: restart the worker processes when Python code changes, "
            "as runserver does.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if options["reload"] and options["burst"]:
            raise CommandError(
                "--reload keeps the workers running to restart them on code changes, and "
                "--burst exits once the queues are empty: use one or the other."
            )
        alias = options["backend"]
        try:
            backend = jobs_backend(alias)
        except ImproperlyConfigured as exc:
            raise CommandError(str(exc)) from None
        refuse_in_memory_database(backend.db)
        queues = tuple(q.strip() for q in options["queues"].split(",") if q.strip())
        unknown = sorted(set(queues) - backend.queues)
        if unknown:
            raise CommandError(
                f"Unknown queue(s): {', '.join(unknown)}. TASKS[{alias!r}]['QUEUES'] "
                f"has {', '.join(sorted(backend.queues))}."
            )
        self._configure_logging(options["verbosity"])
        config = WorkerConfig(
            backend=alias,
            queues=queues,
            concurrency=options["concurrency"],
            burst=options["burst"],
            max_jobs=options["max_jobs"],
            max_memory_mb=options["max_memory"],
        )
        if options["reload"]:
            code = run_reloading(config, options["processes"])
        else:
            code = Supervisor(config, options["processes"]).run()
        if code:
            sys.exit(code)

    def _configure_logging(self, verbosity: int) -> None:
        """Show our log lines when the project has not routed them anywhere."""
        log = logging.getLogger("django_jobs")
        if log.handlers or logging.getLogger().handlers:
            return
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(
            logging.Formatter("%(asctime)s %(levelname)s %(processName)s %(name)s: %(message)s")
        )
        log.addHandler(handler)
        log.setLevel({0: logging.WARNING, 1: logging.INFO}.get(verbosity, logging.DEBUG))


def refuse_in_memory_database(alias: str) -> None:
    """Refuse to run workers on a database they cannot share (an in-memory SQLite)."""
    problem = engine_for(alias).unusable_for_workers()
    if problem is not None:
        raise CommandError(problem)
