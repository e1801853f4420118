"""Unique jobs and debounce, applied: the job a unique key finds, and the debounce write.

Both engines run these steps with the key's lock held (``Engine.lock_unique``)
in the transaction that then inserts the job if nothing was found, so two
callers with one key decide one after the other: the second sees what the
first committed. Without the lock (``lock=False``) ``find`` only looks: the
prediction a deferred enqueue returns before the insert that decides.
"""

from __future__ import annotations

from datetime import datetime

from django.db.models import Exists, OuterRef, Q
from django.utils import timezone

from ..models import Attempt, Job, JobEvent
from ..states import AttemptOutcome
from ..unique import DEBOUNCE_STATES, UniqueRule

DEBOUNCE = "debounce"  # JobEvent.transition of a debounce: the state does not change


def not_started() -> Q:
    """A job a debounce may still change: waiting or queued, and no attempt of it ran.

    Not ``attempts == 0``: an attempt claimed ahead and given back unstarted
    counts in ``attempts`` (its number fences the next one), and a debounced
    job so given back was left with its old arguments, due at once, while
    the call made a second job.
    """
    ran = Attempt.objects.filter(job=OuterRef("pk")).exclude(outcome=AttemptOutcome.NOT_STARTED)
    return Q(state__in=DEBOUNCE_STATES) & ~Q(Exists(ran))


def find(db: str, job: Job, rule: UniqueRule, *, lock: bool) -> Job | None:
    """The newest job of ``rule``'s key in ``job``'s scope that ``rule`` matches.

    Unique: a job in one of the rule's states, or enqueued within its window.
    Debounce: a job not started yet; ``lock`` also locks its row, so no
    worker claims it between this look and the write that changes it (a claim
    that got there first makes it not match, and a new job is written).
    """
    jobs = Job.objects.using(db).filter(unique_key=rule.key, dedup_scope=job.dedup_scope)
    if rule.debounce is not None:
        jobs = jobs.filter(not_started())
        if lock:
            jobs = jobs.select_for_update()
    else:
        match = Q(state__in=rule.states)
        if rule.window is not None:
            match |= Q(enqueued_at__gte=timezone.now() - rule.window)
        jobs = jobs.filter(match)
    return jobs.order_by("-enqueued_at").first()


def debounce(db: str, found: Job, call: Job, actor: str) -> bool:
    """Give ``found`` the arguments and the start of ``call``; audited. False: it started.

    Guarded by the states it was found in, as every write to a job is.
    """
    now = timezone.now()
    changes = {"args": call.args, "kwargs": call.kwargs, "run_after": call.run_after}
    moved = (
        Job.objects.using(db).filter(not_started(), id=found.id).update(**changes, updated_at=now)
    )
    if not moved:
        return False
    for name, value in changes.items():
        setattr(found, name, value)
    found.updated_at = now
    JobEvent.objects.using(db).create(
        job_id=found.id,
        at=now,
        transition=DEBOUNCE,
        from_state=found.state,
        to_state=found.state,
        actor=actor[:255],
        note=_note(found.run_after),
    )
    return True


def _note(run_after: datetime) -> str:
    return f"arguments replaced by a later call; runs after {run_after.isoformat()}"
