"""The backend's ``OPTIONS``, read once and checked strictly.

A misspelt option that is silently ignored is how a 10-second lease turns into
a 5-minute outage, so unknown keys and wrong types are refused: each mistake is
a ``ConfigurationError`` carrying its system-check id, reported by ``manage.py
check`` (and every command that runs the checks) as one ``django_jobs.E0xx``
message, and raised by whatever uses the backend (an enqueue, a worker).
"""

from __future__ import annotations

import difflib
import json
import math
from collections.abc import Mapping
from dataclasses import MISSING, dataclass, field, fields
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import CroniterBadCronError, CroniterBadDateError, croniter

from .exceptions import MAX_ATTEMPTS_LIMIT, MAX_RETRY_DELAY_SECONDS, ConfigurationError

# The system-check ids of OPTIONS mistakes (docs/configuration.md#system-checks).
UNKNOWN_OPTION = "django_jobs.E005"
BAD_OPTION = "django_jobs.E006"
BAD_SCHEDULE = "django_jobs.E007"
OPTIONS_HINT = "See the OPTIONS table in django-jobs' docs/configuration.md."
SCHEDULES_HINT = "See 'Declaring schedules in code' in django-jobs' docs/schedules.md."


def _bad(message: str) -> ConfigurationError:
    return ConfigurationError(message, check_id=BAD_OPTION, hint=OPTIONS_HINT)


@dataclass(frozen=True, slots=True)
class JobsOptions:
    # Database alias that holds the jobs tables.
    DATABASE: str = "default"
    # Bound on the JSON size of args + kwargs accepted by enqueue.
    MAX_PAYLOAD_BYTES: int = 256 * 1024
    # Bound on the JSON size of a stored return value.
    MAX_RESULT_BYTES: int = 64 * 1024
    # Defaults for tasks that do not set their own policy.
    MAX_ATTEMPTS: int = 3
    BACKOFF_BASE_SECONDS: float = 1.0
    BACKOFF_CAP_SECONDS: float = 600.0
    # A lease lives this long unless renewed; a killed worker's job runs again
    # after at most LEASE_SECONDS + REAP_SECONDS (+ one poll).
    LEASE_SECONDS: float = 10.0
    HEARTBEAT_SECONDS: float = 2.0
    REAP_SECONDS: float = 2.0
    # A table of ours that gained this many dead row versions since its latest
    # vacuum is vacuumed by a worker (docs/operations.md#dead-rows); 0: never,
    # autovacuum alone keeps the tables.
    VACUUM_DEAD_ROWS: int = 100_000
    # How often an idle worker looks for work when no notification arrives.
    POLL_SECONDS: float = 1.0
    # LISTEN/NOTIFY wake-ups on PostgreSQL; turn off behind a transaction pooler.
    LISTEN: bool = True
    # Prepare the claim and completion statements on workers' connections (so
    # PostgreSQL plans them once); turn off behind a pooler that cannot keep
    # prepared statements (PgBouncer before 1.21 in transaction mode).
    PREPARE_STATEMENTS: bool = True
    # Most jobs one claim statement takes (also bounded by free slots).
    CLAIM_BATCH: int = 100
    # Attempts claimed ahead per job thread while jobs are short (worker/prefetch.py); 0: none.
    PREFETCH: int = 1
    # On SIGTERM, how long running jobs may take before their leases are released.
    SHUTDOWN_GRACE_SECONDS: float = 30.0
    # A worker row whose heartbeat is older than this is shown as stale.
    WORKER_STALE_SECONDS: float = 30.0
    # Extra modules imported by workers so their tasks are registered.
    TASK_MODULES: tuple[str, ...] = ()
    # A running job asked to cancel that has not stopped after this is stopped by force.
    CANCEL_GRACE_SECONDS: float = 10.0
    # A job told to stop (timeout, forced cancel) that is still running after this
    # gets its worker process replaced: Python cannot kill one thread.
    STOP_GRACE_SECONDS: float = 2.0
    # This many lost attempts in a row quarantine the job (poison detection).
    POISON_LOST_ATTEMPTS: int = 3
    # Run a job whose previous attempt was lost in a child process of its own,
    # so if it is what crashes workers, it takes no other job down with it.
    ISOLATE_SUSPECTS: bool = True
    # Queue -> most queued jobs it may hold; enqueue beyond it raises QueueFullError.
    QUEUE_MAX_DEPTH: Mapping[str, int] = field(default_factory=dict)
    # Queue -> (retries, window seconds): the per-queue retry budget (docs/control.md).
    RETRY_BUDGET: Mapping[str, tuple[int, float]] = field(default_factory=dict)
    # Flow control, per queue (docs/flow.md). A queue with a limit (concurrency
    # or rate) is claimed under a per-queue lock, so its limits hold across all
    # workers; a queue that is only fair is claimed in one statement.
    # Queue -> most jobs running at once, cluster-wide.
    QUEUE_CONCURRENCY: Mapping[str, int] = field(default_factory=dict)
    # Queue -> most running jobs per concurrency_key in it (e.g. 1 per account).
    KEY_CONCURRENCY: Mapping[str, int] = field(default_factory=dict)
    # Queue -> {tenant: weight}: claims interleave tenants (weight 1 if unlisted).
    FAIR_QUEUES: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    # Queue -> (jobs, seconds): at most that many claims per fixed window.
    RATE_LIMITS: Mapping[str, tuple[int, float]] = field(default_factory=dict)
    # Queue -> (jobs, seconds): the same, for each concurrency_key in the queue.
    KEY_RATE_LIMITS: Mapping[str, tuple[int, float]] = field(default_factory=dict)
    # ``manage.py jobs prune`` deletes finished jobs older than this by default.
    RETENTION_DAYS: float = 14.0
    # Periodic schedules declared in code: name -> {"task", "cron", ...} (docs/schedules.md).
    # Parsed into ScheduleSpec here, so a typo fails at start-up, not at 3 a.m.
    SCHEDULES: Mapping[str, ScheduleSpec] = field(default_factory=dict)
    # How often each worker's scheduler thread looks for due schedule ticks.
    SCHEDULER_SECONDS: float = 1.0
    # A tick found later than this is "missed": policy "skip" drops it.
    SCHEDULE_GRACE_SECONDS: float = 60.0
    # A job whose task this worker does not have is postponed, not failed, for
    # this many seconds after it was enqueued: a rolling deploy's old workers
    # leave new tasks to the new ones (docs/workers.md#rolling-deploys). 0: fail at once.
    UNKNOWN_TASK_GRACE: float = 300.0

    def constrained(self, queue: str) -> bool:
        """Whether claims from this queue go through the per-queue flow-control path."""
        return any(
            queue in rules
            for rules in (
                self.QUEUE_CONCURRENCY,
                self.KEY_CONCURRENCY,
                self.FAIR_QUEUES,
                self.RATE_LIMITS,
                self.KEY_RATE_LIMITS,
            )
        )

    def limited(self, queue: str) -> bool:
        """Whether a limit counts this queue's jobs (so claims keep exact counts under a lock)."""
        limits = (
            self.QUEUE_CONCURRENCY,
            self.KEY_CONCURRENCY,
            self.RATE_LIMITS,
            self.KEY_RATE_LIMITS,
        )
        return any(queue in rules for rules in limits)

    def caps_running(self, queue: str) -> bool:
        """Whether a limit counts this queue's running jobs (``QUEUE_CONCURRENCY``, per key)."""
        return queue in self.QUEUE_CONCURRENCY or queue in self.KEY_CONCURRENCY

    def only_fair(self, queue: str) -> bool:
        """Fair, and no limit that needs exact counts (so no per-queue lock)."""
        return queue in self.FAIR_QUEUES and not self.limited(queue)

    @classmethod
    def from_mapping(cls, alias: str, options: Mapping[str, Any]) -> JobsOptions:
        known = {f.name: f for f in fields(cls)}
        unknown = sorted(set(options) - set(known))
        if unknown:
            guesses = [
                f"{name} (did you mean {close[0]}?)"
                if (close := difflib.get_close_matches(str(name), known, n=1))
                else str(name)
                for name in unknown
            ]
            raise ConfigurationError(
                f"TASKS[{alias!r}]['OPTIONS'] has unknown option(s) {', '.join(guesses)}.",
                check_id=UNKNOWN_OPTION,
                hint=f"Known options are {', '.join(sorted(known))}.",
            )
        values: dict[str, Any] = {}
        for name, value in options.items():
            default = known[name].default
            if default is MISSING:
                default = known[name].default_factory()  # type: ignore[operator]
            values[name] = _coerce(alias, name, value, default)
        result = cls(**values)
        result._check_relations(alias)
        return result

    def _check_relations(self, alias: str) -> None:
        where = f"TASKS[{alias!r}]['OPTIONS']"
        for name in (
            "MAX_PAYLOAD_BYTES",
            "MAX_RESULT_BYTES",
            "MAX_ATTEMPTS",
            "CLAIM_BATCH",
            "POISON_LOST_ATTEMPTS",
        ):
            if getattr(self, name) < 1:
                raise _bad(f"{where}[{name!r}] must be at least 1.")
        if self.MAX_ATTEMPTS > MAX_ATTEMPTS_LIMIT:
            raise _bad(f"{where}['MAX_ATTEMPTS'] must be at most {MAX_ATTEMPTS_LIMIT}.")
        for name in (
            "LEASE_SECONDS",
            "HEARTBEAT_SECONDS",
            "REAP_SECONDS",
            "POLL_SECONDS",
            "CANCEL_GRACE_SECONDS",
            "STOP_GRACE_SECONDS",
            "RETENTION_DAYS",
            "SCHEDULER_SECONDS",
            "SCHEDULE_GRACE_SECONDS",
        ):
            if getattr(self, name) <= 0:
                raise _bad(f"{where}[{name!r}] must be positive.")
        for name in ("UNKNOWN_TASK_GRACE", "VACUUM_DEAD_ROWS", "PREFETCH"):
            if getattr(self, name) < 0:
                raise _bad(f"{where}[{name!r}] must not be negative.")
        if self.HEARTBEAT_SECONDS * 2 > self.LEASE_SECONDS:
            raise _bad(
                f"{where}: HEARTBEAT_SECONDS ({self.HEARTBEAT_SECONDS}) must be at most half "
                f"of LEASE_SECONDS ({self.LEASE_SECONDS}), or one late heartbeat loses the lease."
            )
        for queue, depth in self.QUEUE_MAX_DEPTH.items():
            if isinstance(depth, bool) or not isinstance(depth, int) or depth < 1:
                raise _bad(
                    f"{where}['QUEUE_MAX_DEPTH'][{queue!r}] must be a whole number of at "
                    f"least 1, not {depth!r}."
                )
        for name in ("QUEUE_CONCURRENCY", "KEY_CONCURRENCY"):
            for queue, limit in getattr(self, name).items():
                if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
                    raise _bad(
                        f"{where}[{name!r}][{queue!r}] must be a whole number of at least 1, "
                        f"not {limit!r}."
                    )
        for queue, weights in self.FAIR_QUEUES.items():
            if not isinstance(weights, Mapping) or not all(
                isinstance(w, int | float) and not isinstance(w, bool) and 0 < w < math.inf
                for w in weights.values()
            ):
                raise _bad(
                    f"{where}['FAIR_QUEUES'][{queue!r}] must be a dict of tenant -> positive "
                    f"weight (or {{}} for equal shares), not {weights!r}."
                )
        for name in ("RETRY_BUDGET", "RATE_LIMITS", "KEY_RATE_LIMITS"):
            for queue, pair in getattr(self, name).items():
                _check_pair(where, name, queue, pair)
        if self.BACKOFF_CAP_SECONDS < self.BACKOFF_BASE_SECONDS:
            raise _bad(f"{where}: BACKOFF_CAP_SECONDS must not be below BACKOFF_BASE_SECONDS.")
        if not self.BACKOFF_CAP_SECONDS <= MAX_RETRY_DELAY_SECONDS:
            raise _bad(
                f"{where}: BACKOFF_CAP_SECONDS must be at most {MAX_RETRY_DELAY_SECONDS} "
                f"(a hundred years), not {self.BACKOFF_CAP_SECONDS!r}."
            )


def _check_pair(where: str, name: str, queue: str, pair: Any) -> None:
    if (
        not isinstance(pair, tuple | list)
        or len(pair) != 2
        or isinstance(pair[0], bool)
        or not isinstance(pair[0], int)
        or pair[0] < 1
        or isinstance(pair[1], bool)
        or not isinstance(pair[1], int | float)
        or not 0 < pair[1] <= MAX_RETRY_DELAY_SECONDS  # NaN and infinity too
    ):
        raise _bad(
            f"{where}[{name!r}][{queue!r}] must be (count, window_seconds) with a count "
            f">= 1 and a window of more than 0 and at most {MAX_RETRY_DELAY_SECONDS} seconds "
            f"(a hundred years), not {pair!r}."
        )


def _coerce(alias: str, name: str, value: Any, default: Any) -> Any:
    where = f"TASKS[{alias!r}]['OPTIONS'][{name!r}]"
    if name == "SCHEDULES":
        return parse_schedules(where, value)
    if isinstance(default, bool):
        if not isinstance(value, bool):
            raise _bad(f"{where} must be True or False, not {value!r}.")
        return value
    if isinstance(default, int):
        if isinstance(value, bool) or not isinstance(value, int):
            raise _bad(f"{where} must be an integer, not {value!r}.")
        return value
    if isinstance(default, float):
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise _bad(f"{where} must be a number of seconds, not {value!r}.")
        if not math.isfinite(value):  # NaN passes every comparison the checks below make
            raise _bad(f"{where} must be a finite number, not {value!r}.")
        return float(value)
    if isinstance(default, dict):
        if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
            raise _bad(f"{where} must be a dict keyed by queue name, not {value!r}.")
        return {k: tuple(v) if isinstance(v, list) else v for k, v in value.items()}
    if isinstance(default, tuple):
        if isinstance(value, str) or not all(isinstance(v, str) for v in value):
            raise _bad(f"{where} must be a list of module paths, not {value!r}.")
        return tuple(value)
    if not isinstance(value, str) or not value:
        raise _bad(f"{where} must be a non-empty string, not {value!r}.")
    return value


# -- periodic schedules ----------------------------------------------------------

MISSED_POLICIES = ("skip", "catch_up")
# A catch-up enqueues at most this many ticks at once, whatever max_catch_up says:
# a per-second schedule down for a day must not flood its queue with 86,400 jobs.
MAX_CATCH_UP_LIMIT = 1000
# Schedule.name's column width, minus what the idempotency key adds around it.
MAX_SCHEDULE_NAME = 200


@dataclass(frozen=True, slots=True)
class ScheduleSpec:
    """One schedule as declared in ``OPTIONS["SCHEDULES"]``, already validated."""

    name: str
    task: str
    cron: str
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    timezone: str = "UTC"
    missed: str = "skip"
    max_catch_up: int = 10
    queue: str = "default"
    priority: int = 0
    tenant: str = ""


_SPEC_KEYS = {f.name for f in fields(ScheduleSpec)} - {"name"}


def cron_problem(expression: Any, timezone_name: str = "UTC") -> str | None:
    """Why ``expression`` is not a usable cron expression, or None if it is.

    croniter accepts some expressions that never fire (``0 0 31 2 *``), so the
    check also asks it for the next tick.
    """
    if not isinstance(expression, str) or not expression.strip():
        return f"cron must be a non-empty string, not {expression!r}"
    try:
        croniter(expression, datetime.now(ZoneInfo(timezone_name))).get_next(datetime)
    except (CroniterBadCronError, CroniterBadDateError, ValueError, KeyError) as exc:
        return f"cron {expression!r} is not valid ({exc})"
    return None


def timezone_problem(name: Any) -> str | None:
    """Why ``name`` is not an IANA timezone name, or None if it is."""
    if not isinstance(name, str) or not name:
        return f"timezone must be an IANA name such as 'Europe/Paris', not {name!r}"
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):  # "America": a folder of tzdata
        return f"timezone {name!r} is not a known IANA timezone"
    return None


def parse_schedules(where: str, value: Any) -> dict[str, ScheduleSpec]:
    if not isinstance(value, Mapping):
        raise ConfigurationError(
            f"{where} must be a dict of schedule name -> dict, not {value!r}.",
            check_id=BAD_SCHEDULE,
            hint=SCHEDULES_HINT,
        )
    return {name: _parse_schedule(where, name, spec) for name, spec in value.items()}


def _parse_schedule(where: str, name: Any, spec: Any) -> ScheduleSpec:
    if not isinstance(name, str) or not name or len(name) > MAX_SCHEDULE_NAME:
        raise ConfigurationError(
            f"{where}: schedule names must be non-empty strings of at most "
            f"{MAX_SCHEDULE_NAME} characters, not {name!r}.",
            check_id=BAD_SCHEDULE,
            hint=SCHEDULES_HINT,
        )
    here = f"{where}[{name!r}]"

    def fail(message: str) -> ConfigurationError:
        return ConfigurationError(f"{here}: {message}.", check_id=BAD_SCHEDULE, hint=SCHEDULES_HINT)

    if not isinstance(spec, Mapping):
        raise fail(f"must be a dict with at least 'task' and 'cron', not {spec!r}")
    unknown = sorted(set(spec) - _SPEC_KEYS)
    if unknown:
        raise fail(
            f"unknown key(s) {', '.join(map(str, unknown))}; known keys are "
            f"{', '.join(sorted(_SPEC_KEYS))}"
        )
    missing = sorted({"task", "cron"} - set(spec))
    if missing:
        raise fail(f"missing {' and '.join(missing)}")
    task = spec["task"]
    if not isinstance(task, str) or "." not in task or len(task) > 255:
        raise fail(f"task must be a registered task's module path, not {task!r}")
    timezone_name = spec.get("timezone", "UTC")
    if problem := timezone_problem(timezone_name):
        raise fail(problem)
    if problem := cron_problem(spec["cron"], timezone_name):
        raise fail(problem)
    args = spec.get("args", ())
    if isinstance(args, str | bytes) or not isinstance(args, list | tuple):
        raise fail(f"args must be a list, not {args!r}")
    kwargs = spec.get("kwargs", {})
    if not isinstance(kwargs, Mapping) or not all(isinstance(k, str) for k in kwargs):
        raise fail(f"kwargs must be a dict keyed by argument name, not {kwargs!r}")
    try:
        json.dumps([list(args), dict(kwargs)])
    except (TypeError, ValueError) as exc:
        raise fail(f"args and kwargs must be JSON ({exc})") from None
    missed = spec.get("missed", "skip")
    if missed not in MISSED_POLICIES:
        raise fail(f"missed must be one of {', '.join(MISSED_POLICIES)}, not {missed!r}")
    max_catch_up = spec.get("max_catch_up", 10)
    if (
        isinstance(max_catch_up, bool)
        or not isinstance(max_catch_up, int)
        or not 1 <= max_catch_up <= MAX_CATCH_UP_LIMIT
    ):
        raise fail(
            f"max_catch_up must be a whole number from 1 to {MAX_CATCH_UP_LIMIT}, "
            f"not {max_catch_up!r}"
        )
    priority = spec.get("priority", 0)
    if isinstance(priority, bool) or not isinstance(priority, int) or not -100 <= priority <= 100:
        raise fail(f"priority must be a whole number from -100 to 100, not {priority!r}")
    for key, limit, default in (("queue", 100, "default"), ("tenant", 255, "")):
        text = spec.get(key, default)
        if not isinstance(text, str) or len(text) > limit or (key == "queue" and not text):
            raise fail(f"{key} must be a string of at most {limit} characters, not {text!r}")
    return ScheduleSpec(
        name=name,
        task=task,
        cron=spec["cron"].strip(),
        args=tuple(args),
        kwargs=dict(kwargs),
        timezone=timezone_name,
        missed=missed,
        max_catch_up=max_catch_up,
        queue=spec.get("queue", "default"),
        priority=priority,
        tenant=spec.get("tenant", ""),
    )
