"""The authority policy's interface, on its own so the settings can check a policy against it.

``DJANGO_JOBS_API["AUTHORITY_POLICY"]`` must name a subclass (``conf.py``
checks); ``permissions.DefaultAuthority`` is the one django-jobs ships.
"""

from __future__ import annotations

from django.db.models import QuerySet
from rest_framework.request import Request

from django_jobs.models import Job


class Authority:
    """The policy interface, denying everything; subclass it to grant."""

    def has_permission(self, request: Request, action: str) -> bool:
        return False

    def filter_jobs(self, request: Request, action: str, queryset: QuerySet[Job]) -> QuerySet[Job]:
        return queryset.none()

    def has_job_permission(self, request: Request, action: str, job: Job) -> bool:
        return False
