"""The SQLite engine: the ORM, every transaction serialised by BEGIN IMMEDIATE.

There are no row locks: ``skip_locked`` is a no-op and correctness comes from
one writer at a time (``checks.py`` requires the ``transaction_mode``).
"""

from __future__ import annotations

from .base import Engine


class SqliteEngine(Engine):
    listens = False
