"""Log lines an on-call person and a log pipeline can both use.

Every line about one job's attempt carries the same fields twice: in the
message, for a person reading a terminal, and as ``extra=`` attributes of the
record (``job_id``, ``task``, ``queue``, ``attempt``), so a JSON pipeline, Sentry
or Loki can filter and group on them without parsing text. ``job_fields``
builds them, so no call site spells them differently.

``JSONFormatter`` writes one JSON object per record, with those attributes and
any other ``extra=`` a caller passed; it needs nothing beyond the standard
library, so a project gets structured logs without a dependency
(docs/operations.md#logs has a ``LOGGING`` example).
"""

from __future__ import annotations

import json
import logging
import uuid
from datetime import UTC, datetime
from typing import Any

# What every LogRecord has: anything else on a record came from ``extra=``.
_STANDARD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {
    "message",
    "asctime",
}


def job_fields(job_id: uuid.UUID, task: str, queue: str, attempt: int) -> dict[str, Any]:
    """The ``extra=`` of a line about one attempt of one job."""
    return {"job_id": str(job_id), "task": task, "queue": queue, "attempt": attempt}


class JSONFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, ``extra=`` fields, traceback.

    A value JSON cannot hold is written as its ``str()``: a log line must
    never be lost to a field it could not encode.
    """

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, tz=UTC).isoformat(),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "process": record.process,
            "thread": record.threadName,
        }
        for name, value in vars(record).items():
            if name not in _STANDARD and name not in entry:
                entry[name] = value
        if record.exc_info:
            entry["exc_type"] = getattr(record.exc_info[0], "__qualname__", None)
            entry["traceback"] = self.formatException(record.exc_info)
        elif record.exc_text:
            entry["traceback"] = record.exc_text
        if record.stack_info:
            entry["stack"] = self.formatStack(record.stack_info)
        return json.dumps(entry, default=str)
