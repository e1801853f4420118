"""The workers page: every registered worker process, read-only.

Rows are written by the workers themselves (register, heartbeat, stop); an
operator reads them to see who is alive and what each one holds. A worker
whose heartbeat is older than ``WORKER_STALE_SECONDS`` is marked stale: it may
be hung, partitioned or killed — its leases expire and the reaper takes its
jobs back, nothing here needs to.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.contrib import admin
from django.core.exceptions import ImproperlyConfigured
from django.db.models import QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString
from django.utils.translation import gettext_lazy as _

from ..backend import jobs_backend
from ..models import Job, Worker, leases_held
from ..states import LEASED_STATES
from .readonly import ReadOnlyAdmin


def stale_after() -> timedelta:
    try:
        seconds = jobs_backend("default").settings.WORKER_STALE_SECONDS
    except ImproperlyConfigured:
        seconds = 30.0
    return timedelta(seconds=seconds)


def worker_status(worker: Worker) -> str:
    if worker.stopped_at is not None:
        return "stopped"
    if timezone.now() - worker.heartbeat_at > stale_after():
        return "stale"
    return "live"


class StatusFilter(admin.SimpleListFilter):
    title = _("status")
    parameter_name = "status"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, Any]]:
        return [("live", _("live")), ("stale", _("stale")), ("stopped", _("stopped"))]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Worker]) -> QuerySet[Worker]:
        cutoff = timezone.now() - stale_after()
        match self.value():
            case "live":
                return queryset.filter(stopped_at__isnull=True, heartbeat_at__gte=cutoff)
            case "stale":
                return queryset.filter(stopped_at__isnull=True, heartbeat_at__lt=cutoff)
            case "stopped":
                return queryset.filter(stopped_at__isnull=False)
        return queryset


@admin.register(Worker)
class WorkerAdmin(ReadOnlyAdmin, admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = (
        "__str__",
        "status_badge",
        "queue_list",
        "concurrency",
        "running_jobs",
        "heartbeat_at",
        "started_at",
        "jobs_done",
    )
    list_filter = (StatusFilter, "host")
    search_fields = ("=host", "=pid")
    fields = readonly_fields = (
        "id",
        "status_badge",
        "host",
        "pid",
        "queue_list",
        "concurrency",
        "backend",
        "started_at",
        "heartbeat_at",
        "stopped_at",
        "jobs_done",
        "leases",
    )

    class Media:
        css = {"all": ("django_jobs/admin.css",)}

    def get_queryset(self, request: HttpRequest) -> QuerySet[Worker]:
        queryset: QuerySet[Worker] = super().get_queryset(request)
        return queryset.annotate(running=leases_held(queryset.db))

    @admin.display(description=_("status"))
    def status_badge(self, worker: Worker) -> SafeString:
        status = worker_status(worker)
        return format_html('<span class="dj-badge dj-worker-{}">{}</span>', status, status)

    @admin.display(description=_("queues"))
    def queue_list(self, worker: Worker) -> str:
        return ", ".join(worker.queues) or "—"

    @admin.display(description=_("running jobs"), ordering="running")
    def running_jobs(self, worker: Worker) -> int:
        return int(getattr(worker, "running", 0))

    @admin.display(description=_("leases held"))
    def leases(self, worker: Worker) -> SafeString | str:
        held = (
            Job.objects.filter(leased_by=worker.id, state__in=sorted(LEASED_STATES))
            .order_by("leased_at")
            .only("id", "attempts", "leased_at")
        )
        if not held:
            return "—"
        return format_html(
            "<ul>{}</ul>",
            format_html_join(
                "",
                '<li><a href="{}">{}</a> token {}, since {}</li>',
                (
                    (
                        reverse("admin:django_jobs_job_change", args=[job.id]),
                        job.id,
                        job.attempts,
                        job.leased_at,
                    )
                    for job in held
                ),
            ),
        )
