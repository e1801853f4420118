"""Where a worker's next plain claim starts reading each queue.

A claimed job's entry in ``django_jobs_claim_idx`` stays in the index until
VACUUM removes the row version it points to. While something holds the
vacuum horizon back (a long transaction, a ``REPEATABLE READ`` report, a
replica's feedback), nothing can be removed, so a claim that reads a queue
from its head walks past every job claimed since. On our benchmark host,
120,000 such entries cost each claim 11 ms of PostgreSQL's time; read from
where the last claim ended, the same claim took 0.06 ms.

So a worker claims each queue from its position there: the priority and
``run_after`` of the last job it took from it. It reads the queue's jobs of
a higher priority from their head (usually none), then those of the
position's priority due from ``run_after`` on, then those of a lower
priority from their head (usually none either). While its claims come back
full (a backlog), it reads from the position itself; once one comes back
short (it has caught up, jobs arrive as they are made), from
``LAG_SECONDS`` before it, so a job whose transaction committed after a
later job's is still found at once unless it committed that much later.
What lies further behind a position is found by reading every queue from
its head again, at least every ``RESCAN_SECONDS``: a job that committed
late, one released, or one enqueued with a ``run_after`` in the past waits
up to that much longer than strict priority-then-age order would have it.
A claim rolled back after its positions were kept leaves its jobs behind
them until then, too.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from functools import cache
from typing import Any

from psycopg.types.numeric import Int4

# How often a worker with positions claims from the head all the same.
RESCAN_SECONDS = 1.0
# How far before its position a worker that has caught up reads.
LAG_SECONDS = 1.0

# Below every job's priority (a smallint): the first scan reads the queue from
# its head, and the other two find nothing. Priorities go as Int4:
# psycopg gives a plain int the smallest type it fits, and a statement
# prepared with other parameter types is another prepared statement.
_HEAD = (Int4(-(2**15) - 1), None)


class Positions:
    """One worker's positions, by queue; the worker's producer alone uses them."""

    def __init__(self) -> None:
        self._at: dict[str, tuple[Int4, str | None]] = {}
        self._lag = 0.0
        self._rescan_at = 0.0
        self._from_head = True

    def params(self, queues: Sequence[str]) -> dict[str, Any]:
        """The next claim's parameters: each queue's priority and ``run_after`` to start from.

        From the head when no queue has a position yet or a rescan is due.
        """
        self._from_head = not self._at or time.monotonic() >= self._rescan_at
        at = {} if self._from_head else self._at
        params: dict[str, Any] = {"lag": 0.0 if self._from_head else self._lag}
        for (priority, since), queue in zip(parameter_names(len(queues)), queues, strict=True):
            params[priority], params[since] = at.get(queue, _HEAD)
        return params

    def moved(self, taken: Iterable[tuple[str, int, str]], *, full: bool) -> None:
        """After the claim ``params`` was for: each job's queue, priority and position, in order.

        Each queue it took from is left at its last job. A claim from the head
        starts the time to the next rescan.
        """
        for queue, priority, position in taken:
            self._at[queue] = (Int4(priority), position)
        self._lag = 0.0 if full else LAG_SECONDS
        if self._from_head:
            self._rescan_at = time.monotonic() + RESCAN_SECONDS


@cache
def parameter_names(count: int) -> tuple[tuple[str, str], ...]:
    """The names of ``count`` queues' position parameters, in the claim's text and its call."""
    return tuple((f"priority_{n}", f"since_{n}") for n in range(count))
