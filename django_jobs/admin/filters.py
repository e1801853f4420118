"""Changelist filters whose choices cost no query on a large table.

Django's default filter for a plain ``CharField`` lists its values with
``SELECT DISTINCT``, a full scan of the jobs table on every page load. Queues
come from the backend's configuration, tasks from the registry of this
process, and tenants — unbounded in number — are typed, not listed.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from django.contrib import admin
from django.contrib.admin.options import IncorrectLookupParameters
from django.contrib.admin.views.main import PAGE_VAR, ChangeList
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.translation import gettext_lazy as _

from .. import registry
from ..backend import JobsBackend
from ..framework import task_backends
from ..models import Job
from ..states import JobState
from ..text import unstorable


class StateFilter(admin.SimpleListFilter):
    title = _("state")
    parameter_name = "state"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [(str(value), str(label)) for value, label in JobState.choices]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Job]) -> QuerySet[Job]:
        value = self.value()
        return queryset.filter(state=value) if value else queryset


class QueueFilter(admin.SimpleListFilter):
    title = _("queue")
    parameter_name = "queue"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        queues: set[str] = set()
        for backend in task_backends.all():
            if isinstance(backend, JobsBackend):
                queues.update(backend.queues or ())
        return [(queue, queue) for queue in sorted(queues)]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Job]) -> QuerySet[Job]:
        value = self.value()
        return queryset.filter(queue=value) if value else queryset


class TaskFilter(admin.SimpleListFilter):
    """The registered tasks, by their short name; the full path is the value."""

    title = _("task")
    parameter_name = "task"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        # The web process imports task modules only when something enqueues;
        # discover them like a worker does, so the list is whole from the start.
        registry.discover()
        names = set(registry.names())
        if self.value():  # a link to a task that is no longer registered still filters
            names.add(str(self.value()))
        return [(name, name.rsplit(".", 1)[-1]) for name in sorted(names)]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Job]) -> QuerySet[Job]:
        value = self.value()
        return queryset.filter(task_name=value) if value else queryset


class TypedFilter(admin.SimpleListFilter):
    """An exact value of ``field``, typed into a box: there may be millions of them."""

    field: str
    parameter_name: str
    template = "django_jobs/admin/input_filter.html"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        # Non-empty, or Django hides the filter; the template ignores it.
        return [("", "")]

    # Not Django's choice shape: this filter's own template reads a text box's value
    # and the other parameters it must keep in its form.
    def choices(self, changelist: ChangeList) -> Iterator[dict[str, Any]]:  # type: ignore[override]
        yield {
            "value": self.value() or "",
            "parameter_name": self.parameter_name,
            "clear_query_string": changelist.get_query_string(remove=[self.parameter_name]),
            "kept": [
                (key, value)
                for key, values in self.request.GET.lists()
                if key not in (self.parameter_name, PAGE_VAR)
                for value in values
            ],
        }

    def queryset(self, request: HttpRequest, queryset: QuerySet[Job]) -> QuerySet[Job]:
        value = self.value()
        if value and unstorable(value) is not None:
            # No row holds it, and PostgreSQL refuses to compare with it (a 500):
            # the admin's own answer to a parameter it cannot use.
            raise IncorrectLookupParameters(f"{self.parameter_name}: {value!r}")
        return queryset.filter(**{self.field: value}) if value else queryset


class TenantFilter(TypedFilter):
    title = _("tenant")
    parameter_name = field = "tenant"


class UniqueKeyFilter(TypedFilter):
    """The jobs of one unique key, every scope: what a debounce or a window kept or let in."""

    title = _("unique key")
    parameter_name = field = "unique_key"
