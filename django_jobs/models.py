"""Jobs (each running one carrying its lease), their attempts, and the workers.

Rows here are written only by the engine (and the insert in ``enqueue.py``):
read them freely, never ``save()`` a state change yourself. The indexes below
are shaped after the queries that run hot: the claim reads ``queued`` jobs of
some queues by priority then age, the reaper reads the running jobs by their
holder, and a worker's heartbeat reads its own.
"""

from __future__ import annotations

import uuid
from datetime import timedelta

from django.db import models
from django.db.models import Count, OuterRef, Q, Subquery
from django.db.models.functions import Coalesce

from .ids import new_id
from .states import LEASED_STATES, AttemptOutcome, BatchState, JobState
from .verbs import VERBS


class Job(models.Model):
    """One durable unit of work; the row exists iff the enqueuing transaction committed."""

    # Time-ordered (ids.py): a new job's index entries go to the right edge.
    id = models.UUIDField(primary_key=True, default=new_id, editable=False)
    backend = models.CharField(max_length=100, default="default")
    task_name = models.CharField(max_length=255, help_text="Module path of a registered task.")
    task_version = models.CharField(max_length=64, blank=True, default="")
    args = models.JSONField(default=list, blank=True)
    kwargs = models.JSONField(default=dict, blank=True)
    queue = models.CharField(max_length=100, default="default")
    priority = models.SmallIntegerField(default=0, help_text="-100..100, higher runs first.")
    run_after = models.DateTimeField(help_text="Not claimed before this time.")
    expires_at = models.DateTimeField(null=True, blank=True)

    tenant = models.CharField(max_length=255, blank=True, default="")
    initiator = models.CharField(max_length=255, blank=True, default="")
    # NULL, not "", means "no key": the unique constraint ignores NULLs.
    idempotency_key = models.CharField(max_length=255, null=True, blank=True)  # noqa: DJ001
    dedup_scope = models.CharField(
        max_length=511,
        blank=True,
        default="",
        help_text="Where the idempotency key is unique: the task name and the tenant.",
    )
    concurrency_key = models.CharField(max_length=255, null=True, blank=True)  # noqa: DJ001
    # Unique within dedup_scope only while its job is live or recent (unique.py), so
    # no constraint: enqueue decides under the key's lock. NULL: no key.
    unique_key = models.CharField(  # noqa: DJ001
        max_length=255,
        null=True,
        blank=True,
        help_text="Enqueue finds this job instead of writing another while it is live "
        "or recent (unique_for), or debounces it.",
    )

    state = models.CharField(max_length=16, choices=JobState.choices, default=JobState.QUEUED)
    attempts = models.PositiveIntegerField(
        default=0, help_text="Attempts started; the current one's number is the lease token."
    )
    # The lease of the running attempt, on the row itself: written by the
    # claim's update and cleared by the update that ends the attempt, so a
    # lease costs no row, index entry or write of its own. It lives as long
    # as the holder's heartbeat (Worker.heartbeat_at), and at least
    # LEASE_SECONDS from leased_at (engine/leases.py).
    leased_by = models.UUIDField(
        null=True,
        blank=True,
        editable=False,
        help_text="The worker whose attempt holds the lease; empty when not running.",
    )
    leased_at = models.DateTimeField(
        null=True, blank=True, editable=False, help_text="When the current lease was taken."
    )
    max_attempts = models.PositiveIntegerField(help_text="Attempt numbers above this exhaust.")
    attempt_budget = models.PositiveIntegerField(
        default=3, help_text="Attempts granted at enqueue and again by each operator retry."
    )
    timeout = models.FloatField(null=True, blank=True, help_text="Hard timeout in seconds.")
    cancel_requested_at = models.DateTimeField(null=True, blank=True)
    lost_streak = models.PositiveSmallIntegerField(
        default=0, help_text="Latest attempts in a row that ended lost (poison detection)."
    )

    waiting_on = models.PositiveIntegerField(
        default=0, help_text="Jobs it was enqueued after that have not succeeded yet."
    )
    # Set once at insert, never updated: the claim's and completion's updates
    # stay HOT. Indexed only where set (django_jobs_batch_member_idx).
    batch = models.ForeignKey(
        "Batch",
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="members",
        db_index=False,
        editable=False,
    )

    progress_done = models.BigIntegerField(null=True, blank=True)
    progress_total = models.BigIntegerField(null=True, blank=True)
    progress_message = models.CharField(max_length=500, blank=True, default="")
    progress_attempt = models.PositiveIntegerField(null=True, blank=True)
    progress_at = models.DateTimeField(null=True, blank=True)

    result = models.JSONField(null=True, blank=True)
    last_error = models.TextField(blank=True, default="")

    enqueued_at = models.DateTimeField()
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField()
    # The enqueuer's OpenTelemetry context (W3C traceparent), for the worker's
    # span to join its trace; NULL, so free, when nobody traces (tracing.py).
    trace_context = models.JSONField(null=True, blank=True, editable=False)
    # The job this one was copied from by an operator's rerun. An id, not a
    # foreign key: pruning the original must neither cascade to its reruns
    # nor rewrite them.
    rerun_of = models.UUIDField(
        null=True, blank=True, editable=False, help_text="The job this one reruns."
    )

    class Meta:
        ordering = ["-enqueued_at"]
        indexes = [
            # The claim: WHERE state='queued' AND queue IN (...) AND run_after <= now
            # ORDER BY priority DESC, run_after. Partial, so finished history
            # (most of the table in production) never bloats it.
            models.Index(
                fields=["queue", "-priority", "run_after"],
                condition=Q(state=JobState.QUEUED),
                name="django_jobs_claim_idx",
            ),
            models.Index(
                fields=["state", "queue"],
                condition=Q(state__in=[JobState.RUNNING, JobState.CANCELLING]),
                name="django_jobs_leased_idx",
            ),
            # Leases by holder: a heartbeat's read of its worker's jobs, a
            # dead worker's release, and the reaper, which reads every lease
            # (the running jobs, never the backlog) against its holder's row.
            models.Index(
                fields=["leased_by"],
                condition=Q(state__in=[JobState.RUNNING, JobState.CANCELLING]),
                name="django_jobs_holder_idx",
            ),
            # Pruning by age. Partial: a job gets no entry until it finishes, so
            # the claim's update of every job skips this index.
            models.Index(
                fields=["finished_at"],
                condition=Q(finished_at__isnull=False),
                name="django_jobs_finished_idx",
            ),
            # The admin's and the API's lists: newest first, whole and by state or tenant.
            models.Index(fields=["-enqueued_at", "-id"], name="django_jobs_recent_idx"),
            # Partial: a queued or running job has no entry, so an enqueue and a
            # claim (each a new row version) write none, and a vacuum has
            # none of theirs to read. Those lists read other indexes: running
            # jobs (as many as there are worker slots) through
            # django_jobs_leased_idx; queued ones by walking the list above
            # (a backlog is the newest jobs) or, when few, through the claim
            # index. Succeeded jobs keep theirs: walking the list above past a
            # backlog to find them would cost a read per queued job.
            models.Index(
                fields=["state", "-enqueued_at", "-id"],
                condition=~Q(state__in=[JobState.QUEUED, JobState.RUNNING]),
                name="django_jobs_state_recent_idx",
            ),
            # Partial: a job without a tenant gets no entry, so the enqueue, the
            # claim and the completion of an untenanted job (each a new row
            # version) write none, and a vacuum has none to read. A list of one
            # tenant's jobs ("tenant = 'acme'") still reads it.
            models.Index(
                fields=["tenant", "-enqueued_at", "-id"],
                condition=~Q(tenant=""),
                name="django_jobs_tenant_recent_idx",
            ),
            # Fair claims: the distinct tenants of a queue's queued jobs, and each
            # tenant's next jobs (the recursive scan in transitions._fair_candidates).
            models.Index(
                fields=["queue", "tenant", "-priority", "run_after"],
                condition=Q(state=JobState.QUEUED),
                name="django_jobs_fair_idx",
            ),
            # Per-key concurrency: running jobs of a key.
            models.Index(
                fields=["queue", "concurrency_key"],
                condition=Q(
                    state__in=[JobState.RUNNING, JobState.CANCELLING],
                    concurrency_key__isnull=False,
                ),
                name="django_jobs_key_running_idx",
            ),
            # Search by idempotency key alone (the unique constraint leads with the scope).
            models.Index(
                fields=["idempotency_key"],
                condition=Q(idempotency_key__isnull=False),
                name="django_jobs_idem_key_idx",
            ),
            # A batch's members (the admin, the API). Partial: a job outside
            # a batch gets no entry, so enqueue pays nothing for it.
            models.Index(
                fields=["batch", "state"],
                condition=Q(batch__isnull=False),
                name="django_jobs_batch_member_idx",
            ),
            # Unique jobs: a key's jobs in its scope, newest first (engine/unique.py),
            # and the admin's and the API's search by the key alone.
            models.Index(
                fields=["unique_key", "dedup_scope", "-enqueued_at"],
                condition=Q(unique_key__isnull=False),
                name="django_jobs_unique_key_idx",
            ),
            # The deadline sweep: queued jobs that carry a deadline.
            models.Index(
                fields=["expires_at"],
                condition=Q(state=JobState.QUEUED, expires_at__isnull=False),
                name="django_jobs_deadline_idx",
            ),
            # A job's reruns, for its page. Partial: enqueue writes no entry.
            models.Index(
                fields=["rerun_of"],
                condition=Q(rerun_of__isnull=False),
                name="django_jobs_rerun_of_idx",
            ),
        ]
        # One per operator verb, as declared in VERBS (a new verb brings its migration).
        permissions = [(verb.codename, verb.permission_name) for verb in VERBS.values()]
        constraints = [
            models.UniqueConstraint(
                fields=["dedup_scope", "idempotency_key"],
                condition=Q(idempotency_key__isnull=False),
                name="django_jobs_idempotency_uniq",
            ),
            models.CheckConstraint(
                condition=Q(priority__gte=-100, priority__lte=100),
                name="django_jobs_priority_range",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.task_name} {self.id} ({self.state})"


class Batch(models.Model):
    """Jobs enqueued together in one ``with django_jobs.batch(...)`` block, and their callbacks.

    The counters hold how many members are in each kind of final state now;
    ``batches.py`` has the rules. They move in the same transaction as the
    member's state, under this row's lock, and the callback jobs are inserted
    in that transaction when the counts reach ``total``: exactly once each,
    with no polling.
    """

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    backend = models.CharField(max_length=100, default="default")
    label = models.CharField(max_length=255, blank=True, default="")
    state = models.CharField(max_length=16, choices=BatchState.choices, default=BatchState.OPEN)
    total = models.PositiveIntegerField(default=0)
    succeeded = models.PositiveIntegerField(default=0)
    failed = models.PositiveIntegerField(
        default=0, help_text="Members failed, exhausted, expired or quarantined."
    )
    cancelled = models.PositiveIntegerField(default=0, help_text="Members cancelled or discarded.")
    # What to enqueue: {"task_name", "args", "kwargs", "options"} (batches.Callback.stored).
    on_finish = models.JSONField(null=True, blank=True, editable=False)
    on_success = models.JSONField(null=True, blank=True, editable=False)
    # The callback jobs once enqueued: set exactly once, under the row's lock.
    on_finish_job = models.UUIDField(null=True, blank=True, editable=False)
    on_success_job = models.UUIDField(null=True, blank=True, editable=False)
    created_at = models.DateTimeField()
    finished_at = models.DateTimeField(
        null=True, blank=True, help_text="When every member had first settled."
    )
    succeeded_at = models.DateTimeField(
        null=True, blank=True, help_text="When every member had succeeded."
    )

    class Meta:
        ordering = ["-created_at"]
        verbose_name_plural = "batches"
        indexes = [models.Index(fields=["-created_at", "-id"], name="django_jobs_batch_recent_idx")]

    def __str__(self) -> str:
        return f"batch {self.label or self.id} ({self.state})"

    @property
    def settled(self) -> int:
        """Members in a final state now."""
        return self.succeeded + self.failed + self.cancelled

    @property
    def pending(self) -> int:
        """Members not in a final state now: not yet run, running, retrying, or retried."""
        return self.total - self.settled


# An exception's dotted path, as an attempt records it; a longer one is clipped.
ERROR_TYPE_MAX_LENGTH = 255
# The most of an error message, and of a traceback, an attempt keeps: a task
# can raise with a whole response body in its message.
ERROR_TEXT_MAX_LENGTH = 65_536


class Attempt(models.Model):
    """One execution try of a job. History: never rewritten after it ends."""

    # No index of the job alone: the unique (job, number) index leads with it.
    job = models.ForeignKey(
        Job, on_delete=models.CASCADE, related_name="attempt_set", db_index=False
    )
    number = models.PositiveIntegerField()
    worker_id = models.UUIDField(null=True, blank=True)
    worker_name = models.CharField(max_length=255, blank=True, default="")
    outcome = models.CharField(
        max_length=16, choices=AttemptOutcome.choices, default=AttemptOutcome.RUNNING
    )
    started_at = models.DateTimeField()
    finished_at = models.DateTimeField(null=True, blank=True)
    error_type = models.CharField(max_length=ERROR_TYPE_MAX_LENGTH, blank=True, default="")
    error_message = models.TextField(blank=True, default="")
    traceback = models.TextField(blank=True, default="")
    late_report = models.JSONField(
        null=True,
        blank=True,
        help_text="What the worker reported after it had lost the lease; it changed nothing.",
    )

    class Meta:
        ordering = ["job", "number"]
        indexes = [
            # The dashboard's charts: attempts that ended in the last hour.
            # Partial, like django_jobs_finished_idx: the claim's insert skips
            # it, and a running attempt gets its entry when it ends.
            models.Index(
                fields=["finished_at"],
                condition=Q(finished_at__isnull=False),
                name="django_jobs_attempt_ended_idx",
            ),
        ]
        constraints = [
            models.UniqueConstraint(fields=["job", "number"], name="django_jobs_attempt_uniq"),
        ]

    def __str__(self) -> str:
        return f"attempt {self.number} of {self.job_id} ({self.outcome})"

    @property
    def duration(self) -> timedelta | None:
        if self.finished_at is None:
            return None
        return self.finished_at - self.started_at


class Step(models.Model):
    """One completed step of a job (``context.step``): its recorded result.

    Written only by the attempt that holds the job's lease (``Engine.record_step``)
    and, for a ``context.sleep``, by the completer that puts the job to sleep;
    a later attempt returns the record instead of running the step again.
    Kept across retries (docs/steps.md says why); deleted with its job.
    """

    # No index of the job alone: the unique (job, name) index leads with it.
    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="steps", db_index=False)
    name = models.CharField(max_length=200)
    attempt = models.PositiveIntegerField(help_text="The attempt that ran it and recorded it.")
    result = models.JSONField(null=True, blank=True)
    recorded_at = models.DateTimeField()

    class Meta:
        ordering = ["job", "id"]  # the order they were recorded in
        constraints = [
            models.UniqueConstraint(fields=["job", "name"], name="django_jobs_step_uniq"),
        ]

    def __str__(self) -> str:
        return f"step {self.name!r} of {self.job_id} (attempt {self.attempt})"


class Dependency(models.Model):
    """``job`` runs only once ``depends_on`` has succeeded (``.using(after=...)``).

    Kept after both have finished, as the record of why a job waited.
    ``Job.waiting_on`` counts a waiting job's unmet dependencies, and the
    completion of a dependency decrements it: the decrement locks the waiting
    job's row, so when several of its dependencies finish at once exactly one
    of them sees the count reach zero and queues it.
    """

    # No index of its own: the unique (job, depends_on) index leads with the job.
    job = models.ForeignKey(
        Job, on_delete=models.CASCADE, related_name="dependencies", db_index=False
    )
    depends_on = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="dependents")

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["job", "depends_on"], name="django_jobs_dependency_uniq"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.job_id} after {self.depends_on_id}"


def leases_held(db: str = "default") -> Coalesce:
    """An annotation for Worker querysets: the leases (running jobs) each worker holds.

    A correlated count, so a worker list costs one query whatever its length.
    """
    held = (
        Job.objects.using(db)
        .filter(leased_by=OuterRef("pk"), state__in=sorted(LEASED_STATES))
        .order_by()
        .values("leased_by")
        .annotate(n=Count("pk"))
        .values("n")
    )
    return Coalesce(Subquery(held, output_field=models.IntegerField()), 0)


class Worker(models.Model):
    """A worker process that registered itself, so operators can see who is alive."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    backend = models.CharField(max_length=100, default="default")
    host = models.CharField(max_length=255)
    pid = models.PositiveIntegerField()
    queues = models.JSONField(default=list)
    concurrency = models.PositiveIntegerField()
    started_at = models.DateTimeField()
    heartbeat_at = models.DateTimeField()
    stopped_at = models.DateTimeField(null=True, blank=True)
    jobs_done = models.PositiveBigIntegerField(default=0)

    class Meta:
        ordering = ["-started_at"]
        indexes = [
            models.Index(
                fields=["heartbeat_at"],
                condition=Q(stopped_at__isnull=True),
                name="django_jobs_live_worker_idx",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.host}:{self.pid}"


class JobEvent(models.Model):
    """The audit trail of a job: every operator action and automatic hold, with who and why."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="events")
    at = models.DateTimeField()
    transition = models.CharField(max_length=32)
    from_state = models.CharField(max_length=16, choices=JobState.choices)
    to_state = models.CharField(max_length=16, choices=JobState.choices)
    actor = models.CharField(max_length=255, help_text="Who acted: a user, or 'system'.")
    note = models.TextField(blank=True, default="")

    class Meta:
        ordering = ["job", "at", "id"]
        indexes = [models.Index(fields=["job", "at"], name="django_jobs_event_job_idx")]

    def __str__(self) -> str:
        return f"{self.transition} by {self.actor} at {self.at:%Y-%m-%d %H:%M:%S}"


class RetryWindow(models.Model):
    """Retries scheduled per queue in one fixed window, for the per-queue retry budget."""

    queue = models.CharField(max_length=100)
    window_start = models.DateTimeField()
    retries = models.PositiveIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["queue", "window_start"], name="django_jobs_window_uniq"
            )
        ]

    def __str__(self) -> str:
        return f"{self.queue} {self.window_start:%H:%M:%S}: {self.retries} retries"


class QueueState(models.Model):
    """Whether a queue is paused; every worker's claim obeys it."""

    queue = models.CharField(max_length=100, unique=True)
    paused = models.BooleanField(default=False)
    changed_at = models.DateTimeField()
    changed_by = models.CharField(max_length=255)
    note = models.TextField(blank=True, default="")

    def __str__(self) -> str:
        return f"{self.queue} ({'paused' if self.paused else 'running'})"


class FairClock(models.Model):
    """What one tenant of a fair queue has received so far, in virtual time (fairness.py).

    Claims rank a fair queue's tenants by these clocks, so a tenant that got
    less than its share comes first however long the other's backlog, with
    one slot free or many. The rows are few (one per queue and tenant) and
    moved inside each claim's transaction, so a claim and its accounting
    commit together; claimers serving one tenant wait for each other on its row.
    """

    queue = models.CharField(max_length=100)
    tenant = models.CharField(max_length=255, blank=True)
    start = models.FloatField(help_text="Virtual time at which its latest claimed job started.")
    finish = models.FloatField(help_text="Virtual time its claims so far add up to.")
    claims = models.BigIntegerField(help_text="Jobs claimed for it in this queue.")
    weight = models.FloatField(help_text="Its weight at its latest claim.")
    updated_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["queue", "tenant"], name="django_jobs_fairclock_queue_tenant"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.queue}/{self.tenant or '(no tenant)'} at {self.finish:g}"


def paused_queues(db: str = "default") -> set[str]:
    """The names of the queues paused now (the dashboard, ``jobs stats`` and the API show it)."""
    return set(QueueState.objects.using(db).filter(paused=True).values_list("queue", flat=True))


class QueueEvent(models.Model):
    """The audit trail of queue pauses and resumes."""

    queue = models.CharField(max_length=100)
    at = models.DateTimeField()
    action = models.CharField(max_length=16)  # "pause" or "resume"
    actor = models.CharField(max_length=255)
    note = models.TextField(blank=True, default="")

    class Meta:
        ordering = ["-at", "-id"]
        permissions = [("pause_queue", "Can pause and resume queues")]

    def __str__(self) -> str:
        return f"{self.action} {self.queue} by {self.actor}"


class RateWindow(models.Model):
    """Jobs claimed from a rate-limited queue (or one key in it) in one fixed window."""

    queue = models.CharField(max_length=100)
    key = models.CharField(
        max_length=255, blank=True, default="", help_text="A concurrency_key, or '' for the queue."
    )
    window_start = models.DateTimeField()
    claims = models.PositiveIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["queue", "key", "window_start"], name="django_jobs_rate_key_window_uniq"
            )
        ]

    def __str__(self) -> str:
        return f"{self.queue} {self.key} {self.window_start:%H:%M:%S}: {self.claims} claims"


class Schedule(models.Model):
    """A periodic schedule: enqueue ``task_name`` at every tick of ``cron``.

    Rows come from ``OPTIONS["SCHEDULES"]`` (``source="settings"``, synced by
    each worker's scheduler at start) or from the admin (``source="admin"``,
    never touched by the sync). ``next_fire_at`` is the one moving part: the
    scheduler that advances it with a compare-and-set is the one that fires
    the tick, and the tick's idempotency key backs that up (``schedules.py``).
    """

    class Missed(models.TextChoices):
        SKIP = "skip", "skip"  # ticks found too late are dropped
        CATCH_UP = "catch_up", "catch up"  # up to max_catch_up missed ticks fire

    class Source(models.TextChoices):
        SETTINGS = "settings", "settings"  # declared in code; the sync owns its fields
        ADMIN = "admin", "admin"  # added by an operator; the sync never touches it

    name = models.CharField(max_length=200, unique=True)
    backend = models.CharField(max_length=100, default="default")
    source = models.CharField(max_length=16, choices=Source.choices, default=Source.ADMIN)
    task_name = models.CharField(max_length=255, help_text="Module path of a registered task.")
    args = models.JSONField(default=list, blank=True)
    kwargs = models.JSONField(default=dict, blank=True)
    queue = models.CharField(max_length=100, default="default")
    priority = models.SmallIntegerField(default=0, help_text="-100..100, higher runs first.")
    tenant = models.CharField(max_length=255, blank=True, default="")
    cron = models.CharField(
        max_length=255,
        help_text="Five fields (minute hour day month weekday), or six with seconds last.",
    )
    timezone = models.CharField(
        max_length=64, default="UTC", help_text="IANA name the cron is read in."
    )
    enabled = models.BooleanField(default=True)
    missed = models.CharField(max_length=16, choices=Missed.choices, default=Missed.SKIP)
    max_catch_up = models.PositiveIntegerField(
        default=10, help_text="With catch up: most missed ticks enqueued at once."
    )
    next_fire_at = models.DateTimeField(
        null=True, blank=True, help_text="The next tick to fire (UTC); empty: computed soon."
    )
    last_fired_at = models.DateTimeField(
        null=True, blank=True, help_text="The latest tick that was enqueued."
    )
    last_error = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]
        indexes = [
            # The scheduler's poll: enabled schedules of one backend that are due.
            models.Index(
                fields=["backend", "next_fire_at"],
                condition=Q(enabled=True),
                name="django_jobs_schedule_due_idx",
            ),
        ]
        permissions = [("run_schedule", "Can run schedules now")]
        constraints = [
            models.CheckConstraint(
                condition=Q(priority__gte=-100, priority__lte=100),
                name="django_jobs_schedule_priority_range",
            ),
        ]

    def __str__(self) -> str:
        return self.name
