"""The PostgreSQL engine: named statements for the hot calls, SKIP LOCKED, NOTIFY."""

from __future__ import annotations

from .base import Engine


class PostgresEngine(Engine):
    listens = True
