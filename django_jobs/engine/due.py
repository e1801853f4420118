"""Bringing scheduled jobs forward: the next moment a queued job falls due, made now.

Only ``django_jobs.testing`` calls it, to run in a test what a worker would
run later (a ``run_after`` in the future, a retry's backoff) without waiting
for it. One moment at a time, the soonest first, so jobs run in the order the
clock would have run them. The job stays ``queued``: no state changes, so no
transition and no signal; the write is guarded on that state, so a job
claimed or cancelled meanwhile is left alone.
"""

from __future__ import annotations

import uuid
from collections.abc import Collection, Sequence

from django.db import transaction
from django.db.models import Min
from django.db.models.functions import Now

from ..models import Job
from ..states import JobState


def bring_forward(db: str, queues: Sequence[str], only: Collection[uuid.UUID] | None = None) -> int:
    """Make the queued jobs of ``queues`` due soonest (of ``only``, if given) due now."""
    with transaction.atomic(using=db):
        later = Job.objects.using(db).filter(
            state=JobState.QUEUED, queue__in=queues, run_after__gt=Now()
        )
        if only is not None:
            later = later.filter(id__in=only)
        soonest = later.aggregate(at=Min("run_after"))["at"]
        if soonest is None:
            return 0
        return later.filter(run_after=soonest).update(run_after=Now(), updated_at=Now())
