"""Unique jobs and debounce: the rule a call's ``.using(unique_key=...)`` options make.

An idempotency key holds for the lifetime of its row; a unique key holds only
while a job with it is *live* (``unique_states``) or was enqueued within a
window (``unique_for``), so the same key enqueues again once that job is done
or old enough. ``debounce`` is the other reading of one key: the last call
wins, replacing the arguments of the job not yet started and pushing its start.

This module decides what the options mean and refuses what they cannot mean;
``engine/unique.py`` applies the rule under the key's lock.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import timedelta
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from .exceptions import MAX_RETRY_DELAY_SECONDS
from .states import LIVE_STATES, JobState

if TYPE_CHECKING:
    from .tasks import JobTask

# Where a debounced call finds its job (with no attempt made yet): a job that
# has started keeps the arguments it started with, and the call makes a new one.
DEBOUNCE_STATES = frozenset({JobState.WAITING, JobState.QUEUED})
# The longest window or debounce: the longest delay a job may have.
_LONGEST = timedelta(seconds=MAX_RETRY_DELAY_SECONDS)


class EnqueueOutcome(StrEnum):
    """What ``enqueue()`` did: ``JobResult.enqueue_outcome``."""

    # A new row was written.
    CREATED = "created"
    # An existing job holds the idempotency key or the unique key: nothing was written.
    EXISTING = "existing"
    # A job of the key not yet started took this call's arguments and a later start.
    DEBOUNCED = "debounced"


@dataclass(frozen=True, slots=True)
class UniqueRule:
    """When a call with ``key`` finds a job instead of writing one (see the module docstring)."""

    key: str
    states: frozenset[JobState]
    window: timedelta | None = None
    debounce: timedelta | None = None


def rule_of(task: JobTask[Any, Any]) -> UniqueRule | None:
    """The rule of a validated task's options; None without a unique key."""
    if task.unique_key is None:
        return None
    states = LIVE_STATES if task.unique_states is None else frozenset(task.unique_states)
    return UniqueRule(task.unique_key, states, task.unique_for, task.debounce)


def states_given(value: Iterable[JobState | str] | None) -> Any:
    """``.using(unique_states=...)`` as kept on the task: a tuple, or as given to be refused."""
    if value is None or isinstance(value, str):
        return value
    try:
        return tuple(value)
    except TypeError:
        return value


def problem(task: JobTask[Any, Any]) -> str | None:
    """What is wrong with a task's unique options, if anything: the message of the refusal."""
    for name in ("unique_for", "debounce"):
        value = getattr(task, name)
        if value is None:
            continue
        if not isinstance(value, timedelta):
            return f"{name} must be a timedelta, not {type(value).__name__}."
        if value <= timedelta(0):
            return f"{name} must be a positive timedelta, not {value!r}."
        if value > _LONGEST:  # further, now + it is past the last date Python has
            return f"{name} must be at most a hundred years, not {value!r}."
    states = task.unique_states
    if states is not None:
        if not isinstance(states, tuple):
            return (
                "unique_states must be a collection of job states (e.g. "
                f"[JobState.QUEUED]), not {type(states).__name__}."
            )
        known = {str(state) for state in JobState}
        for state in states:
            if not isinstance(state, str) or str(state) not in known:
                return (
                    f"unique_states: {state!r} is not a job state; the states are "
                    f"{', '.join(sorted(known))}."
                )
    given = [n for n in ("unique_for", "unique_states", "debounce") if getattr(task, n) is not None]
    if task.unique_key is None:
        return f"{given[0]} needs a unique_key." if given else None
    if task.debounce is not None:
        if task.unique_for is not None or task.unique_states is not None:
            return (
                "debounce cannot be combined with unique_for or unique_states: a debounced "
                "key always has its one job not yet started, whose arguments the last call sets."
            )
        if task.run_after is not None:
            return "debounce sets run_after (now + debounce); give one or the other."
        if task.after:
            return "debounce cannot be combined with after=: the job it finds waits for its own."
    if states == () and task.unique_for is None:
        return "unique_states is empty and no unique_for is given: no job would ever match."
    return None
