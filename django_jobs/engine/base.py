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
runs is decided once, by the database's vendor, and nowhere else.

Guarantees and limits, honestly:

* Delivery is at least once. When a lease expires the worker may or may not
  have done the work; the attempt is recorded ``lost`` (never success, never a
  plain failure) and the job runs again. Tasks make their effects idempotent
  with ``context.stable_key``.
* The reaper trusts the database clock (``Now()``), so worker hosts may drift;
  ``run_after`` of new jobs is taken from the enqueuing host's clock.
"""

from __future__ import annotations

import uuid
from abc import ABC
from collections.abc import Iterable, Mapping, Sequence

from .. import transitions
from ..conf import JobsOptions
from ..states import Transition
from ..values import Claimed, Finished, Progress, Renewed, Report, WorkerIdentity

Held = tuple[uuid.UUID, int]  # (job id, lease token): one attempt this worker runs


class Engine(ABC):  # noqa: B024 (the interface; engines override the hot calls)
    """One database's way of storing jobs; see the module docstring for the rules."""

    #: Whether the database can wake idle workers (LISTEN/NOTIFY).
    listens: bool = False

    def __init__(self, db: str, options: JobsOptions | None = None) -> None:
        self.db = db
        self.options = options or JobsOptions()

    # -- the producer --------------------------------------------------------

    def claim(
        self,
        worker: WorkerIdentity,
        queues: Sequence[str],
        limit: int,
        lease_seconds: float | None = None,
    ) -> list[Claimed]:
        """Lease up to ``limit`` ready jobs of ``queues``, highest priority then oldest.

        Each claimed job is ``running`` with one attempt and one lease, fenced
        by its token; the task runs after the claim commits, outside any
        transaction of ours. Paused queues are skipped; queues with flow
        control (limits, fairness, rates) honour it across every worker.
        """
        return transitions.claim(
            self.db,
            worker,
            queues,
            limit,
            lease_seconds or self.options.LEASE_SECONDS,
            self.options,
        )

    def idle(self, queues: Sequence[str]) -> bool:
        """No job of ``queues`` is queued, running or due: a burst worker may exit."""
        return transitions.idle(self.db, queues)

    # -- the completer -------------------------------------------------------

    def finish(self, worker_id: uuid.UUID, reports: Sequence[Report]) -> Finished:
        """Apply attempt outcomes, each fenced on its lease.

        A report whose lease is gone (reaped, released, or re-claimed under a
        newer token) is *stale*: kept on its attempt's ``late_report``, it
        changes nothing else.
        """
        return transitions.finish(self.db, worker_id, reports, self.options)

    def release_lease(
        self, worker_id: uuid.UUID, job_id: uuid.UUID, token: int, reason: str
    ) -> int:
        """Give back one lease, its attempt ``lost``: the worker saw the attempt die."""
        return transitions.release_lease(
            self.db, worker_id, job_id, token, reason, self.options.POISON_LOST_ATTEMPTS
        )

    def release_worker(self, worker_id: uuid.UUID, reason: str) -> int:
        """Give back every lease of one worker, their attempts ``lost``, requeued at once."""
        return transitions.release_worker(
            self.db, worker_id, reason, self.options.POISON_LOST_ATTEMPTS
        )

    # -- the lifeline ----------------------------------------------------------

    def renew(
        self,
        worker_id: uuid.UUID,
        held: Iterable[Held],
        progress: Mapping[Held, Progress] | None = None,
        lease_seconds: float | None = None,
    ) -> Renewed:
        """Extend this worker's leases, write progress, learn of loss and cancellation."""
        return transitions.renew(
            self.db, worker_id, held, lease_seconds or self.options.LEASE_SECONDS, progress
        )

    def reap(self, batch: int = 100) -> int:
        """Turn expired leases into ``lost`` attempts; requeue, exhaust or quarantine."""
        return transitions.reap(self.db, batch, self.options.POISON_LOST_ATTEMPTS)

    def expire_overdue(self, batch: int = 500) -> int:
        """Move queued jobs past their ``expires_at`` to ``expired``."""
        return transitions.expire_overdue(self.db, batch)

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
        transitions.register_worker(self.db, worker, backend, host, pid, queues, concurrency)

    def stop_worker(self, worker_id: uuid.UUID) -> None:
        """Mark a worker stopped (its leases are released separately)."""
        transitions.stop_worker(self.db, worker_id)

    # -- operators -------------------------------------------------------------

    def operate(self, job_id: uuid.UUID, verb: str, actor: str, note: str = "") -> Transition:
        """Apply an operator verb to one job; return the transition it took."""
        return transitions.operate(self.db, job_id, verb, actor, note)

    def set_queue_paused(self, queue: str, paused: bool, actor: str, note: str = "") -> bool:
        """Pause or resume a queue; whether anything changed."""
        return transitions.set_queue_paused(self.db, queue, paused, actor, note)
