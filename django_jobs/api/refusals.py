"""How the API answers each refusal of an operator's request: the one place that maps them.

``control`` raises a class per refusal (``exceptions.py``); a view catches
``REFUSED`` and returns ``answer(exc)``. Refusals about the request's fields
are 400 with the field named, as DRF reports its own validation errors.
"""

from __future__ import annotations

from rest_framework import status
from rest_framework.exceptions import ValidationError
from rest_framework.response import Response

from django_jobs.exceptions import (
    ActorRequiredError,
    InvalidTransitionError,
    JobNotFoundError,
    NoteRequiredError,
    OperatorRequestError,
    QueueNotFoundError,
    StaleCountError,
    UnknownVerbError,
)

# Refusal -> (HTTP status, the request field it is about, if any).
STATUS: dict[type[Exception], tuple[int, str | None]] = {
    InvalidTransitionError: (status.HTTP_409_CONFLICT, None),
    JobNotFoundError: (status.HTTP_404_NOT_FOUND, None),  # pruned since it was read
    QueueNotFoundError: (status.HTTP_404_NOT_FOUND, None),
    NoteRequiredError: (status.HTTP_400_BAD_REQUEST, "note"),
    ActorRequiredError: (status.HTTP_400_BAD_REQUEST, "non_field_errors"),
    UnknownVerbError: (status.HTTP_400_BAD_REQUEST, "non_field_errors"),
    # The filter matches another number of jobs than the operator confirmed.
    StaleCountError: (status.HTTP_409_CONFLICT, None),
}
REFUSED = (InvalidTransitionError, JobNotFoundError, OperatorRequestError)


def answer(exc: Exception) -> Response:
    """The response to ``exc``; a field error is raised, for DRF to render as it does its own."""
    code, field = next(STATUS[kind] for kind in type(exc).__mro__ if kind in STATUS)
    if field is not None:
        raise ValidationError({field: [str(exc)]}) from exc
    return Response({"detail": str(exc)}, status=code)
