"""The values that travel between the worker's parts and the engine.

A claim hands the producer ``Claimed`` attempts; the executor turns each into
an ``Outcome`` (a ``Report``, or ``ChildDied`` when an isolated attempt's
process ended without one); the completer hands outcomes to the engine and
gets ``Finished`` back; the lifeline renews leases and learns what was
``Renewed``. They are plain frozen data so that every part can be tested
without the others, and so that an isolated child can send a report through a
pipe.
"""

from __future__ import annotations

import dataclasses
import enum
import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.utils import timezone

from .retry import Decision
from .states import AttemptOutcome, JobState, Transition


@dataclass(frozen=True, slots=True)
class WorkerIdentity:
    id: uuid.UUID
    name: str  # host:pid, for people


@dataclass(frozen=True, slots=True)
class Claimed:
    """What a worker needs to run one attempt; ``token`` fences its reports."""

    job_id: uuid.UUID
    attempt_id: int
    token: int
    task_name: str
    args: list[Any]
    kwargs: dict[str, Any]
    queue: str
    priority: int
    max_attempts: int
    timeout: float | None
    tenant: str
    idempotency_key: str | None
    backend: str
    enqueued_at: datetime
    started_at: datetime
    # The previous attempt was lost: it may be what crashed its worker.
    suspect: bool = False
    # The enqueuer's trace context, when it was traced (tracing.py).
    trace_context: dict[str, str] | None = None
    # The enqueuer's version of the task (versions.py).
    task_version: str = ""


@dataclass(frozen=True, slots=True)
class Report:
    """A worker's account of how one attempt ended."""

    job_id: uuid.UUID
    token: int
    attempt_id: int
    outcome: AttemptOutcome  # SUCCEEDED, FAILED, TIMED_OUT, CANCELLED, SLEPT or NOT_STARTED
    result: Any = None
    error_type: str = ""
    error_message: str = ""
    traceback: str = ""
    decision: Decision | None = None  # for failures: what the retry policy said
    progress: Progress | None = None  # the last progress the task set, if unwritten
    # For SLEPT: when the job is due again, and the name its sleep is recorded under.
    wake_at: datetime | None = None
    sleep_step: str = ""
    # The exception itself, so the completer can log it with its traceback
    # (``exc_info``); only in the process that caught it: never pickled.
    exception: BaseException | None = field(default=None, compare=False, repr=False)

    @property
    def started(self) -> bool:
        """Whether a job thread took the attempt: not one given back unstarted."""
        return self.outcome != AttemptOutcome.NOT_STARTED

    def portable(self) -> Report:
        """This report without the live exception, to send to another process."""
        return dataclasses.replace(self, exception=None)

    def as_late_report(self) -> dict[str, Any]:
        return {
            "outcome": str(self.outcome),
            "error_type": self.error_type,
            "error_message": self.error_message[:2000],
            "reported_at": timezone.now().isoformat(),
        }


@dataclass(frozen=True, slots=True)
class ChildDied:
    """An isolated attempt's process ended without a report, and nobody stopped it.

    Only the attempt is lost: what it did before it died is unknown, so it
    is not a failure the retry policy could judge, and the job runs again
    (or is quarantined as poison).
    """

    job_id: uuid.UUID
    token: int
    attempt_id: int
    exit_code: int  # negative: killed by that signal

    @property
    def reason(self) -> str:
        code = self.exit_code
        how = f"killed by signal {-code}" if code < 0 else f"exit {code}"
        return f"isolated attempt's process died ({how})"


# How one attempt ended, as its executor saw it.
Outcome = Report | ChildDied


@dataclass(frozen=True, slots=True)
class Progress:
    done: int
    total: int | None
    message: str


@dataclass(frozen=True, slots=True)
class Renewed:
    lost: set[tuple[uuid.UUID, int]]  # leases this worker no longer holds
    cancelling: set[tuple[uuid.UUID, int]]  # held leases whose job was asked to cancel
    # Leases the database says this worker has held for a lease's length and
    # it did not name: claims that committed as their answer was lost.
    unknown: dict[tuple[uuid.UUID, int], Unheard] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Unheard:
    """A lease its worker never heard of: its attempt to end, and the job's names to log."""

    attempt_id: int
    task_name: str
    queue: str


@dataclass(frozen=True, slots=True)
class DeadRows:
    """One of our tables' dead row versions as the database counts them, and its latest vacuum."""

    table: str
    dead: int
    vacuumed_at: datetime | None  # by anyone: a worker, autovacuum, an operator


class StepWrite(enum.StrEnum):
    """What became of a step an attempt asked the engine to record."""

    RECORDED = "recorded"
    # The attempt does not hold the job's lease (reaped, released, superseded).
    STALE = "stale"
    # The job already has a step of that name: nothing was overwritten.
    DUPLICATE = "duplicate"


@dataclass(slots=True)
class Finished:
    applied: list[tuple[Report, JobState]] = field(default_factory=list)
    stale: list[Report] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Operated:
    """What an operator verb did to one job: the transition, and the copy a rerun made."""

    job_id: uuid.UUID
    transition: Transition
    from_state: JobState
    #: The job's state now: a rerun leaves the original in the state it was.
    to_state: JobState
    #: The new job a rerun enqueued.
    rerun: uuid.UUID | None = None
