"""When a worker process's claim loop and heartbeat thread last turned, for its supervisor.

Liveness must mean "this worker claims and heartbeats", not "the process
exists": a process whose claim loop is stuck on a lock, or whose heartbeat
thread hangs, holds its slots and loses its leases while ``ps`` shows it
running. So each worker stamps two moments into memory it shares with the
supervisor that forked it, and the supervisor's ``/livez`` compares them with
the clock.

Shared memory and not the worker's database row on purpose: liveness must not
fail while the database is down (restarting workers would not bring it back,
and they ride out the outage by themselves); readiness says that instead. A
turn of a loop counts even when its database call failed.

The moments are ``time.monotonic()``: one clock for every process on a host.
Zero means "not yet": a worker still starting up (importing tasks, waiting
for the database to register) is not stalled.
"""

from __future__ import annotations

import ctypes
import multiprocessing
import time

_LOOP, _BEAT = 0, 1


class Pulse:
    def __init__(self) -> None:
        # Made before the fork, so the supervisor and its child share it.
        # Unlocked: each moment has one writer, and a float is written whole.
        self._moments = multiprocessing.RawArray(ctypes.c_double, 2)

    def loop(self) -> None:
        """The claim loop turned."""
        self._moments[_LOOP] = time.monotonic()

    def beat(self) -> None:
        """The heartbeat thread turned."""
        self._moments[_BEAT] = time.monotonic()

    def reset(self) -> None:
        """A new process takes the slot: it is starting, not stalled."""
        self._moments[_LOOP] = self._moments[_BEAT] = 0.0

    def stalled(self, after: float) -> str | None:
        """Why this worker is not live (a loop idle for more than ``after`` seconds), or None."""
        now = time.monotonic()
        for index, part in ((_LOOP, "claim loop"), (_BEAT, "heartbeat thread")):
            moment = self._moments[index]
            if moment and now - moment > after:
                return f"its {part} has not turned for {now - moment:.0f}s (limit {after:g}s)"
        return None
