"""The PostgreSQL engine: the hot calls as named statements, SKIP LOCKED, NOTIFY.

A plain claim and a batch of plain successes are one statement each
(``statements.claim``, ``statements.COMPLETE``); everything else runs the
shared steps, with PostgreSQL's row locks making them safe across workers.
"""

from __future__ import annotations

import dataclasses
import json
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import datetime
from functools import cache
from operator import itemgetter
from typing import Any

from django.apps import apps
from django.db import connections, transaction
from django.db.models import Field, JSONField
from psycopg.types.json import Jsonb

from ...bulk import Call, copy_jobs
from ...conf import JobsOptions
from ...fairness import Head
from ...models import Job
from ...payload import encode
from ...signals import send_on_commit, signal_listeners
from ...states import AttemptOutcome, JobState, Transition
from ...unique import EnqueueOutcome
from ...values import Claimed, DeadRows, Finished, Report, StepWrite, WorkerIdentity
from ...wakeup import CHANNEL
from .. import batches, completion
from ..base import Engine
from ..wakeups import owes_notify
from . import statements
from .positions import Positions
from .session import fetch, fetch_rows, pin_plans, prepared_cursor


class PostgresEngine(Engine):
    listens = True
    streams_bulk = True

    def __init__(self, db: str, options: JobsOptions | None = None) -> None:
        super().__init__(db, options)
        self._positions: dict[uuid.UUID, Positions] = {}

    # -- claim -----------------------------------------------------------------

    def claim_plain(
        self, worker: WorkerIdentity, queues: Sequence[str], limit: int
    ) -> list[Claimed]:
        positions = self._positions.get(worker.id)
        if positions is None:
            # A worker process claims as one worker; each testing drain is one
            # more: the oldest are dropped, and would only claim from the head.
            if len(self._positions) >= _POSITIONS_KEPT:
                del self._positions[next(iter(self._positions))]
            positions = self._positions[worker.id] = Positions()
        wanted = tuple(queues)
        claimed: list[Claimed] = []
        for size in statements.claim_sizes(limit):
            sql = statements.claim(wanted, size)
            got, names, rows = self._claim(sql, worker, positions.params(wanted))
            claimed += got
            taken = map(_columns(names, ("queue", "priority", "position")), rows)
            positions.moved(taken, full=len(got) == size)
            if len(got) < size:  # the queues ran out
                break
        return claimed

    def claim_flow(self, worker: WorkerIdentity, queue: str, limit: int) -> list[Claimed]:
        if not self.options.only_fair(queue):
            return super().claim_flow(worker, queue, limit)
        # Fairness needs no counts kept exact, so no lock: one statement.
        weights = self.options.FAIR_QUEUES[queue]
        fair = {
            "queue": queue,
            "limit": limit,
            "weight_tenants": list(weights),
            "weights": [float(w) for w in weights.values()],
        }
        claimed, _, _ = self._claim(statements.CLAIM_FAIR, worker, fair)
        return claimed

    def _claim(
        self, sql: str, worker: WorkerIdentity, given: Mapping[str, Any]
    ) -> tuple[list[Claimed], tuple[str, ...], list[tuple[Any, ...]]]:
        """Run a claim statement; the attempts it started, and its rows as read."""
        params = {"worker_id": worker.id, "worker_name": worker.name, **given}
        # One statement, so atomic by itself: in autocommit it is its own
        # transaction (and the signals go out at once, after it), inside the
        # worker's report-and-claim transaction it is part of that.
        names, rows = fetch_rows(self.db, sql, params, prepare=self.options.PREPARE_STATEMENTS)
        claimed = [_claimed(values) for values in map(_columns(names, _CLAIMED), rows)]
        if signal_listeners(Transition.CLAIM):
            for c in claimed:
                send_on_commit(
                    self.db, c.job_id, Transition.CLAIM, JobState.QUEUED, JobState.RUNNING
                )
        return claimed, names, rows

    def lock_queue(self, queue: str) -> None:
        pin_plans(self.db)
        with connections[self.db].cursor() as cursor:
            cursor.execute(statements.LOCK_QUEUE, [statements.LOCK_NAMESPACE, queue])

    def lock_unique(self, scope: str, key: str) -> None:
        """A transaction-scoped advisory lock on the key's hash.

        Neither a unique index nor ON CONFLICT can say "while live, or within
        the window"; a lock can, and costs one round trip (docs/benchmarks.md).
        Two keys with one hash only wait for each other.
        """
        with connections[self.db].cursor() as cursor:
            cursor.execute(statements.LOCK_UNIQUE, [statements.UNIQUE_NAMESPACE, f"{scope}|{key}"])

    def fair_heads(self, queue: str, want: int, blocked: Sequence[str]) -> list[Head]:
        params = {"queue": queue, "k": want, "blocked": blocked}
        rows = fetch(
            self.db, statements.FAIR_CANDIDATES, params, prepare=self.options.PREPARE_STATEMENTS
        )
        return [
            Head(
                row["id"], row["tenant"], row["priority"], row["run_after"], row["concurrency_key"]
            )
            for row in rows
        ]

    def record_served(self, queue: str, served: Mapping[str, tuple[int, float]]) -> None:
        tenants = sorted(served)  # one lock order for every worker: no deadlock
        weights = self.options.FAIR_QUEUES.get(queue, {})
        params = {
            "queue": queue,
            "tenants": tenants,
            "counts": [served[t][0] for t in tenants],
            "bases": [served[t][1] for t in tenants],
            "weights": [float(weights.get(t, 1.0)) for t in tenants],
        }
        fetch(
            self.db,
            statements.RECORD_FAIR_CLAIMS,
            params,
            prepare=self.options.PREPARE_STATEMENTS,
        )

    # -- completion ------------------------------------------------------------

    def finish(self, worker_id: uuid.UUID, reports: Sequence[Report]) -> Finished:
        """Plain successes in one statement; the rest, one by one (``completion.finish``).

        One transaction, so a batch callback is inserted with the success that
        made it due (without a savepoint: free inside the completer's own).
        """
        fast = [r for r in reports if _plain_success(r)]
        if not fast:
            return super().finish(worker_id, reports)
        with transaction.atomic(using=self.db, savepoint=False):
            applied = self._complete(worker_id, fast)
            rest = [r for r in reports if (r.job_id, r.token) not in applied]
            done = completion.finish(self.db, worker_id, rest, self.options)
        done.applied[:0] = [(r, JobState.SUCCEEDED) for r in fast if (r.job_id, r.token) in applied]
        return done

    def _complete(
        self, worker_id: uuid.UUID, reports: Sequence[Report]
    ) -> set[tuple[uuid.UUID, int]]:
        """Apply successes in one round trip; the (job, token) pairs it applied.

        The rest go to the general path, which records each case precisely:
        stale reports (no lease), and leases on jobs in a state that takes no
        success.
        """
        params: dict[str, Any] = {
            "job_ids": "{" + ",".join([r.job_id.hex for r in reports]) + "}",
            "tokens": "{" + ",".join([str(r.token) for r in reports]) + "}",
            "results": encode([r.result for r in reports]),
            "worker_id": worker_id,
        }
        rows = fetch(self.db, statements.COMPLETE, params, prepare=self.options.PREPARE_STATEMENTS)
        if signal_listeners(Transition.COMPLETE):
            for row in rows:
                send_on_commit(
                    self.db, row["job_id"], Transition.COMPLETE, row["was"], JobState.SUCCEEDED
                )
        if rows and rows[0]["queued"] and signal_listeners(Transition.DEPENDENCIES_MET):
            for job_id in rows[0]["queued"]:
                send_on_commit(
                    self.db,
                    job_id,
                    Transition.DEPENDENCIES_MET,
                    JobState.WAITING,
                    JobState.QUEUED,
                )
        if rows and rows[0]["due_batches"]:
            batches.fire_due(self.db, rows[0]["due_batches"])
        return {(row["job_id"], row["token"]) for row in rows}

    # -- the task's steps --------------------------------------------------------

    def record_step(
        self,
        worker_id: uuid.UUID,
        job_id: uuid.UUID,
        token: int,
        name: str,
        result: Any,
    ) -> StepWrite:
        params = {
            "job_id": job_id,
            "token": token,
            "worker_id": worker_id,
            "name": name,
            "result": Jsonb(result),
        }
        rows = fetch(
            self.db, statements.RECORD_STEP, params, prepare=self.options.PREPARE_STATEMENTS
        )
        if not rows[0]["held"]:
            return StepWrite.STALE
        return StepWrite.RECORDED if rows[0]["recorded"] else StepWrite.DUPLICATE

    # -- operators -------------------------------------------------------------

    def dead_rows(self) -> list[DeadRows]:
        tables = [model._meta.db_table for model in apps.get_app_config("django_jobs").get_models()]
        rows = fetch(self.db, statements.DEAD_ROWS, {"tables": tables}, prepare=False)
        return [DeadRows(row["table_name"], row["dead"], row["vacuumed_at"]) for row in rows]

    def vacuum(self, table: str) -> bool:
        wrapper = connections[self.db]
        if wrapper.in_atomic_block:
            raise RuntimeError("VACUUM cannot run inside a transaction (atomic block)")
        with wrapper.cursor() as cursor:
            cursor.execute(statements.VACUUM_COUNT, [table])
            (before,) = cursor.fetchone()
            cursor.execute(statements.VACUUM.format(table=wrapper.ops.quote_name(table)))
            cursor.execute(statements.VACUUM_COUNT, [table])
            (after,) = cursor.fetchone()
        return bool(after > before)

    def estimated_rows(self, table: str) -> int | None:
        with connections[self.db].cursor() as cursor:
            cursor.execute(statements.ESTIMATED_ROWS, [table])
            row = cursor.fetchone()
        # -1 means the table was never analysed: no estimate to trust.
        if row is None or row[0] < 0:
            return None
        return int(row[0])

    # -- enqueue ---------------------------------------------------------------

    def insert_now(self, job: Job, args_json: str, kwargs_json: str) -> EnqueueOutcome | None:
        """One INSERT, with its queue's NOTIFY folded in, where that is safe.

        In the caller's transaction or in autocommit, where the statement
        commits by itself with its NOTIFY. A single enqueue outside a
        transaction was four round trips (BEGIN, the INSERT, ``pg_notify``,
        COMMIT) and the ORM compiled the INSERT anew each time; in autocommit
        this is one. A job with an idempotency key is inserted unless a job
        holds the key (``statements.insert_job``): EXISTING then, and the
        caller reads that job. The arguments go as the JSON text their
        validation made. Under ``PREPARE_STATEMENTS`` the statement is
        prepared on the connection (``session.prepared_cursor``): PostgreSQL
        parses it once, and psycopg sends the values instead of quoting them
        into the text.
        """
        connection = connections[self.db]
        if not (connection.in_atomic_block or connection.get_autocommit()):
            return None
        notify = owes_notify(self.db, job.queue)
        params: list[Any] = []
        for name, field, json_field in _insert_fields():
            if name == "args":
                params.append(args_json)
            elif name == "kwargs":
                params.append(kwargs_json)
            else:
                value = getattr(job, name)
                as_it_is = not json_field and _sent_as_it_is(value)
                params.append(value if as_it_is else field.get_db_prep_save(value, connection))
        if notify:
            params += [CHANNEL, job.queue]
        keyed = job.idempotency_key is not None
        prepared = self.options.PREPARE_STATEMENTS
        sql = statements.insert_job(notify, keyed)
        with prepared_cursor(self.db, sql) if prepared else connection.cursor() as cursor:
            cursor.execute(sql, params)
            inserted = cursor.fetchone()[0] if keyed else 1
        return EnqueueOutcome.CREATED if inserted else EnqueueOutcome.EXISTING

    def bulk_insert(self, prototype: Job, calls: Iterator[Call]) -> None:
        copy_jobs(self.db, prototype, calls)

    def add_dependencies(
        self, job_ids: Sequence[uuid.UUID | str], ids: Sequence[uuid.UUID]
    ) -> None:
        # One statement for a whole enqueue_many batch, not a model per row.
        with connections[self.db].cursor() as cursor:
            cursor.execute(
                statements.ADD_DEPENDENCIES,
                [[str(job) for job in job_ids], [str(on) for on in ids]],
            )

    def depended_on(
        self, ids: Sequence[uuid.UUID], *, lock: bool
    ) -> dict[uuid.UUID, tuple[str, str]]:
        if not lock:
            rows = Job.objects.using(self.db).filter(id__in=ids)
            found = rows.values_list("id", "state", "tenant")
            return {job_id: (state, tenant) for job_id, state, tenant in found}
        # FOR SHARE, not FOR UPDATE: jobs enqueued after the same job at once
        # do not wait for each other, only the job's completion waits for them.
        with connections[self.db].cursor() as cursor:
            cursor.execute(statements.DEPENDED_ON, [list(ids)])
            return {job_id: (state, tenant) for job_id, state, tenant in cursor.fetchall()}


@cache
def _insert_fields() -> list[tuple[str, Field[Any, Any], bool]]:
    """Each column's attribute and field, and whether it holds JSON."""
    return [
        (field.attname, field, isinstance(field, JSONField)) for field in Job._meta.concrete_fields
    ]


def _sent_as_it_is(value: Any) -> bool:
    """Whether a column's own field would hand ``value`` to psycopg unchanged.

    On PostgreSQL a field's get_db_prep_save returns these exact types (and
    aware datetimes) as they are, outside JSON columns: preparing each of a
    new job's 40 columns through its field cost 42 µs of a single enqueue,
    against 10 µs this way. Anything else (a naive datetime, a choices
    member, any JSON value) still goes through its field.
    """
    kind = type(value)
    return kind in _PLAIN or (kind is datetime and value.tzinfo is not None)


_PLAIN = frozenset({type(None), str, int, float, uuid.UUID})


def _plain_success(report: Report) -> bool:
    return report.outcome == AttemptOutcome.SUCCEEDED and report.progress is None


def _json(value: Any) -> Any:
    """JSON columns come back decoded or as text, depending on the cursor's loaders."""
    if not isinstance(value, str):
        return value
    # Most jobs take no positional or no keyword arguments: no parse for those.
    return [] if value == "[]" else {} if value == "{}" else json.loads(value)


# Workers whose claim positions an engine keeps (claim_plain).
_POSITIONS_KEPT = 64

# The claim's columns are Claimed's fields, in their order; these hold JSON.
_CLAIMED = tuple(field.name for field in dataclasses.fields(Claimed))
_JSON_AT = tuple(_CLAIMED.index(name) for name in ("args", "kwargs", "trace_context"))


@cache
def _columns(names: tuple[str, ...], wanted: tuple[str, ...]) -> Callable[[Any], tuple[Any, ...]]:
    """Picks ``wanted`` out of a row of ``names``, as one tuple, in C."""
    return itemgetter(*(names.index(name) for name in wanted))


def _claimed(values: tuple[Any, ...]) -> Claimed:
    fields = list(values)
    for at in _JSON_AT:
        fields[at] = _json(fields[at])
    return Claimed(*fields)
