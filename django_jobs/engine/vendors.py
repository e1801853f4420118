"""Which engine serves which database: the one place that looks at the vendor.

Kept free of the engines' own imports (they are named, and imported when
first asked for), so that any module — the wake-ups the engines send, the
system checks — may ask what a database can do without an import cycle.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from django.db import connections
from django.utils.module_loading import import_string

# Django's vendor name → the engine class.
ENGINES = {
    "postgresql": "django_jobs.engine.postgres.PostgresEngine",
    "sqlite": "django_jobs.engine.sqlite.SqliteEngine",
}

LABELS = {"postgresql": "PostgreSQL", "sqlite": "SQLite"}

# The last part of a DATABASES ENGINE setting → Django's vendor name, for the
# system checks, which run before any connection is opened.
BACKENDS = {
    "postgresql": "postgresql",
    "postgresql_psycopg2": "postgresql",
    "sqlite3": "sqlite",
}


# What a database's OPTIONS must hold for its engine to be correct, by vendor:
# option → (accepted values, why). SQLite has no row locks, so every
# transaction must take the write lock at BEGIN.
REQUIRED_OPTIONS: dict[str, dict[str, tuple[tuple[str, ...], str]]] = {
    "sqlite": {
        "transaction_mode": (
            ("IMMEDIATE", "EXCLUSIVE"),
            "SQLite has no row locks; django_jobs serialises claims with BEGIN IMMEDIATE. "
            "Without it, concurrent workers fail with 'database is locked'.",
        )
    }
}


def vendor(db: str) -> str:
    """The vendor of the database alias ``db``, refused if no engine serves it."""
    name = connections[db].vendor
    if name not in ENGINES:
        raise NotImplementedError(
            f"django_jobs stores jobs on PostgreSQL or SQLite; DATABASES[{db!r}] is {name}."
        )
    return name


def of_setting(engine_setting: str) -> str | None:
    """The vendor a DATABASES ``ENGINE`` setting names, if an engine serves it."""
    return BACKENDS.get(engine_setting.rsplit(".", 1)[-1])


@cache
def engine_class(name: str) -> Any:
    """The engine class serving the vendor ``name``, imported once."""
    return import_string(ENGINES[name])


def listens(db: str) -> bool:
    """Whether ``db`` can wake idle workers with LISTEN/NOTIFY (asked at every enqueue)."""
    return bool(engine_class(vendor(db)).listens)
