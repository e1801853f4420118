"""Cursor pagination that answers a bad cursor or page size with 400, not 404 or a 500.

Cursors, not page numbers: the job table changes under the reader (new jobs,
jobs finishing), and a cursor neither skips nor repeats a row when it does,
nor gets slower the deeper one pages (no OFFSET over the whole table).

DRF's own ``CursorPagination`` answers a malformed cursor with 404, ignores a
malformed ``page_size``, and passes the position inside a forged cursor
straight to the database, where a value that is not a date or a number
would be a 500. Here each is a 400 naming the parameter.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from django.core.exceptions import FieldDoesNotExist
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db.models import Field, Model
from django.utils.timezone import is_aware, make_aware
from rest_framework.exceptions import NotFound, ValidationError
from rest_framework.pagination import Cursor, CursorPagination
from rest_framework.request import Request

from .conf import api_settings


class StrictCursorPagination(CursorPagination):
    cursor_query_param = "cursor"
    page_size_query_param = "page_size"
    invalid_cursor_message = "Invalid cursor: use the next or previous link as given."

    def paginate_queryset(
        self, queryset: Any, request: Request, view: Any = None
    ) -> list[Any] | None:
        # decode_cursor checks the position against the ordering column of this model.
        self._model: type[Model] = queryset.model
        return super().paginate_queryset(queryset, request, view)

    def get_page_size(self, request: Request) -> int:
        settings = api_settings()
        raw = request.query_params.get(self.page_size_query_param)
        if raw is None:
            return settings.page_size
        try:
            size = int(raw)
        except ValueError:
            size = 0
        if size < 1:
            raise ValidationError(
                {self.page_size_query_param: [f"A whole number >= 1, not {raw!r}."]}
            )
        # Larger requests are served at the cap, as DRF does; the response's
        # length tells the client so.
        return min(size, settings.max_page_size)

    def decode_cursor(self, request: Request) -> Cursor | None:
        try:
            cursor: Cursor | None = super().decode_cursor(request)
        except NotFound:
            raise ValidationError(
                {self.cursor_query_param: [self.invalid_cursor_message]}
            ) from None
        if cursor is None or cursor.position is None:
            return cursor
        # The position is compared with the ordering column in SQL: check it is
        # a value of that column first, so a forged cursor is a 400, not a 500.
        try:
            field = self._model._meta.get_field(self.ordering[0].lstrip("-"))
            position = str(cursor.position)
            if "\x00" in position:
                raise DjangoValidationError("NUL character")
            if not isinstance(field, Field):  # a relation: never an ordering of ours
                raise FieldDoesNotExist(field.name)
            value = field.to_python(position)
            if isinstance(value, datetime):
                # PostgreSQL refuses offsets beyond +-15:59 that Python accepts.
                value = (value if is_aware(value) else make_aware(value)).astimezone(UTC)
                # The stubs type position as int; DRF keeps any column's str().
                return cursor._replace(position=str(value))  # type: ignore[arg-type]
        except (FieldDoesNotExist, DjangoValidationError, ValueError, OverflowError):
            raise ValidationError(
                {self.cursor_query_param: [self.invalid_cursor_message]}
            ) from None
        return cursor
