"""``jobs prune``: delete finished jobs older than the retention period, in batches."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from datetime import timedelta
from typing import Any

from django.core.management.base import BaseCommand

from django_jobs import retention
from django_jobs.backend import JobsBackend

from . import render
from .arguments import positive_days, positive_int
from .base import AddSubcommand


def add_prune(add: AddSubcommand) -> None:
    sub = add("prune", "Delete finished jobs older than the retention period, in batches.", prune)
    sub.add_argument(
        "--older-than",
        type=positive_days,
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


def prune(command: BaseCommand, backend: JobsBackend, options: dict[str, Any]) -> None:
    days: float = options["older_than"] or backend.settings.RETENTION_DAYS
    settings = backend.settings
    rates = [*settings.RATE_LIMITS.values(), *settings.KEY_RATE_LIMITS.values()]
    result = retention.prune(
        backend.db,
        older_than=timedelta(days=days),
        include_held=options["include_held"],
        batch_size=options["batch_size"],
        dry_run=options["dry_run"],
        keep_retry_windows=_longest(settings.RETRY_BUDGET.values()),
        keep_rate_windows=_longest(rates),
    )
    if options["json"]:
        # asdict() rebuilds a Counter from its items, counting (state, n) pairs
        # as keys: the document failed to encode whenever anything was pruned.
        document = {**dataclasses.asdict(result), "jobs_by_state": dict(result.jobs_by_state)}
        command.stdout.write(render.document(document))
        return
    by_state = ", ".join(f"{s} {n}" for s, n in sorted(result.jobs_by_state.items()))
    verb = "Would delete" if result.dry_run else "Deleted"
    held = "" if options["include_held"] else " (exhausted and quarantined kept)"
    command.stdout.write(
        f"{verb} {result.jobs} job(s) finished before {render.when(result.cutoff)}"
        f"{held}" + (f": {by_state}" if by_state else "") + "."
    )
    batches = "" if result.dry_run else f" in {result.batches} batch(es)"
    command.stdout.write(
        f"{verb} with them {result.attempts} attempt(s) and {result.events} audit "
        f"event(s){batches}; also {result.retry_windows} retry window(s), "
        f"{result.rate_windows} rate window(s), {result.fair_clocks} fair-queue clock(s) "
        f"and {result.workers} worker row(s)."
    )


def _longest(limits: Iterable[tuple[int, float]]) -> timedelta:
    """How long windows of these (count, seconds) limits are kept: a day, or the longest.

    A window longer than a day is still being counted after a day: deleted, a
    rate limit of one job a week let a second job start the same week.
    """
    return max([retention.RETRY_WINDOW_KEEP, *(timedelta(seconds=w) for _, w in limits)])
