"""What every storage engine does: the one interface the worker, the control
verbs and enqueue call.

An engine is bound to one database alias and one backend's options when the
backend is built (``engine_for``). Each call is one short transaction of that
database (or joins the caller's), guarded compare-and-set on the state table
in ``states.TRANSITIONS``: two actors racing — a worker and the reaper, two
reapers, a worker back from a long pause — cannot both win, and what could not
be applied is reported back, never pretended.

Two engines implement it: ``PostgresEngine`` (named SQL statements for the hot
calls, row locks with ``SKIP LOCKED``, LISTEN/NOTIFY) and ``SqliteEngine``
(the ORM, with every transaction serialised by ``BEGIN IMMEDIATE``). Which one
runs is decided once, by the database's vendor (``vendors.py``), and nowhere
else. The calls both make the same way are written once, here, from the
shared steps in this package (``claims``, ``flow``, ``completion``,
``leases``, ``operator``, ``presence``, ``unique``, and ``batches``, which
those call); an engine overrides what it does faster, and supplies the few
steps that only it knows how to do (the abstract methods).

Guarantees and limits, honestly:

* Delivery is at least once. When a lease expires (its worker stopped
  heartbeating) or is released (its worker died) the worker may or may not
  have done the work; the attempt is recorded ``lost`` (never success, never a
  plain failure) and the job runs again. Tasks make their effects idempotent
  with ``context.stable_key``.
* The reaper trusts the database clock (``Now()``), so worker hosts may drift;
  ``run_after`` of new jobs is taken from the enqueuing host's clock.
"""

from __future__ import annotations

import uuid
from abc import ABC, abstractmethod
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from typing import Any

from django.utils import timezone

from ..bulk import Call
from ..conf import JobsOptions
from ..exceptions import InvalidTransitionError, JobNotFoundError
from ..fairness import Head
from ..models import Job
from ..unique import EnqueueOutcome, UniqueRule
from ..values import (
    Claimed,
    DeadRows,
    Finished,
    Operated,
    Progress,
    Renewed,
    Report,
    StepWrite,
    WorkerIdentity,
)
from . import completion, due, flow, leases, operator, presence, unique

Held = tuple[uuid.UUID, int]  # (job id, lease token): one attempt this worker runs


class Engine(ABC):
    """One database's way of storing jobs; see the module docstring for the rules."""

    #: Whether the database can wake idle workers (LISTEN/NOTIFY).
    listens: bool = False
    #: Whether a bulk insert can take rows while they are still being validated.
    streams_bulk: bool = False

    def __init__(self, db: str, options: JobsOptions | None = None) -> None:
        self.db = db
        self.options = options or JobsOptions()

    # -- the producer --------------------------------------------------------

    def claim(
        self,
        worker: WorkerIdentity,
        queues: Sequence[str],
        limit: int,
        ahead: int = 0,
    ) -> list[Claimed]:
        """Lease up to ``limit`` ready jobs of ``queues``, highest priority then oldest.

        Each claimed job is ``running`` with one attempt, and leased to
        ``worker`` on its row, fenced by its token; the task runs after the
        claim commits, outside any transaction of ours. The lease lives as long
        as the worker heartbeats (``reap``). Paused queues are skipped. Queues with flow
        control (limits, fairness, rates) are claimed one by one after the
        others, so their limits hold across every worker; priority therefore
        orders jobs within that split, not across it. They are claimed in
        the order of their names, whatever the worker's order: each holds
        locks until the claim commits (a limited queue's lock, a fair queue's
        clock rows), and two workers taking them in opposite orders could
        each wait for the other until PostgreSQL broke the deadlock.

        ``ahead`` more may be leased to wait in the worker for a thread
        (``worker/prefetch.py``), but not from a queue with a concurrency
        limit: it counts the attempts workers hold as running, so a waiting
        one held a slot that another worker with a free thread could have
        run at once. Such a queue's jobs are claimed only for the first
        ``limit`` places of the result, the ones threads take now. A rate
        limit counts starts, and an attempt claimed ahead starts within the
        cycle (or is given back, its start refunded: ``flow.refund_claim``).
        """
        everything = limit + ahead
        if everything < 1:
            return []
        plain = [q for q in queues if not self.options.constrained(q)]
        got = self.claim_plain(worker, plain, everything) if plain else []
        for queue in sorted(set(queues).difference(plain)):
            room = (limit if self.options.caps_running(queue) else everything) - len(got)
            if room > 0:
                got += self.claim_flow(worker, queue, room)
        return got

    @abstractmethod
    def claim_plain(
        self, worker: WorkerIdentity, queues: Sequence[str], limit: int
    ) -> list[Claimed]:
        """Claim from queues without flow control."""

    def claim_flow(self, worker: WorkerIdentity, queue: str, limit: int) -> list[Claimed]:
        """Claim from one flow-controlled queue (``flow.py``)."""
        return flow.claim_constrained(self, worker, queue, limit)

    @abstractmethod
    def lock_queue(self, queue: str) -> None:
        """Serialise flow-controlled claims of ``queue`` until the transaction ends."""

    @abstractmethod
    def fair_heads(self, queue: str, want: int, blocked: Sequence[str]) -> list[Head]:
        """The next ``want`` ready jobs of each tenant of a fair queue.

        Jobs whose concurrency key is in ``blocked`` are left out.
        """

    @abstractmethod
    def record_served(self, queue: str, served: Mapping[str, tuple[int, float]]) -> None:
        """Move the fair clocks of the tenants a claim served, in the claim's transaction.

        Committed with the claim, never after it: a claimer that saw the
        claimed jobs gone and the clocks not yet moved would rank that
        tenant's next jobs as still owed.
        """

    def idle(self, queues: Sequence[str]) -> bool:
        """No job of ``queues`` is queued or leased: a burst worker may exit."""
        return presence.idle(self.db, queues)

    def bring_forward(
        self, queues: Sequence[str], only: Collection[uuid.UUID] | None = None
    ) -> int:
        """Make the queued jobs due soonest (of ``only``, if given) due now (``due.py``)."""
        return due.bring_forward(self.db, queues, only)

    # -- the completer -------------------------------------------------------

    def finish(self, worker_id: uuid.UUID, reports: Sequence[Report]) -> Finished:
        """Apply attempt outcomes, each fenced on its lease.

        A report whose lease is gone (reaped, released, or re-claimed under a
        newer token) is *stale*: kept on its attempt's ``late_report``, it
        changes nothing else.
        """
        return completion.finish(self.db, worker_id, reports, self.options)

    def release_lease(
        self, worker_id: uuid.UUID, job_id: uuid.UUID, token: int, reason: str
    ) -> int:
        """Give back one lease, its attempt ``lost``: the worker saw the attempt die."""
        poison_after = self.options.POISON_LOST_ATTEMPTS
        return leases.release_lease(self.db, worker_id, job_id, token, reason, poison_after)

    def release_worker(self, worker_id: uuid.UUID, reason: str, *, suspect: bool = True) -> int:
        """Give back every lease of one worker, their attempts ``lost``, requeued at once.

        ``suspect=False``: the worker stops on purpose; the losses do not count
        towards poison (``leases.lose``).
        """
        return leases.release_worker(
            self.db, worker_id, reason, self.options.POISON_LOST_ATTEMPTS, suspect=suspect
        )

    # -- the task's steps --------------------------------------------------------

    @abstractmethod
    def record_step(
        self,
        worker_id: uuid.UUID,
        job_id: uuid.UUID,
        token: int,
        name: str,
        result: Any,
    ) -> StepWrite:
        """Record a completed step of the attempt ``token`` (``context.step``), fenced on its lease.

        ``result`` is in its stored form (``codec.to_json``). Refused, with
        nothing written, when this worker does not hold the job's lease under
        that token (``STALE``) or the job has a step of that name already
        (``DUPLICATE``). Joins the caller's transaction, if the task runs the
        step in one: the record then commits (or rolls back) with the task's
        own writes.
        """

    # -- the lifeline ----------------------------------------------------------

    def renew(
        self,
        worker_id: uuid.UUID,
        held: Iterable[Held],
        progress: Mapping[Held, Progress] | None = None,
    ) -> Renewed:
        """Keep this worker's leases in one write; write progress; learn of loss, cancels."""
        return leases.renew(self.db, worker_id, held, progress, self.options.LEASE_SECONDS)

    def reap(self, batch: int = 100) -> int:
        """Turn expired leases into ``lost`` attempts; requeue, exhaust or quarantine.

        A lease has expired when it was taken, and its worker last heartbeat,
        more than ``LEASE_SECONDS`` ago (by this engine's options).
        """
        options = self.options
        return leases.reap(self.db, batch, options.POISON_LOST_ATTEMPTS, options.LEASE_SECONDS)

    def expire_overdue(self, batch: int = 500) -> int:
        """Move queued jobs past their ``expires_at`` to ``expired``."""
        return leases.expire_overdue(self.db, batch)

    def dead_rows(self) -> list[DeadRows]:
        """Our tables' dead row versions, where the database counts them and we may vacuum."""
        return []

    def vacuum(self, table: str) -> bool:
        """Vacuum one of our tables now, unless something else is; whether this did.

        Runs outside any transaction (VACUUM cannot run in one), on the calling
        thread's connection, which another thread may cancel.
        """
        raise NotImplementedError(f"{type(self).__name__} counts no dead rows to vacuum")

    def register_worker(
        self,
        worker: WorkerIdentity,
        backend: str,
        host: str,
        pid: int,
        queues: Sequence[str],
        concurrency: int,
    ) -> None:
        """Record a live worker, so operators see it and its heartbeat."""
        presence.register_worker(self.db, worker, backend, host, pid, queues, concurrency)

    def stop_worker(self, worker_id: uuid.UUID) -> None:
        """Mark a worker stopped (its leases are released separately)."""
        presence.stop_worker(self.db, worker_id)

    def unusable_for_workers(self) -> str | None:
        """Why worker processes cannot share this database, if they cannot."""
        return None

    # -- operators -------------------------------------------------------------

    def operate(self, job_id: uuid.UUID, verb: str, actor: str, note: str = "") -> Operated:
        """Apply an operator verb to one job; what it did, or InvalidTransitionError."""
        return operator.operate(self.db, job_id, verb, actor, note)

    def operate_batch(
        self, read_in: Mapping[uuid.UUID, str], verb: str, actor: str, note: str = ""
    ) -> list[Operated | InvalidTransitionError | JobNotFoundError]:
        """Apply an operator verb to each job still in the state it was read in; one transaction.

        The refusals are returned, a job that moved since it was read among them.
        """
        return operator.operate_batch(self.db, read_in, verb, actor, note)

    def set_queue_paused(self, queue: str, paused: bool, actor: str, note: str = "") -> bool:
        """Pause or resume a queue; whether anything changed."""
        return operator.set_queue_paused(self.db, queue, paused, actor, note)

    def estimated_rows(self, table: str) -> int | None:
        """The planner's estimate of a table's rows, where the database keeps one."""
        return None

    # -- enqueue ---------------------------------------------------------------

    def insert_now(self, job: Job, args_json: str, kwargs_json: str) -> EnqueueOutcome | None:
        """Write ``job`` in one statement where the connection stands, if this engine can.

        CREATED: written. EXISTING: a job holds its idempotency key, and
        nothing was written. None: nothing was written, and the caller takes
        the general path.
        """
        return None

    @abstractmethod
    def lock_unique(self, scope: str, key: str) -> None:
        """Serialise the enqueues of one unique key in one scope until the transaction ends."""

    def find_unique(self, job: Job, rule: UniqueRule) -> tuple[Job, EnqueueOutcome] | None:
        """The job that takes ``job``'s call under ``rule`` (debounced if asked), or None.

        Locks the key first (``lock_unique``): call it in the transaction that
        inserts ``job`` when None comes back.
        """
        self.lock_unique(job.dedup_scope, rule.key)
        if rule.debounce is not None:
            # From the clock read under the lock: the last call to take it pushes furthest.
            job.run_after = timezone.now() + rule.debounce
        found = unique.find(self.db, job, rule, lock=True)
        if found is None:
            return None
        if rule.debounce is None:
            return found, EnqueueOutcome.EXISTING
        if not unique.debounce(self.db, found, job, job.initiator or "system"):
            return None
        return found, EnqueueOutcome.DEBOUNCED

    @abstractmethod
    def bulk_insert(self, prototype: Job, calls: Iterator[Call]) -> None:
        """Insert a job per validated call, the rest of each row from ``prototype``."""

    @abstractmethod
    def add_dependencies(
        self, job_ids: Sequence[uuid.UUID | str], ids: Sequence[uuid.UUID]
    ) -> None:
        """One row per (new job, job it waits for)."""

    @abstractmethod
    def depended_on(
        self, ids: Sequence[uuid.UUID], *, lock: bool
    ) -> dict[uuid.UUID, tuple[str, str]]:
        """The state and tenant of each job a new job waits for; ``lock`` holds them to commit."""
