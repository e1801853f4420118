"""Durable background jobs for Django, behind Django's Tasks framework.

Public API: the backend (``django_jobs.backend.JobsBackend``, named in
settings), the retry policy pieces a task declares, the exceptions enqueue
raises, and the context a ``takes_context=True`` task receives.
"""

from .exceptions import (
    ArgumentsNotJSONError,
    EnqueueError,
    InvalidJobOptionError,
    LeaseLostError,
    PayloadTooLargeError,
    ResultNotJSONError,
    ResultTooLargeError,
    RetryLater,
    UnknownQueueError,
    UnknownTaskError,
)
from .retry import Backoff
from .states import AttemptOutcome, JobState

__all__ = [
    "ArgumentsNotJSONError",
    "AttemptOutcome",
    "Backoff",
    "EnqueueError",
    "InvalidJobOptionError",
    "JobState",
    "LeaseLostError",
    "PayloadTooLargeError",
    "ResultNotJSONError",
    "ResultTooLargeError",
    "RetryLater",
    "UnknownQueueError",
    "UnknownTaskError",
]
