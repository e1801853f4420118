"""Query parameters of the job list: filters, ordering, and refusing what is not one.

Every parameter is validated: a malformed value, an unknown ordering or an
unknown parameter answers 400 naming it. An unknown parameter is refused
rather than ignored because a typo (``?tenat=acme``) would otherwise return
*every* job the user may see, which looks like an answer and is not.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import django_filters
from django import forms
from django.db.models import QuerySet
from django.utils.timezone import is_naive
from django_filters.fields import IsoDateTimeField
from django_filters.rest_framework import DjangoFilterBackend
from rest_framework import filters
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request
from rest_framework.settings import api_settings as drf_settings
from rest_framework.views import APIView

from django_jobs.models import Job
from django_jobs.states import JobState, django_status

from ..framework import TaskResultStatus

# Parameters the pagination and the format override read, besides a view's filters.
PAGINATION_PARAMETERS = ("cursor", "page_size")
ORDERING_PARAMETER = "ordering"


class UTCDateTimeField(IsoDateTimeField):
    """An ISO 8601 date-time, converted to UTC before it reaches the database.

    Python accepts offsets up to +-23:59, PostgreSQL only up to +-15:59: sent
    as given, ``+16:00`` would be a 500. In UTC every offset is fine, and a
    value that has no UTC equivalent (year 1 at +01:00) is a 400 naming the
    parameter. A naive value was already read in the current time zone.
    """

    def to_python(self, value: Any) -> datetime | None:
        parsed: datetime | None = super().to_python(value)
        if parsed is None or is_naive(parsed):  # USE_TZ = False: compared as given
            return parsed
        try:
            return parsed.astimezone(UTC)
        except (OverflowError, ValueError):
            raise forms.ValidationError("Date-time out of range.", code="invalid") from None


class UTCDateTimeFilter(django_filters.IsoDateTimeFilter):
    field_class = UTCDateTimeField


class JobFilter(django_filters.FilterSet):
    state = django_filters.MultipleChoiceFilter(
        choices=JobState.choices, help_text="Our detailed state; repeat to match any of several."
    )
    status = django_filters.ChoiceFilter(
        choices=TaskResultStatus.choices,
        method="filter_status",
        help_text="Django's TaskResultStatus, mapped onto our states.",
    )
    queue = django_filters.CharFilter(field_name="queue")
    task = django_filters.CharFilter(field_name="task_name", help_text="Module path of the task.")
    tenant = django_filters.CharFilter(field_name="tenant")
    idempotency_key = django_filters.CharFilter(field_name="idempotency_key")
    unique_key = django_filters.CharFilter(field_name="unique_key")
    enqueued_after = UTCDateTimeFilter(
        field_name="enqueued_at", lookup_expr="gte", help_text="enqueued_at >= this (ISO 8601)."
    )
    enqueued_before = UTCDateTimeFilter(
        field_name="enqueued_at", lookup_expr="lt", help_text="enqueued_at < this (ISO 8601)."
    )
    finished_after = UTCDateTimeFilter(
        field_name="finished_at", lookup_expr="gte", help_text="finished_at >= this (ISO 8601)."
    )
    finished_before = UTCDateTimeFilter(
        field_name="finished_at", lookup_expr="lt", help_text="finished_at < this (ISO 8601)."
    )

    class Meta:
        model = Job
        fields: list[str] = []

    def filter_status(self, queryset: QuerySet[Job], name: str, value: str) -> QuerySet[Job]:
        return queryset.filter(state__in=[s for s in JobState if django_status(s) == value])


class KnownParametersFilter(filters.BaseFilterBackend):
    """Refuse query parameters that no filter, the ordering or the pagination reads."""

    #: Whether the view pages and orders what it filters.
    lists = True

    def known(self, view: APIView) -> set[str]:
        names = {drf_settings.URL_FORMAT_OVERRIDE or "format"}
        filterset_class = getattr(view, "filterset_class", None)
        if filterset_class is not None:
            names.update(filterset_class.base_filters)
        if self.lists:
            names.update(PAGINATION_PARAMETERS)
            if getattr(view, "ordering_fields", None):
                names.add(ORDERING_PARAMETER)
        return names

    def filter_queryset(
        self, request: Request, queryset: QuerySet[Any], view: APIView
    ) -> QuerySet[Any]:
        known = self.known(view)
        unknown = sorted(set(request.query_params) - known)
        if unknown:
            message = f"Unknown query parameter; known parameters are {', '.join(sorted(known))}."
            raise ValidationError({name: [message] for name in unknown})
        return queryset


class KnownFilterParameters(KnownParametersFilter):
    """A bulk verb's parameters: the list's filters, not its ordering or its pages.

    The verb walks every matching job by id, so those would be ignored: a list
    URL of page 2 pasted into a verb looked as if it acted on that page, and
    acted on every page.
    """

    lists = False


class JobFilterBackend(DjangoFilterBackend):
    """django-filter's backend, with its browsable-API form rendered from our template.

    django-filter's own template lives in its app, which a project need not add
    to ``INSTALLED_APPS`` to use the filters; without it the browsable API was
    a ``TemplateDoesNotExist``. Ours is found through ``django_jobs``, which
    every project using the API has installed.
    """

    template = "django_jobs/api/filter_form.html"


class StrictOrderingFilter(filters.OrderingFilter):
    """DRF's ordering, but an unknown field is a 400, and ties are broken by id.

    The tie-break makes the order total, which cursor pagination needs to page
    through equal priorities or timestamps without skipping or repeating a job.
    Only columns that are never NULL are offered: a cursor position cannot be NULL.
    """

    ordering_param = ORDERING_PARAMETER

    def allowed(self, view: APIView) -> list[str]:
        fields = list(getattr(view, "ordering_fields", ()))
        return sorted([*fields, *(f"-{name}" for name in fields)])

    def get_schema_operation_parameters(self, view: APIView) -> list[dict[str, Any]]:
        return [
            {
                "name": self.ordering_param,
                "required": False,
                "in": "query",
                "description": f"One field; '-' for descending. Default: {view.ordering}.",  # type: ignore[attr-defined]
                "schema": {"type": "string", "enum": self.allowed(view)},
            }
        ]

    def get_ordering(
        self, request: Request, queryset: QuerySet[Any], view: APIView
    ) -> tuple[str, ...]:
        valid = self.allowed(view)
        raw = request.query_params.get(self.ordering_param)
        if raw is None:
            ordering = view.ordering  # type: ignore[attr-defined]  # every view using us sets it
        else:
            terms = [term.strip() for term in raw.split(",")]
            if len(terms) != 1 or terms[0] not in valid:
                raise ValidationError(
                    {self.ordering_param: [f"Order by one of {', '.join(valid)}, not {raw!r}."]}
                )
            ordering = terms[0]
        tiebreak = "-pk" if ordering.startswith("-") else "pk"
        return (ordering, tiebreak)
