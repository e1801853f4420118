"""Where a worker's next plain claim starts reading each queue.

A claimed job's entry in ``django_jobs_claim_idx`` stays in the index until
VACUUM removes the row version it points to. While something holds the
vacuum horizon back (a long transaction, a ``REPEATABLE READ`` report, a
replica's feedback), nothing can be removed, so a claim that reads a queue
from its head walks past every job claimed since. On our benchmark host,
120,000 such entries cost each claim 11 ms of PostgreSQL's time; read from
where the last claim ended, the same claim took 0.06 ms.

So, under a backlog, a worker claims each queue from its position there:
the priority and ``run_after`` of the last job its last full claim took.
It reads the queue's jobs of a higher priority from their head (usually
none), then the position's priority from ``run_after`` on. What lies behind
a position is claimed from the head again:

* when a claim from the positions comes back short: the jobs left may be of
  a lower priority;
* at least every ``RESCAN_SECONDS``, for jobs that became ready behind the
  position: a transaction that committed after later ones, a job released or
  scheduled in the past. Under a backlog such a job waits up to that much
  longer than strict priority-then-age order would have it.

A claim that comes back short forgets the positions: an idle worker reads
from the head, as it always did. A claim rolled back after its positions
were kept leaves its jobs behind them until the next rescan.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from typing import Any

from psycopg.types.numeric import Int4

# How often a worker with positions claims from the head all the same.
RESCAN_SECONDS = 1.0

# Below every job's priority (a smallint): the first scan starts at the head,
# and the second, on this priority, finds nothing. Priorities go as Int4:
# psycopg gives a plain int the smallest type it fits, and a statement
# prepared with other parameter types is another prepared statement.
_HEAD = (Int4(-(2**15) - 1), None)


class Positions:
    """One worker's positions, by queue; the worker's producer alone uses them."""

    def __init__(self, rescan_seconds: float = RESCAN_SECONDS) -> None:
        self.rescan_seconds = rescan_seconds
        self._at: dict[str, tuple[Int4, str | None]] = {}
        self._rescan_at = 0.0

    def resuming(self) -> bool:
        """Whether the next claim reads from the positions rather than the head."""
        return bool(self._at) and time.monotonic() < self._rescan_at

    def params(self, queues: Sequence[str]) -> dict[str, Any]:
        """The claim's parameters: each queue's priority and ``run_after`` to start from."""
        at = self._at if self.resuming() else {}
        params: dict[str, Any] = {}
        for n, queue in enumerate(queues):
            params[f"priority_{n}"], params[f"since_{n}"] = at.get(queue, _HEAD)
        return params

    def moved(self, taken: Iterable[tuple[str, int, str]], *, full: bool, resumed: bool) -> None:
        """After a claim: ``taken`` is each job's queue, priority and position, in claim order.

        A full claim leaves each queue it took from at its last job; from the
        head, it also starts the time to the next rescan. A short one
        forgets every position.
        """
        if not full:
            self._at.clear()
            return
        for queue, priority, position in taken:
            self._at[queue] = (Int4(priority), position)
        if not resumed:
            self._rescan_at = time.monotonic() + self.rescan_seconds
