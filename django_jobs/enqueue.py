"""Acceptance: turning a validated call into a job row, inside the caller's transaction.

The job exists if and only if the caller's transaction commits:

* jobs in the same database as the business data: the row is inserted in the
  caller's transaction, workers are woken by a NOTIFY that PostgreSQL delivers
  when it commits, and ``task_enqueued`` is sent after the commit;
* jobs in another database (``OPTIONS["DATABASE"]``): the insert is deferred
  with ``on_commit`` of every other database with an open transaction. This
  leaves one crash window — the process dying between the business commit and
  the job insert loses the job — which ``docs/concepts.md`` spells out.

The same idempotency key within its scope (task name + tenant) returns the
existing job. Two processes racing with one key both try the insert; the
unique constraint lets exactly one win and the other reads the winner's row
(on PostgreSQL its insert does nothing on the conflict; elsewhere it fails in
a savepoint).
A unique key (``unique.py``) is decided under a lock of the key instead, held
until the transaction that inserts the job commits.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from functools import partial

from django.db import IntegrityError, connections, transaction

from .bulk import Call
from .dependencies import wait_for
from .engine import unique
from .engine.base import Engine
from .engine.wakeups import wake_on_commit
from .exceptions import QueueFullError
from .models import Job
from .rows import columns
from .states import JobState
from .unique import EnqueueOutcome, UniqueRule


def find_existing(db: str, scope: str, key: str | None) -> Job | None:
    if key is None:
        return None
    return Job.objects.using(db).filter(dedup_scope=scope, idempotency_key=key).first()


def insert(
    engine: Engine,
    job: Job,
    encoded: tuple[str, str],
    after: Sequence[uuid.UUID] = (),
    rule: UniqueRule | None = None,
) -> tuple[Job, EnqueueOutcome]:
    """Insert ``job``, or return the job that its unique ``rule`` or idempotency key finds.

    ``encoded``: the JSON text of its args and kwargs; ``after``: the jobs it
    waits for (``dependencies.py``). Run in a transaction: the unique key's
    lock is held until it ends.
    """
    db = engine.db
    if rule is not None and (found := engine.find_unique(job, rule)) is not None:
        return found
    if not after and (written := write_now(engine, job, encoded)) is not None:
        return written
    if job.idempotency_key is None:
        return _write(engine, job, after), EnqueueOutcome.CREATED
    existing = find_existing(db, job.dedup_scope, job.idempotency_key)
    if existing is not None:
        return existing, EnqueueOutcome.EXISTING
    try:
        # A savepoint, so losing the race does not abort the caller's transaction.
        with transaction.atomic(using=db):
            _write(engine, job, after)
    except IntegrityError:
        # The other insert has committed (PostgreSQL made us wait for it), and
        # under READ COMMITTED this new statement sees its row.
        existing = find_existing(db, job.dedup_scope, job.idempotency_key)
        if existing is None:
            raise
        return existing, EnqueueOutcome.EXISTING
    return job, EnqueueOutcome.CREATED


def write_now(
    engine: Engine, job: Job, encoded: tuple[str, str]
) -> tuple[Job, EnqueueOutcome] | None:
    """``job`` written in one statement with its NOTIFY, or the job holding its key.

    None where the engine cannot (the general path then writes it), or when
    the job that held the key is gone again (pruned) by the time it is read.
    """
    written = engine.insert_now(job, *encoded)
    if written is EnqueueOutcome.CREATED:
        job._state.adding, job._state.db = False, engine.db  # as save() leaves it
        return job, written
    if written is EnqueueOutcome.EXISTING:
        existing = find_existing(engine.db, job.dedup_scope, job.idempotency_key)
        if existing is not None:
            return existing, written
    return None


def _write(engine: Engine, job: Job, after: Sequence[uuid.UUID]) -> Job:
    if after:
        wait_for(engine, job, after)
    job.save(using=engine.db, force_insert=True)
    if after:
        engine.add_dependencies([job.id], after)
    return job


def open_transactions_elsewhere(db: str) -> list[str]:
    """Aliases, other than the jobs database, with a transaction open in this thread."""
    return [alias for alias in connections if alias != db and connections[alias].in_atomic_block]


def accept(
    engine: Engine,
    job: Job,
    encoded: tuple[str, str],
    announce: Callable[[Job], None],
    after: Sequence[uuid.UUID] = (),
    rule: UniqueRule | None = None,
) -> tuple[Job, EnqueueOutcome]:
    """Write ``job`` as part of the caller's transaction; announce it after commit.

    ``encoded`` is the JSON text of its args and kwargs, from their validation;
    ``after``, the jobs it waits for; ``rule``, its unique key's.
    Returns the job that holds the work — ``job`` itself, the existing job
    with the same idempotency or unique key, or the job it debounced — and
    which of these it is. Only a new job is announced.
    """
    db = engine.db
    if after:
        # Bad input fails here, leaving the caller's transaction usable; the
        # insert reads again with the rows locked.
        wait_for(engine, job, after, lock=False)
    if rule is not None and rule.debounce is not None:
        job.run_after = job.enqueued_at + rule.debounce
    elsewhere = open_transactions_elsewhere(db)
    # One statement, in the caller's transaction or committing by itself.
    simple = not elsewhere and not after and rule is None
    if simple and (written := write_now(engine, job, encoded)) is not None:
        stored, outcome = written
        if outcome is EnqueueOutcome.CREATED:
            transaction.on_commit(lambda: announce(stored), using=db, robust=True)
        return stored, outcome
    if not elsewhere:
        # Outside a transaction, one of our own: the row and its NOTIFY share one
        # commit, and the unique key stays locked until it.
        with transaction.atomic(using=db, savepoint=False):
            stored, outcome = insert(engine, job, encoded, after, rule)
            if outcome is EnqueueOutcome.CREATED:
                _wake_if_queued(db, stored)
                transaction.on_commit(lambda: announce(stored), using=db, robust=True)
        return stored, outcome
    predicted = _predict(engine, job, rule)

    def insert_later() -> None:
        with transaction.atomic(using=db):  # the row, its dependencies, their locks
            stored, outcome = insert(engine, job, encoded, after, rule)
            if outcome is EnqueueOutcome.CREATED:
                _wake_if_queued(db, stored)
        if outcome is EnqueueOutcome.CREATED:
            announce(stored)

    if predicted[1] is not EnqueueOutcome.EXISTING:
        _after_commits(elsewhere, insert_later)
    return predicted


def _predict(engine: Engine, job: Job, rule: UniqueRule | None) -> tuple[Job, EnqueueOutcome]:
    """What the deferred insert of ``job`` will most likely do, from an unlocked look.

    It decides again when it runs, after the other databases' commits.
    """
    existing = find_existing(engine.db, job.dedup_scope, job.idempotency_key)
    if existing is not None:
        return existing, EnqueueOutcome.EXISTING
    found = None if rule is None else unique.find(engine.db, job, rule, lock=False)
    if found is None or rule is None:
        return job, EnqueueOutcome.CREATED
    if rule.debounce is None:
        return found, EnqueueOutcome.EXISTING
    found.args, found.kwargs, found.run_after = job.args, job.kwargs, job.run_after
    return found, EnqueueOutcome.DEBOUNCED


def _wake_if_queued(db: str, job: Job) -> None:
    if job.state == JobState.QUEUED:  # not waiting for other jobs
        wake_on_commit(db, job.queue)


def accept_many(
    engine: Engine,
    prototype: Job,
    calls: Iterator[Call],
    announce: Callable[[], None],
    after: Sequence[uuid.UUID] = (),
) -> None:
    """Write a job per call in bulk, as part of the caller's transaction (see ``accept``).

    ``calls`` validates each call as it is drained and raises at a bad one.
    Where the engine streams bulk inserts (PostgreSQL's COPY), in the jobs
    database, the rows are written while the calls are still being
    validated, so the server inserts while Python works; a bad call aborts
    the COPY and its savepoint rolls back every row before it, leaving the
    caller's transaction as it was. Otherwise every call is validated before
    anything is written. ``prototype`` carries the columns every job shares
    (see ``bulk.py``); ``announce`` runs once after the commit (it sends
    every job's signal). ``after``: the jobs every one of them waits for
    (checked, unlocked, by the caller already).
    """
    elsewhere = open_transactions_elsewhere(engine.db)
    write = partial(_write_many, engine, prototype, announce=announce, after=after)
    if engine.streams_bulk and not elsewhere:
        write(calls)
        return
    validated = list(calls)
    _after_commits(elsewhere, lambda: write(iter(validated)))


def _write_many(
    engine: Engine,
    prototype: Job,
    calls: Iterator[Call],
    *,
    announce: Callable[[], None],
    after: Sequence[uuid.UUID],
) -> None:
    """The rows of ``calls``, their dependencies, and the wake-up."""
    with transaction.atomic(using=engine.db):
        written: list[str] = []
        if after:
            wait_for(engine, prototype, after)
            calls = _recorded(calls, written)
        engine.bulk_insert(prototype, calls)
        if after:
            engine.add_dependencies(written, after)
        _announce_many(engine.db, prototype, announce)


def _recorded(calls: Iterator[Call], ids: list[str]) -> Iterator[Call]:
    for call in calls:
        ids.append(call.id)
        yield call


def _announce_many(db: str, prototype: Job, announce: Callable[[], None]) -> None:
    _wake_if_queued(db, prototype)
    transaction.on_commit(announce, using=db, robust=True)


def job_of(prototype: Job, call: Call) -> Job:
    """The model of one call of a batch, for engines that insert models."""
    values = {
        **{name: getattr(prototype, name) for name, _ in columns()},
        "id": call.id,
        "args": call.args,
        "kwargs": call.kwargs,
        "run_after": call.run_after,
        "enqueued_at": call.at,
        "updated_at": call.at,
    }
    positional: Callable[..., Job] = Job  # see new_job
    return positional(*values.values())


def _after_commits(aliases: list[str], action: Callable[[], None]) -> None:
    """Run ``action`` once the open transaction of each alias has committed (now if none)."""
    if not aliases:
        action()
        return
    first, rest = aliases[0], aliases[1:]
    transaction.on_commit(partial(_after_commits, rest, action), using=first)


class DepthGauge:
    """Backpressure: refuse an enqueue that would grow a queue past its limit.

    Counting a queue costs an index scan of up to ``limit`` entries, so a
    count well below the limit is trusted for one second, plus the enqueues
    made through this gauge since (Django builds one backend, so one gauge,
    per thread); near the limit (above half) every enqueue counts again. Only
    other threads' and processes' enqueues within that second can overshoot
    the bound: more than ``limit / 2`` of them would be needed.
    """

    TRUST_SECONDS = 1.0

    def __init__(self) -> None:
        self._seen: dict[tuple[str, str], tuple[float, int]] = {}

    def check(self, db: str, queue: str, limit: int) -> None:
        key = (db, queue)
        now = time.monotonic()
        seen = self._seen.get(key)
        if seen is not None and now - seen[0] < self.TRUST_SECONDS and seen[1] + 1 < limit // 2:
            # Count our own enqueues against the estimate until the next exact count.
            self._seen[key] = (seen[0], seen[1] + 1)
            return
        depth = self._count(db, queue, limit)
        self._seen[key] = (now, depth + 1)
        if depth >= limit:
            raise QueueFullError(
                f"Queue {queue!r} is full: {depth} jobs are queued and QUEUE_MAX_DEPTH is "
                f"{limit}. Nothing was enqueued; try again later or raise the limit."
            )

    def check_room(self, db: str, queue: str, limit: int, adding: int) -> None:
        """For a bulk enqueue: an exact count, and room for all of ``adding``."""
        depth = self._count(db, queue, limit)
        if depth + adding > limit:
            raise QueueFullError(
                f"Queue {queue!r} has room for {max(0, limit - depth)} more job(s) "
                f"(QUEUE_MAX_DEPTH {limit}, {depth} queued), not {adding}. Nothing was enqueued."
            )
        self._seen.pop((db, queue), None)

    @staticmethod
    def _count(db: str, queue: str, limit: int) -> int:
        return Job.objects.using(db).filter(state=JobState.QUEUED, queue=queue)[:limit].count()
