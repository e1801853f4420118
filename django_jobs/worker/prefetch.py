"""Claiming ahead: a waiting attempt for each job thread, while the jobs are short.

A worker's cycle writes outcomes and claims in one transaction; while that
runs, job threads that have nothing to do wait for it. With an attempt claimed
ahead for each thread (``PREFETCH``), the threads run those during the
transaction instead, and one process of 16 threads drains about a third more
short jobs a second (docs/benchmarks.md).

An attempt claimed ahead is leased and ``running`` while it waits, so the
waiting must stay short. Two rules keep it so:

- the worker claims ahead only while no attempt it holds was claimed more than
  ``SHORT_SECONDS`` ago and is still running or waiting: a long job ends
  claiming ahead until it is over, and a queue of long jobs never claims ahead;
- an attempt still waiting ``GIVE_BACK_SECONDS`` after its claim (a batch of
  long jobs took every thread) is given back to its queue, due at once for any
  worker, its attempt recorded as not started and not counted
  (``TaskRunner.not_started``). At shutdown, the attempts still waiting when
  the grace period ends (or at a second stop) go back the same way, not
  released as lost with the running ones.

A waiting attempt's timeout counts from when a thread takes it
(``AttemptControl.start``). A queue with a concurrency limit is never claimed
ahead: the limit counts a waiting attempt as running (``Engine.claim``).
"""

from __future__ import annotations

import time

from ..values import Report
from .runner import TaskRunner
from .running import Running

# Claim ahead only while every attempt held was claimed less than this ago.
SHORT_SECONDS = 0.1
# An attempt claimed ahead that no thread took within this goes back to its queue.
GIVE_BACK_SECONDS = 1.0


class Prefetch:
    def __init__(self, per_thread: int, threads: int, running: Running, runner: TaskRunner) -> None:
        self.size = per_thread * threads
        self.running = running
        self.runner = runner
        # How many attempts to claim beyond the free threads, as of ``check``.
        self.ahead = 0

    def check(self) -> list[Report]:
        """Once a cycle: decide ``ahead``; give back what waited too long (reports to write)."""
        if not self.size:
            return []
        oldest = self.running.oldest_claim()
        now = time.monotonic()
        held = 0.0 if oldest is None else now - oldest
        self.ahead = self.size if held < SHORT_SECONDS else 0
        if held < GIVE_BACK_SECONDS:
            return []
        return self._give_back(waited=GIVE_BACK_SECONDS)

    def give_back_all(self) -> list[Report]:
        """Give back every waiting attempt (at shutdown); their reports, to write."""
        return self._give_back(waited=0.0)

    def _give_back(self, waited: float) -> list[Report]:
        """The attempts claimed at least ``waited`` seconds ago that no thread took."""
        now = time.monotonic()
        return [
            self.runner.not_started(attempt.claimed, now - attempt.control.claimed)
            for attempt in self.running.waiting(claimed_before=now - waited)
            if attempt.control.give_back()
        ]
