"""How the PostgreSQL engine runs its statements: prepared on request, plans pinned."""

from __future__ import annotations

import sys
import threading
import weakref
from collections.abc import Mapping
from datetime import UTC, tzinfo
from typing import Any, Protocol, Self, cast

import psycopg
from django.db import connections, transaction
from django.db.backends.utils import CursorWrapper
from psycopg import pq
from psycopg.abc import Loader

from . import statements

Row = dict[str, Any]


class _Described(Protocol):
    @property
    def description(self) -> Any: ...

    def fetchall(self) -> list[Any]: ...


# Each statement's column names, read once: psycopg builds the description's
# Column objects anew on every access, 6 % of a busy worker's time.
_names: dict[str, tuple[str, ...]] = {}


def _rows(sql: str, cursor: _Described) -> tuple[tuple[str, ...], list[tuple[Any, ...]]]:
    names = _names.get(sql)
    if names is None:
        names = _names[sql] = tuple(column.name for column in cursor.description or ())
    return names, cursor.fetchall()


def fetch(db: str, sql: str, params: Mapping[str, Any], *, prepare: bool) -> list[Row]:
    """Run a named statement (``fetch_rows``); its rows, by column name."""
    names, rows = fetch_rows(db, sql, params, prepare=prepare)
    return [dict(zip(names, row, strict=True)) for row in rows]


def fetch_rows(
    db: str, sql: str, params: Mapping[str, Any], *, prepare: bool
) -> tuple[tuple[str, ...], list[tuple[Any, ...]]]:
    """Run a named statement in the connection's current transaction; its column names and rows.

    The rows are tuples. The claim, whose rows a worker reads by the
    thousand, picks its columns by position (``operator.itemgetter``, matched
    to the names once), which costs a fraction of ``fetch``'s dict per row.

    ``prepare`` (the PREPARE_STATEMENTS option) makes it a prepared statement
    on this connection, through a server-side-binding psycopg cursor. Planning
    the claim costs PostgreSQL more than running it — about 0.6 against
    0.45 ms for a batch on our benchmark host — on every claim of every
    worker; prepared, it is planned once per connection.

    Django turns psycopg's preparing off (``prepare_threshold`` None) so that
    poolers work; then nothing can be prepared, not even on request. We set a
    threshold no query reaches, so only the statements asked for here are
    prepared, and Django's own queries stay as they were.

    A prepared statement's plan is made once, from the tables as they were
    then, and kept for the connection's life. A worker started on an empty
    table planned the completion's attempt update as a sequential scan (the
    cheapest plan for an empty table) and kept it while the table grew: every
    batch then read the whole attempt history, and the drain rate fell with
    every job done until something (a VACUUM) made PostgreSQL plan again. So
    the sessions that prepare these statements turn sequential scans off
    (``pin_plans``): every table they touch has the index they need, and the
    plan made on an empty table is then the one that serves a full one. JIT
    goes off with them: a disabled scan still costs 10^10 in the planner's
    units, which is far above ``jit_above_cost``, and compiling the claim then
    took 0.8 s for a statement that runs in 6 ms.
    """
    wrapper = connections[db]
    if not prepare:
        with wrapper.cursor() as outer, wrapper.wrap_database_errors:
            outer.execute(sql, params)
            return _rows(sql, outer)
    # Only the connection is needed here, not a Django cursor (and the psycopg
    # cursor inside it) made and closed around every statement for nothing.
    connection = _preparing_connection(db)
    pin_plans(db)
    cursor = _statement_cursor(connection, sql, wrapper.timezone)
    with wrapper.wrap_database_errors:
        cursor.execute(sql, params, prepare=True)
        return _rows(sql, cursor)


# Per thread (as Django's connections are): each connection's cursor for each
# statement. psycopg's connections hash by identity.
_kept = threading.local()


def _statement_cursor(
    connection: psycopg.Connection[Any], sql: str, zone: tzinfo | None
) -> _Preparing:
    """The connection's cursor for ``sql``, made once and used for every run of it.

    psycopg keeps a cursor's adaptation state (the loader of each result
    column, the dumper of each parameter) while the cursor runs the same
    query object again, and builds it anew for a new cursor or another
    query. The claim has 18 columns, two of them timestamps (loaded by
    psycopg's own loader where ``zone``, the zone Django wants its values
    in, allows: ``_TIMESTAMPTZ``); the single enqueue's insert has 35
    parameters. Made afresh for each statement, that was about 5 % of a busy
    worker's CPU per job (W2 in one process) and 2-7 % of a single
    enqueue's (docs/benchmarks.md). The statements' texts are
    constants (``statements.claim`` and ``statements.insert_job`` are
    cached), so each is the same object every time. A connection that was
    closed (Django replaces it after an error) is dropped with its cursors
    when the thread next makes one.
    """
    kept: dict[psycopg.Connection[Any], dict[str, _Preparing]]
    kept = _kept.__dict__.setdefault("cursors", {})
    cursors = kept.get(connection)
    if cursors is None:
        for closed in [other for other in kept if other.closed]:
            del kept[closed]
        cursors = kept[connection] = {}
    cursor = cursors.get(sql)
    if cursor is None:
        cursor = cursors[sql] = _Preparing(connection)
        if zone is UTC and connection.info.timezone is UTC:
            cursor.adapters.register_loader("timestamptz", _TIMESTAMPTZ)
    return cursor


# psycopg's own timestamptz loader (in C with its binary build). Django
# registers a Python class around it that sets the zone Django wants on every
# value; where Django wants UTC and the session is in UTC (USE_TZ, as Django
# sets the session up), this one already gives exactly that. Django's class
# was 3.6 % of a busy worker's GIL time (W2 in one process, the claim's two
# timestamps a job).
_TIMESTAMPTZ = cast(
    "type[Loader]",
    psycopg.adapters.get_loader(psycopg.adapters.types["timestamptz"].oid, pq.Format.TEXT),
)


def _preparing_connection(db: str) -> psycopg.Connection[Any]:
    """The alias's psycopg connection, able to prepare what is asked for (``fetch_rows``)."""
    wrapper = connections[db]
    wrapper.ensure_connection()
    connection: psycopg.Connection[Any] = wrapper.connection
    if connection.prepare_threshold is None:
        connection.prepare_threshold = sys.maxsize
    return connection


class _Preparing(psycopg.Cursor[Any]):
    """A server-side-binding cursor that prepares every statement it runs.

    It lives as long as its connection (``_statement_cursor``), so closing
    it does nothing: Django's cursor wrapper closes its cursor on leaving
    ``with``, which would drop what the next run of the statement reuses.
    Closing the connection ends it.
    """

    def execute(
        self,
        query: Any,
        params: Any = None,
        *,
        prepare: bool | None = None,
        binary: bool | None = None,
    ) -> Self:
        return super().execute(query, params, prepare=True, binary=binary)

    def close(self) -> None:
        return None


def prepared_cursor(db: str, sql: str) -> CursorWrapper:
    """A Django cursor for ``sql``, prepared on the connection, over the cursor kept for it.

    For the statements that run in the caller's code (the single enqueue),
    unlike ``fetch_rows``: through Django's cursor wrapper, they still pass
    the connection's execute wrappers (the application's instrumentation)
    and raise Django's exceptions. Django's own cursors bind parameters on the
    client, which cost a single enqueue's 35 columns 10 % of its time, and
    prepare nothing. No plan is pinned: an INSERT's plan does not depend on
    the tables.

    While the connection logs its queries (DEBUG, ``CaptureQueriesContext``)
    it is Django's own cursor: Django before 6.1 records a prepared
    statement's text as None, and a query log is for reading, not for speed.
    """
    wrapper = connections[db]
    if wrapper.queries_logged:
        return wrapper.cursor()
    # As Django's cursor() does: under CONN_HEALTH_CHECKS a connection that
    # died since the request began is replaced, not used.
    wrapper.close_if_health_check_failed()
    wrapper.validate_thread_sharing()
    cursor: Any = _statement_cursor(_preparing_connection(db), sql, wrapper.timezone)
    return wrapper.make_cursor(cursor)


# psycopg connections whose session has sequential scans off (see ``fetch_rows``).
_pinned: weakref.WeakSet[psycopg.Connection[Any]] = weakref.WeakSet()


def pin_plans(db: str) -> None:
    """Turn sequential scans (and JIT) off for this session, once; see ``fetch_rows``.

    The claims that count limits in Python (``flow.claim_constrained``)
    call this too: their statements lock and update jobs by primary key, and
    with statistics taken on an empty table PostgreSQL preferred reading the
    whole table to a hundred key probes.

    The SET runs in the caller's transaction, so a rollback undoes it: the
    connection is only marked once that transaction commits (at once in
    autocommit), and a rolled-back one is pinned again on its next statement.
    """
    wrapper = connections[db]
    wrapper.ensure_connection()
    connection = wrapper.connection
    if connection in _pinned:
        return
    with wrapper.cursor() as cursor:
        cursor.execute(statements.PIN_PLANS)
    transaction.on_commit(lambda: _pinned.add(connection), using=db)
