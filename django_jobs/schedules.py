"""Periodic schedules: each cron tick enqueues one job, however many workers run.

Every worker process runs a ``Scheduler`` thread. At start it syncs the
schedules declared in ``OPTIONS["SCHEDULES"]`` into the ``Schedule`` table;
then, every ``SCHEDULER_SECONDS``, it fires the enabled schedules whose
``next_fire_at`` has come. There is no leader: all schedulers race for every
due tick, and two guards make the race produce exactly one job per tick.

1. **Compare-and-set on ``next_fire_at``.** Firing is one transaction that
   first runs ``UPDATE schedule SET next_fire_at = <next> WHERE id = %s AND
   next_fire_at = <the value we read> AND enabled``, then enqueues the tick's
   jobs. A second scheduler that read the same row blocks on the row lock
   until the first commits; PostgreSQL then re-checks its WHERE against the
   new row version, matches nothing, and that scheduler enqueues nothing. If
   the winner crashes before it commits, both the update and the jobs roll
   back and the next poll fires the tick again.
2. **An idempotency key per tick**, ``schedule:<name>:<tick in UTC ISO 8601>``,
   in the usual dedup scope (task name + tenant). Should ``next_fire_at`` ever
   move back onto a tick that already fired (a restored backup, a hand edit),
   the unique constraint returns the existing job instead of a second one —
   as long as that job has not been pruned.

Which ticks fire (``plan``), with ``now`` the scheduler's clock and *due* ticks
the cron ticks in ``[next_fire_at, now]``:

* ``skip``: every due tick at most ``SCHEDULE_GRACE_SECONDS`` old, oldest
  first (at most ``MAX_CATCH_UP_LIMIT`` of them); older ticks are dropped.
  A tick one second late is not "missed": only an outage longer than the
  grace loses ticks.
* ``catch_up``: the latest ``max_catch_up`` due ticks however old, oldest
  first; older ones are dropped.

Then ``next_fire_at`` becomes the first tick after ``now``. Dropped ticks are
logged. Ticks are computed by croniter in the schedule's timezone; see
``docs/schedules.md`` for what daylight-saving changes do.

When: each scheduler wakes on the wall clock's ``SCHEDULER_SECONDS``
boundaries (plus a few milliseconds of jitter), not ``SCHEDULER_SECONDS``
after its last pass: a pass's own duration never accumulates into drift.
Schedulers that lose the race do not queue up behind the winner either: the
row is locked with ``SKIP LOCKED`` before the compare-and-set, so a loser
moves on at once instead of waiting for the winner's commit and falling into
step with it.

Limits, honestly: a tick fires within about ``SCHEDULER_SECONDS`` of its time
when a worker is up, not to the millisecond; an enqueue that fails (a full or
unknown queue, a task this worker does not know) rolls the tick back, is
recorded on the schedule's ``last_error`` and retried at the next poll, where
the missed-tick policy applies as usual.
"""

from __future__ import annotations

import contextlib
import logging
import random
import threading
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any
from zoneinfo import ZoneInfo

from croniter import croniter
from django.db import DatabaseError, IntegrityError, connections, transaction
from django.utils import timezone

from . import registry
from .conf import MAX_CATCH_UP_LIMIT, ScheduleSpec
from .exceptions import EnqueueError, UnknownTaskError
from .models import Schedule
from .tasks import JobTask

if TYPE_CHECKING:
    from .backend import JobsBackend
    from .results import JobResult

logger = logging.getLogger("django_jobs.schedules")

SKIP = Schedule.Missed.SKIP
CATCH_UP = Schedule.Missed.CATCH_UP

# Fields of a row that OPTIONS["SCHEDULES"] owns; ``enabled`` stays the operator's.
DECLARED_FIELDS = (
    "backend",
    "task_name",
    "args",
    "kwargs",
    "queue",
    "priority",
    "tenant",
    "cron",
    "timezone",
    "missed",
    "max_catch_up",
)
# A change to any of these makes the stored next_fire_at meaningless.
TIMING_FIELDS = ("cron", "timezone")


# -- ticks: pure functions of the cron, the timezone and the clock ----------------


def next_tick(cron: str, timezone_name: str, after: datetime) -> datetime:
    """The first tick strictly after ``after``, in UTC."""
    local = after.astimezone(ZoneInfo(timezone_name))
    tick: datetime = croniter(cron, local).get_next(datetime)
    return tick.astimezone(UTC)


def tick_key(name: str, tick: datetime) -> str:
    """The idempotency key of one tick: the same on every worker, whatever its timezone."""
    return f"schedule:{name}:{tick.astimezone(UTC).isoformat()}"


@dataclass(frozen=True, slots=True)
class Plan:
    """What one scheduler pass does with one due schedule."""

    fire: tuple[datetime, ...]  # ticks to enqueue, oldest first, UTC
    next_fire_at: datetime  # first tick after now, UTC
    dropped: bool  # some due ticks were not (and will never be) enqueued


def plan(
    cron: str,
    timezone_name: str,
    next_fire_at: datetime,
    now: datetime,
    missed: str,
    max_catch_up: int,
    grace: timedelta,
) -> Plan:
    """Decide which due ticks fire; the module docstring states the rule.

    Walks backwards from ``now``, so the work is bounded by what fires
    (``max_catch_up``, or the grace under ``skip``) however long the schedule
    went unattended (a per-second cron left alone for a week has 600,000 due
    ticks; we look at no more than we fire).
    """
    if next_fire_at > now:
        return Plan((), next_fire_at, False)
    following = next_tick(cron, timezone_name, now)
    limit = MAX_CATCH_UP_LIMIT if missed == SKIP else max(1, max_catch_up)
    oldest = next_fire_at if missed != SKIP else max(next_fire_at, now - grace)
    # croniter's get_prev is strictly before its start: start a microsecond
    # after now so a tick exactly at now counts as due.
    backwards = croniter(
        cron, (now + timedelta(microseconds=1)).astimezone(ZoneInfo(timezone_name))
    )
    due: list[datetime] = []
    tick: datetime = backwards.get_prev(datetime).astimezone(UTC)
    while tick >= oldest and len(due) < limit:
        due.append(tick)
        tick = backwards.get_prev(datetime).astimezone(UTC)
    dropped = tick >= next_fire_at
    return Plan(tuple(reversed(due)), following, dropped)


# -- enqueueing ------------------------------------------------------------------


def _task(backend: JobsBackend, name: str) -> JobTask:
    """The registered task a schedule names: never an import of a row's dotted path."""
    task = registry.get(name)
    if task is None:
        # A web process (the admin's "run now") may not have imported task modules yet.
        registry.discover(backend.settings.TASK_MODULES)
        task = registry.get(name)
    if not isinstance(task, JobTask):
        raise UnknownTaskError(
            f"No django_jobs task named {name!r} is registered in this process; "
            "the schedule cannot enqueue it."
        )
    return task


def enqueue_for(
    backend: JobsBackend, schedule: Schedule, key: str, initiator: str = ""
) -> JobResult:
    """Enqueue the schedule's task through the normal enqueue path (validation included)."""
    task = _task(backend, schedule.task_name).using(
        queue_name=schedule.queue,
        priority=schedule.priority,
        backend=backend.alias,
        tenant=schedule.tenant,
        initiator=(initiator or f"schedule:{schedule.name}")[:255],
        idempotency_key=key,
    )
    return backend.enqueue(task, schedule.args, schedule.kwargs)


def run_now(backend: JobsBackend, schedule: Schedule, actor: str = "") -> JobResult:
    """Enqueue one extra run now; the schedule's own ticks are not affected."""
    key = f"schedule:{schedule.name}:manual:{uuid.uuid4()}"
    initiator = f"schedule:{schedule.name} run now" + (f" by {actor}" if actor else "")
    return enqueue_for(backend, schedule, key, initiator)


def fire_due(backend: JobsBackend, now: datetime | None = None) -> int:
    """Fire every due tick of this backend's enabled schedules; return the jobs enqueued.

    Safe to call from any number of processes at once: see the module docstring.
    """
    db = backend.db
    now = now or timezone.now()
    grace = timedelta(seconds=backend.settings.SCHEDULE_GRACE_SECONDS)
    enabled = Schedule.objects.using(db).filter(backend=backend.alias, enabled=True)
    for schedule in enabled.filter(next_fire_at__isnull=True):
        _initialise(db, schedule, now)
    fired = 0
    for schedule in enabled.filter(next_fire_at__lte=now).order_by("next_fire_at"):
        if schedule.next_fire_at is not None:  # always, by the filter: narrows the type
            fired += _fire(backend, schedule, schedule.next_fire_at, now, grace)
    return fired


def _initialise(db: str, schedule: Schedule, now: datetime) -> None:
    """Give a new (or hand-reset) row its first tick; only the first scheduler's write counts."""
    try:
        first = next_tick(schedule.cron, schedule.timezone, now)
    except Exception as exc:  # a row written past the admin's validation
        _record_error(db, schedule, f"cannot compute the next tick: {exc}")
        return
    Schedule.objects.using(db).filter(pk=schedule.pk, next_fire_at__isnull=True).update(
        next_fire_at=first
    )


def _fire(
    backend: JobsBackend, schedule: Schedule, due: datetime, now: datetime, grace: timedelta
) -> int:
    db = backend.db
    try:
        decided = plan(
            schedule.cron,
            schedule.timezone,
            due,
            now,
            schedule.missed,
            schedule.max_catch_up,
            grace,
        )
    except Exception as exc:  # a row written past the admin's validation
        _record_error(db, schedule, f"cannot compute ticks: {exc}")
        return 0
    try:
        with transaction.atomic(using=db):
            # Another scheduler holding the row is firing this tick: move on at
            # once rather than wait for its commit and fall into step with it.
            held = (
                Schedule.objects.using(db)
                .select_for_update(skip_locked=True)
                .filter(pk=schedule.pk, next_fire_at=due)
                .values_list("pk", flat=True)
            )
            if not list(held):
                return 0
            # The compare-and-set decides who fires (module docstring).
            moved: dict[str, Any] = {"next_fire_at": decided.next_fire_at}
            if decided.fire:
                # Only a fire clears the error: a pass that drops every tick it
                # found (all past the grace) has not shown the schedule works.
                moved.update(last_fired_at=decided.fire[-1], last_error="")
            won = (
                Schedule.objects.using(db)
                .filter(pk=schedule.pk, next_fire_at=due, enabled=True)
                .update(**moved)
            )
            if not won:
                return 0
            for tick in decided.fire:
                enqueue_for(backend, schedule, tick_key(schedule.name, tick))
    except EnqueueError as exc:
        _record_error(db, schedule, f"{type(exc).__name__}: {exc}")
        return 0
    if decided.dropped:
        logger.warning(
            "Schedule %s missed ticks between %s and %s; policy %s dropped some of them.",
            schedule.name,
            due.isoformat(),
            now.isoformat(),
            schedule.missed,
        )
    for tick in decided.fire:
        logger.info("Schedule %s fired its tick %s.", schedule.name, tick.isoformat())
    return len(decided.fire)


def _record_error(db: str, schedule: Schedule, message: str) -> None:
    """Keep the problem on the row for the admin; log it once, not once per poll."""
    if message != schedule.last_error:
        logger.error("Schedule %s: %s", schedule.name, message)
    Schedule.objects.using(db).filter(pk=schedule.pk).update(last_error=message)


# -- sync from settings ------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SyncResult:
    created: tuple[str, ...]
    updated: tuple[str, ...]
    deleted: tuple[str, ...]


def declared_values(spec: ScheduleSpec, alias: str) -> dict[str, Any]:
    return {
        "backend": alias,
        "task_name": spec.task,
        "args": list(spec.args),
        "kwargs": dict(spec.kwargs),
        "queue": spec.queue,
        "priority": spec.priority,
        "tenant": spec.tenant,
        "cron": spec.cron,
        "timezone": spec.timezone,
        "missed": spec.missed,
        "max_catch_up": spec.max_catch_up,
    }


def sync(backend: JobsBackend, now: datetime | None = None) -> SyncResult:
    """Make the table match ``OPTIONS["SCHEDULES"]`` of this backend.

    Declared schedules are inserted, or their declared fields updated (a new
    cron or timezone also resets ``next_fire_at`` to the next tick); rows
    declared before but no longer are deleted. Rows added in the admin are
    never touched, and neither is ``enabled``: an operator's "disable"
    survives restarts. Every worker runs this at start, concurrently: each
    row is locked while it is compared, and an insert that loses the race
    to another worker's is simply dropped (it inserted the same values).
    """
    db = backend.db
    now = now or timezone.now()
    created: list[str] = []
    updated: list[str] = []
    for spec in backend.settings.SCHEDULES.values():
        values = declared_values(spec, backend.alias)
        with transaction.atomic(using=db):
            row = Schedule.objects.using(db).select_for_update().filter(name=spec.name).first()
            if row is None:
                try:
                    with transaction.atomic(using=db):
                        Schedule.objects.using(db).create(
                            name=spec.name,
                            source=Schedule.Source.SETTINGS,
                            next_fire_at=next_tick(spec.cron, spec.timezone, now),
                            **values,
                        )
                    created.append(spec.name)
                except IntegrityError:
                    pass  # another worker's sync inserted it a moment ago
                continue
            changed = [name for name, value in values.items() if getattr(row, name) != value]
            if row.source != Schedule.Source.SETTINGS:
                logger.warning(
                    "Schedule %s, added in the admin, is now declared in settings: "
                    "settings own it from now on.",
                    spec.name,
                )
                changed.append("source")
            if not changed:
                continue
            for name, value in values.items():
                setattr(row, name, value)
            row.source = Schedule.Source.SETTINGS
            if row.next_fire_at is None or set(changed) & set(TIMING_FIELDS):
                row.next_fire_at = next_tick(spec.cron, spec.timezone, now)
                changed.append("next_fire_at")
            row.save(using=db, update_fields=[*changed, "updated_at"])
            updated.append(spec.name)
    gone = Schedule.objects.using(db).filter(backend=backend.alias, source=Schedule.Source.SETTINGS)
    deleted = sorted(
        gone.exclude(name__in=list(backend.settings.SCHEDULES)).values_list("name", flat=True)
    )
    if deleted:
        gone.filter(name__in=deleted).delete()
        logger.warning("Deleted schedule(s) no longer declared in settings: %s", ", ".join(deleted))
    return SyncResult(tuple(created), tuple(updated), tuple(deleted))


# -- the thread ------------------------------------------------------------------


class Scheduler:
    """Sync at start, then fire due ticks every ``SCHEDULER_SECONDS`` until ``stopping``.

    One per worker process, on its own database connection. Database faults
    are waited out like everywhere in the worker: the tick is fired at the
    next poll that reaches the database (the missed-tick policy decides what
    a long outage costs).
    """

    def __init__(self, backend: JobsBackend, stopping: threading.Event) -> None:
        self.backend = backend
        self.stopping = stopping
        self.interval = backend.settings.SCHEDULER_SECONDS
        self.thread: threading.Thread | None = None

    def start(self) -> threading.Thread:
        self.thread = threading.Thread(target=self.run, name="django-jobs-scheduler", daemon=True)
        self.thread.start()
        return self.thread

    def pause(self) -> float:
        """Seconds to the next wall-clock boundary of the interval, plus a little jitter.

        Counted from the clock, not from the end of the last pass, so the time
        a pass takes never accumulates: ticks are found a few milliseconds
        after they fall due, every time. The jitter (up to 5% of the interval,
        50 ms at most) keeps schedulers of many workers from all reading the
        same rows in the same millisecond.
        """
        now = time.time()
        jitter = random.random() * min(0.05, self.interval / 20)
        return self.interval - (now % self.interval) + jitter

    def run(self) -> None:
        synced = False
        while not self.stopping.wait(self.pause()):
            try:
                if not synced:
                    sync(self.backend)
                    synced = True
                fire_due(self.backend)
            except DatabaseError as exc:
                logger.warning("Scheduler could not reach the database (%s); retrying.", exc)
                with contextlib.suppress(DatabaseError):
                    connections[self.backend.db].close()
            except Exception:
                # A bug must not silently end scheduling for the life of the worker.
                logger.exception("Scheduler pass failed; trying again in %ss.", self.interval)
        connections.close_all()
