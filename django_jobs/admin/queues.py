"""The audit trail of queue pauses and resumes, read-only."""

from __future__ import annotations

from django.contrib import admin
from django.http import HttpRequest

from ..models import QueueEvent


@admin.register(QueueEvent)
class QueueEventAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = ("at", "queue", "action", "actor", "note")
    list_filter = ("queue", "action")
    search_fields = ("queue", "actor", "note")
    date_hierarchy = "at"

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False
