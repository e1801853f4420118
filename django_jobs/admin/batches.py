"""The batches page: each batch's progress, its callbacks and its members, read-only.

A batch's counters are written by the engine as its members settle
(``engine/batches.py``); an operator reads them here to see how far a batch
is and why its callback has not run. The members are repaired on the job
pages, with the operator verbs, like any job.
"""

from __future__ import annotations

import contextlib
import uuid
from typing import Any

from django.contrib import admin
from django.db.models import Q, QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html, format_html_join
from django.utils.http import urlencode
from django.utils.safestring import SafeString, mark_safe
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from ..models import Batch, Job
from .readonly import ReadOnlyAdmin

EMPTY = "—"
# Members listed on a batch's page; the job list, filtered by the batch, has them all.
MEMBERS_SHOWN = 50


def progress_text(batch: Batch) -> str:
    """``7/10 settled: 6 succeeded, 1 failed, 0 cancelled``."""
    return _(
        "%(settled)d/%(total)d settled: %(ok)d succeeded, %(failed)d failed, "
        "%(cancelled)d cancelled"
    ) % {
        "settled": batch.settled,
        "total": batch.total,
        "ok": batch.succeeded,
        "failed": batch.failed,
        "cancelled": batch.cancelled,
    }


def batch_link(batch: Batch) -> SafeString:
    """A link to a batch's page with its progress: the job page's "batch" field."""
    return format_html(
        '<a href="{}">{}</a> <span class="dj-badge dj-batch-{}">{}</span> {}',
        reverse("admin:django_jobs_batch_change", args=[batch.pk]),
        batch.label or str(batch.id)[:8],
        batch.state,
        batch.get_state_display(),
        progress_text(batch),
    )


@admin.register(Batch)
class BatchAdmin(ReadOnlyAdmin, admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = (
        "short_id",
        "label",
        "state_badge",
        "done",
        "succeeded",
        "failed",
        "cancelled",
        "created_at",
        "finished_at",
    )
    list_display_links = ("short_id",)
    list_filter = ("state",)
    search_fields = ("=label",)
    show_facets = admin.ShowFacets.NEVER
    fields = readonly_fields = (
        "id",
        "label",
        "state_badge",
        "progress",
        "backend",
        "created_at",
        "finished_at",
        "succeeded_at",
        "on_finish_info",
        "on_success_info",
        "member_list",
    )

    class Media:
        css = {"all": ("django_jobs/admin.css",)}

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[Batch], search_term: str
    ) -> tuple[QuerySet[Batch], bool]:
        """By exact label or id: a substring search would scan every row."""
        term = search_term.strip()
        if not term:
            return queryset, False
        match = Q(label=term)
        with contextlib.suppress(ValueError):
            match |= Q(id=uuid.UUID(term))
        return queryset.filter(match), False

    @admin.display(description=gettext_lazy("batch"))
    def short_id(self, batch: Batch) -> str:
        return str(batch.id)[:8]

    @admin.display(description=gettext_lazy("state"), ordering="state")
    def state_badge(self, batch: Batch) -> SafeString:
        return format_html(
            '<span class="dj-badge dj-batch-{}">{}</span>', batch.state, batch.get_state_display()
        )

    @admin.display(description=gettext_lazy("settled / total"))
    def done(self, batch: Batch) -> str:
        return f"{batch.settled}/{batch.total}"

    @admin.display(description=gettext_lazy("progress"))
    def progress(self, batch: Batch) -> str:
        return progress_text(batch)

    @admin.display(description=gettext_lazy("on finish"))
    def on_finish_info(self, batch: Batch) -> SafeString | str:
        return self._callback(batch.on_finish, batch.on_finish_job)

    @admin.display(description=gettext_lazy("on success"))
    def on_success_info(self, batch: Batch) -> SafeString | str:
        return self._callback(batch.on_success, batch.on_success_job)

    def _callback(self, stored: dict[str, Any] | None, job_id: Any) -> SafeString | str:
        if stored is None:
            return EMPTY
        if job_id is None:
            return format_html("{} ({})", stored["task_name"], _("not due yet"))
        return format_html(
            '{} — <a href="{}">{}</a>',
            stored["task_name"],
            reverse("admin:django_jobs_job_change", args=[job_id]),
            _("enqueued as job %(id)s") % {"id": str(job_id)[:8]},
        )

    @admin.display(description=gettext_lazy("members"))
    def member_list(self, batch: Batch) -> SafeString | str:
        """The first members, each with its state, and a link to all of them in the job list."""
        shown = list(
            Job.objects.using(batch._state.db)
            .filter(batch=batch)
            .only("id", "state", "task_name")
            .order_by("enqueued_at", "id")[:MEMBERS_SHOWN]
        )
        if not shown:
            return EMPTY
        links = format_html_join(
            mark_safe("<br>"),
            '<a href="{}">{}</a> {} <span class="dj-badge dj-state-{}">{}</span>',
            (
                (
                    reverse("admin:django_jobs_job_change", args=[job.pk]),
                    str(job.id)[:8],
                    job.task_name.split(".")[-1],
                    job.state,
                    job.get_state_display(),
                )
                for job in shown
            ),
        )
        every = (
            reverse("admin:django_jobs_job_changelist") + "?" + urlencode({"batch": str(batch.pk)})
        )
        return format_html(
            '{}<br><a href="{}">{}</a>',
            links,
            every,
            _("all %(total)d members in the job list") % {"total": batch.total},
        )
