"""Applying attempt outcomes one by one: success, retry, exhaustion, cancellation, sleep, give-back.

Every outcome a worker reports ends here unless an engine has a faster way
for the plain case (PostgreSQL completes plain successes in one statement).
Each report is fenced on its lease: the job row is locked, and the job moves
only if this worker still holds its lease under the report's token, and only
from the states its transition allows.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction
from django.db.models import Count, F, Value
from django.db.models.functions import Greatest
from django.utils import timezone

from ..conf import JobsOptions
from ..models import Attempt, Dependency, Job, RetryWindow, Worker
from ..retry import Verdict, budget_window, within_budget
from ..signals import send_on_commit
from ..states import AttemptOutcome, JobState, Transition
from ..values import Finished, Report
from . import batches
from .flow import refund_claim
from .guards import sources, target
from .leases import progress_fields
from .steps import record_sleep
from .wakeups import wake_on_commit


def finish(
    db: str, worker_id: uuid.UUID, reports: Sequence[Report], rules: JobsOptions
) -> Finished:
    """Apply a batch of attempt outcomes; fence each on its lease.

    A report whose lease is gone (reaped, released, or re-claimed under a newer
    token) is *stale*: it is written to its attempt's ``late_report`` and
    changes nothing else. One report at a time, under the lock of its job
    (which carries the lease): every case is recorded precisely. ``rules`` gives the retry
    budgets.
    """
    done = Finished()
    if not reports:
        return done
    now = timezone.now()
    with transaction.atomic(using=db, savepoint=False):
        # Lock the jobs whose leases we claim to hold: the reaper locks them
        # the same way (SKIP LOCKED), so it either reaps before us or skips
        # while we finish; an operator's cancel locks the job too, so it
        # either lands before we read the state or waits until we have written.
        held = {
            (job.id, job.attempts): job
            for job in Job.objects.using(db)
            .select_for_update()
            .only(
                "id",
                "attempts",
                "state",
                "queue",
                "tenant",
                "concurrency_key",
                "batch_id",
                "leased_at",
            )
            .filter(leased_by=worker_id, id__in=[r.job_id for r in reports])
            .order_by("id")
        }
        current = [r for r in reports if (r.job_id, r.token) in held]
        done.stale = [r for r in reports if (r.job_id, r.token) not in held]
        moves: list[batches.Move] = []
        for report in current:
            job = held[(report.job_id, report.token)]
            transition = transition_for(report, job.state)
            job_changes: dict[str, Any] = {
                "state": target(transition),
                "updated_at": now,
                "leased_by": None,
                "leased_at": None,
            }
            if _ran(report):
                # An attempt that ran and reported ends a run of lost ones. One
                # that never started says nothing of whether the job kills its
                # worker: the streak stays, and so does its next run's isolation.
                job_changes["lost_streak"] = 0
            if report.progress is not None:
                job_changes.update(progress_fields(report.token, report.progress, now))
            if transition is Transition.COMPLETE:
                job_changes.update(result=report.result, finished_at=now, last_error="")
            elif transition is Transition.SLEEP:
                # Asleep, not failed: due again at its wake time, and the
                # attempt goes back to the budget, as a postponed one does.
                job_changes.update(run_after=report.wake_at, max_attempts=F("max_attempts") + 1)
            elif transition is Transition.GIVE_BACK:
                # Nothing ran: due again at once, the attempt back in the budget,
                # and the job's last error still the last one a run of it raised.
                job_changes.update(run_after=now, max_attempts=F("max_attempts") + 1)
            else:
                job_changes["last_error"] = short_error(report)
                decision = report.decision
                if transition is Transition.SCHEDULE_RETRY and decision is not None:
                    if decision.verdict is Verdict.POSTPONE:
                        # The task could not start: not a failure to ration with
                        # the retry budget, and the attempt goes back to the budget.
                        job_changes["run_after"] = now + timedelta(seconds=decision.delay)
                        job_changes["max_attempts"] = F("max_attempts") + 1
                    else:
                        job_changes["run_after"] = retry_at(
                            db, job.queue, now, decision.delay, rules.RETRY_BUDGET
                        )
                else:
                    job_changes["finished_at"] = now
            changed = (
                Job.objects.using(db)
                .filter(
                    id=report.job_id,
                    attempts=report.token,
                    leased_by=worker_id,
                    state=job.state,
                    state__in=sources(transition),
                )
                .update(**job_changes)
            )
            if changed != 1:
                # A lease on a job in a state that takes no report (only a
                # hand-written row can be there): refuse it like a late report.
                done.stale.append(report)
                continue
            if transition is Transition.SLEEP and report.wake_at is not None:
                record_sleep(db, report.job_id, report.token, report.sleep_step, report.wake_at)
            if transition is Transition.GIVE_BACK:
                started = Attempt.objects.using(db).values_list("started_at", flat=True)
                refund_claim(db, rules, job, started.get(id=report.attempt_id))
            Attempt.objects.using(db).filter(
                id=report.attempt_id, outcome=AttemptOutcome.RUNNING
            ).update(
                outcome=report.outcome,
                finished_at=now,
                error_type=report.error_type,
                error_message=report.error_message,
                traceback=report.traceback,
            )
            send_on_commit(db, report.job_id, transition, job.state, target(transition))
            done.applied.append((report, JobState(target(transition))))
            if job.batch_id is not None:
                moves.append((job.batch_id, job.state, target(transition)))
        for report in done.stale:
            Attempt.objects.using(db).filter(id=report.attempt_id, late_report__isnull=True).update(
                late_report=report.as_late_report()
            )
        # Jobs done, as --max-jobs counts them: not attempts given back unstarted.
        jobs = sum(1 for report, _ in done.applied if report.started)
        if jobs:
            Worker.objects.using(db).filter(id=worker_id).update(jobs_done=F("jobs_done") + jobs)
        release_dependents(
            db, [r.job_id for r, state in done.applied if state == JobState.SUCCEEDED], now
        )
        batches.moved(db, moves)
    return done


def _ran(report: Report) -> bool:
    """Whether the attempt's task ran: not one given back, nor one postponed unstarted."""
    if not report.started:
        return False
    return report.decision is None or report.decision.verdict is not Verdict.POSTPONE


def transition_for(report: Report, state: str) -> Transition:
    if report.outcome == AttemptOutcome.SUCCEEDED:
        return Transition.COMPLETE
    if state == JobState.CANCELLING:
        return Transition.CONFIRM_CANCEL
    if report.outcome == AttemptOutcome.NOT_STARTED:
        return Transition.GIVE_BACK
    if report.outcome == AttemptOutcome.SLEPT:
        if report.wake_at is None:
            raise ValueError("a sleep report needs the time to wake at")
        return Transition.SLEEP
    if report.decision is None:
        raise ValueError("a failure report needs the retry policy's decision")
    return {
        Verdict.RETRY: Transition.SCHEDULE_RETRY,
        Verdict.POSTPONE: Transition.SCHEDULE_RETRY,
        Verdict.EXHAUSTED: Transition.EXHAUST,
        Verdict.GIVE_UP: Transition.FAIL,
    }[report.decision.verdict]


def release_dependents(db: str, succeeded: Sequence[uuid.UUID], now: datetime) -> None:
    """One unmet dependency fewer for each job waiting on ``succeeded``; queue those at zero.

    The ORM way of the ``released`` step of PostgreSQL's ``COMPLETE``. The first
    update locks each waiting row, so concurrent completions of its other
    dependencies queue it exactly once.
    """
    if not succeeded:
        return
    met = (
        Dependency.objects.using(db)
        .filter(depends_on_id__in=succeeded)
        .values("job_id")
        .annotate(n=Count("id"))
        .order_by("job_id")  # one lock order for every completer
    )
    for row in met:
        waiting = Job.objects.using(db).filter(
            id=row["job_id"], state__in=sources(Transition.DEPENDENCIES_MET)
        )
        waiting.update(waiting_on=F("waiting_on") - row["n"], updated_at=now)
        ready = waiting.filter(waiting_on=0)
        queue = ready.values_list("queue", flat=True).first()
        if queue is None:
            continue
        ready.update(
            state=target(Transition.DEPENDENCIES_MET),
            run_after=Greatest("run_after", Value(now)),
            updated_at=now,
        )
        wake_on_commit(db, queue)
        send_on_commit(
            db, row["job_id"], Transition.DEPENDENCIES_MET, JobState.WAITING, JobState.QUEUED
        )


def retry_at(
    db: str,
    queue: str,
    now: datetime,
    delay: float,
    budgets: Mapping[str, tuple[int, float]],
) -> datetime:
    """When a retry may run: its backoff, pushed later if the queue's retry budget is spent.

    Counts the retry in its queue's current window (``retry.within_budget``
    has the rule); pushed retries are not counted again in the window they
    land in.
    """
    at = now + timedelta(seconds=delay)
    if queue not in budgets:
        return at
    budget, window = budgets[queue]
    start = budget_window(now, window)
    row, _ = (
        RetryWindow.objects.using(db)
        .select_for_update()
        .get_or_create(queue=queue, window_start=start)
    )
    row.retries += 1
    row.save(using=db, update_fields=["retries"])
    return within_budget(at, start, row.retries, budget, window, random.random())


def short_error(report: Report) -> str:
    first_line = report.error_message.strip().splitlines()[0] if report.error_message else ""
    return f"{report.error_type}: {first_line}"[:1000]
