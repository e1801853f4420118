"""Claims from flow-controlled queues: concurrency, rate and per-key limits, fairness.

Counted under a per-queue lock (``Engine.lock_queue``), so the limits hold
across every worker; the choice among the candidates is made by the pure
policies in ``limits.py`` and ``fairness.py``. Both engines run this; each
supplies its lock and its query for the heads of the tenants' lines.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING

from django.db import transaction
from django.db.models import Count, F
from django.utils import timezone

from .. import fairness
from ..conf import JobsOptions
from ..limits import KeyCounts, RateLimit, within_key_limits
from ..models import FairClock, Job, QueueState, RateWindow
from ..retry import budget_window
from ..states import Transition
from ..values import Claimed, WorkerIdentity
from .claims import CLAIM_FIELDS, lease
from .fair_clocks import clocks
from .guards import ready, ready_now, sources

if TYPE_CHECKING:
    from .base import Engine


def claim_constrained(
    engine: Engine, worker: WorkerIdentity, queue: str, limit: int
) -> list[Claimed]:
    """Claim from one flow-controlled queue: limits counted under a per-queue lock.

    The lock is taken in a statement of its own, so the counts read after it
    see every claim committed by whoever held it before (READ COMMITTED takes
    a fresh snapshot per statement).
    """
    db, rules = engine.db, engine.options
    with transaction.atomic(using=db):
        engine.lock_queue(queue)
        # One moment for the whole claim, read once the lock is held: the rate
        # windows it counts in and its attempts' start, from which a give-back
        # finds the window to refund.
        now = timezone.now()
        if QueueState.objects.using(db).filter(queue=queue, paused=True).exists():
            return []
        budget = limit
        leased = sources(Transition.COMPLETE)
        if queue in rules.QUEUE_CONCURRENCY:
            running = Job.objects.using(db).filter(queue=queue, state__in=leased).count()
            budget = min(budget, rules.QUEUE_CONCURRENCY[queue] - running)
        window: RateWindow | None = None
        if queue in rules.RATE_LIMITS:
            allowed, seconds = rules.RATE_LIMITS[queue]
            window = rate_window(db, queue, seconds, now)
            budget = min(budget, allowed - window.claims)
        if budget <= 0:
            return []
        key_limit = rules.KEY_CONCURRENCY.get(queue)
        key_rate = rules.KEY_RATE_LIMITS.get(queue)
        # Room for candidates that per-key limits will turn down.
        per_key = key_limit is not None or key_rate is not None
        want = budget * 4 if per_key else budget
        # Keys already at a limit are left out of the candidates: otherwise a
        # long run of one key at the head of the queue filled them, and the
        # other keys' jobs waited behind it, against the promise of the limit.
        counts = key_counts(db, queue, key_limit, key_rate, now)
        blocked = counts.at_limit(key_limit, key_rate)
        fair: dict[uuid.UUID, tuple[str, float]] = {}
        if queue in rules.FAIR_QUEUES:
            candidates, fair = fair_candidates(engine, queue, want, blocked)
        else:
            candidates = list(
                ready(db, [queue])
                .exclude(concurrency_key__in=blocked)
                .order_by("-priority", "run_after")
                .values_list("id", "concurrency_key")[:want]
            )
        chosen = within_key_limits(candidates, key_limit, key_rate, budget, counts)
        # Locked by primary key alone, readiness checked on the row as locked:
        # a state condition in this query let a plan made from statistics
        # taken on an empty table read every queued row through a partial index.
        # Due again on the locked row, not only in the candidates' read: a
        # debounce that committed in between moved run_after an hour on, and
        # the job ran at once with the arguments promised for later.
        locked = {
            job.id: job
            for job in Job.objects.using(db)
            .filter(id__in=chosen)
            .order_by()
            .select_for_update(skip_locked=True, of=("self",))
            .only(*CLAIM_FIELDS, "state")
            .annotate(due=ready_now())
        }
        claimable = sources(Transition.CLAIM)
        rows = [
            job
            for job_id in chosen
            if (job := locked.get(job_id)) is not None and job.state in claimable and job.due
        ]
        if window is not None and rows:
            RateWindow.objects.using(db).filter(pk=window.pk).update(claims=F("claims") + len(rows))
        if key_rate is not None:
            started = Counter(row.concurrency_key for row in rows if row.concurrency_key)
            for key, count in started.items():
                key_window = rate_window(db, queue, key_rate[1], now, key)
                RateWindow.objects.using(db).filter(pk=key_window.pk).update(
                    claims=F("claims") + count
                )
        if fair and rows:
            engine.record_served(queue, fairness.served(fair[row.id] for row in rows))
        return lease(db, worker, rows, now)


def fair_candidates(
    engine: Engine, queue: str, want: int, blocked: Sequence[str]
) -> tuple[list[tuple[uuid.UUID, str | None]], dict[uuid.UUID, tuple[str, float]]]:
    """The next ``want`` jobs of a queue in fair order, and each one's tenant and base.

    Only the head of each tenant's line is read (``want`` jobs each), found
    by a recursive scan of the distinct tenants on django_jobs_fair_idx: the
    cost grows with the number of tenants, not with the backlog.
    """
    heads = engine.fair_heads(queue, want, blocked)
    known = clocks(engine.db, queue, {head.tenant for head in heads})
    ranked = fairness.order(heads, known, engine.options.FAIR_QUEUES[queue])[:want]
    return (
        [(head.job_id, head.concurrency_key) for head, _ in ranked],
        {head.job_id: (head.tenant, start) for head, start in ranked},
    )


def rate_window(db: str, queue: str, seconds: float, at: datetime, key: str = "") -> RateWindow:
    """The rate window of ``seconds`` holding ``at`` (fixed, as the retry budget's)."""
    window, _ = RateWindow.objects.using(db).get_or_create(
        queue=queue, key=key, window_start=budget_window(at, seconds)
    )
    return window


def refund_claim(db: str, rules: JobsOptions, job: Job, claimed_at: datetime) -> None:
    """Take back what a claim counted for an attempt given back unstarted.

    Such an attempt (``worker/prefetch.py``) never ran, yet its claim spent a
    start of its rate windows, so a window started one job fewer than its
    limit, and served its tenant a turn of a fair queue. ``job`` is its row
    as the completion locked it, still leased; ``claimed_at`` its attempt's
    start, the moment the claim counted its windows at (not ``leased_at``, the
    database's clock: a claim across a window's end, or a clock apart from
    the database's, refunded a window that never counted it, and the next
    one started a job over its limit). One already over takes the refund
    harmlessly. The tenant's clock goes back by one job (``1 / weight``): its
    next job ranks as the one given back did, unless the queue's time has
    passed it meanwhile, and then nothing changes.
    """
    queue = job.queue
    if queue in rules.FAIR_QUEUES:
        FairClock.objects.using(db).filter(queue=queue, tenant=job.tenant, claims__gt=0).update(
            finish=F("finish") - 1.0 / F("weight"), claims=F("claims") - 1
        )
    key = job.concurrency_key
    windows: list[tuple[str, float]] = []
    if queue in rules.RATE_LIMITS:
        windows.append(("", rules.RATE_LIMITS[queue][1]))
    if key and queue in rules.KEY_RATE_LIMITS:
        windows.append((key, rules.KEY_RATE_LIMITS[queue][1]))
    for window_key, seconds in windows:
        RateWindow.objects.using(db).filter(
            queue=queue,
            key=window_key,
            window_start=budget_window(claimed_at, seconds),
            claims__gt=0,
        ).update(claims=F("claims") - 1)


def key_counts(
    db: str, queue: str, key_limit: int | None, key_rate: RateLimit | None, at: datetime
) -> KeyCounts:
    """Jobs of each concurrency key running now, and started in the key's rate window."""
    running: dict[str, int] = {}
    if key_limit is not None:
        rows = (
            Job.objects.using(db)
            .filter(
                queue=queue,
                concurrency_key__isnull=False,
                state__in=sources(Transition.COMPLETE),
            )
            .values_list("concurrency_key")
            .annotate(n=Count("id"))
            .order_by()
        )
        running = {key: n for key, n in rows if key is not None}
    started: dict[str, int] = {}
    if key_rate is not None:
        started = dict(
            RateWindow.objects.using(db)
            .filter(queue=queue, window_start=budget_window(at, key_rate[1]))
            .exclude(key="")
            .values_list("key", "claims")
        )
    return KeyCounts(running, started)
