"""The attempts one worker process runs, behind one lock.

Every part reads or changes them: the producer adds what it claimed and
counts free slots, the completer ends what it wrote, the lifeline renews
their leases and marks those it lost, the watchdog gives up on threads that
will not stop. Each attempt's flags live on its own entry, so they leave with
it: nothing about an attempt outlives the attempt.
"""

from __future__ import annotations

import itertools
import threading
import uuid
from collections.abc import Iterable
from dataclasses import dataclass

from ..attempt import AttemptControl
from ..values import Claimed

Key = tuple[uuid.UUID, int]  # (job id, lease token): one attempt


@dataclass(slots=True)
class RunningAttempt:
    """One claimed attempt, from its claim until its outcome is written."""

    claimed: Claimed
    control: AttemptControl
    # Its outcome is being written: its lease vanishes on purpose, not lost.
    writing: bool = False
    # The lifeline found its lease gone: whatever it reports will not count.
    lease_lost: bool = False
    # Its thread would not stop: its report is held until the process exits.
    abandoned: bool = False

    @property
    def key(self) -> Key:
        return (self.claimed.job_id, self.claimed.token)


class Running:
    """The running attempts by key; the flags change only under the lock."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._attempts: dict[Key, RunningAttempt] = {}
        # Whether any attempt was given up on: then the process is on its way
        # out (the watchdog recycles it), and until then no outcome's key
        # needs looking up (a UUID hashes in Python: 6 % of the Python time
        # of a busy worker's main thread, one outcome at a time).
        self._abandoned_any = False

    def __len__(self) -> int:
        with self._lock:
            return len(self._attempts)

    def start(self, claimed: Claimed) -> RunningAttempt:
        attempt = RunningAttempt(claimed, AttemptControl(claimed.timeout))
        with self._lock:
            self._attempts[attempt.key] = attempt
        return attempt

    def snapshot(self) -> dict[Key, RunningAttempt]:
        """The attempts now, to read without holding the lock."""
        with self._lock:
            return dict(self._attempts)

    # The attempts are kept in the order they were claimed (``start``), so the
    # two reads below, made every cycle, stop at the first attempt that answers
    # them instead of reading every one.

    def oldest_claim(self) -> float | None:
        """When the longest-held attempt whose task has not returned was claimed (monotonic)."""
        with self._lock:
            return next(
                (a.control.claimed for a in self._attempts.values() if not a.control.finished),
                None,
            )

    def waiting(self, claimed_before: float) -> list[RunningAttempt]:
        """Attempts claimed before that moment that no job thread has taken yet."""
        with self._lock:
            early = itertools.takewhile(
                lambda attempt: attempt.control.claimed < claimed_before,
                self._attempts.values(),
            )
            return [a for a in early if not a.control.running and not a.control.given_back]

    def writing(self, keys: Iterable[Key]) -> None:
        with self._lock:
            for key in keys:
                if (attempt := self._attempts.get(key)) is not None:
                    attempt.writing = True

    def end(self, keys: Iterable[Key]) -> dict[Key, RunningAttempt]:
        """Forget attempts whose outcome is written; return those that were here."""
        with self._lock:
            return {
                key: attempt
                for key in keys
                if (attempt := self._attempts.pop(key, None)) is not None
            }

    def clear(self) -> None:
        with self._lock:
            self._attempts.clear()

    def lose(self, keys: Iterable[Key]) -> set[Key]:
        """Mark leases the database no longer has; return the ones not known lost before.

        A lease that vanished because its outcome is being written is not lost.
        """
        newly: set[Key] = set()
        with self._lock:
            for key in keys:
                attempt = self._attempts.get(key)
                if attempt is None or attempt.writing or attempt.lease_lost:
                    continue
                attempt.lease_lost = True
                newly.add(key)
        return newly

    def lost_leases(self) -> set[Key]:
        with self._lock:
            return {key for key, attempt in self._attempts.items() if attempt.lease_lost}

    def abandon(self, key: Key) -> bool:
        """Give up on an attempt's thread; False if it ended or was given up on already."""
        with self._lock:
            attempt = self._attempts.get(key)
            if attempt is None or attempt.abandoned:
                return False
            attempt.abandoned = self._abandoned_any = True
            return True

    def abandoned_among(self, keys: Iterable[Key]) -> set[Key]:
        """Those of ``keys`` whose attempt was given up on; one lock for a whole batch."""
        with self._lock:
            if not self._abandoned_any:
                return set()
            return {
                key
                for key in keys
                if (attempt := self._attempts.get(key)) is not None and attempt.abandoned
            }

    def only_abandoned(self) -> bool:
        """Every attempt left is one given up on (or none is left)."""
        with self._lock:
            return all(attempt.abandoned for attempt in self._attempts.values())
