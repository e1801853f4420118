"""The audit trail of queue pauses and resumes, read-only."""

from __future__ import annotations

from django.contrib import admin

from ..models import QueueEvent
from .readonly import ReadOnlyAdmin


@admin.register(QueueEvent)
class QueueEventAdmin(ReadOnlyAdmin, admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = ("at", "queue", "action", "actor", "note")
    list_filter = ("queue", "action")
    search_fields = ("queue", "actor", "note")
    date_hierarchy = "at"
