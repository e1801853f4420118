"""Storage engines: how jobs are stored, claimed and finished on one database.

``engine_for`` is the one place that looks at which database holds the jobs.
"""

from __future__ import annotations

from django.db import connections

from ..conf import JobsOptions
from .base import Engine
from .postgres import PostgresEngine
from .sqlite import SqliteEngine

__all__ = ["Engine", "PostgresEngine", "SqliteEngine", "engine_for"]

_ENGINES: dict[str, type[Engine]] = {"postgresql": PostgresEngine, "sqlite": SqliteEngine}


def engine_for(db: str, options: JobsOptions | None = None) -> Engine:
    """The engine for the database alias ``db``, bound to a backend's ``options``."""
    vendor = connections[db].vendor
    try:
        engine = _ENGINES[vendor]
    except KeyError:
        raise NotImplementedError(
            f"django_jobs stores jobs on PostgreSQL or SQLite; DATABASES[{db!r}] is {vendor}."
        ) from None
    return engine(db, options)
