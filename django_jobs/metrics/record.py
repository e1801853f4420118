"""What the enqueue path, the worker and the engine report as jobs move.

Each function is called with what its caller already holds (the rows an
engine call returned, the attempts the worker runs): no query is made and
nothing waits, so the completion path stays as fast as without metrics.
Every call is a no-op without prometheus-client, and in workers without a
``PROMETHEUS_MULTIPROC_DIR`` (``instruments.worker_instruments``).
"""

from __future__ import annotations

import collections
import time
from collections.abc import Mapping, Sequence
from functools import cache, partial
from typing import TYPE_CHECKING

from django.db import transaction

from ..states import AttemptOutcome, JobState
from .instruments import instruments, worker_instruments

if TYPE_CHECKING:
    from prometheus_client import Counter, Histogram

    from ..values import Claimed, Report
    from ..worker.running import Key, RunningAttempt


def enqueued(queue: str, task: str, count: int = 1) -> None:
    """Jobs written by a commit (called from the enqueue's on-commit announce)."""
    if (metrics := instruments()) is not None:
        _child(metrics.enqueued, queue, task).inc(count)


def started(claimed: Sequence[Claimed]) -> None:
    """Attempts just claimed; a first attempt also gives its wait since enqueue."""
    if not claimed or (metrics := worker_instruments()) is None:
        return
    # One increment per queue and task of the batch, not per attempt.
    batch = collections.Counter((attempt.queue, attempt.task_name) for attempt in claimed)
    for (queue, task), count in batch.items():
        _child(metrics.started, queue, task).inc(count)
    for attempt in claimed:
        # started_at is the job's first start: only a first attempt's is this one's.
        if attempt.token == 1:
            waited = (attempt.started_at - attempt.enqueued_at).total_seconds()
            _child(metrics.latency, attempt.queue, attempt.task_name).observe(max(0.0, waited))


# The outcomes whose job, queued again, counts as a retry: a sleep is not one.
_RETRIED = frozenset({AttemptOutcome.FAILED, AttemptOutcome.TIMED_OUT})


def finished(
    applied: Sequence[tuple[Report, JobState]], ended: Mapping[Key, RunningAttempt]
) -> None:
    """Outcomes the engine applied (``Finished.applied``), for attempts this worker ran."""
    if not applied or (metrics := worker_instruments()) is None:
        return
    now = time.monotonic()
    outcomes: collections.Counter[tuple[str, str, str]] = collections.Counter()
    retried: collections.Counter[tuple[str, str]] = collections.Counter()
    for report, state in applied:
        attempt = ended.get((report.job_id, report.token))
        if attempt is None:
            continue
        queue, task = attempt.claimed.queue, attempt.claimed.task_name
        outcomes[queue, task, report.outcome.value] += 1
        if not report.started:
            continue  # no run to time, and no retry: it never ran
        _child(metrics.duration, queue, task).observe(now - attempt.control.started)
        if state == JobState.QUEUED and report.outcome in _RETRIED:
            retried[queue, task] += 1
    for (queue, task, outcome), count in outcomes.items():
        _child(metrics.finished, queue, task, outcome).inc(count)
    for (queue, task), count in retried.items():
        _child(metrics.retries, queue, task).inc(count)


def attempt_lost(db: str, queue: str, task: str) -> None:
    """An attempt the engine recorded ``lost``; counted once the transaction commits."""
    if (metrics := worker_instruments()) is not None:
        transaction.on_commit(partial(_child(metrics.lost, queue, task).inc), using=db)


@cache
def _child[M: (Counter, Histogram)](metric: M, *labels: str) -> M:
    """A metric's series for these labels, looked up once: ``labels()`` takes a lock each call.

    Bounded: labels are queues, tasks and outcomes (see the package's docstring).
    """
    return metric.labels(*labels)
