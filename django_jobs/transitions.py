"""Every write to jobs, attempts and leases, each a guarded compare-and-set.

Nothing else in django_jobs changes a job's state. Each function here:

* guards on the current state (from ``states.TRANSITIONS``) *and*, for work
  reported by a worker, on the lease token, so two actors racing (worker vs.
  reaper, two reapers, a worker that came back from a long pause) cannot both
  win;
* checks how many rows it changed, and reports the ones it could not change as
  stale instead of pretending they were applied;
* runs in one short transaction of the jobs database.

Guarantees and limits, honestly:

* Delivery is at least once. When a lease expires the worker may or may not
  have done the work; the attempt is recorded ``lost`` (never success, never a
  plain failure) and the job runs again. Tasks make their effects idempotent
  with ``context.stable_key``.
* The reaper trusts the database clock (``Now()``), so worker hosts may drift;
  ``run_after`` of new jobs is taken from the enqueuing host's clock.
* On SQLite there are no row locks: ``skip_locked`` is a no-op and correctness
  comes from ``BEGIN IMMEDIATE`` serialising every transaction (see checks.py).
"""

from __future__ import annotations

import json
import logging
import math
import random
import uuid
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db import connections, transaction
from django.db.models import Count, F, QuerySet, Value
from django.db.models.functions import Coalesce, Greatest, Now
from django.utils import timezone
from psycopg.types.json import Jsonb

from . import fairness, pgsql
from .conf import JobsOptions
from .exceptions import (
    InvalidTransitionError,
    JobNotFoundError,
    LeaseLostError,
    LockedRowChangedError,
)
from .models import (
    Attempt,
    Dependency,
    Job,
    JobEvent,
    Lease,
    QueueEvent,
    QueueState,
    RateWindow,
    RetryWindow,
    Worker,
)
from .retry import Verdict
from .signals import send_on_commit, signal_listeners
from .states import (
    IN_FLIGHT_STATES,
    TRANSITIONS,
    AttemptOutcome,
    JobState,
    Transition,
    allowed,
)
from .values import Claimed, Finished, Progress, Renewed, Report, WorkerIdentity
from .verbs import VERBS
from .wakeup import wake_on_commit

logger = logging.getLogger("django_jobs.transitions")


def _sources(transition: Transition) -> list[str]:
    return [str(s) for s in TRANSITIONS[transition].sources]


def _target(transition: Transition) -> str:
    return str(TRANSITIONS[transition].target)


# ---------------------------------------------------------------------------
# Claim
# ---------------------------------------------------------------------------


def claim(
    db: str,
    worker: WorkerIdentity,
    queues: Sequence[str],
    limit: int,
    lease_seconds: float,
    rules: JobsOptions | None = None,
) -> list[Claimed]:
    """Lease up to ``limit`` ready jobs, highest priority then oldest first.

    One short transaction per batch: lock the rows (``SKIP LOCKED``, so
    concurrent claimers take disjoint batches instead of queueing behind each
    other), mark them running, write one attempt and one lease each. The task
    itself runs after this commits, outside any transaction of ours.

    Paused queues are skipped. Queues with flow-control rules (concurrency
    limits, fairness, rate limits: ``rules``) are claimed one by one under a
    per-queue lock after the others, so their limits hold across every worker;
    priority therefore orders jobs within that split, not across it.
    """
    if limit < 1:
        return []
    postgresql = connections[db].vendor == "postgresql"
    prepare = (rules or JobsOptions()).PREPARE_STATEMENTS
    plain = [q for q in queues if rules is None or not rules.constrained(q)]
    got: list[Claimed] = []
    if plain:
        if postgresql:
            got = _claim_postgresql(db, worker, plain, limit, lease_seconds, prepare)
        else:
            with transaction.atomic(using=db):
                rows = list(
                    _ready(db, plain)
                    .exclude(queue__in=_paused(db))
                    .select_for_update(skip_locked=True, of=("self",))
                    .order_by("-priority", "run_after")
                    .only(*_CLAIM_FIELDS)[:limit]
                )
                got = _lease(db, worker, rows, lease_seconds)
    for queue in queues:
        if len(got) >= limit or queue in plain or rules is None:
            continue
        if postgresql and rules.only_fair(queue):
            # Fairness needs no counts kept exact, so no lock: one statement.
            got += _claim_postgresql(
                db,
                worker,
                [queue],
                limit - len(got),
                lease_seconds,
                prepare,
                rules.FAIR_QUEUES[queue],
            )
        else:
            got += _claim_constrained(db, worker, queue, limit - len(got), lease_seconds, rules)
    return got


_CLAIM_FIELDS = (
    "id",
    "task_name",
    "args",
    "kwargs",
    "queue",
    "priority",
    "attempts",
    "max_attempts",
    "timeout",
    "tenant",
    "idempotency_key",
    "backend",
    "enqueued_at",
    "started_at",
    "lost_streak",
    "concurrency_key",
)

# Namespace of our advisory locks (the first key of pg_advisory_xact_lock's pair).
_LOCK_NAMESPACE = 0x6A6F6273  # "jobs"


def _ready(db: str, queues: Sequence[str]) -> QuerySet[Job]:
    return (
        Job.objects.using(db)
        .filter(state=JobState.QUEUED, queue__in=queues, run_after__lte=Now())
        # Never start a job after its deadline; the reaper marks it expired.
        .exclude(expires_at__lte=Now())
    )


def _paused(db: str) -> QuerySet[QueueState, str]:
    return QueueState.objects.using(db).filter(paused=True).values_list("queue", flat=True)


def _lease(
    db: str, worker: WorkerIdentity, rows: Sequence[Job], lease_seconds: float
) -> list[Claimed]:
    """Mark locked, queued rows running and give each an attempt and a lease."""
    if not rows:
        return []
    now = timezone.now()
    expires = now + timedelta(seconds=lease_seconds)
    # By primary key alone, for the same reason as the lock: the rows are
    # locked by this transaction and were queued when it locked them.
    updated = (
        Job.objects.using(db)
        .filter(id__in=[r.id for r in rows])
        .update(
            state=_target(Transition.CLAIM),
            attempts=F("attempts") + 1,
            started_at=Coalesce(F("started_at"), Value(now)),
            updated_at=now,
        )
    )
    # We hold the row locks, so nobody can have moved these rows since the
    # SELECT; a mismatch means the locking assumption is broken.
    if updated != len(rows):
        raise LockedRowChangedError(f"claimed {len(rows)} locked rows but updated {updated}")
    attempts = Attempt.objects.using(db).bulk_create(
        Attempt(
            job_id=r.id,
            number=r.attempts + 1,
            worker_id=worker.id,
            worker_name=worker.name,
            started_at=now,
        )
        for r in rows
    )
    Lease.objects.using(db).bulk_create(
        Lease(
            job_id=r.id,
            attempt_id=a.pk,
            token=a.number,
            worker_id=worker.id,
            acquired_at=now,
            renewed_at=now,
            # The reaper compares with the database clock; on SQLite (one host)
            # that is this host's clock too.
            expires_at=expires,
        )
        for r, a in zip(rows, attempts, strict=True)
    )
    for r in rows:
        send_on_commit(db, r.id, Transition.CLAIM, JobState.QUEUED, JobState.RUNNING)
    return [
        Claimed(
            job_id=r.id,
            attempt_id=a.pk,
            token=a.number,
            task_name=r.task_name,
            args=r.args,
            kwargs=r.kwargs,
            queue=r.queue,
            priority=r.priority,
            max_attempts=r.max_attempts,
            timeout=r.timeout,
            tenant=r.tenant,
            idempotency_key=r.idempotency_key,
            backend=r.backend,
            enqueued_at=r.enqueued_at,
            started_at=r.started_at or now,
            lease_expires_at=expires,
            suspect=r.lost_streak > 0,
        )
        for r, a in zip(rows, attempts, strict=True)
    ]


def _claim_constrained(
    db: str,
    worker: WorkerIdentity,
    queue: str,
    limit: int,
    lease_seconds: float,
    rules: JobsOptions,
) -> list[Claimed]:
    """Claim from one flow-controlled queue: limits counted under a per-queue lock.

    The lock is taken in a statement of its own, so the counts read after it
    see every claim committed by whoever held it before (READ COMMITTED takes
    a fresh snapshot per statement). On SQLite, BEGIN IMMEDIATE already
    serialises every claim.
    """
    with transaction.atomic(using=db):
        if connections[db].vendor == "postgresql":
            pgsql.pin_plans(db)
            with connections[db].cursor() as cursor:
                cursor.execute(
                    "SELECT pg_advisory_xact_lock(%s, hashtext(%s))", [_LOCK_NAMESPACE, queue]
                )
        if QueueState.objects.using(db).filter(queue=queue, paused=True).exists():
            return []
        budget = limit
        leased = [str(s) for s in TRANSITIONS[Transition.COMPLETE].sources]
        if queue in rules.QUEUE_CONCURRENCY:
            running = Job.objects.using(db).filter(queue=queue, state__in=leased).count()
            budget = min(budget, rules.QUEUE_CONCURRENCY[queue] - running)
        window: RateWindow | None = None
        if queue in rules.RATE_LIMITS:
            allowed, seconds = rules.RATE_LIMITS[queue]
            window = _window(db, queue, seconds)
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
        counts = _KeyCounts.read(db, queue, key_limit, key_rate)
        blocked = counts.at_limit(key_limit, key_rate)
        fair: dict[uuid.UUID, tuple[str, float]] = {}
        if queue in rules.FAIR_QUEUES:
            candidates, fair = _fair_candidates(
                db, queue, want, rules.FAIR_QUEUES[queue], rules.PREPARE_STATEMENTS, blocked
            )
        else:
            candidates = list(
                _ready(db, [queue])
                .exclude(concurrency_key__in=blocked)
                .order_by("-priority", "run_after")
                .values_list("id", "concurrency_key")[:want]
            )
        chosen = _within_key_limits(candidates, key_limit, key_rate, budget, counts)
        # Locked by primary key alone, the state checked on the row as locked:
        # a state condition in this query let a plan made from statistics
        # taken on an empty table read every queued row through a partial index.
        locked = {
            job.id: job
            for job in Job.objects.using(db)
            .filter(id__in=chosen)
            .order_by()
            .select_for_update(skip_locked=True, of=("self",))
            .only(*_CLAIM_FIELDS, "state")
        }
        claimable = _sources(Transition.CLAIM)
        rows = [
            locked[job_id]
            for job_id in chosen
            if job_id in locked and locked[job_id].state in claimable
        ]
        if window is not None and rows:
            RateWindow.objects.using(db).filter(pk=window.pk).update(claims=F("claims") + len(rows))
        if key_rate is not None:
            started = Counter(row.concurrency_key for row in rows if row.concurrency_key)
            for key, count in started.items():
                key_window = _window(db, queue, key_rate[1], key)
                RateWindow.objects.using(db).filter(pk=key_window.pk).update(
                    claims=F("claims") + count
                )
        if fair and rows:
            fairness.record_on_commit(
                db,
                queue,
                _served(fair[row.id] for row in rows),
                rules.FAIR_QUEUES[queue],
                rules.PREPARE_STATEMENTS,
            )
        return _lease(db, worker, rows, lease_seconds)


def _window_start(seconds: float) -> datetime:
    now = timezone.now()
    return datetime.fromtimestamp(math.floor(now.timestamp() / seconds) * seconds, tz=UTC)


def _window(db: str, queue: str, seconds: float, key: str = "") -> RateWindow:
    window, _ = RateWindow.objects.using(db).get_or_create(
        queue=queue, key=key, window_start=_window_start(seconds)
    )
    return window


@dataclass(frozen=True)
class _KeyCounts:
    """Per concurrency key of one queue: jobs running now, jobs started in the rate window."""

    running: dict[str, int]
    started: dict[str, int]

    @classmethod
    def read(
        cls, db: str, queue: str, key_limit: int | None, key_rate: tuple[int, float] | None
    ) -> _KeyCounts:
        running: dict[str, int] = {}
        if key_limit is not None:
            rows = (
                Job.objects.using(db)
                .filter(
                    queue=queue,
                    concurrency_key__isnull=False,
                    state__in=[str(s) for s in TRANSITIONS[Transition.COMPLETE].sources],
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
                .filter(queue=queue, window_start=_window_start(key_rate[1]))
                .exclude(key="")
                .values_list("key", "claims")
            )
        return cls(running, started)

    def at_limit(self, key_limit: int | None, key_rate: tuple[int, float] | None) -> list[str]:
        """The keys that may start no job now."""
        full: set[str] = set()
        if key_limit is not None:
            full |= {key for key, n in self.running.items() if n >= key_limit}
        if key_rate is not None:
            full |= {key for key, n in self.started.items() if n >= key_rate[0]}
        return sorted(full)


def _within_key_limits(
    candidates: Sequence[tuple[uuid.UUID, str | None]],
    key_limit: int | None,
    key_rate: tuple[int, float] | None,
    budget: int,
    counts: _KeyCounts,
) -> list[uuid.UUID]:
    """Candidates in order, skipping those whose concurrency key is at a limit.

    A key may be at its concurrency limit (jobs of that key running now) or
    at its rate limit (jobs of that key started in the current window).
    """
    if key_limit is None and key_rate is None:
        return [job_id for job_id, _ in candidates[:budget]]
    running = dict(counts.running)
    started = dict(counts.started)
    chosen: list[uuid.UUID] = []
    for job_id, key in candidates:
        if key is not None:
            if key_limit is not None and running.get(key, 0) >= key_limit:
                continue
            if key_rate is not None and started.get(key, 0) >= key_rate[0]:
                continue
            running[key] = running.get(key, 0) + 1
            started[key] = started.get(key, 0) + 1
        chosen.append(job_id)
        if len(chosen) == budget:
            break
    return chosen


def _fair_candidates(
    db: str,
    queue: str,
    want: int,
    weights: Mapping[str, float],
    prepare: bool,
    blocked: Sequence[str] = (),
) -> tuple[list[tuple[uuid.UUID, str | None]], dict[uuid.UUID, tuple[str, float]]]:
    """The next ``want`` jobs of a queue in fair order, and each one's tenant and base.

    Only the head of each tenant's line is read (``want`` jobs each), found
    by a recursive scan of the distinct tenants on django_jobs_fair_idx: the
    cost grows with the number of tenants, not with the backlog.
    """
    params: dict[str, Any] = {"queue": queue, "state": str(JobState.QUEUED), "k": want}
    if connections[db].vendor == "postgresql":
        params["blocked"] = list(blocked)
        rows = pgsql.fetch(db, pgsql.FAIR_CANDIDATES, params, prepare=prepare)
    else:
        with connections[db].cursor() as cursor:
            cursor.execute(_SQLITE_FAIR_CANDIDATES, params)
            rows = [row for row in cursor.fetchall() if row[4] is None or row[4] not in blocked]
    heads = [
        fairness.Head(_as_uuid(job_id), tenant, priority, run_after, key)
        for job_id, tenant, priority, run_after, key in rows
    ]
    known = fairness.clocks(db, queue, {head.tenant for head in heads})
    ranked = fairness.order(heads, known, weights)[:want]
    return (
        [(head.job_id, head.concurrency_key) for head, _ in ranked],
        {head.job_id: (head.tenant, start) for head, start in ranked},
    )


def _served(
    claimed: Iterable[tuple[str, float]],
) -> dict[str, tuple[int, float]]:
    """Per tenant: how many jobs a fair claim took, and the base their ranks counted from."""
    served: dict[str, tuple[int, float]] = {}
    for tenant, start in claimed:
        count, _ = served.get(tenant, (0, start))
        served[tenant] = (count + 1, start)
    return served


def _as_uuid(value: Any) -> uuid.UUID:
    return value if isinstance(value, uuid.UUID) else uuid.UUID(str(value))


# SQLite has no FOR UPDATE and serialises claims anyway; a window function
# over the queue's ready jobs is simple and fast enough at one host's scale.
_SQLITE_FAIR_CANDIDATES = """
SELECT id, tenant, priority, run_after, concurrency_key FROM (
    SELECT id, tenant, priority, run_after, concurrency_key,
           row_number() OVER (PARTITION BY tenant ORDER BY priority DESC, run_after) AS turn
    FROM django_jobs_job
    WHERE state = %(state)s AND queue = %(queue)s
      AND run_after <= STRFTIME('%%Y-%%m-%%d %%H:%%M:%%f', 'NOW')
      AND (expires_at IS NULL OR expires_at > STRFTIME('%%Y-%%m-%%d %%H:%%M:%%f', 'NOW'))
)
WHERE turn <= %(k)s
"""


def _claim_postgresql(
    db: str,
    worker: WorkerIdentity,
    queues: Sequence[str],
    limit: int,
    lease_seconds: float,
    prepare: bool,
    fair_weights: Mapping[str, float] | None = None,
) -> list[Claimed]:
    """The same claim in one statement (pgsql.CLAIM, or CLAIM_FAIR for one fair queue)."""
    params: dict[str, Any] = {
        "queues": list(queues),
        "limit": limit,
        "worker_id": worker.id,
        "worker_name": worker.name,
        "lease_seconds": lease_seconds,
    }
    sql = pgsql.CLAIM
    if fair_weights is not None:
        sql = pgsql.CLAIM_FAIR
        params.update(
            queue=queues[0],
            weight_tenants=list(fair_weights),
            weights=[float(w) for w in fair_weights.values()],
        )
    # One statement, so atomic by itself: in autocommit it is its own
    # transaction (and the signals go out at once, after it), inside the
    # worker's report-and-claim transaction it is part of that.
    rows = pgsql.fetch(db, sql, params, prepare=prepare)
    if fair_weights is not None and rows:
        fairness.record_on_commit(
            db, queues[0], _served((row[10], row[17]) for row in rows), fair_weights, prepare
        )
    if signal_listeners(Transition.CLAIM):
        for row in rows:
            send_on_commit(db, row[0], Transition.CLAIM, JobState.QUEUED, JobState.RUNNING)
    return [
        Claimed(
            job_id=row[0],
            attempt_id=row[1],
            token=row[2],
            task_name=row[3],
            args=_json(row[4]),
            kwargs=_json(row[5]),
            queue=row[6],
            priority=row[7],
            max_attempts=row[8],
            timeout=row[9],
            tenant=row[10],
            idempotency_key=row[11],
            backend=row[12],
            enqueued_at=row[13],
            started_at=row[14],
            lease_expires_at=row[15],
            suspect=row[16] > 0,
        )
        for row in rows
    ]


def _json(value: Any) -> Any:
    """JSON columns come back decoded or as text, depending on the cursor's loaders."""
    return json.loads(value) if isinstance(value, str) else value


# ---------------------------------------------------------------------------
# Heartbeat
# ---------------------------------------------------------------------------


def renew(
    db: str,
    worker_id: uuid.UUID,
    held: Iterable[tuple[uuid.UUID, int]],
    lease_seconds: float,
    progress: Mapping[tuple[uuid.UUID, int], Progress] | None = None,
) -> Renewed:
    """Extend this worker's leases, write throttled progress, and learn of cancellations.

    Also stamps the worker row, so the heartbeat that keeps leases alive is
    the same one operators see. Progress is written only under a lease this
    worker still holds: a stale holder's progress changes nothing.
    """
    held = set(held)
    with transaction.atomic(using=db):
        # Leases the completer has locked (it is ending them) are skipped, not
        # waited for: the two lock this worker's leases in different orders,
        # and waiting deadlocked them (a second lost by both to detection).
        mine = Lease.objects.using(db).filter(worker_id=worker_id)
        Lease.objects.using(db).filter(
            pk__in=mine.select_for_update(skip_locked=True).values("pk")
        ).update(
            expires_at=Now() + Value(timedelta(seconds=lease_seconds)),
            renewed_at=Now(),
        )
        current = {
            (job_id, token): state
            for job_id, token, state in Lease.objects.using(db)
            .filter(worker_id=worker_id)
            .values_list("job_id", "token", "job__state")
        }
        now = timezone.now()
        for (job_id, token), value in (progress or {}).items():
            if (job_id, token) in current:
                _write_progress(db, job_id, token, value, now)
        Worker.objects.using(db).filter(id=worker_id).update(heartbeat_at=Now())
    return Renewed(
        lost=held - set(current),
        cancelling={key for key, state in current.items() if state == JobState.CANCELLING},
    )


def _write_progress(db: str, job_id: uuid.UUID, token: int, value: Progress, now: datetime) -> None:
    Job.objects.using(db).filter(id=job_id, attempts=token).update(
        progress_done=value.done,
        progress_total=value.total,
        progress_message=value.message[:500],
        progress_attempt=token,
        progress_at=now,
    )


# ---------------------------------------------------------------------------
# Completion and failure
# ---------------------------------------------------------------------------


def _transition_for(report: Report, state: str) -> Transition:
    if report.outcome == AttemptOutcome.SUCCEEDED:
        return Transition.COMPLETE
    if state == JobState.CANCELLING:
        return Transition.CONFIRM_CANCEL
    if report.decision is None:
        raise ValueError("a failure report needs the retry policy's decision")
    return {
        Verdict.RETRY: Transition.SCHEDULE_RETRY,
        Verdict.EXHAUSTED: Transition.EXHAUST,
        Verdict.GIVE_UP: Transition.FAIL,
    }[report.decision.verdict]


def finish(
    db: str,
    worker_id: uuid.UUID,
    reports: Sequence[Report],
    rules: JobsOptions | None = None,
) -> Finished:
    """Apply a batch of attempt outcomes; fence each on its lease.

    A report whose lease is gone (reaped, released, or re-claimed under a newer
    token) is *stale*: it is written to its attempt's ``late_report`` and
    changes nothing else. ``rules`` gives the retry budgets and whether to
    prepare the completion statement (the defaults when None).
    """
    done = Finished()
    if not reports:
        return done
    rules = rules or JobsOptions()
    postgresql = connections[db].vendor == "postgresql"
    fast = [r for r in reports if _plain_success(r)] if postgresql else []
    if fast:
        applied = _complete_postgresql(db, worker_id, fast, rules.PREPARE_STATEMENTS)
        done.applied.extend((r, JobState.SUCCEEDED) for r in fast if _key(r) in applied)
        reports = [r for r in reports if _key(r) not in applied]
        if not reports:
            return done
    now = timezone.now()
    with transaction.atomic(using=db, savepoint=False):
        # Lock the leases we claim to hold: the reaper locks them the same way
        # (SKIP LOCKED), so it either reaps before us or skips while we finish.
        held = {
            (lease.job_id, lease.token): lease
            # The job rows too: an operator's cancel locks the job, so it either
            # lands before we read the state or waits until we have written.
            for lease in Lease.objects.using(db)
            .select_for_update(of=("self", "job"))
            .select_related("job")
            .only("job_id", "token", "job__state", "job__queue")
            .filter(worker_id=worker_id, job_id__in=[r.job_id for r in reports])
        }
        current = [r for r in reports if (r.job_id, r.token) in held]
        done.stale = [r for r in reports if (r.job_id, r.token) not in held]
        if current:
            Lease.objects.using(db).filter(
                job_id__in=[r.job_id for r in current], worker_id=worker_id
            ).delete()
        for report in current:
            job = held[(report.job_id, report.token)].job
            transition = _transition_for(report, job.state)
            job_changes: dict[str, Any] = {
                "state": _target(transition),
                "updated_at": now,
                "lost_streak": 0,
            }
            if transition is Transition.COMPLETE:
                job_changes.update(result=report.result, finished_at=now, last_error="")
            else:
                job_changes["last_error"] = _short_error(report)
                if transition is Transition.SCHEDULE_RETRY and report.decision is not None:
                    job_changes["run_after"] = _retry_at(
                        db, job.queue, now, report.decision.delay, rules.RETRY_BUDGET
                    )
                else:
                    job_changes["finished_at"] = now
            changed = (
                Job.objects.using(db)
                .filter(
                    id=report.job_id,
                    attempts=report.token,
                    state=job.state,
                    state__in=_sources(transition),
                )
                .update(**job_changes)
            )
            if changed != 1:
                # A lease on a job in a state that takes no report (only a
                # hand-written row can be there): refuse it like a late report.
                done.stale.append(report)
                continue
            if report.progress is not None:
                _write_progress(db, report.job_id, report.token, report.progress, now)
            Attempt.objects.using(db).filter(
                id=report.attempt_id, outcome=AttemptOutcome.RUNNING
            ).update(
                outcome=report.outcome,
                finished_at=now,
                error_type=report.error_type,
                error_message=report.error_message,
                traceback=report.traceback,
            )
            send_on_commit(db, report.job_id, transition, job.state, _target(transition))
            done.applied.append((report, JobState(_target(transition))))
        for report in done.stale:
            Attempt.objects.using(db).filter(id=report.attempt_id, late_report__isnull=True).update(
                late_report=report.as_late_report()
            )
        if done.applied:
            Worker.objects.using(db).filter(id=worker_id).update(
                jobs_done=F("jobs_done") + len(done.applied)
            )
        _release_dependents(
            db, [r.job_id for r, state in done.applied if state == JobState.SUCCEEDED], now
        )
    return done


def _release_dependents(db: str, succeeded: Sequence[uuid.UUID], now: datetime) -> None:
    """One unmet dependency fewer for each job waiting on ``succeeded``; queue those at zero.

    The ORM twin of the ``released`` step of ``pgsql.COMPLETE``. The first
    update locks each waiting row, so concurrent completions of its other
    dependencies queue it exactly once.
    """
    if not succeeded:
        return
    met = (
        Dependency.objects.using(db)
        .filter(depends_on_id__in=succeeded)
        .values("job_id")
        .annotate(n=Count("id"))
        .order_by("job_id")  # one lock order for every completer
    )
    for row in met:
        waiting = Job.objects.using(db).filter(
            id=row["job_id"], state__in=_sources(Transition.DEPENDENCIES_MET)
        )
        waiting.update(waiting_on=F("waiting_on") - row["n"], updated_at=now)
        ready = waiting.filter(waiting_on=0)
        queue = ready.values_list("queue", flat=True).first()
        if queue is None:
            continue
        ready.update(
            state=_target(Transition.DEPENDENCIES_MET),
            run_after=Greatest("run_after", Value(now)),
            updated_at=now,
        )
        wake_on_commit(db, queue)
        send_on_commit(
            db, row["job_id"], Transition.DEPENDENCIES_MET, JobState.WAITING, JobState.QUEUED
        )


def _plain_success(report: Report) -> bool:
    return report.outcome == AttemptOutcome.SUCCEEDED and report.progress is None


def _key(report: Report) -> tuple[uuid.UUID, int]:
    return (report.job_id, report.token)


def _complete_postgresql(
    db: str, worker_id: uuid.UUID, reports: Sequence[Report], prepare: bool
) -> set[tuple[uuid.UUID, int]]:
    """Apply successes in one round trip; return the (job, token) pairs it applied.

    The rest go to the general path, which records each case precisely: stale
    reports (no lease), and leases on jobs in a state that takes no success.
    """
    params: dict[str, Any] = {
        "job_ids": [r.job_id for r in reports],
        "tokens": [r.token for r in reports],
        "results": [Jsonb(r.result) for r in reports],
        "worker_id": worker_id,
    }
    rows = pgsql.fetch(db, pgsql.COMPLETE, params, prepare=prepare)  # one statement: atomic
    # The statement ends only leases whose job it then updates; anything else
    # would be a write that bypassed this module.
    if not all(row[2] for row in rows):
        raise LockedRowChangedError("a success ended a lease without updating its job")
    if signal_listeners(Transition.COMPLETE):
        for job_id, _, _, was, *_ in rows:
            send_on_commit(db, job_id, Transition.COMPLETE, was, JobState.SUCCEEDED)
    if rows and rows[0][5] and signal_listeners(Transition.DEPENDENCIES_MET):
        for job_id in rows[0][5]:
            send_on_commit(
                db, job_id, Transition.DEPENDENCIES_MET, JobState.WAITING, JobState.QUEUED
            )
    return {(job_id, token) for job_id, token, *_ in rows}


def _retry_at(
    db: str,
    queue: str,
    now: datetime,
    delay: float,
    budgets: Mapping[str, tuple[int, float]],
) -> datetime:
    """When a retry may run: its backoff, pushed later if the queue's retry budget is spent.

    The rule (docs/control.md): retries scheduled in a queue are counted in
    fixed windows of ``window`` seconds. The first ``budget`` retries of a
    window keep their backoff; the n-th beyond it is pushed to a random moment
    of the window ``ceil(n / budget)`` windows later, so retries past the
    budget drain at ``budget`` per window instead of piling onto a failing
    dependency. Pushed retries are not counted again in the window they land in.
    """
    at = now + timedelta(seconds=delay)
    if queue not in budgets:
        return at
    budget, window = budgets[queue]
    start = datetime.fromtimestamp(
        math.floor(now.timestamp() / window) * window, tz=now.tzinfo or UTC
    )
    row, _ = (
        RetryWindow.objects.using(db)
        .select_for_update()
        .get_or_create(queue=queue, window_start=start)
    )
    row.retries += 1
    row.save(using=db, update_fields=["retries"])
    over = row.retries - budget
    if over <= 0:
        return at
    pushed = start + timedelta(seconds=window * (math.ceil(over / budget) + random.random()))
    return max(at, pushed)


def _short_error(report: Report) -> str:
    first_line = report.error_message.strip().splitlines()[0] if report.error_message else ""
    return f"{report.error_type}: {first_line}"[:1000]


# ---------------------------------------------------------------------------
# Recovery: the reaper and the supervisor's immediate release
# ---------------------------------------------------------------------------


def reap(db: str, batch: int = 100, poison_after: int = 3) -> int:
    """Turn expired leases into ``lost`` attempts and requeue (or exhaust) their jobs.

    Safe to run in every worker at once: expired leases are locked with
    SKIP LOCKED, so each one is reaped by exactly one reaper, and a worker
    finishing that very job at the same moment either wins the lock first
    (and its report is applied) or finds its lease gone (and its report is
    stale).
    """
    with transaction.atomic(using=db):
        leases = list(
            Lease.objects.using(db)
            .select_for_update(skip_locked=True, of=("self",))
            .filter(expires_at__lt=Now())
            .select_related("job")
            .order_by("expires_at")[:batch]
        )
        _lose(
            db,
            leases,
            "lease expired without a report: the worker stopped heartbeating",
            poison_after,
        )
    return len(leases)


def release_worker(db: str, worker_id: uuid.UUID, reason: str, poison_after: int = 3) -> int:
    """Give back every lease of one worker at once, its attempts ``lost``.

    Used when the supervisor saw the worker process die and when a shutdown's
    grace period ends with jobs still running: waiting for the leases to
    expire would only delay the re-run.
    """
    with transaction.atomic(using=db):
        leases = list(
            Lease.objects.using(db)
            .select_for_update(skip_locked=True, of=("self",))
            .select_related("job")
            .filter(worker_id=worker_id)
        )
        _lose(db, leases, reason, poison_after)
    return len(leases)


def release_lease(
    db: str,
    worker_id: uuid.UUID,
    job_id: uuid.UUID,
    token: int,
    reason: str,
    poison_after: int = 3,
) -> int:
    """Give back one lease, its attempt ``lost``: the worker saw the attempt die.

    Used for an isolated attempt whose child process died: the worker is alive
    and knows the attempt ended, but not what it did before it ended.
    """
    with transaction.atomic(using=db):
        leases = list(
            Lease.objects.using(db)
            .select_for_update(of=("self",))
            .select_related("job")
            .filter(worker_id=worker_id, job_id=job_id, token=token)
        )
        _lose(db, leases, reason, poison_after)
    return len(leases)


def _lose(db: str, leases: Sequence[Lease], reason: str, poison_after: int) -> None:
    if not leases:
        return
    now = timezone.now()
    for lease in leases:
        job = lease.job
        attempt_changed = (
            Attempt.objects.using(db)
            .filter(id=lease.attempt_id, outcome=AttemptOutcome.RUNNING)
            .update(
                outcome=AttemptOutcome.LOST,
                finished_at=now,
                error_type=f"{LeaseLostError.__module__}.{LeaseLostError.__qualname__}",
                error_message=reason,
            )
        )
        if not attempt_changed or job.attempts != lease.token:
            continue
        if job.state == JobState.CANCELLING:
            transition = Transition.REAP_CANCEL
        elif job.lost_streak + 1 >= poison_after:
            transition = Transition.POISON
        elif job.attempts < job.max_attempts:
            transition = Transition.REAP
        else:
            transition = Transition.REAP_EXHAUST
        changes: dict[str, Any] = {
            "state": _target(transition),
            "updated_at": now,
            "last_error": f"lost: {reason}",
            "lost_streak": F("lost_streak") + 1,
        }
        if transition is Transition.REAP:
            changes["run_after"] = now
        else:
            changes["finished_at"] = now
        moved = (
            Job.objects.using(db)
            .filter(id=job.id, attempts=lease.token, state__in=_sources(transition))
            .update(**changes)
        )
        if not moved:
            continue
        note = reason
        if transition is Transition.POISON:
            note = f"{poison_after} attempts in a row were lost; held as possible poison."
            _audit(db, job.id, transition, job.state, "system", note, now)
        if transition is Transition.REAP:
            # Commit-time wake-up, so an idle worker re-runs it without waiting a poll.
            wake_on_commit(db, job.queue)
        send_on_commit(db, job.id, transition, job.state, _target(transition), note=note)
        logger.warning(
            "Attempt %s of job %s lost (%s); job %s",
            lease.token,
            job.id,
            reason,
            _target(transition),
        )
    Lease.objects.using(db).filter(job_id__in=[lease.job_id for lease in leases]).delete()


def expire_overdue(db: str, batch: int = 500) -> int:
    """Mark queued jobs whose deadline passed ``expired``: they must never run late."""
    now = timezone.now()
    with transaction.atomic(using=db):
        ids = list(
            Job.objects.using(db)
            .select_for_update(skip_locked=True)
            .filter(state=JobState.QUEUED, expires_at__lte=Now())
            .values_list("id", flat=True)[:batch]
        )
        if not ids:
            return 0
        rule = TRANSITIONS[Transition.EXPIRE]
        expired = (
            Job.objects.using(db)
            .filter(id__in=ids, state__in=_sources(Transition.EXPIRE))
            .update(
                state=rule.target,
                finished_at=now,
                updated_at=now,
                last_error="expired: its deadline passed before it started",
            )
        )
        for job_id in ids:
            send_on_commit(db, job_id, Transition.EXPIRE, JobState.QUEUED, rule.target)
    return expired


# ---------------------------------------------------------------------------
# Operator verbs (called through django_jobs.control)
# ---------------------------------------------------------------------------


def operate(db: str, job_id: uuid.UUID, verb: str, actor: str, note: str = "") -> Transition:
    """Apply an operator verb to one job, or raise InvalidTransitionError; audit it.

    The job row is locked for the decision, and the write is still guarded by
    the state it was decided on, so two operators racing cannot both win.
    """
    now = timezone.now()
    with transaction.atomic(using=db):
        job = (
            Job.objects.using(db)
            .select_for_update()
            .only("id", "state", "queue", "attempts", "attempt_budget", "max_attempts")
            .filter(id=job_id)
            .first()
        )
        if job is None:
            raise JobNotFoundError(f"No job with id {job_id}.")
        transition = next((t for t in VERBS[verb].transitions if allowed(t, job.state)), None)
        if transition is None:
            states = sorted(str(s) for s in VERBS[verb].source_states())
            raise InvalidTransitionError(
                f"Cannot {verb} job {job_id}: it is {job.state}; {verb} applies only to "
                f"jobs that are {', '.join(states)}."
            )
        changes: dict[str, Any] = {"state": _target(transition), "updated_at": now}
        if transition is Transition.CANCEL:
            changes.update(cancel_requested_at=now, finished_at=now)
        elif transition is Transition.REQUEST_CANCEL:
            changes["cancel_requested_at"] = now
        elif transition is Transition.RETRY:
            # The operator decided it should run now: its old deadline no longer holds.
            # Nor does waiting for other jobs, for one cancelled while it waited.
            changes.update(
                max_attempts=job.attempts + job.attempt_budget,
                run_after=now,
                finished_at=None,
                cancel_requested_at=None,
                expires_at=None,
                waiting_on=0,
            )
        elif transition is Transition.RELEASE:
            # Queued again: nothing of the finished job it was may stay on the row.
            changes.update(
                run_after=now,
                max_attempts=max(job.max_attempts, job.attempts + 1),
                expires_at=None,
                finished_at=None,
                cancel_requested_at=None,
            )
        elif transition is Transition.QUARANTINE:
            # Held is finished (not live); one that had finished keeps when it did.
            changes["finished_at"] = Coalesce(F("finished_at"), Value(now))
        elif transition is Transition.DISCARD:
            changes["finished_at"] = now
        moved = Job.objects.using(db).filter(id=job_id, state=job.state).update(**changes)
        if moved != 1:
            raise LockedRowChangedError(f"job {job_id} is locked, yet left {job.state}")
        _audit(db, job_id, transition, job.state, actor, note, now)
        if transition is Transition.DISCARD:
            _cancel_dependents(db, job_id, actor, now)
        if _target(transition) == JobState.QUEUED:
            wake_on_commit(db, job.queue)
        send_on_commit(db, job_id, transition, job.state, _target(transition), actor, note)
    return transition


def _cancel_dependents(db: str, discarded: uuid.UUID, actor: str, now: datetime) -> None:
    """Cancel the jobs waiting on ``discarded``, and theirs in turn: none of them can run now.

    A failed, cancelled or expired dependency does not do this: an operator
    may still retry it, and its dependents wait for that. Discarding accepts
    the loss, so the jobs waiting for it end too, each with an audit event
    naming the job it waited for.
    """
    frontier = [discarded]
    while frontier:
        edges = (
            Dependency.objects.using(db)
            .filter(depends_on_id__in=frontier)
            .order_by("job_id")
            .values_list("job_id", "depends_on_id")
        )
        frontier = []
        for job_id, depends_on in edges:
            note = f"job {depends_on}, which it waited for, was discarded"
            moved = (
                Job.objects.using(db)
                .filter(id=job_id, state__in=_sources(Transition.DEPENDENCY_DISCARDED))
                .update(
                    state=_target(Transition.DEPENDENCY_DISCARDED),
                    finished_at=now,
                    updated_at=now,
                    last_error=f"cancelled: {note}",
                )
            )
            if not moved:
                continue
            _audit(db, job_id, Transition.DEPENDENCY_DISCARDED, JobState.WAITING, actor, note, now)
            send_on_commit(
                db,
                job_id,
                Transition.DEPENDENCY_DISCARDED,
                JobState.WAITING,
                _target(Transition.DEPENDENCY_DISCARDED),
                actor,
                note,
            )
            frontier.append(job_id)


def set_queue_paused(db: str, queue: str, paused: bool, actor: str, note: str = "") -> bool:
    """Pause or resume a queue for every worker; False if it already was.

    Workers read the flag in every claim, so the change takes effect at their
    next claim; jobs already running finish normally.
    """
    now = timezone.now()
    with transaction.atomic(using=db):
        state, _ = (
            QueueState.objects.using(db)
            .select_for_update()
            .get_or_create(queue=queue, defaults={"changed_at": now, "changed_by": actor[:255]})
        )
        if state.paused == paused:
            return False
        QueueState.objects.using(db).filter(pk=state.pk, paused=state.paused).update(
            paused=paused, changed_at=now, changed_by=actor[:255], note=note
        )
        QueueEvent.objects.using(db).create(
            queue=queue,
            at=now,
            action="pause" if paused else "resume",
            actor=actor[:255],
            note=note,
        )
        if not paused:
            wake_on_commit(db, queue)
    return True


def _audit(
    db: str,
    job_id: uuid.UUID,
    transition: Transition,
    from_state: str,
    actor: str,
    note: str,
    now: datetime,
) -> None:
    JobEvent.objects.using(db).create(
        job_id=job_id,
        at=now,
        transition=transition,
        from_state=from_state,
        to_state=_target(transition),
        actor=actor[:255],
        note=note,
    )


# ---------------------------------------------------------------------------
# Worker presence
# ---------------------------------------------------------------------------


def register_worker(
    db: str,
    worker: WorkerIdentity,
    backend: str,
    host: str,
    pid: int,
    queues: Sequence[str],
    concurrency: int,
) -> None:
    now = timezone.now()
    Worker.objects.using(db).create(
        id=worker.id,
        backend=backend,
        host=host,
        pid=pid,
        queues=list(queues),
        concurrency=concurrency,
        started_at=now,
        heartbeat_at=now,
    )


def stop_worker(db: str, worker_id: uuid.UUID) -> None:
    Worker.objects.using(db).filter(id=worker_id, stopped_at=None).update(stopped_at=Now())


def idle(db: str, queues: Sequence[str]) -> bool:
    return not (
        Job.objects.using(db)
        .filter(queue__in=queues, state__in=[str(s) for s in IN_FLIGHT_STATES])
        .exists()
    )
