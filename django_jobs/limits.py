"""Per-key limits: which of a queue's candidate jobs may start now.

A pure policy: the counts come from the engine, the choice is made here, so
it is the same on every database and tested without one.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass

RateLimit = tuple[int, float]  # (jobs, per seconds)


@dataclass(frozen=True)
class KeyCounts:
    """Per concurrency key of one queue: jobs running now, jobs started in the rate window."""

    running: dict[str, int]
    started: dict[str, int]

    def at_limit(self, key_limit: int | None, key_rate: RateLimit | None) -> list[str]:
        """The keys that may start no job now."""
        full: set[str] = set()
        if key_limit is not None:
            full |= {key for key, n in self.running.items() if n >= key_limit}
        if key_rate is not None:
            full |= {key for key, n in self.started.items() if n >= key_rate[0]}
        return sorted(full)


def within_key_limits(
    candidates: Sequence[tuple[uuid.UUID, str | None]],
    key_limit: int | None,
    key_rate: RateLimit | None,
    budget: int,
    counts: KeyCounts,
) -> list[uuid.UUID]:
    """Candidates in order, skipping those whose concurrency key is at a limit.

    A key may be at its concurrency limit (jobs of that key running now) or
    at its rate limit (jobs of that key started in the current window).
    """
    if key_limit is None and key_rate is None:
        return [job_id for job_id, _ in candidates[:budget]]
    running = dict(counts.running)
    started = dict(counts.started)
    chosen: list[uuid.UUID] = []
    for job_id, key in candidates:
        if key is not None:
            if key_limit is not None and running.get(key, 0) >= key_limit:
                continue
            if key_rate is not None and started.get(key, 0) >= key_rate[0]:
                continue
            running[key] = running.get(key, 0) + 1
            started[key] = started.get(key, 0) + 1
        chosen.append(job_id)
        if len(chosen) == budget:
            break
    return chosen
