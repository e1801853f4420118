"""How jobs, attempts, queues and workers look over the wire.

Field names follow Django's ``TaskResult`` where the two overlap — ``id``,
``status`` (one of Django's four statuses), ``enqueued_at``, ``started_at``,
``finished_at``, ``last_attempted_at``, ``args``, ``kwargs``, ``backend``,
``errors``, ``worker_ids``, ``return_value`` — so a client written against
``get_result()`` reads the same names here. ``state`` is our detailed state
(``exhausted`` versus ``failed``, ``quarantined``, ...), and ``attempt_log``
the attempts themselves, as on ``django_jobs.results.JobResult``.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from django_jobs.dependencies import waits_for
from django_jobs.models import Attempt, Batch, Job, JobEvent, Step, Worker
from django_jobs.results import raised, runs
from django_jobs.states import AttemptOutcome, BatchState, JobState, django_status
from django_jobs.verbs import Verb

from ..framework import TaskResultStatus

NOTE_MAX_LENGTH = 2000


class ProgressSerializer(serializers.Serializer[Job]):
    done = serializers.IntegerField(source="progress_done")
    total = serializers.IntegerField(source="progress_total", allow_null=True)
    message = serializers.CharField(source="progress_message")
    attempt = serializers.IntegerField(
        source="progress_attempt", allow_null=True, help_text="The attempt that reported it."
    )
    at = serializers.DateTimeField(source="progress_at", allow_null=True)
    fraction = serializers.SerializerMethodField()

    def get_fraction(self, job: Job) -> float | None:
        if not job.progress_total or job.progress_done is None:
            return None
        return min(1.0, job.progress_done / job.progress_total)


class JobSerializer(serializers.ModelSerializer[Job]):
    """A job in a list: its identity, where it stands, and its progress."""

    status = serializers.SerializerMethodField(help_text="Django's TaskResultStatus.")
    state = serializers.ChoiceField(choices=JobState.choices, help_text="Our detailed state.")
    progress = serializers.SerializerMethodField()

    class Meta:
        model = Job
        fields = [
            "id",
            "task_name",
            "backend",
            "queue",
            "priority",
            "tenant",
            "initiator",
            "idempotency_key",
            "unique_key",
            "status",
            "state",
            "attempts",
            "max_attempts",
            "enqueued_at",
            "run_after",
            "started_at",
            "finished_at",
            "updated_at",
            "expires_at",
            "cancel_requested_at",
            "progress",
            "last_error",
            "waiting_on",
            "batch",
        ]
        read_only_fields = fields

    @extend_schema_field(serializers.ChoiceField(choices=TaskResultStatus.choices))
    def get_status(self, job: Job) -> str:
        return str(django_status(job.state))

    @extend_schema_field(ProgressSerializer(allow_null=True))
    def get_progress(self, job: Job) -> dict[str, Any] | None:
        if job.progress_done is None:
            return None
        return dict(ProgressSerializer(job).data)


class AttemptSerializer(serializers.ModelSerializer[Attempt]):
    outcome = serializers.ChoiceField(choices=AttemptOutcome.choices)
    duration = serializers.SerializerMethodField(help_text="Seconds, once the attempt ended.")

    class Meta:
        model = Attempt
        fields = [
            "number",
            "outcome",
            "worker_id",
            "worker_name",
            "started_at",
            "finished_at",
            "duration",
            "error_type",
            "error_message",
            "traceback",
            "late_report",
        ]
        read_only_fields = fields

    def get_duration(self, attempt: Attempt) -> float | None:
        duration = attempt.duration
        return None if duration is None else duration.total_seconds()


class StepSerializer(serializers.ModelSerializer[Step]):
    """A completed step (``context.step``) or sleep; its result in its stored form."""

    attempt = serializers.IntegerField(help_text="The attempt that ran and recorded it.")
    result = serializers.JSONField(
        help_text="As stored: JSON, with UUID, datetime, date, time and Decimal tagged."
    )

    class Meta:
        model = Step
        fields = ["name", "attempt", "recorded_at", "result"]
        read_only_fields = fields


class EventSerializer(serializers.ModelSerializer[JobEvent]):
    class Meta:
        model = JobEvent
        fields = ["at", "transition", "from_state", "to_state", "actor", "note"]
        read_only_fields = fields


class TaskErrorSerializer(serializers.Serializer[Any]):
    """Django's ``TaskError``: one per attempt that ended with an exception."""

    exception_class_path = serializers.CharField()
    traceback = serializers.CharField()


class JobDetailSerializer(JobSerializer):
    """One job with everything an operator repairing it needs."""

    args = serializers.JSONField()
    kwargs = serializers.JSONField()
    return_value = serializers.SerializerMethodField(
        help_text="What the task returned; null unless the job succeeded."
    )
    # Django's name; DRF pops declared fields off the class, so Serializer.errors survives.
    errors = serializers.SerializerMethodField()  # type: ignore[assignment]
    last_attempted_at = serializers.SerializerMethodField()
    worker_ids = serializers.SerializerMethodField()
    waits_for = serializers.SerializerMethodField(
        help_text="Ids of the jobs it was enqueued after (after=), oldest first."
    )
    attempt_log = AttemptSerializer(source="attempt_set", many=True, read_only=True)
    steps = StepSerializer(
        many=True, read_only=True, help_text="Its completed steps, in the order they were recorded."
    )
    events = EventSerializer(many=True, read_only=True, help_text="The audit trail.")

    class Meta(JobSerializer.Meta):
        fields = [
            *JobSerializer.Meta.fields,
            "task_version",
            "concurrency_key",
            "timeout",
            "args",
            "kwargs",
            "return_value",
            "errors",
            "last_attempted_at",
            "worker_ids",
            "waits_for",
            "attempt_log",
            "steps",
            "events",
        ]
        read_only_fields = fields

    @extend_schema_field(serializers.ListField(child=serializers.UUIDField()))
    def get_waits_for(self, job: Job) -> list[str]:
        return [str(job_id) for job_id in waits_for(job).values_list("id", flat=True)]

    @extend_schema_field(OpenApiTypes.ANY)
    def get_return_value(self, job: Job) -> Any:
        return job.result if job.state == JobState.SUCCEEDED else None

    @extend_schema_field(TaskErrorSerializer(many=True))
    def get_errors(self, job: Job) -> list[dict[str, str]]:
        # The same rule as django_jobs.results.build, so the API and get_result() agree.
        return [
            {
                "exception_class_path": a.error_type,
                "traceback": a.traceback or a.error_message,
            }
            for a in runs(list(job.attempt_set.all()))
            if raised(a)
        ]

    @extend_schema_field(OpenApiTypes.DATETIME)
    def get_last_attempted_at(self, job: Job) -> str | None:
        attempts = runs(list(job.attempt_set.all()))
        if not attempts:
            return None
        return serializers.DateTimeField().to_representation(attempts[-1].started_at)

    def get_worker_ids(self, job: Job) -> list[str]:
        return [str(a.worker_id) for a in runs(list(job.attempt_set.all())) if a.worker_id]


class StringField(serializers.CharField):
    """A ``CharField`` that takes a string only: DRF's turns ``5`` into ``"5"``."""

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            self.fail("invalid")
        value: str = super().to_internal_value(data)
        return value


def optional_note(audit_trail: str) -> serializers.CharField:
    """The optional ``note`` of a verb's body, kept in ``audit_trail``."""
    return StringField(
        required=False,
        allow_blank=True,
        max_length=NOTE_MAX_LENGTH,
        default="",
        help_text=f"Why; kept in {audit_trail}.",
    )


class ActionSerializer(serializers.Serializer[Any]):
    note = optional_note("the job's audit trail")


class NoteRequiredActionSerializer(serializers.Serializer[Any]):
    note = StringField(
        max_length=NOTE_MAX_LENGTH,
        help_text="Why; required, and kept in the job's audit trail.",
    )

    def validate_note(self, value: str) -> str:
        if not value.strip():
            raise serializers.ValidationError("A note saying why is required.")
        return value


def action_serializer(verb: Verb) -> type[serializers.Serializer[Any]]:
    """A verb's request body: its ``note`` is required if the verb needs one."""
    return NoteRequiredActionSerializer if verb.needs_note else ActionSerializer


class ActionResultSerializer(serializers.Serializer[Any]):
    id = serializers.UUIDField()
    verb = serializers.CharField()
    transition = serializers.CharField(help_text="Which transition the verb took.")
    state = serializers.ChoiceField(choices=JobState.choices, help_text="The job's state now.")
    status = serializers.ChoiceField(choices=TaskResultStatus.choices)
    rerun = serializers.UUIDField(
        allow_null=True, help_text="The new job a rerun enqueued; null for the other verbs."
    )


_EXPECTED_COUNT_HELP = (
    "How many jobs the filter matched when you looked (a list with the same filters, "
    "or a previous 409's `matched`). If it matches another number now, nothing changes "
    "and the answer is 409."
)


class BulkActionSerializer(ActionSerializer):
    expected_count = serializers.IntegerField(min_value=0, help_text=_EXPECTED_COUNT_HELP)


class BulkNoteRequiredActionSerializer(NoteRequiredActionSerializer):
    expected_count = serializers.IntegerField(min_value=0, help_text=_EXPECTED_COUNT_HELP)


def bulk_action_serializer(verb: Verb) -> type[serializers.Serializer[Any]]:
    """A bulk verb's body: the confirmed count, and a ``note`` as the single verb takes it."""
    return BulkNoteRequiredActionSerializer if verb.needs_note else BulkActionSerializer


class BulkResultSerializer(serializers.Serializer[Any]):
    verb = serializers.CharField()
    matched = serializers.IntegerField(help_text="Jobs the filter matched (you may act on).")
    applicable = serializers.IntegerField(
        help_text="Of them, in a state the verb applies to when it started."
    )
    changed = serializers.IntegerField(help_text="Jobs the verb changed.")
    stopping = serializers.IntegerField(
        help_text="Of them, running jobs cancel only asked to stop: cancelling, and they may "
        "still end succeeded. 0 for the other verbs."
    )
    skipped = serializers.IntegerField(
        help_text="Matched and left as they were: the verb does not apply, or they moved first."
    )
    reruns = serializers.DictField(
        child=serializers.UUIDField(),
        help_text="For rerun: each original job's id, and the new job's id.",
    )


class StaleCountSerializer(serializers.Serializer[Any]):
    detail = serializers.CharField()
    matched = serializers.IntegerField(help_text="Jobs the filter matches now.")
    expected = serializers.IntegerField(help_text="The expected_count you sent.")


class ErrorSerializer(serializers.Serializer[Any]):
    detail = serializers.CharField()


class QueueStatsSerializer(serializers.Serializer[Any]):
    queue = serializers.CharField()
    depth = serializers.DictField(
        child=serializers.IntegerField(), help_text="Jobs in this queue, by state (every state)."
    )
    ready = serializers.IntegerField(help_text="Queued jobs whose run_after has passed.")
    scheduled = serializers.IntegerField(help_text="Queued jobs held back by run_after.")
    oldest_ready_at = serializers.DateTimeField(
        allow_null=True, help_text="run_after of the longest-waiting ready job."
    )
    oldest_ready_age = serializers.FloatField(
        allow_null=True, help_text="Seconds that job has been waiting to be claimed."
    )
    succeeded_last_hour = serializers.IntegerField()
    failed_last_hour = serializers.IntegerField(help_text="Ended failed, exhausted or expired.")
    paused = serializers.BooleanField(help_text="Workers claim nothing from it until resumed.")


class QueueActionSerializer(serializers.Serializer[Any]):
    note = optional_note("the queue's audit trail")


class QueueStateSerializer(serializers.Serializer[Any]):
    """A queue after a pause or resume, and the last recorded change of it."""

    queue = serializers.CharField()
    paused = serializers.BooleanField(help_text="Workers claim nothing from it until resumed.")
    changed = serializers.BooleanField(
        help_text="False when the queue already was paused (or running): nothing was recorded."
    )
    changed_at = serializers.DateTimeField(
        allow_null=True, help_text="When it was last paused or resumed; null if never."
    )
    changed_by = serializers.CharField(allow_null=True, help_text="Who did that.")
    note = serializers.CharField(allow_null=True, allow_blank=True, help_text="Why, as they said.")


class WorkerSerializer(serializers.ModelSerializer[Worker]):
    alive = serializers.SerializerMethodField(
        help_text="Not stopped, and heartbeating within WORKER_STALE_SECONDS."
    )
    leases = serializers.IntegerField(read_only=True, help_text="Jobs it holds now.")

    class Meta:
        model = Worker
        fields = [
            "id",
            "backend",
            "host",
            "pid",
            "queues",
            "concurrency",
            "started_at",
            "heartbeat_at",
            "stopped_at",
            "jobs_done",
            "alive",
            "leases",
        ]
        read_only_fields = fields

    def get_alive(self, worker: Worker) -> bool:
        stale_before = self.context["stale_before"]
        return worker.stopped_at is None and worker.heartbeat_at >= stale_before


class BatchSerializer(serializers.ModelSerializer[Batch]):
    """A batch: where its members stand, and its callbacks' jobs once enqueued."""

    state = serializers.ChoiceField(choices=BatchState.choices)
    settled = serializers.IntegerField(
        read_only=True, help_text="Members in a final state now: succeeded + failed + cancelled."
    )
    pending = serializers.IntegerField(read_only=True, help_text="total - settled.")
    on_finish = serializers.SerializerMethodField(help_text="The on_finish task, if any.")
    on_success = serializers.SerializerMethodField(help_text="The on_success task, if any.")

    class Meta:
        model = Batch
        fields = [
            "id",
            "label",
            "backend",
            "state",
            "total",
            "settled",
            "pending",
            "succeeded",
            "failed",
            "cancelled",
            "on_finish",
            "on_finish_job",
            "on_success",
            "on_success_job",
            "created_at",
            "finished_at",
            "succeeded_at",
        ]
        read_only_fields = fields

    def get_on_finish(self, batch: Batch) -> str | None:
        return batch.on_finish["task_name"] if batch.on_finish else None

    def get_on_success(self, batch: Batch) -> str | None:
        return batch.on_success["task_name"] if batch.on_success else None
