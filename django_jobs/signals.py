"""Signals for every job state transition, sent after the change commits.

``job_transitioned`` fires for all of them; each transition also has its own
signal (``job_exhausted``, ``job_quarantined``, ...). Receivers get
``job_id``, ``transition``, ``from_state``, ``to_state``, ``actor`` and ``note``
keyword arguments, and the sender is ``django_jobs.models.Job``.

Django's own ``task_enqueued``, ``task_started`` and ``task_finished`` are sent
too, by the backend and the worker.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterable
from functools import partial
from typing import Any

from django.db import transaction
from django.dispatch import Signal

from .states import JobState, Transition

job_transitioned = Signal()

job_claimed = Signal()
job_succeeded = Signal()
job_retry_scheduled = Signal()
job_exhausted = Signal()
job_failed = Signal()
job_cancel_confirmed = Signal()
job_lost = Signal()
job_lost_exhausted = Signal()
job_lost_cancelled = Signal()
job_poisoned = Signal()
job_expired = Signal()
job_slept = Signal()
job_given_back = Signal()
job_dependencies_met = Signal()
job_dependency_discarded = Signal()
job_cancelled = Signal()
job_cancel_requested = Signal()
job_retried = Signal()
job_quarantined = Signal()
job_released = Signal()
job_discarded = Signal()
job_run_now = Signal()
# Sent for the original job (the new one's id is in the note); its state is unchanged.
job_rerun = Signal()

BY_TRANSITION: dict[Transition, Signal] = {
    Transition.CLAIM: job_claimed,
    Transition.COMPLETE: job_succeeded,
    Transition.SCHEDULE_RETRY: job_retry_scheduled,
    Transition.EXHAUST: job_exhausted,
    Transition.FAIL: job_failed,
    Transition.CONFIRM_CANCEL: job_cancel_confirmed,
    Transition.REAP: job_lost,
    Transition.REAP_EXHAUST: job_lost_exhausted,
    Transition.REAP_CANCEL: job_lost_cancelled,
    Transition.POISON: job_poisoned,
    Transition.EXPIRE: job_expired,
    Transition.SLEEP: job_slept,
    Transition.GIVE_BACK: job_given_back,
    Transition.DEPENDENCIES_MET: job_dependencies_met,
    Transition.DEPENDENCY_DISCARDED: job_dependency_discarded,
    Transition.CANCEL: job_cancelled,
    Transition.REQUEST_CANCEL: job_cancel_requested,
    Transition.RETRY: job_retried,
    Transition.QUARANTINE: job_quarantined,
    Transition.RELEASE: job_released,
    Transition.DISCARD: job_discarded,
    Transition.RUN_NOW: job_run_now,
    Transition.RERUN: job_rerun,
}


def signal_listeners(transition: Transition) -> bool:
    """Whether anyone listens for this transition (signals cost the hot path otherwise)."""
    return BY_TRANSITION[transition].has_listeners() or job_transitioned.has_listeners()


def send_on_commit(
    db: str,
    job_id: uuid.UUID,
    transition: Transition,
    from_state: JobState | str,
    to_state: JobState | str,
    actor: str = "system",
    note: str = "",
) -> None:
    """Queue both signals for after the current transaction commits (if anyone listens)."""
    if not signal_listeners(transition):
        return
    specific = BY_TRANSITION[transition]
    from .models import Job

    kwargs = {
        "job_id": job_id,
        "transition": transition,
        "from_state": JobState(from_state),
        "to_state": JobState(to_state),
        "actor": actor,
        "note": note,
    }
    transaction.on_commit(partial(specific.send, Job, **kwargs), using=db, robust=True)
    transaction.on_commit(partial(job_transitioned.send, Job, **kwargs), using=db, robust=True)


def send_each(
    signal: Signal,
    sender: type,
    name: str,
    values: Iterable[Any],
    on_error: Callable[[BaseException], None] | None = None,
) -> None:
    """``signal.send(sender, **{name: value})`` for each value, the receivers looked up once.

    ``Signal.send`` finds and resolves its receivers on every call (a lock,
    weak references): 2.3 µs a send against 0.4 µs for calling the one
    receiver Django connects, a sixth of a 20,000-job ``enqueue_many``. The
    receivers get the same calls in the same order as from one send per
    value. With an async receiver connected, each value is sent as usual:
    ``send`` runs those through ``async_to_sync``. With no receiver,
    ``values`` is not iterated, so a generator builds nothing for nobody.
    With ``on_error``, a receiver's exception goes there (with an async
    receiver connected, to ``send_robust``, which logs it) and the sending
    goes on; without it, it propagates.
    """
    sync_receivers, async_receivers = signal._live_receivers(sender)
    if not sync_receivers and not async_receivers:
        return
    if async_receivers:
        send = signal.send if on_error is None else signal.send_robust  # which logs what raised
        for value in values:
            send(sender, **{name: value})
        return
    for value in values:
        for receiver in sync_receivers:
            try:
                receiver(signal=signal, sender=sender, **{name: value})
            except Exception as exc:
                if on_error is None:
                    raise
                on_error(exc)


def receiver_failed(signal_name: str, carried_on: str) -> Callable[[BaseException], None]:
    """An ``on_error`` for ``send_each`` that logs on ``django_jobs.worker``.

    Django's ``send_robust`` logs on ``django.dispatch``, which Django's default
    logging shows only with ``DEBUG``: a broken receiver in production would
    go unseen. ``carried_on`` says what was done regardless.
    """
    logger = logging.getLogger("django_jobs.worker")

    def log(exc: BaseException) -> None:
        logger.error("A %s receiver raised; %s", signal_name, carried_on, exc_info=exc)

    return log
