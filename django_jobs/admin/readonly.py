"""Admin pages that show history and never change it.

Jobs, workers and the queue audit are written only by the storage engine
(and the operator verbs): the admin must not add, edit or delete their rows.
"""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest


class ReadOnlyAdmin:
    """Mixed into a ModelAdmin: no add, change or delete, whatever the user's permissions."""

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
