"""``manage.py runworkers``: run the supervisor and its worker processes."""

from __future__ import annotations

import argparse
import contextlib
import logging
import sys
from argparse import ArgumentTypeError
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandError, CommandParser

from django_jobs.backend import jobs_backend
from django_jobs.cli.arguments import positive_int
from django_jobs.engine import engine_for
from django_jobs.reloader import run_reloading
from django_jobs.supervisor import Supervisor
from django_jobs.worker import WorkerConfig

if TYPE_CHECKING:
    from django_jobs.backend import JobsBackend
    from django_jobs.metrics.exposition import Address


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
            "--health-port",
            type=port_number,
            default=None,
            metavar="PORT",
            help="Serve /livez and /readyz over HTTP on this port, on every interface "
            "(default: no probe server).",
        )
        parser.add_argument(
            "--metrics-port",
            type=metrics_address,
            default=None,
            metavar="[HOST:]PORT",
            help="Serve Prometheus metrics of every worker process at http://HOST:PORT/ "
            "from the supervisor (HOST: every interface if omitted). Needs "
            "django-jobs[metrics].",
        )
        parser.add_argument(
            "--reload",
            action="store_true",
            help="For development: restart the worker processes when Python code changes, "
            "as runserver does.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        for production in ("health_port", "metrics_port"):
            if options["reload"] and options[production] is not None:
                flag = "--" + production.replace("_", "-")
                raise CommandError(
                    f"--reload is for development and {flag} for production: a reloading "
                    "runworkers restarts its workers on every code change, so its probes and "
                    f"metrics would describe nothing stable. Leave out {flag} or --reload."
                )
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
            with serving_metrics(options["metrics_port"], backend):
                try:
                    supervisor = Supervisor(config, options["processes"], options["health_port"])
                except OSError as exc:
                    raise CommandError(
                        f"Cannot serve health probes on port {options['health_port']}: {exc}"
                    ) from None
                code = supervisor.run()
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


def port_number(value: str) -> int:
    try:
        port = int(value)
    except ValueError:
        raise ArgumentTypeError(f"{value!r} is not a port number.") from None
    if not 1 <= port <= 65535:
        raise ArgumentTypeError(f"{value} is not a port number (1 to 65535).")
    return port


def metrics_address(text: str) -> Address:
    from django_jobs.metrics.exposition import parse_address

    try:
        return parse_address(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


@contextlib.contextmanager
def serving_metrics(address: Address | None, backend: JobsBackend) -> Iterator[None]:
    """The supervisor's metrics endpoint, up before any worker is forked (see metrics/)."""
    if address is None:
        yield
        return
    from django_jobs.metrics.exposition import MetricsServer, require_client, use_multiprocess_dir

    try:
        require_client()
        remove = use_multiprocess_dir()
    except ImproperlyConfigured as exc:
        raise CommandError(str(exc)) from None
    server = MetricsServer(address, backend)
    try:
        server.start()
    except ImproperlyConfigured as exc:
        remove()
        raise CommandError(str(exc)) from None
    try:
        yield
    finally:
        server.stop()
        remove()


def refuse_in_memory_database(alias: str) -> None:
    """Refuse to run workers on a database they cannot share (an in-memory SQLite)."""
    problem = engine_for(alias).unusable_for_workers()
    if problem is not None:
        raise CommandError(problem)
