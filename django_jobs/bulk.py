"""enqueue_many's rows: validated calls written by COPY, without model instances.

A batch is one task with one set of options, so every column but the id, the
arguments and the timestamps holds the same value for all of its jobs. Those
are rendered once per batch, and each job costs one line of COPY text built
from JSON the validation already produced. Model instances (their init
signals, their per-field defaults) and psycopg's adaptation of every value
were most of the time of a 20,000-job batch; docs/benchmarks.md has the figures.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import datetime
from enum import Enum
from typing import Any, NamedTuple

from django.db import connections
from django.db.models import Field, JSONField

from .models import Job
from .payload import encode

# COPY sends this many lines per write: fewer, larger writes than one per job.
_LINES_PER_WRITE = 1000


class Call(NamedTuple):
    """One validated call of a batch: what its row and its result need."""

    id: str  # the job's UUID as text, which both the COPY line and the result take
    args: list[Any]  # the stored form (codec.py), as the row holds it
    kwargs: dict[str, Any]
    args_json: str
    kwargs_json: str
    at: datetime  # enqueued_at and updated_at
    run_after: datetime  # ``at`` itself unless the options gave a time


def copy_jobs(db: str, prototype: Job, calls: Iterator[Call]) -> None:
    """Insert one row per call, the rest of each row copied from ``prototype``.

    ``prototype`` is a job of the batch's task and options (``new_job`` built
    it, so it holds every default).
    """
    per_call = ["id", "args", "kwargs", "enqueued_at", "updated_at", "run_after"]
    fields = {f.attname: f for f in Job._meta.concrete_fields}
    shared = [name for name in fields if name not in per_call]
    tail = "".join(f"\t{_text(fields[name], getattr(prototype, name))}" for name in shared)
    quote = connections[db].ops.quote_name
    columns = ", ".join(quote(str(fields[name].column)) for name in [*per_call, *shared])
    connection = connections[db]
    # psycopg's own cursor, for COPY; its errors (a dropped connection, a
    # terminated backend) become Django's, as for every other statement.
    with connection.cursor() as wrapper, connection.wrap_database_errors:
        cursor = wrapper.cursor
        with cursor.copy(f"COPY {Job._meta.db_table} ({columns}) FROM STDIN") as copy:
            chunk: list[str] = []
            for line in _lines(calls, tail + "\n"):
                chunk.append(line)
                if len(chunk) == _LINES_PER_WRITE:
                    copy.write("".join(chunk))
                    chunk.clear()
            if chunk:
                copy.write("".join(chunk))


def _lines(calls: Iterator[Call], tail: str) -> Iterator[str]:
    """COPY text lines: id, args, kwargs, enqueued_at, updated_at, run_after, then ``tail``."""
    for call in calls:
        args, kwargs = _escape(call.args_json), _escape(call.kwargs_json)
        at = call.at.isoformat()
        after = at if call.run_after is call.at else call.run_after.isoformat()
        yield f"{call.id}\t{args}\t{kwargs}\t{at}\t{at}\t{after}{tail}"


def _text(field: Field[Any, Any], value: Any) -> str:
    r"""``value`` in COPY's text format (``\N`` is NULL), as the ORM would store it."""
    if value is None:
        return r"\N"
    if isinstance(field, JSONField):
        return _escape(encode(value))
    if isinstance(value, Enum):  # JobState and other choices store their value
        value = value.value
    if isinstance(value, str):
        return _escape(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, uuid.UUID):  # a batch's id
        return str(value)
    raise TypeError(f"enqueue_many cannot write {type(value).__name__} to Job.{field.name}.")


def _escape(text: str) -> str:
    """COPY text escapes: backslash, and the tab, newline and CR that delimit."""
    if "\\" in text:
        text = text.replace("\\", "\\\\")
    if "\t" in text or "\n" in text or "\r" in text:
        text = text.replace("\t", "\\t").replace("\n", "\\n").replace("\r", "\\r")
    return text
