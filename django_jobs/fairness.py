"""Fair queues: tenants take turns by what each has received, not by what runs now.

Start-time fair queueing, counted in claims. Each tenant of a fair queue has
a clock (``models.FairClock``): ``finish``, the virtual time its claims add
up to (each job ``1 / weight``), and ``start``, the virtual start of its
latest job. The queue's virtual time is the latest ``start`` among the
tenants that have jobs ready. A tenant's next jobs rank at
``base + (k - 0.5) / weight`` for k = 1, 2, … with ``base = max(finish, queue
time)``, and the claim takes the lowest ranks:

* a tenant that got less than its share ranks first until it has caught up,
  whether one slot is free at a time or sixty-four, and however long the
  other tenants' backlogs are;
* a tenant that is new, or comes back after having nothing queued, starts
  level with the others (at the queue's time) instead of cashing in the time
  it was away, and one that was ahead when it left keeps its lead only until
  the others reach it;
* weights split the claims in proportion (the midpoints ``k - 0.5`` are
  Sainte-Laguë's, so a batch splits evenly rather than in favour of the
  largest).

Counting what each tenant *received* is the point: ranking by what runs at
this instant (the previous design) gave every tenant the same rank whenever
nothing ran, and the tie went to the oldest job, the big backlog, every time.

The clocks move in the claim's own transaction: written after its commit (an
earlier design), another claimer could see the claimed jobs gone with their
tenant's clock not yet moved, rank its next job level with a late tenant's and
give it the tie, and the queue's time then passed the late tenant's clock: a
turn lost for good, each time. Claimers that serve one tenant at once wait for
each other's commit on its clock row (locked in tenant order, never in a
cycle); a crash loses the claim and its accounting together. PostgreSQL's
fair claim (``CLAIM_FAIR`` in ``engine/postgres/statements.py``) ranks and
moves the clocks in SQL, in the claim statement; the claim that also counts
limits, and SQLite's, call ``order`` below and ``Engine.record_served``. Pure
functions: the engines read and write the clocks.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True)
class Clock:
    """A tenant's virtual start and finish (a tenant with no row yet has none)."""

    start: float
    finish: float


@dataclass(frozen=True)
class Head:
    """One ready job of a fair queue, as the ranking sees it."""

    job_id: uuid.UUID
    tenant: str
    priority: int
    run_after: datetime
    concurrency_key: str | None


def queue_time(clocks: Iterable[Clock]) -> float:
    """The queue's virtual time: the latest start among the tenants with ready jobs."""
    return max((clock.start for clock in clocks), default=0.0)


def base(clock: Clock | None, now: float) -> float:
    """Where a tenant's next turns count from: its own finish, or the queue's time if later."""
    return now if clock is None else max(clock.finish, now)


def rank(start: float, turn: int, weight: float) -> float:
    """The rank of a tenant's ``turn``-th next job (1-based) from its ``base``."""
    return start + (turn - 0.5) / weight


def advance(clock: Clock | None, start: float, claims: int, weight: float) -> Clock:
    """A tenant's clock after ``claims`` more jobs counted from ``start`` (its base then).

    A clock that moved on meanwhile (another worker's claim, recorded first)
    is counted from, so concurrent claims add up instead of overwriting.
    """
    begin = start if clock is None else max(clock.finish, start)
    return Clock(start=begin + (claims - 1) / weight, finish=begin + claims / weight)


def order(
    heads: Sequence[Head], clocks: Mapping[str, Clock], weights: Mapping[str, float]
) -> list[tuple[Head, float]]:
    """``heads`` in fair order, each with its tenant's base (what ``record`` needs).

    Within a tenant, jobs keep their own order (priority, then age); across
    tenants the ranks interleave them. Ties go to priority, then age.
    """
    now = queue_time(clocks[h.tenant] for h in heads if h.tenant in clocks)
    turns: dict[str, int] = {}
    ranked = []
    for head in sorted(heads, key=lambda h: (-h.priority, h.run_after)):
        turn = turns[head.tenant] = turns.get(head.tenant, 0) + 1
        start = base(clocks.get(head.tenant), now)
        weight = float(weights.get(head.tenant, 1.0))
        ranked.append((rank(start, turn, weight), -head.priority, head.run_after, head, start))
    ranked.sort(key=lambda row: row[:3])
    return [(head, start) for *_, head, start in ranked]


def served(
    claimed: Iterable[tuple[str, float]],
) -> dict[str, tuple[int, float]]:
    """Per tenant: how many jobs a fair claim took, and the base their ranks counted from."""
    served: dict[str, tuple[int, float]] = {}
    for tenant, start in claimed:
        count, _ = served.get(tenant, (0, start))
        served[tenant] = (count + 1, start)
    return served
