"""The backend's ``OPTIONS``, read once and checked strictly.

A misspelt option that is silently ignored is how a 10-second lease turns into
a 5-minute outage, so unknown keys and wrong types are refused when the backend
is built (Django raises it from ``task_backends[alias]``) and reported by
``manage.py check``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import MISSING, dataclass, field, fields
from typing import Any

from django.core.exceptions import ImproperlyConfigured


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
    # How often an idle worker looks for work when no notification arrives.
    POLL_SECONDS: float = 1.0
    # LISTEN/NOTIFY wake-ups on PostgreSQL; turn off behind a transaction pooler.
    LISTEN: bool = True
    # Most jobs one claim statement takes (also bounded by free slots).
    CLAIM_BATCH: int = 10
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
    # ``manage.py jobs prune`` deletes finished jobs older than this by default.
    RETENTION_DAYS: float = 14.0

    @classmethod
    def from_mapping(cls, alias: str, options: Mapping[str, Any]) -> JobsOptions:
        known = {f.name: f for f in fields(cls)}
        unknown = sorted(set(options) - set(known))
        if unknown:
            raise ImproperlyConfigured(
                f"TASKS[{alias!r}]['OPTIONS'] has unknown option(s) {', '.join(unknown)}; "
                f"known options are {', '.join(sorted(known))}."
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
                raise ImproperlyConfigured(f"{where}[{name!r}] must be at least 1.")
        for name in (
            "LEASE_SECONDS",
            "HEARTBEAT_SECONDS",
            "REAP_SECONDS",
            "POLL_SECONDS",
            "CANCEL_GRACE_SECONDS",
            "STOP_GRACE_SECONDS",
            "RETENTION_DAYS",
        ):
            if getattr(self, name) <= 0:
                raise ImproperlyConfigured(f"{where}[{name!r}] must be positive.")
        if self.HEARTBEAT_SECONDS * 2 > self.LEASE_SECONDS:
            raise ImproperlyConfigured(
                f"{where}: HEARTBEAT_SECONDS ({self.HEARTBEAT_SECONDS}) must be at most half "
                f"of LEASE_SECONDS ({self.LEASE_SECONDS}), or one late heartbeat loses the lease."
            )
        for queue, depth in self.QUEUE_MAX_DEPTH.items():
            if isinstance(depth, bool) or not isinstance(depth, int) or depth < 1:
                raise ImproperlyConfigured(
                    f"{where}['QUEUE_MAX_DEPTH'][{queue!r}] must be a whole number of at "
                    f"least 1, not {depth!r}."
                )
        for queue, budget in self.RETRY_BUDGET.items():
            if (
                not isinstance(budget, tuple | list)
                or len(budget) != 2
                or isinstance(budget[0], bool)
                or not isinstance(budget[0], int)
                or budget[0] < 1
                or not isinstance(budget[1], int | float)
                or budget[1] <= 0
            ):
                raise ImproperlyConfigured(
                    f"{where}['RETRY_BUDGET'][{queue!r}] must be (retries, window_seconds) "
                    f"with retries >= 1 and a positive window, not {budget!r}."
                )
        if self.BACKOFF_CAP_SECONDS < self.BACKOFF_BASE_SECONDS:
            raise ImproperlyConfigured(
                f"{where}: BACKOFF_CAP_SECONDS must not be below BACKOFF_BASE_SECONDS."
            )


def _coerce(alias: str, name: str, value: Any, default: Any) -> Any:
    where = f"TASKS[{alias!r}]['OPTIONS'][{name!r}]"
    if isinstance(default, bool):
        if not isinstance(value, bool):
            raise ImproperlyConfigured(f"{where} must be True or False, not {value!r}.")
        return value
    if isinstance(default, int):
        if isinstance(value, bool) or not isinstance(value, int):
            raise ImproperlyConfigured(f"{where} must be an integer, not {value!r}.")
        return value
    if isinstance(default, float):
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ImproperlyConfigured(f"{where} must be a number of seconds, not {value!r}.")
        return float(value)
    if isinstance(default, dict):
        if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
            raise ImproperlyConfigured(
                f"{where} must be a dict keyed by queue name, not {value!r}."
            )
        return {k: tuple(v) if isinstance(v, list) else v for k, v in value.items()}
    if isinstance(default, tuple):
        if isinstance(value, str) or not all(isinstance(v, str) for v in value):
            raise ImproperlyConfigured(f"{where} must be a list of module paths, not {value!r}.")
        return tuple(value)
    if not isinstance(value, str) or not value:
        raise ImproperlyConfigured(f"{where} must be a non-empty string, not {value!r}.")
    return value
