"""Job states, attempt outcomes and the table of allowed transitions.

The table is data on purpose: ``transitions.py`` reads it to build the
``WHERE state IN (...)`` guard of every write, and a test walks it. A state
change that is not in this table cannot happen.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from django.db import models
from django.utils.translation import gettext_lazy as _

from .framework import TaskResultStatus


class JobState(models.TextChoices):
    # Enqueued after other jobs (``after=``); queued once every one has succeeded.
    WAITING = "waiting", _("Waiting")
    # Waiting to be claimed; ``run_after`` may hold it back (scheduled/backoff).
    QUEUED = "queued", _("Queued")
    # Leased by exactly one attempt.
    RUNNING = "running", _("Running")
    # Cancel was asked while running; the attempt is told at its next heartbeat.
    CANCELLING = "cancelling", _("Cancelling")
    # The current attempt returned normally.
    SUCCEEDED = "succeeded", _("Succeeded")
    # A permanent failure (give-up exception, unknown task, result too large).
    FAILED = "failed", _("Failed")
    # Every allowed attempt was used; terminal until an operator acts.
    EXHAUSTED = "exhausted", _("Exhausted")
    # Cancelled before or while running.
    CANCELLED = "cancelled", _("Cancelled")
    # Held by an operator or poison detection; never runs until released.
    QUARANTINED = "quarantined", _("Quarantined")
    # An operator accepted the loss, with their name and a note.
    DISCARDED = "discarded", _("Discarded")
    # Its deadline (``expires_at``) passed before it started.
    EXPIRED = "expired", _("Expired")


class AttemptOutcome(models.TextChoices):
    # The attempt holds the lease and is executing.
    RUNNING = "running", _("Running")
    # The task returned; the job took the result.
    SUCCEEDED = "succeeded", _("Succeeded")
    # The task raised; the retry policy decided what happens to the job.
    FAILED = "failed", _("Failed")
    # The attempt outlived its hard timeout and was stopped.
    TIMED_OUT = "timed_out", _("Timed out")
    # The lease ended without a report: the work may or may not have happened.
    LOST = "lost", _("Lost")
    # The attempt was stopped because the job was cancelled.
    CANCELLED = "cancelled", _("Cancelled")
    # The task asked to sleep (``context.sleep``): the job waits, queued, until then.
    SLEPT = "slept", _("Slept")
    # Claimed, then given back to its queue before the task started (claimed
    # ahead and not taken in time, or its claim's answer never reached the
    # worker): nothing ran, so nothing failed, and the attempt is not counted.
    NOT_STARTED = "not_started", _("Not started")


class BatchState(models.TextChoices):
    """Where a batch (``models.Batch``) stands; ``batches.py`` has the rules."""

    # Being written: the ``with batch()`` block has not ended (nobody else sees it).
    OPEN = "open", _("Open")
    # Sealed, some member not settled yet.
    RUNNING = "running", _("Running")
    # Every member settled, not all of them succeeded: on_finish was enqueued.
    FINISHED = "finished", _("Finished")
    # Every member succeeded: on_finish and on_success were enqueued.
    SUCCEEDED = "succeeded", _("Succeeded")


LIVE_STATES = frozenset({JobState.WAITING, JobState.QUEUED, JobState.RUNNING, JobState.CANCELLING})
LEASED_STATES = frozenset({JobState.RUNNING, JobState.CANCELLING})
# Work a worker can see through: a waiting job only becomes queued when one of
# these succeeds, so a burst worker is done when none is left.
IN_FLIGHT_STATES = frozenset({JobState.QUEUED}) | LEASED_STATES
FINISHED_STATES = frozenset(set(JobState) - LIVE_STATES)


class Transition(StrEnum):
    """Every way a job's state may change, named after what causes it."""

    # Workers and the reaper.
    CLAIM = "claim"
    COMPLETE = "complete"
    SCHEDULE_RETRY = "schedule_retry"
    EXHAUST = "exhaust"
    FAIL = "fail"
    CONFIRM_CANCEL = "confirm_cancel"  # a cancelling attempt ended without success
    REAP = "reap"  # lease expired or its worker died: attempt lost, job requeued
    REAP_EXHAUST = "reap_exhaust"  # ... and no attempt is left
    REAP_CANCEL = "reap_cancel"  # ... while cancel was requested
    POISON = "poison"  # ... for the Nth time in a row: held for an operator
    EXPIRE = "expire"  # its deadline passed before it started
    SLEEP = "sleep"  # the task asked to sleep: queued for later, the attempt not counted
    GIVE_BACK = "give_back"  # the attempt never started: queued again at once, not counted
    # Dependencies (``after=``).
    DEPENDENCIES_MET = "dependencies_met"  # the last job it waits for succeeded
    DEPENDENCY_DISCARDED = "dependency_discarded"  # a job it waits for can never succeed
    # Operators (admin, API, CLI), through django_jobs.control.
    CANCEL = "cancel"  # a queued job: cancelled at once
    REQUEST_CANCEL = "request_cancel"  # a running job: asked to stop
    RETRY = "retry"  # a fresh attempt budget
    QUARANTINE = "quarantine"
    RELEASE = "release"
    DISCARD = "discard"
    RUN_NOW = "run_now"  # a queued job scheduled for later: due at once
    # Not a change of state, and so not in TRANSITIONS: a finished job is
    # copied into a new queued one. Recorded in the audit trail of both.
    RERUN = "rerun"


@dataclass(frozen=True, slots=True)
class Rule:
    sources: frozenset[JobState]
    target: JobState


_S = JobState
# Finished without success: where an operator may retry, quarantine or discard.
UNSUCCESSFUL = frozenset({_S.FAILED, _S.EXHAUSTED, _S.CANCELLED, _S.EXPIRED})
# Finished, and not held: what an operator may rerun as a new job. A held
# (quarantined) job is released or discarded first: copying it would copy
# whatever made it poison.
RERUNNABLE = FINISHED_STATES - {_S.QUARANTINED}

TRANSITIONS: dict[Transition, Rule] = {
    Transition.CLAIM: Rule(frozenset({_S.QUEUED}), _S.RUNNING),
    Transition.COMPLETE: Rule(LEASED_STATES, _S.SUCCEEDED),
    Transition.SCHEDULE_RETRY: Rule(frozenset({_S.RUNNING}), _S.QUEUED),
    Transition.SLEEP: Rule(frozenset({_S.RUNNING}), _S.QUEUED),
    Transition.GIVE_BACK: Rule(frozenset({_S.RUNNING}), _S.QUEUED),
    Transition.EXHAUST: Rule(frozenset({_S.RUNNING}), _S.EXHAUSTED),
    Transition.FAIL: Rule(frozenset({_S.RUNNING}), _S.FAILED),
    Transition.CONFIRM_CANCEL: Rule(frozenset({_S.CANCELLING}), _S.CANCELLED),
    Transition.REAP: Rule(frozenset({_S.RUNNING}), _S.QUEUED),
    Transition.REAP_EXHAUST: Rule(frozenset({_S.RUNNING}), _S.EXHAUSTED),
    Transition.REAP_CANCEL: Rule(frozenset({_S.CANCELLING}), _S.CANCELLED),
    Transition.POISON: Rule(frozenset({_S.RUNNING}), _S.QUARANTINED),
    Transition.EXPIRE: Rule(frozenset({_S.QUEUED}), _S.EXPIRED),
    Transition.DEPENDENCIES_MET: Rule(frozenset({_S.WAITING}), _S.QUEUED),
    Transition.DEPENDENCY_DISCARDED: Rule(frozenset({_S.WAITING}), _S.CANCELLED),
    Transition.CANCEL: Rule(frozenset({_S.WAITING, _S.QUEUED}), _S.CANCELLED),
    Transition.REQUEST_CANCEL: Rule(frozenset({_S.RUNNING}), _S.CANCELLING),
    Transition.RETRY: Rule(UNSUCCESSFUL | {_S.QUARANTINED}, _S.QUEUED),
    Transition.QUARANTINE: Rule(UNSUCCESSFUL | {_S.QUEUED}, _S.QUARANTINED),
    Transition.RELEASE: Rule(frozenset({_S.QUARANTINED}), _S.QUEUED),
    Transition.DISCARD: Rule(UNSUCCESSFUL | {_S.WAITING, _S.QUEUED, _S.QUARANTINED}, _S.DISCARDED),
    # Also guarded by run_after being in the future (engine/operator.py).
    Transition.RUN_NOW: Rule(frozenset({_S.QUEUED}), _S.QUEUED),
}


def allowed(transition: Transition, state: JobState | str) -> bool:
    return JobState(state) in TRANSITIONS[transition].sources


def django_status(state: JobState | str) -> TaskResultStatus:
    """Map our detailed state onto the four statuses Django's Tasks framework knows."""
    state = JobState(state)
    if state in (JobState.WAITING, JobState.QUEUED):
        return TaskResultStatus.READY
    if state in LEASED_STATES:
        return TaskResultStatus.RUNNING
    if state is JobState.SUCCEEDED:
        return TaskResultStatus.SUCCESSFUL
    return TaskResultStatus.FAILED
