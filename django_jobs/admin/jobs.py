"""The job list and the job page: where an operator finds what went wrong.

Job rows are history and evidence, so the admin never adds, edits or deletes
them: every change goes through an operator verb (``actions.py``), which is
guarded and audited. Removing old jobs is ``manage.py jobs prune``'s work.

The list is built to stay fast on millions of rows: every column comes from
the job row itself (no join, no per-row query), the count is estimated or
capped (``pagination.py``), filters list their choices without scanning the
table (``filters.py``), search is by exact id, idempotency key or tenant, and
sorting is offered only on the enqueue time, which the default ordering uses.
"""

from __future__ import annotations

import contextlib
import json
import uuid
from datetime import timedelta
from typing import Any

from django.contrib import admin
from django.contrib.admin.utils import flatten_fieldsets
from django.core.exceptions import ImproperlyConfigured
from django.db.models import Q, QuerySet
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe
from django.utils.text import Truncator
from django.utils.timesince import timesince, timeuntil
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from .. import dependencies
from ..backend import jobs_backend
from ..conf import JobsOptions
from ..models import Attempt, Batch, Job, JobEvent, Step, Worker
from ..states import LEASED_STATES, AttemptOutcome, JobState
from . import actions, dashboard
from .batches import batch_link
from .filters import QueueFilter, StateFilter, TaskFilter, TenantFilter, UniqueKeyFilter
from .pagination import EstimatedCountPaginator
from .readonly import ReadOnlyAdmin

EMPTY = "—"


def state_badge(state: str) -> SafeString:
    """A coloured label, so a failed job stands out in a page of succeeded ones."""
    label = JobState(state).label if state in JobState.values else state
    return format_html('<span class="dj-badge dj-state-{}">{}</span>', state, label)


def outcome_badge(outcome: str) -> SafeString:
    label = AttemptOutcome(outcome).label if outcome in AttemptOutcome.values else outcome
    return format_html('<span class="dj-badge dj-outcome-{}">{}</span>', outcome, label)


def pretty_json(value: Any) -> SafeString:
    if value is None:
        return format_html("{}", EMPTY)
    text = json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False)
    return format_html('<pre class="dj-json">{}</pre>', text)


def duration_text(value: timedelta | None) -> str:
    if value is None:
        return EMPTY
    seconds = value.total_seconds()
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 120:
        return f"{seconds:.1f} s"
    return f"{seconds / 60:.1f} min"


def progress_text(job: Job) -> str:
    if job.progress_done is None:
        return ""
    text = f"{job.progress_done}"
    if job.progress_total:
        percent = min(100.0, 100.0 * job.progress_done / job.progress_total)
        text = f"{job.progress_done}/{job.progress_total} ({percent:.0f}%)"
    if job.progress_message:
        text = f"{text} {job.progress_message}"
    return text


class ReadOnlyInline(ReadOnlyAdmin, admin.TabularInline):  # type: ignore[type-arg]
    """History shown on the job page: visible to whoever may view the job, never editable."""

    extra = 0
    max_num = 0
    can_delete = False
    show_change_link = False

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # The job's view permission is enough: attempts and events are part of the job.
        return request.user.has_perm("django_jobs.view_job")


class AttemptInline(ReadOnlyInline):
    model = Attempt
    verbose_name_plural = gettext_lazy("attempts")
    fields = readonly_fields = (
        "number",
        "outcome_badge",
        "worker",
        "started_at",
        "duration",
        "error",
        "traceback_text",
        "late_report_json",
    )
    ordering = ("number",)

    @admin.display(description=gettext_lazy("outcome"))
    def outcome_badge(self, attempt: Attempt) -> SafeString:
        return outcome_badge(attempt.outcome)

    @admin.display(description=gettext_lazy("worker"))
    def worker(self, attempt: Attempt) -> SafeString | str:
        if attempt.worker_id is None:
            return attempt.worker_name or EMPTY
        url = reverse("admin:django_jobs_worker_change", args=[attempt.worker_id])
        return format_html('<a href="{}">{}</a>', url, attempt.worker_name or attempt.worker_id)

    @admin.display(description=gettext_lazy("duration"))
    def duration(self, attempt: Attempt) -> str:
        return duration_text(attempt.duration)

    @admin.display(description=gettext_lazy("error"))
    def error(self, attempt: Attempt) -> str:
        if not attempt.error_type and not attempt.error_message:
            return EMPTY
        return f"{attempt.error_type}: {attempt.error_message}".strip(": ")

    @admin.display(description=gettext_lazy("traceback"))
    def traceback_text(self, attempt: Attempt) -> SafeString | str:
        if not attempt.traceback:
            return EMPTY
        return format_html(
            '<details class="dj-traceback"><summary>{}</summary><pre>{}</pre></details>',
            _("show"),
            attempt.traceback,
        )

    @admin.display(description=gettext_lazy("late report"))
    def late_report_json(self, attempt: Attempt) -> SafeString | str:
        return EMPTY if attempt.late_report is None else pretty_json(attempt.late_report)


# Characters of a step's result shown on the job page; the API has it whole.
STEP_RESULT_PREVIEW = 200


class StepInline(ReadOnlyInline):
    """What the job's completed steps recorded: what a re-run will not do again."""

    model = Step
    verbose_name_plural = gettext_lazy("steps")
    fields = readonly_fields = ("name", "attempt", "recorded_at", "result_preview")
    ordering = ("id",)

    @admin.display(description=gettext_lazy("result"))
    def result_preview(self, step: Step) -> SafeString:
        text = json.dumps(step.result, sort_keys=True, ensure_ascii=False)
        return format_html(
            '<code class="dj-json">{}</code>', Truncator(text).chars(STEP_RESULT_PREVIEW)
        )


class JobEventInline(ReadOnlyInline):
    model = JobEvent
    verbose_name_plural = gettext_lazy("audit trail")
    fields = readonly_fields = ("at", "transition", "change", "actor", "note")
    ordering = ("at", "id")

    @admin.display(description=gettext_lazy("change"))
    def change(self, event: JobEvent) -> SafeString:
        return format_html("{} → {}", state_badge(event.from_state), state_badge(event.to_state))


# A job may wait for up to 100 jobs and be waited for by any number.
DEPENDENCIES_SHOWN = 20


@admin.register(Job)
@actions.with_verb_permissions
class JobAdmin(ReadOnlyAdmin, admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = (
        "short_id",
        "state_badge",
        "task",
        "queue",
        "tenant",
        "attempts_used",
        "progress",
        "when",
        "error_short",
    )
    list_display_links = ("short_id",)
    list_filter = (
        StateFilter,
        QueueFilter,
        TaskFilter,
        TenantFilter,
        UniqueKeyFilter,
        ("enqueued_at", admin.DateFieldListFilter),
    )
    # Exact matches: get_search_results.
    search_fields = ("id", "idempotency_key", "unique_key", "tenant")
    search_help_text = gettext_lazy("An exact job id, idempotency key, unique key or tenant.")
    # Sorting on any other column would sort the whole table for one page.
    sortable_by = ("when",)
    list_per_page = 100
    paginator = EstimatedCountPaginator
    show_full_result_count = False
    # Facet counts are one COUNT per filter choice over the table: never on a big one.
    show_facets = admin.ShowFacets.NEVER
    actions = actions.BULK_ACTIONS
    inlines = (AttemptInline, StepInline, JobEventInline)
    change_list_template = "django_jobs/admin/job/change_list.html"
    change_form_template = "django_jobs/admin/job/change_form.html"
    fieldsets = (
        (None, {"fields": ("id", "state_badge", "task_name", "task_version", "queue", "priority")}),
        (
            gettext_lazy("Identity"),
            {
                "fields": (
                    "tenant",
                    "initiator",
                    "idempotency_key",
                    "unique_key",
                    "dedup_scope",
                    "concurrency_key",
                    "backend",
                )
            },
        ),
        (
            gettext_lazy("Attempts and lease"),
            {
                "fields": (
                    "attempts",
                    "max_attempts",
                    "attempt_budget",
                    "timeout",
                    "lease_info",
                    "progress_info",
                )
            },
        ),
        (
            gettext_lazy("Times"),
            {
                "fields": (
                    "enqueued_at",
                    "run_after",
                    "expires_at",
                    "started_at",
                    "finished_at",
                    "cancel_requested_at",
                    "updated_at",
                )
            },
        ),
        (
            gettext_lazy("Dependencies and batch"),
            {"fields": ("waits_for", "waited_for_by", "batch_info")},
        ),
        (
            gettext_lazy("Reruns"),
            {"fields": ("rerun_of_link", "reruns")},
        ),
        (
            gettext_lazy("Payload and result"),
            {"fields": ("args_json", "kwargs_json", "result_json", "last_error_text")},
        ),
    )
    readonly_fields = tuple(flatten_fieldsets(fieldsets))

    class Media:
        css = {"all": ("django_jobs/admin.css",)}

    # -- list -----------------------------------------------------------------

    def get_queryset(self, request: HttpRequest) -> QuerySet[Job]:
        # The list never shows the payload or the result: do not fetch them.
        return super().get_queryset(request).defer("args", "kwargs", "result")

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[Job], search_term: str
    ) -> tuple[QuerySet[Job], bool]:
        """Exact matches only: a substring search would scan every row of a big table."""
        term = search_term.strip()
        if not term:
            return queryset, False
        match = Q(idempotency_key=term) | Q(unique_key=term) | Q(tenant=term)
        with contextlib.suppress(ValueError):
            match |= Q(id=uuid.UUID(term))
        return queryset.filter(match), False

    @admin.display(description=gettext_lazy("job"))
    def short_id(self, job: Job) -> str:
        return str(job.id)[:8]

    @admin.display(description=gettext_lazy("state"))
    def state_badge(self, job: Job) -> SafeString:
        return state_badge(job.state)

    @admin.display(description=gettext_lazy("task"))
    def task(self, job: Job) -> SafeString:
        return format_html(
            '<span title="{}">{}</span>', job.task_name, job.task_name.split(".")[-1]
        )

    @admin.display(description=gettext_lazy("attempts"))
    def attempts_used(self, job: Job) -> str:
        return f"{job.attempts}/{job.max_attempts}"

    @admin.display(description=gettext_lazy("progress"))
    def progress(self, job: Job) -> str:
        return Truncator(progress_text(job)).chars(24) or EMPTY

    @admin.display(description=gettext_lazy("age / next run"), ordering="enqueued_at")
    def when(self, job: Job) -> SafeString:
        now = timezone.now()
        if job.state == JobState.QUEUED and job.run_after > now:
            return format_html(
                '<span title="{}">{}</span>',
                job.run_after,
                _("runs in %s") % timeuntil(job.run_after, now),
            )
        return format_html(
            '<span title="{}">{}</span>',
            job.enqueued_at,
            _("%s ago") % timesince(job.enqueued_at, now),
        )

    @admin.display(description=gettext_lazy("last error"))
    def error_short(self, job: Job) -> SafeString | str:
        if not job.last_error:
            return EMPTY
        first_line = job.last_error.strip().splitlines()[-1] if job.last_error.strip() else ""
        return format_html(
            '<span title="{}">{}</span>', job.last_error, Truncator(first_line).chars(48)
        )

    # -- job page ---------------------------------------------------------------

    @admin.display(description=gettext_lazy("waits for"))
    def waits_for(self, job: Job) -> SafeString | str:
        """The jobs it was enqueued after, each with its state: what holds a waiting job."""
        return self._job_links(dependencies.waits_for(job))

    @admin.display(description=gettext_lazy("waited for by"))
    def waited_for_by(self, job: Job) -> SafeString | str:
        return self._job_links(dependencies.waited_for_by(job))

    @admin.display(description=gettext_lazy("batch"))
    def batch_info(self, job: Job) -> SafeString | str:
        """The batch it is a member of, with the batch's progress."""
        if job.batch_id is None:
            return EMPTY
        return batch_link(Batch.objects.using(job._state.db).get(id=job.batch_id))

    @admin.display(description=gettext_lazy("rerun of"))
    def rerun_of_link(self, job: Job) -> SafeString | str:
        """The job an operator copied this one from (it may have been pruned since)."""
        if job.rerun_of is None:
            return EMPTY
        return self._job_links(Job.objects.filter(id=job.rerun_of)) or str(job.rerun_of)

    @admin.display(description=gettext_lazy("reruns"))
    def reruns(self, job: Job) -> SafeString | str:
        return self._job_links(Job.objects.filter(rerun_of=job.id).order_by("enqueued_at"))

    def _job_links(self, rows: QuerySet[Job]) -> SafeString | str:
        limit = DEPENDENCIES_SHOWN
        shown = list(rows.only("id", "state", "task_name")[: limit + 1])
        if not shown:
            return EMPTY
        links = format_html_join(
            mark_safe("<br>"),
            '<a href="{}">{}</a> {} {}',
            (
                (
                    reverse("admin:django_jobs_job_change", args=[other.pk]),
                    str(other.id)[:8],
                    other.task_name.split(".")[-1],
                    state_badge(other.state),
                )
                for other in shown[:limit]
            ),
        )
        if len(shown) > limit:
            return format_html("{}<br>{}", links, _("and more"))
        return links

    @admin.display(description=gettext_lazy("arguments"))
    def args_json(self, job: Job) -> SafeString:
        return pretty_json(job.args)

    @admin.display(description=gettext_lazy("keyword arguments"))
    def kwargs_json(self, job: Job) -> SafeString:
        return pretty_json(job.kwargs)

    @admin.display(description=gettext_lazy("result"))
    def result_json(self, job: Job) -> SafeString:
        return pretty_json(job.result)

    @admin.display(description=gettext_lazy("last error"))
    def last_error_text(self, job: Job) -> SafeString | str:
        if not job.last_error:
            return EMPTY
        return format_html('<pre class="dj-error">{}</pre>', job.last_error)

    @admin.display(description=gettext_lazy("progress"))
    def progress_info(self, job: Job) -> SafeString | str:
        if job.progress_done is None:
            return EMPTY
        bar = ""
        if job.progress_total:
            bar = format_html(
                '<progress value="{}" max="{}"></progress> ',
                job.progress_done,
                job.progress_total,
            )
        return format_html(
            "{}{} <span class='quiet'>{}</span>",
            bar,
            progress_text(job),
            _("(attempt %(n)s, %(at)s)") % {"n": job.progress_attempt, "at": job.progress_at},
        )

    @admin.display(description=gettext_lazy("lease"))
    def lease_info(self, job: Job) -> SafeString | str:
        if job.leased_by is None or job.leased_at is None or job.state not in LEASED_STATES:
            return _("none: no attempt is running")
        now = timezone.now()
        holder = Worker.objects.using(job._state.db).filter(id=job.leased_by).first()
        # What the reaper compares (engine/leases.py): the later of the claim
        # and the holder's last heartbeat, while the holder is not stopped.
        kept_from = job.leased_at
        if holder is not None and holder.stopped_at is None:
            kept_from = max(kept_from, holder.heartbeat_at)
        expires_at = kept_from + timedelta(seconds=lease_seconds(job.backend))
        if expires_at <= now:
            expiry = _("expired %s ago: the reaper will take it back") % timesince(expires_at, now)
        else:
            expiry = _("kept by its worker's heartbeat; expires in %s without one") % timeuntil(
                expires_at, now
            )
        return format_html(
            '{} <a href="{}">{}</a>, {} {}, {} {}; <span class="{}">{}</span>',
            _("token %(t)s held by worker") % {"t": job.attempts},
            reverse("admin:django_jobs_worker_change", args=[job.leased_by]),
            str(job.leased_by)[:8],
            _("acquired"),
            job.leased_at,
            _("last heartbeat"),
            holder.heartbeat_at if holder is not None else "—",
            "dj-stale" if expires_at <= now else "",
            expiry,
        )

    def get_object(self, request: HttpRequest, object_id: str, from_field: Any = None) -> Any:
        try:
            uuid.UUID(str(object_id))
        except ValueError:
            return None
        return self.get_queryset(request).defer(None).filter(pk=object_id).first()

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        job = self.get_object(request, object_id)
        extra_context = {
            **(extra_context or {}),
            "verb_buttons": actions.job_buttons(request, job) if job is not None else [],
        }
        return super().change_view(request, object_id, form_url, extra_context)

    # -- extra pages --------------------------------------------------------------

    def get_urls(self) -> list[URLPattern]:
        wrap = self.admin_site.admin_view
        return [
            path("dashboard/", wrap(self.dashboard_view), name="django_jobs_dashboard"),
            path(
                "dashboard/timeseries/",
                wrap(self.timeseries_view),
                name="django_jobs_dashboard_timeseries",
            ),
            path(
                # path: a queue name may hold a "/" ("reports/daily").
                "dashboard/queue/<path:queue>/pause/",
                wrap(self.pause_view),
                name="django_jobs_queue_pause",
            ),
            path(
                "<uuid:object_id>/do/<slug:verb_name>/",
                wrap(self.verb_view),
                name="django_jobs_job_verb",
            ),
            *super().get_urls(),
        ]

    def verb_view(self, request: HttpRequest, object_id: uuid.UUID, verb_name: str) -> HttpResponse:
        return actions.verb_view(self, request, object_id, verb_name)

    def dashboard_view(self, request: HttpRequest) -> TemplateResponse:
        return dashboard.view(self, request)

    def timeseries_view(self, request: HttpRequest) -> JsonResponse:
        return dashboard.timeseries_view(self, request)

    def pause_view(self, request: HttpRequest, queue: str) -> HttpResponse:
        return dashboard.pause_view(self, request, queue)


def lease_seconds(backend: str) -> float:
    """The LEASE_SECONDS the reapers of a job's backend go by (the default's, if unknown)."""
    try:
        return jobs_backend(backend).settings.LEASE_SECONDS
    except ImproperlyConfigured:
        return JobsOptions().LEASE_SECONDS
