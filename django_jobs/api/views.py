"""The endpoints: jobs (list, detail, the operator verbs), queues (statistics, pause
and resume), workers, batches.

Reads go through the authority policy's ``filter_jobs``, so a job the user may
not see is simply absent: 404 on its URL, missing from lists and statistics.
Writes go through ``django_jobs.control`` (``apply``, ``pause_queue``,
``resume_queue``) and nothing else, so every change is a guarded transition
with an audit record naming the user.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.db.models import Exists, OuterRef, Prefetch, QuerySet
from django.shortcuts import get_object_or_404
from django.utils import timezone
from django.utils.text import format_lazy
from drf_spectacular.openapi import AutoSchema
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import mixins, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from django_jobs import control
from django_jobs.backend import jobs_backend
from django_jobs.exceptions import StaleCountError
from django_jobs.models import (
    Attempt,
    Batch,
    Job,
    QueueEvent,
    Worker,
    leases_held,
    paused_queues,
)
from django_jobs.states import JobState, django_status
from django_jobs.statistics import queue_stats
from django_jobs.verbs import VERBS, Verb

from . import refusals
from .conf import api_settings
from .filters import (
    JobFilter,
    JobFilterBackend,
    KnownFilterParameters,
    KnownParametersFilter,
    StrictOrderingFilter,
)
from .pagination import StrictCursorPagination
from .permissions import Action, AuthorityPermission
from .serializers import (
    ActionResultSerializer,
    BatchSerializer,
    BulkResultSerializer,
    ErrorSerializer,
    JobDetailSerializer,
    JobSerializer,
    QueueActionSerializer,
    QueueStateSerializer,
    QueueStatsSerializer,
    StaleCountSerializer,
    WorkerSerializer,
    action_serializer,
    bulk_action_serializer,
)

UUID_PATTERN = "[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
_NOT_FOUND = OpenApiResponse(ErrorSerializer, description="No such job, or not one you may see.")
_DENIED = OpenApiResponse(ErrorSerializer, description="Not authenticated, or not allowed.")
_BAD_INPUT = OpenApiResponse(
    description="A parameter or field is malformed or unknown; the body names it."
)


def _spectacular(f: Any) -> Any:
    """Base ``@extend_schema`` of ``f`` on drf-spectacular's AutoSchema.

    ``@extend_schema`` on a method builds on the project's
    ``DEFAULT_SCHEMA_CLASS`` unless the method names its own schema. DRF's
    default there is its own (older) AutoSchema, and a reusable app should not
    demand that the project change it.
    """
    f.kwargs = {**getattr(f, "kwargs", {}), "schema": AutoSchema()}
    return f


def _jobs() -> QuerySet[Job]:
    return Job.objects.using(api_settings().database).all()


def _verb_view(verb: Verb) -> Any:
    """One POST endpoint per verb, each with its own request schema (a note or not)."""

    def act(self: JobViewSet, request: Request, pk: str | None = None) -> Response:
        return self.apply_verb(verb, request)

    # DRF routes an action by its function's name, so it must be the verb's.
    act.__name__ = act.__qualname__ = verb.name
    routed = action(
        detail=True,
        methods=["post"],
        url_path=verb.name,
        url_name=verb.name,
        schema=AutoSchema(),
    )(act)
    return extend_schema(
        operation_id=f"jobs_{verb.name}",
        tags=["jobs"],
        summary=format_lazy("{} a job", verb.label),
        description=verb.description,
        request=action_serializer(verb),
        responses={
            200: ActionResultSerializer,
            400: _BAD_INPUT,
            403: _DENIED,
            404: _NOT_FOUND,
            409: OpenApiResponse(
                ErrorSerializer, description="The verb does not apply to the job's state."
            ),
        },
    )(routed)


BULK_PREFIX = "bulk_"


def _bulk_view(verb: Verb) -> Any:
    """``POST bulk/<verb>/?<the list's filters>``: the verb on every job the filter matches."""

    def act(self: JobViewSet, request: Request) -> Response:
        return self.apply_verb_to_filter(verb, request)

    act.__name__ = act.__qualname__ = f"{BULK_PREFIX}{verb.name}"
    routed = action(
        detail=False,
        methods=["post"],
        url_path=f"bulk/{verb.name}",
        url_name=f"bulk-{verb.name}",
        schema=AutoSchema(),
    )(act)
    return extend_schema(
        operation_id=f"jobs_bulk_{verb.name}",
        tags=["jobs"],
        summary=format_lazy("{} every job a filter matches", verb.label),
        description=format_lazy(
            "{} Takes the job list's filters as query parameters and acts on every job "
            "they match that you may {}, in batches, each job a compare-and-set: one "
            "that no longer allows it is skipped. `expected_count` must be the number "
            "the filter matches, or nothing changes (409).",
            verb.description,
            verb.name,
        ),
        request=bulk_action_serializer(verb),
        responses={
            200: BulkResultSerializer,
            400: _BAD_INPUT,
            403: _DENIED,
            409: OpenApiResponse(
                StaleCountSerializer,
                description="The filter matches another number of jobs than expected_count.",
            ),
        },
    )(routed)


def with_verb_actions[ViewSet: type](cls: ViewSet) -> ViewSet:
    """Give the view set two actions per verb of ``VERBS`` (one job, and a filter's jobs)."""
    for verb in VERBS.values():
        setattr(cls, verb.name, _verb_view(verb))
        setattr(cls, f"{BULK_PREFIX}{verb.name}", _bulk_view(verb))
    return cls


@with_verb_actions
class JobViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet[Job]):
    """Jobs the user may see, and the operator verbs on them."""

    schema = AutoSchema()
    permission_classes = [AuthorityPermission]
    filterset_class = JobFilter
    filter_backends = [KnownParametersFilter, JobFilterBackend, StrictOrderingFilter]
    ordering_fields = ["enqueued_at", "run_after", "priority"]
    ordering = "-enqueued_at"
    pagination_class = StrictCursorPagination
    # Job ids are UUIDs; anything else in the URL is not a job (404 by routing).
    lookup_value_regex = UUID_PATTERN

    @extend_schema(
        operation_id="jobs_list",
        tags=["jobs"],
        summary="List jobs",
        responses={200: JobSerializer(many=True), 400: _BAD_INPUT, 403: _DENIED},
    )
    @_spectacular
    def list(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return super().list(request, *args, **kwargs)

    @extend_schema(
        operation_id="jobs_retrieve",
        tags=["jobs"],
        summary="A job with its attempts, steps, progress, result, errors and audit trail",
        responses={200: JobDetailSerializer, 403: _DENIED, 404: _NOT_FOUND},
    )
    @_spectacular
    def retrieve(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return super().retrieve(request, *args, **kwargs)

    @property
    def verb(self) -> Verb | None:
        """The verb this request applies, to one job or to a filter's jobs."""
        return VERBS.get(str(self.action).removeprefix(BULK_PREFIX))

    @property
    def authority_action(self) -> str:
        """The verb this request applies, by name; reading otherwise."""
        return self.verb.name if self.verb is not None else Action.VIEW

    def get_serializer_class(self) -> Any:
        if self.action == "retrieve":
            return JobDetailSerializer
        if self.verb is not None:
            if str(self.action).startswith(BULK_PREFIX):
                return bulk_action_serializer(self.verb)
            return action_serializer(self.verb)
        return JobSerializer

    def get_queryset(self) -> QuerySet[Job]:
        authority = api_settings().authority
        jobs = authority.filter_jobs(self.request, Action.VIEW, _jobs())
        if self.action == "retrieve":
            attempts = Attempt.objects.using(api_settings().database).order_by("number")
            jobs = jobs.prefetch_related(
                Prefetch("attempt_set", queryset=attempts), "steps", "events"
            )
        return jobs

    def filter_queryset(self, queryset: QuerySet[Job, Any]) -> QuerySet[Job, Any]:
        # Filters and ordering belong to the list; DRF would also apply them
        # to the detail lookup, turning ?state=... on a job's URL into a 404.
        # A bulk verb takes the list's filters (not its ordering: it walks by id).
        if self.action == "list":
            return super().filter_queryset(queryset)
        if str(self.action).startswith(BULK_PREFIX):
            for backend in (KnownFilterParameters, JobFilterBackend):
                queryset = backend().filter_queryset(self.request, queryset, self)
        return queryset

    def apply_verb(self, verb: Verb, request: Request) -> Response:
        """Find the job in the user's scope (else 404), check the verb (else 403), apply it."""
        settings = api_settings()
        authority = settings.authority
        # Visible for reading or for this verb: either way, its existence is no secret.
        scope = authority.filter_jobs(request, Action.VIEW, _jobs()) | authority.filter_jobs(
            request, verb.name, _jobs()
        )
        job = get_object_or_404(scope.only("id", "tenant", "state"), pk=self.kwargs["pk"])
        if not authority.has_job_permission(request, verb.name, job):
            self.permission_denied(request, message=f"You may not {verb.name} this job.")
        serializer = action_serializer(verb)(data=request.data)
        serializer.is_valid(raise_exception=True)
        note: str = serializer.validated_data["note"]
        try:
            done = control.perform(
                verb.name, job, actor=request.user, note=note, backend=settings.backend
            )
        except refusals.REFUSED as exc:
            return refusals.answer(exc)
        body = {
            "id": job.id,
            "verb": verb.name,
            "transition": done.transition.value,
            "state": done.to_state.value,
            "status": str(django_status(done.to_state)),
            "rerun": done.rerun,
        }
        return Response(ActionResultSerializer(body).data)

    def apply_verb_to_filter(self, verb: Verb, request: Request) -> Response:
        """The verb on every job of the filter the user may apply it to, once the count agrees."""
        settings = api_settings()
        scope = settings.authority.filter_jobs(request, verb.name, _jobs())
        jobs = self.filter_queryset(scope)
        serializer = bulk_action_serializer(verb)(data=request.data)
        serializer.is_valid(raise_exception=True)
        try:
            result = control.apply_matching(
                verb.name,
                jobs,
                actor=request.user,
                note=serializer.validated_data["note"],
                expected=serializer.validated_data["expected_count"],
                backend=settings.backend,
            )
        except StaleCountError as exc:
            body = {"detail": str(exc), "matched": exc.matched, "expected": exc.expected}
            return Response(StaleCountSerializer(body).data, status=409)
        except refusals.REFUSED as exc:
            return refusals.answer(exc)
        return Response(BulkResultSerializer(result.report(verb.name)).data)


class QueueStatsView(APIView):
    """Depth by state and the age of the oldest ready job, per queue, over the jobs you may see."""

    schema = AutoSchema()
    permission_classes = [AuthorityPermission]
    authority_action = Action.VIEW

    @extend_schema(
        tags=["queues"],
        summary="Queue statistics",
        responses={200: QueueStatsSerializer(many=True), 400: _BAD_INPUT, 403: _DENIED},
    )
    @_spectacular
    def get(self, request: Request) -> Response:
        KnownParametersFilter().filter_queryset(request, Job.objects.none(), self)
        settings = api_settings()
        jobs = settings.authority.filter_jobs(request, Action.VIEW, _jobs())
        now = timezone.now()
        backend = jobs_backend(settings.backend)
        paused = paused_queues(settings.database)
        # The numbers of `manage.py jobs stats` and the dashboard (statistics.py),
        # over the jobs this caller may see.
        data = [
            {
                "queue": stats.queue,
                "depth": {state.value: stats.by_state[state.value] for state in JobState},
                "ready": stats.ready,
                "scheduled": stats.scheduled,
                "oldest_ready_at": stats.oldest_due,
                "oldest_ready_age": None
                if (waited := stats.waited(now)) is None
                else max(0.0, waited.total_seconds()),
                "succeeded_last_hour": stats.succeeded["1h"],
                "failed_last_hour": stats.failed["1h"],
                "paused": stats.queue in paused,
            }
            for stats in queue_stats(jobs, backend.queues or (), now)
        ]
        return Response(QueueStatsSerializer(data, many=True).data)


def _queue_verb(pause: bool) -> Any:
    """The POST handler of pause (or resume), with its own schema."""
    verb = "pause" if pause else "resume"

    def post(self: QueuePauseView, request: Request, name: str) -> Response:
        return self.set_paused(request, name, pause)

    return extend_schema(
        operation_id=f"queues_{verb}",
        tags=["queues"],
        summary=f"{verb.capitalize()} a queue",
        description=_QUEUE_VERB_HELP[verb],
        parameters=[
            OpenApiParameter(
                "name",
                str,
                OpenApiParameter.PATH,
                description="The queue: one of the backend's QUEUES.",
            )
        ],
        request=QueueActionSerializer,
        responses={
            200: QueueStateSerializer,
            400: _BAD_INPUT,
            403: _DENIED,
            404: OpenApiResponse(ErrorSerializer, description="No such queue."),
        },
    )(_spectacular(post))


_QUEUE_VERB_HELP = {
    "pause": "Stop every worker from claiming the queue's jobs, for every tenant; "
    "running jobs finish. `changed` is false, and nothing is recorded, if it already was paused.",
    "resume": "Let workers claim the queue's jobs again. `changed` is false, and nothing "
    "is recorded, if it was not paused.",
}


class QueuePauseView(APIView):
    """Pause a queue, through ``control.pause_queue``; audited as a QueueEvent."""

    schema = AutoSchema()
    permission_classes = [AuthorityPermission]
    # A queue serves every tenant: only an operator may stop it (never a tenant scope).
    authority_action = Action.PAUSE_QUEUE

    post = _queue_verb(pause=True)

    def set_paused(self, request: Request, name: str, pause: bool) -> Response:
        settings = api_settings()
        serializer = QueueActionSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        verb = control.pause_queue if pause else control.resume_queue
        try:
            changed = verb(
                name,
                actor=control.actor_name(request.user),
                note=serializer.validated_data["note"],
                backend=settings.backend,
            )
        except refusals.REFUSED as exc:
            return refusals.answer(exc)
        db = settings.database
        body: dict[str, Any] = {
            "queue": name,
            # A call that changed nothing found the queue already in this state.
            "paused": pause,
            "changed": changed,
            "changed_at": None,
            "changed_by": None,
            "note": None,
        }
        # The audit trail, not QueueState's columns: a resume of a queue never
        # paused writes a QueueState row naming its caller, though nothing changed.
        last = QueueEvent.objects.using(db).filter(queue=name).first()  # newest first
        if last is not None:
            body.update(changed_at=last.at, changed_by=last.actor, note=last.note)
        return Response(QueueStateSerializer(body).data)


class QueueResumeView(QueuePauseView):
    """Resume a paused queue, through ``control.resume_queue``; audited as a QueueEvent."""

    post = _queue_verb(pause=False)


class WorkerPagination(StrictCursorPagination):
    ordering = ("-started_at", "-pk")


class WorkerViewSet(mixins.ListModelMixin, viewsets.GenericViewSet[Worker]):
    """Registered worker processes, so operators can see who is alive."""

    schema = AutoSchema()
    permission_classes = [AuthorityPermission]
    authority_action = Action.VIEW_WORKERS
    serializer_class = WorkerSerializer
    filter_backends = [KnownParametersFilter]
    pagination_class = WorkerPagination

    @extend_schema(
        tags=["workers"],
        summary="Workers, newest first",
        responses={200: WorkerSerializer(many=True), 400: _BAD_INPUT, 403: _DENIED},
    )
    @_spectacular
    def list(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return super().list(request, *args, **kwargs)

    def get_queryset(self) -> QuerySet[Worker]:
        db = api_settings().database
        return Worker.objects.using(db).all().annotate(leases=leases_held(db))

    def get_serializer_context(self) -> dict[str, Any]:
        backend = jobs_backend(api_settings().backend)
        stale = timedelta(seconds=backend.settings.WORKER_STALE_SECONDS)
        return {**super().get_serializer_context(), "stale_before": timezone.now() - stale}


class BatchPagination(StrictCursorPagination):
    ordering = ("-created_at", "-pk")


class BatchViewSet(
    mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet[Batch]
):
    """Batches and their progress: the batches whose every member the user may see.

    A batch's counts describe all of its members, so a batch with a member
    outside the user's scope is absent (404 on its URL), like that job. An
    empty batch has no member to be allowed by, so it is absent too.
    """

    schema = AutoSchema()
    permission_classes = [AuthorityPermission]
    authority_action = Action.VIEW
    serializer_class = BatchSerializer
    filter_backends = [KnownParametersFilter]
    pagination_class = BatchPagination
    lookup_value_regex = UUID_PATTERN

    @extend_schema(
        operation_id="batches_list",
        tags=["batches"],
        summary="Batches, newest first, with their counts",
        responses={200: BatchSerializer(many=True), 400: _BAD_INPUT, 403: _DENIED},
    )
    @_spectacular
    def list(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return super().list(request, *args, **kwargs)

    @extend_schema(
        operation_id="batches_retrieve",
        tags=["batches"],
        summary="A batch with its counts and its callbacks' jobs",
        responses={
            200: BatchSerializer,
            403: _DENIED,
            404: OpenApiResponse(
                ErrorSerializer, description="No such batch, or not one you may see."
            ),
        },
    )
    @_spectacular
    def retrieve(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return super().retrieve(request, *args, **kwargs)

    def get_queryset(self) -> QuerySet[Batch]:
        visible = api_settings().authority.filter_jobs(self.request, Action.VIEW, _jobs())
        hidden = (
            _jobs()
            .filter(batch=OuterRef("pk"))
            .exclude(pk__in=visible.filter(batch=OuterRef(OuterRef("pk"))).values("pk"))
        )
        return (
            Batch.objects.using(api_settings().database)
            .filter(Exists(visible.filter(batch=OuterRef("pk"))))
            .exclude(Exists(hidden))
        )
