"""The retry policy: given an exception and the attempt number, what happens next.

Pure Python on purpose (no database, no clock): the worker asks for a
``Decision`` and the engine applies it, so every branch here is unit
tested without a worker.

Backoff is exponential with *full jitter* (a uniform draw between 0 and
``min(cap, base * 2 ** (attempt - 1))``): after an outage, failed jobs spread
over the whole window instead of stampeding back together.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum

from .exceptions import MAX_RETRY_DELAY_SECONDS, RetryLater


@dataclass(frozen=True, slots=True)
class Backoff:
    base: float = 1.0
    cap: float = 600.0

    def __post_init__(self) -> None:
        if self.base < 0 or self.cap < 0:
            raise ValueError("Backoff base and cap must not be negative.")
        if self.base != self.base:  # NaN passes every comparison: every delay was the cap
            raise ValueError("Backoff base must be a number of seconds, not NaN.")
        if self.cap < self.base:
            raise ValueError("Backoff cap must not be below its base.")
        if not self.cap <= MAX_RETRY_DELAY_SECONDS:  # NaN too
            raise ValueError(
                f"Backoff cap must be at most {MAX_RETRY_DELAY_SECONDS} seconds (a hundred "
                f"years), not {self.cap!r}."
            )

    def ceiling(self, attempt: int) -> float:
        """The largest delay after the given (1-based) attempt failed."""
        # min() before the power would overflow for absurd attempt counts.
        exponent = min(attempt - 1, 64)
        return float(min(self.cap, self.base * 2**exponent))

    def delay(self, attempt: int, rand: Callable[[], float] = random.random) -> float:
        return self.ceiling(attempt) * rand()


class Verdict(StrEnum):
    RETRY = "retry"
    EXHAUSTED = "exhausted"  # retryable, but no attempt is left
    GIVE_UP = "give_up"  # permanent: do not retry whatever the budget
    # Run it later without spending an attempt of its budget (max_attempts
    # grows by one, as Oban's snooze does): the attempt could not start, e.g.
    # this worker does not have the task yet during a rolling deploy.
    POSTPONE = "postpone"


@dataclass(frozen=True, slots=True)
class Decision:
    verdict: Verdict
    delay: float = 0.0


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    max_attempts: int
    backoff: Backoff
    retry_on: tuple[type[BaseException], ...] = (Exception,)
    give_up_on: tuple[type[BaseException], ...] = ()

    def decide(
        self,
        exc: BaseException,
        attempt: int,
        rand: Callable[[], float] = random.random,
    ) -> Decision:
        """Decide after ``attempt`` (1-based) raised ``exc``.

        give_up_on wins over retry_on, so a broad ``retry_on=(Exception,)`` can
        still carve out the errors that retrying cannot fix.
        """
        if isinstance(exc, RetryLater):
            if attempt >= self.max_attempts:
                return Decision(Verdict.EXHAUSTED)
            return Decision(Verdict.RETRY, exc.delay)
        if isinstance(exc, self.give_up_on) or not isinstance(exc, self.retry_on):
            return Decision(Verdict.GIVE_UP)
        if attempt >= self.max_attempts:
            return Decision(Verdict.EXHAUSTED)
        return Decision(Verdict.RETRY, self.backoff.delay(attempt, rand))


def unknown_task_decision(
    waited: float,
    grace: float,
    backoff: Backoff,
    attempt: int,
    rand: Callable[[], float] = random.random,
) -> Decision:
    """What to do with a job whose task this worker does not have, ``waited`` s after enqueue.

    Within ``grace`` it is postponed with backoff (never past the end of the
    grace, so the last look is made when it ends); after it, it fails for good.
    """
    left = grace - waited
    if left <= 0:
        return Decision(Verdict.GIVE_UP)
    return Decision(Verdict.POSTPONE, min(left, backoff.delay(attempt, rand)))


def budget_window(now: datetime, window: float) -> datetime:
    """The start of the fixed retry-budget window of ``window`` seconds holding ``now``."""
    start = math.floor(now.timestamp() / window) * window
    return datetime.fromtimestamp(start, tz=now.tzinfo or UTC)


def within_budget(
    at: datetime, start: datetime, count: int, budget: int, window: float, jitter: float
) -> datetime:
    """When the ``count``-th retry of the window starting at ``start`` may run.

    The rule (docs/control.md): the first ``budget`` retries of a window keep
    their backoff (``at``); the n-th beyond it is pushed to moment ``jitter``
    (0..1) of the window ``ceil(n / budget)`` windows later, so retries past
    the budget drain at ``budget`` per window instead of piling onto a
    failing dependency.
    """
    over = count - budget
    if over <= 0:
        return at
    pushed = start + timedelta(seconds=window * (math.ceil(over / budget) + jitter))
    return max(at, pushed)
