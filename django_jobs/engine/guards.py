"""The conditions every guarded write is made of, read from ``states.TRANSITIONS``.

A write moves a row only from the states its transition allows (``sources``)
to the one state it names (``target``); the claim reads only ``ready`` rows.
Written once here so the two engines and every shared step agree on them.
"""

from __future__ import annotations

from collections.abc import Sequence

from django.db.models import BooleanField, ExpressionWrapper, Q, QuerySet
from django.db.models.functions import Now

from ..models import Job, QueueState
from ..states import TRANSITIONS, JobState, Transition


def sources(transition: Transition) -> list[str]:
    """The states a row may be in for ``transition`` to move it."""
    return [str(s) for s in TRANSITIONS[transition].sources]


def target(transition: Transition) -> str:
    """The state ``transition`` leaves a row in."""
    return str(TRANSITIONS[transition].target)


def ready(db: str, queues: Sequence[str]) -> QuerySet[Job]:
    """Jobs a claim may take now: queued, due, and not past their deadline."""
    return (
        Job.objects.using(db)
        .filter(state=JobState.QUEUED, queue__in=queues, run_after__lte=Now())
        # Never start a job after its deadline; the reaper marks it expired.
        .exclude(expires_at__lte=Now())
    )


def ready_now() -> ExpressionWrapper[Q]:
    """Whether a row is due and not past its deadline, as ``ready`` reads it: a column."""
    return ExpressionWrapper(
        Q(run_after__lte=Now()) & (Q(expires_at__isnull=True) | Q(expires_at__gt=Now())),
        output_field=BooleanField(),
    )


def paused(db: str) -> QuerySet[QueueState, str]:
    """The names of the paused queues."""
    return QueueState.objects.using(db).filter(paused=True).values_list("queue", flat=True)
