"""Writing how attempts ended: every outcome becomes exactly one engine call, in batches.

Reports (succeeded, failed, timed out, cancelled) go to ``Engine.finish`` all
at once; a dead isolated child becomes ``Engine.release_lease``, its attempt
``lost``. The batch shares one transaction with the producer's next claim:
one commit (one WAL flush) per cycle instead of two.

If the database is unavailable nothing is lost: the outcomes stay in memory
and the next cycle tries again. If that takes longer than the lease, the
reaper re-runs the job and our late report is kept on the attempt, not
applied.

A database that answers but refuses a value in the batch (``DataError``,
``IntegrityError``: a constraint, a trigger) is not down, and trying the same
batch again would fail the same way for as long as the worker lives, every
job in it held ``running``. Such a batch is written again at once, one report
at a time, and the report refused alone is recorded as a failure naming
what the database said (``ReportRefusedError``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import threading
import time
import uuid
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING

from django.db import DatabaseError, transaction
from django.utils import timezone

from ..exceptions import ReportRefusedError, error_type
from ..metrics import record
from ..retry import Decision, Verdict
from ..states import AttemptOutcome, JobState
from ..text import storable
from ..values import ChildDied, Finished, Outcome, Report
from .faults import REFUSED, Faults, said
from .notifier import Ended, send_task_finished
from .outcome_logs import log_applied, log_stale
from .running import Key, Running, RunningAttempt

if TYPE_CHECKING:
    from ..engine.base import Engine
    from ..framework import BaseTaskBackend

logger = logging.getLogger("django_jobs.worker")


def _key(outcome: Outcome) -> Key:
    return (outcome.job_id, outcome.token)


def _log(done: Finished, ended: dict[Key, RunningAttempt]) -> None:
    """Log what became of each written report.

    An attempt missing from ``ended`` was released at shutdown, and logged as
    lost then.
    """
    for report in done.stale:
        if (attempt := ended.get(_key(report))) is not None:
            log_stale(report, attempt.claimed)
    for report, state in done.applied:
        if (attempt := ended.get(_key(report))) is not None:
            log_applied(report, state, attempt.claimed)


class Completer:
    def __init__(
        self,
        engine: Engine,
        worker_id: uuid.UUID,
        running: Running,
        faults: Faults,
        sender: type[BaseTaskBackend],
        on_retry: Callable[[float], None],
        notify: Callable[[list[Ended]], None] | None = None,
    ) -> None:
        self.engine = engine
        self.worker_id = worker_id
        self.running = running
        self.faults = faults
        self.on_retry = on_retry  # told when a retry this worker scheduled is due
        # Given each written batch's ended attempts, for Django's task_finished
        # (``sender``, the backend class, names who sends it): a worker's
        # Notifier sends them from its thread; by default, here.
        self.notify = notify or partial(send_task_finished, sender)
        self.jobs_done = 0
        # Outcomes submitted and not collected yet, behind one lock the
        # producer can also wait on (``await_outcomes``).
        self._inbox: list[Outcome] = []
        self._arrived = threading.Condition()
        self._pending: list[Outcome] = []
        # Reports of attempts whose thread would not stop: written just before
        # this process exits, so the job cannot run elsewhere while it still runs here.
        self._held: list[Report] = []
        # A batch was refused: write report by report until a batch is written.
        self._one_by_one = False

    def submit(self, outcome: Outcome) -> None:
        """Take an outcome from a job thread; the next ``collect`` picks it up."""
        with self._arrived:
            self._inbox.append(outcome)
            self._arrived.notify()

    def await_outcomes(self, count: int, timeout: float) -> None:
        """Wait until ``count`` outcomes are submitted and not collected, or ``timeout`` passes."""
        with self._arrived:
            self._arrived.wait_for(lambda: len(self._inbox) >= count, timeout)

    def collect(self) -> None:
        """Move submitted outcomes to the batch; those of abandoned attempts are held already."""
        with self._arrived:
            arrived, self._inbox = self._inbox, []
        abandoned = self.running.abandoned_among(map(_key, arrived))
        self._pending += [o for o in arrived if _key(o) not in abandoned] if abandoned else arrived

    @property
    def pending(self) -> int:
        """Outcomes collected and not written yet: their slots are free once they are."""
        return len(self._pending)

    def hold(self, report: Report) -> None:
        self._held.append(report)

    def write[T](self, then: Callable[[], T], otherwise: T) -> T:
        """Write the collected outcomes and run ``then`` in the same transaction.

        With nothing to write, ``then`` (the claim) runs alone and needs no
        transaction of ours: in autocommit it is one round trip instead of
        three (BEGIN, claim, COMMIT), which is most of an idle worker's
        pickup latency. On a database fault, ``otherwise`` is returned and
        every outcome stays for the next try; a batch the database refused is
        written again at once, one report at a time.
        """
        batch = list(self._pending)
        reports = [outcome for outcome in batch if isinstance(outcome, Report)]
        deaths = [outcome for outcome in batch if isinstance(outcome, ChildDied)]
        self.running.writing(_key(outcome) for outcome in batch)
        scope = transaction.atomic(using=self.engine.db) if batch else contextlib.nullcontext()
        try:
            with scope:
                done = self._finish(reports) if reports else Finished()
                for death in deaths:
                    self.engine.release_lease(
                        self.worker_id, death.job_id, death.token, death.reason
                    )
                got = then()
        except DatabaseError as exc:
            if isinstance(exc, REFUSED) and reports and not self._one_by_one:
                logger.warning(
                    "The database refused a batch of %d reports (%s); writing them one by one.",
                    len(reports),
                    said(exc),
                    extra={"db": self.engine.db},
                )
                self._one_by_one = True
                return self.write(then, otherwise)  # once: it is one by one now
            self.faults.fault("report and claim", exc)
            return otherwise
        self.faults.recovered()
        self._one_by_one = False
        self._pending = self._pending[len(batch) :]
        self._written(batch, reports, done)
        return got

    def write_held(self) -> None:
        """Write the reports of abandoned attempts, as the process is about to exit."""
        if not self._held:
            return
        reports = list(self._held)
        # Few, and written once: one by one at once, so that none can hold the rest.
        done = self.faults.retry(lambda: self._each_alone(reports), tries=10)
        ended = self.running.end(_key(report) for report in reports)
        if done is not None:
            _log(done, ended)

    def _finish(self, reports: list[Report]) -> Finished:
        """The reports in one engine call, or one by one after the last batch was refused."""
        if self._one_by_one:
            return self._each_alone(reports)
        return self.engine.finish(self.worker_id, reports)

    def _each_alone(self, reports: list[Report]) -> Finished:
        """Write each report in a savepoint of its own; a refused one is recorded as a failure."""
        done = Finished()
        for report in reports:
            try:
                with transaction.atomic(using=self.engine.db):
                    part = self.engine.finish(self.worker_id, [report])
            except REFUSED as exc:
                part = self.engine.finish(self.worker_id, [refused(report, exc)])
            done.applied.extend(part.applied)
            done.stale.extend(part.stale)
        return done

    def _written(self, batch: list[Outcome], reports: list[Report], done: Finished) -> None:
        ended = self.running.end(_key(outcome) for outcome in batch)
        # What --max-jobs counts: jobs run, not attempts given back unstarted.
        self.jobs_done += sum(1 for r in reports if r.started)
        _log(done, ended)
        record.finished(done.applied, ended)
        # Django's task_finished, sent once the batch is applied, in its order.
        finished: list[Ended] = []
        for report, state in done.applied:
            if state is JobState.QUEUED and report.decision is not None:
                self.on_retry(time.monotonic() + report.decision.delay)
            elif state is JobState.QUEUED and report.wake_at is not None:
                # A sleep is due like a retry: this worker looks again then.
                delay = (report.wake_at - timezone.now()).total_seconds()
                self.on_retry(time.monotonic() + max(0.0, delay))
            attempt = ended.get(_key(report))
            if attempt is not None and attempt.control.result is not None:
                finished.append((report, state, attempt.control.result))
        if finished:
            self.notify(finished)


def refused(report: Report, exc: DatabaseError) -> Report:
    """A failure for good in place of a report the database would not store.

    Only what the worker writes of its own is kept, so that this one can be
    stored: what the attempt reported (its result, progress, error text) is
    what was refused. Not retried, as for a result that cannot be stored: the
    same code would report the same again.
    """
    what = report.outcome.replace("_", " ")
    error = ReportRefusedError(
        f"The database refused to store this attempt's report ({said(exc)}). The attempt "
        f"ended {what}; what it reported is not stored. "
        "Failed for good: retry the job once the cause is fixed."
    )
    return dataclasses.replace(
        report,
        outcome=AttemptOutcome.FAILED,
        result=None,
        error_type=error_type(type(error)),
        error_message=storable(str(error)),
        traceback="",
        decision=Decision(Verdict.GIVE_UP),
        progress=None,
        wake_at=None,
        sleep_step="",
        exception=error,
    )
