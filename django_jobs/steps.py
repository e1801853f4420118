"""Durable steps inside a job: ``context.step`` and ``context.sleep``.

A task that does several things with effects outside the database (charge a
card, then send an email, then call a partner) is run again from the top
after a lost attempt or a retry. Wrapped in steps, each thing runs once: the
first attempt that completes a step records its result under the job, and
every later attempt gets that record back instead of running the step again.
The task's code stays a plain function; what makes it resumable is that it
asks for the same steps in the same order on every run (docs/steps.md).

The record is written by the engine under the attempt's lease token
(``Engine.record_step``), so an attempt whose lease was taken away cannot
record: it is stopped with ``StaleAttemptError``. A sleep ends the attempt
(``JobSleeping``); the worker re-queues the job for the wake time and records
the sleep as a step, so the next run goes straight past it.

Limits, honestly: a step's function may run more than once if its attempt is
lost after the function returned and before its record committed (the record
is the proof it ran); make it idempotent with ``context.stable_key`` plus the
step's name where that matters. Steps are for synchronous tasks: in a
coroutine task, the record would be a blocking call in the event loop.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, cast

from django.utils import timezone

from .codec import from_json
from .exceptions import DuplicateStepError, JobSleeping, StaleAttemptError, StepError
from .models import Step
from .payload import check_step_result
from .text import unstorable
from .values import StepWrite

if TYPE_CHECKING:
    from .engine.base import Engine

# Step.name's max_length.
NAME_MAX_LENGTH = 200


class Steps:
    """The steps of one attempt: what earlier attempts recorded, and the names used in this run.

    Used from the task's own thread only, one step at a time, as the task
    calls them.
    """

    def __init__(
        self,
        engine: Engine,
        worker_id: uuid.UUID,
        job_id: uuid.UUID,
        token: int,
        max_result_bytes: int,
    ) -> None:
        self.engine = engine
        self.worker_id = worker_id
        self.job_id = job_id
        self.token = token
        self.max_result_bytes = max_result_bytes
        self._recorded: dict[str, Any] | None = None  # read at the first step of the run
        self._used: set[str] = set()  # names completed or under way in this run
        self._sleeps = 0

    def run[**A, R](self, name: str, fn: Callable[A, R], *args: A.args, **kwargs: A.kwargs) -> R:
        """Run ``fn(*args, **kwargs)`` once for this job under ``name``; return its result.

        A step an earlier attempt recorded returns its record, decoded, and
        ``fn`` is not called. The first run returns the record too (what
        a replay will return), so both runs see the same value and types.
        """
        self._check_name(name, "step")
        if not callable(fn):
            raise StepError(f"step {name!r}: {fn!r} is not callable; pass the function to run.")
        self._use(name)
        recorded = self._records()
        if name in recorded:
            return cast("R", self._decoded(name, recorded[name]))
        try:
            value = fn(*args, **kwargs)
            stored = check_step_result(name, value, self.max_result_bytes)
        except BaseException:
            self._used.discard(name)  # not completed: the task may try it again in this run
            raise
        written = self.engine.record_step(self.worker_id, self.job_id, self.token, name, stored)
        if written is StepWrite.STALE:
            raise StaleAttemptError(
                f"attempt {self.token} of job {self.job_id} no longer holds the job's lease "
                f"(reaped or released; the job may run again elsewhere), so step {name!r} "
                "was not recorded and the attempt stops here."
            )
        if written is StepWrite.DUPLICATE:
            raise DuplicateStepError(
                f"step {name!r} of job {self.job_id} was recorded while this run computed it "
                "(a step of the same name inside it?); step names must be unique within a run."
            )
        # As the database keeps it, read back: jsonb has its own idea of some
        # values (1e16 comes back an int), and a replay must see what this run saw.
        rows = Step.objects.using(self.engine.db).filter(job_id=self.job_id, name=name)
        recorded[name] = rows.values_list("result", flat=True).get()
        return cast("R", self._decoded(name, recorded[name]))

    def sleep_until(self, when: datetime, name: str | None = None) -> None:
        """End the attempt until ``when``, unless this run's sleep of that name was slept already.

        Sleeps are named ``sleep-1``, ``sleep-2``, ... in the order a run
        reaches them, unless ``name`` is given. A time already past returns
        at once, and is not recorded.
        """
        if not isinstance(when, datetime) or timezone.is_naive(when):
            raise StepError(
                f"sleep_until needs a timezone-aware datetime, not {when!r} "
                "(django.utils.timezone.now() + timedelta(...), say)."
            )
        self._sleeps += 1
        step = f"sleep-{self._sleeps}" if name is None else name
        self._check_name(step, "sleep")
        self._use(step)
        if step in self._records() or when <= timezone.now():
            return
        # In UTC, which the record stores whatever tzinfo the task used.
        raise JobSleeping(when.astimezone(UTC), step)

    def sleep(self, seconds: float, name: str | None = None) -> None:
        """``sleep_until`` now plus ``seconds``."""
        if (
            isinstance(seconds, bool)
            or not isinstance(seconds, int | float)
            or not math.isfinite(seconds)
            or seconds < 0
        ):
            raise StepError(f"sleep needs a finite number of seconds >= 0, not {seconds!r}.")
        self.sleep_until(timezone.now() + timedelta(seconds=seconds), name)

    def _check_name(self, name: object, what: str) -> None:
        if not isinstance(name, str) or not name or len(name) > NAME_MAX_LENGTH:
            raise StepError(
                f"a {what}'s name must be a non-empty string of at most {NAME_MAX_LENGTH} "
                f"characters, not {name!r}."
            )
        if (wrong := unstorable(name)) is not None:
            raise StepError(f"a {what}'s name must not contain {wrong}: {name!r}.")

    def _use(self, name: str) -> None:
        if name in self._used:
            raise DuplicateStepError(
                f"step {name!r} was already run in this run of job {self.job_id}; step names "
                "must be unique within a run (add a number or the item's key to the name)."
            )
        self._used.add(name)

    def _records(self) -> dict[str, Any]:
        if self._recorded is None:
            rows = Step.objects.using(self.engine.db).filter(job_id=self.job_id)
            self._recorded = dict(rows.values_list("name", "result"))
        return self._recorded

    def _decoded(self, name: str, stored: Any) -> Any:
        """What ``fn`` returned, as stored: equal, and of its type (``codec.py``)."""
        return from_json(stored, f"the result of step {name!r}")
