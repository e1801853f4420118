"""Job states, attempt outcomes and the table of allowed transitions.

The table is data on purpose: ``transitions.py`` reads it to build the
``WHERE state IN (...)`` guard of every write, and a test walks it. A state
change that is not in this table cannot happen.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from django.db import models
from django.tasks import TaskResultStatus
from django.utils.translation import gettext_lazy as _


class JobState(models.TextChoices):
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


LIVE_STATES = frozenset({JobState.QUEUED, JobState.RUNNING, JobState.CANCELLING})
LEASED_STATES = frozenset({JobState.RUNNING, JobState.CANCELLING})
FINISHED_STATES = frozenset(set(JobState) - LIVE_STATES)


class Transition(StrEnum):
    """Every way a job's state may change, named after what causes it."""

    CLAIM = "claim"
    COMPLETE = "complete"
    SCHEDULE_RETRY = "schedule_retry"
    EXHAUST = "exhaust"
    FAIL = "fail"
    REAP = "reap"  # lease expired or its worker died: attempt lost, job requeued
    REAP_EXHAUST = "reap_exhaust"  # ... and no attempt is left


@dataclass(frozen=True, slots=True)
class Rule:
    sources: frozenset[JobState]
    target: JobState


TRANSITIONS: dict[Transition, Rule] = {
    Transition.CLAIM: Rule(frozenset({JobState.QUEUED}), JobState.RUNNING),
    Transition.COMPLETE: Rule(LEASED_STATES, JobState.SUCCEEDED),
    Transition.SCHEDULE_RETRY: Rule(frozenset({JobState.RUNNING}), JobState.QUEUED),
    Transition.EXHAUST: Rule(LEASED_STATES, JobState.EXHAUSTED),
    Transition.FAIL: Rule(LEASED_STATES, JobState.FAILED),
    Transition.REAP: Rule(frozenset({JobState.RUNNING}), JobState.QUEUED),
    Transition.REAP_EXHAUST: Rule(LEASED_STATES, JobState.EXHAUSTED),
}


def allowed(transition: Transition, state: JobState | str) -> bool:
    return JobState(state) in TRANSITIONS[transition].sources


def django_status(state: JobState | str) -> TaskResultStatus:
    """Map our detailed state onto the four statuses Django's Tasks framework knows."""
    state = JobState(state)
    if state is JobState.QUEUED:
        return TaskResultStatus.READY
    if state in LEASED_STATES:
        return TaskResultStatus.RUNNING
    if state is JobState.SUCCEEDED:
        return TaskResultStatus.SUCCESSFUL
    return TaskResultStatus.FAILED
