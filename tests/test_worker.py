"""What one attempt does, end to end: a real ``runworkers --burst`` on PostgreSQL."""

from __future__ import annotations

import json
import uuid
from collections import Counter
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.db import transaction
from django.utils import timezone

from django_jobs import AttemptOutcome, JobState, enqueue_many
from django_jobs.backend import jobs_backend
from django_jobs.framework import TaskResultStatus
from django_jobs.models import Attempt, Job, Worker
from django_jobs.values import WorkerIdentity
from tests.conftest import WorkerProcess, wait_until
from tests.testapp import tasks
from tests.testapp.models import Ledger

pytestmark = pytest.mark.postgres

Burst = Callable[..., str]


def test_worker__runs_a_committed_job_and_stores_its_result(pg: None, run_burst: Burst) -> None:
    with transaction.atomic():
        result = tasks.add.enqueue(2, 3)
    run_burst()
    result.refresh()
    assert (result.status, result.state, result.return_value) == (
        TaskResultStatus.SUCCESSFUL,
        JobState.SUCCEEDED,
        5,
    )
    assert [a.outcome for a in result.attempt_log] == [AttemptOutcome.SUCCEEDED]


def test_worker__retries_with_backoff_then_succeeds(pg: None, run_burst: Burst) -> None:
    result = tasks.flaky.enqueue(2)
    run_burst()
    result.refresh()
    assert (result.state, result.return_value, result.attempts) == (JobState.SUCCEEDED, 3, 3)
    assert [a.outcome for a in result.attempt_log] == ["failed", "failed", "succeeded"]
    assert [e.exception_class for e in result.errors] == [ConnectionError, ConnectionError]
    first, second = result.attempt_log[0], result.attempt_log[1]
    assert first.finished_at is not None and second.started_at > first.finished_at


def test_worker__exhausts_after_max_attempts_keeping_every_error(
    pg: None, run_burst: Burst
) -> None:
    result = tasks.always_fails.enqueue("card declined")
    run_burst()
    result.refresh()
    assert (result.state, result.status, result.attempts) == (
        JobState.EXHAUSTED,
        TaskResultStatus.FAILED,
        3,
    )
    assert [(a.number, a.error_type, a.error_message) for a in result.attempt_log] == [
        (n, "builtins.ValueError", "card declined") for n in (1, 2, 3)
    ]
    assert all("raise ValueError(message)" in a.traceback for a in result.attempt_log)
    assert result.last_error == "builtins.ValueError: card declined"


def test_worker__gives_up_at_once_on_a_give_up_error(pg: None, run_burst: Burst) -> None:
    result = tasks.gives_up.enqueue()
    run_burst()
    result.refresh()
    assert (result.state, result.attempts) == (JobState.FAILED, 1)


def test_worker__retry_later_runs_again_after_the_requested_delay(
    pg: None, run_burst: Burst
) -> None:
    result = tasks.asks_later.enqueue()
    run_burst()
    result.refresh()
    assert (result.state, result.return_value) == (JobState.SUCCEEDED, 2)
    assert result.attempt_log[0].error_type == "django_jobs.exceptions.RetryLater"


def test_worker__fails_a_result_over_the_bound(pg: None, run_burst: Burst) -> None:
    result = tasks.big_result.enqueue(70_000)
    run_burst()
    result.refresh()
    assert (result.state, result.attempts) == (JobState.FAILED, 1)
    assert result.attempt_log[0].error_type == "django_jobs.exceptions.ResultTooLargeError"
    assert "over MAX_RESULT_BYTES (65536)" in result.attempt_log[0].error_message


def test_worker__fails_a_result_that_is_not_json(pg: None, run_burst: Burst) -> None:
    result = tasks.returns_set.enqueue()
    run_burst()
    result.refresh()
    assert result.state == JobState.FAILED
    assert result.attempt_log[0].error_message.startswith("the return value is a set")


def test_worker__refuses_a_row_naming_an_unregistered_path(
    pg: None, run_burst: Burst, tmp_path: Path
) -> None:
    marker = tmp_path / "pwned"
    now = timezone.now()
    job = Job.objects.create(
        task_name="os.system",
        args=[f"touch {marker}"],
        max_attempts=3,
        run_after=now,
        # Past UNKNOWN_TASK_GRACE, so it fails at once instead of being postponed.
        enqueued_at=now - timedelta(hours=1),
        updated_at=now,
    )
    run_burst()
    job.refresh_from_db()
    attempt = job.attempt_set.get()
    assert (job.state, job.attempts, marker.exists()) == (JobState.FAILED, 1, False)
    assert attempt.error_type == "django_jobs.exceptions.UnknownTaskError"


def test_worker__runs_async_tasks(pg: None, run_burst: Burst) -> None:
    result = tasks.async_add.enqueue(20, 22)
    run_burst()
    result.refresh()
    assert result.return_value == 42


def test_worker__gives_tasks_a_key_stable_across_attempts(pg: None, run_burst: Burst) -> None:
    plain = tasks.record.enqueue()
    tasks.record.using(idempotency_key="order-7").enqueue()
    run_burst()
    assert set(Ledger.objects.values_list("job_key", flat=True)) == {plain.id, "order-7"}


def test_worker__stores_a_json_object_result(pg: None, run_burst: Burst) -> None:
    result = tasks.summary.enqueue("A-1")
    run_burst()
    result.refresh()
    assert result.return_value == {"order": "A-1", "lines": [1, 2, 3], "paid": True}


def test_worker__a_suspect_past_its_timeout_has_its_child_killed_not_its_worker(
    pg: None, start_workers: Callable[..., WorkerProcess]
) -> None:
    stuck = tasks.hangs_twice.enqueue(60.0)
    after = tasks.add.using(priority=-1).enqueue(1, 2)
    # Its first attempt is lost with a worker that died: the next one is a suspect.
    engine = jobs_backend("fast").engine
    dead = WorkerIdentity(uuid.uuid4(), "dead:1")
    engine.register_worker(dead, "fast", "elsewhere", 1, ["default"], 1)
    assert [c.job_id for c in engine.claim(dead, ["default"], 1)] == [uuid.UUID(stuck.id)]
    engine.release_worker(dead.id, "worker process 1 died (killed by signal 9)")
    start_workers("--backend", "fast", "--concurrency", "1")
    wait_until(lambda: Job.objects.get(id=after.id).state == JobState.SUCCEEDED, timeout=30)
    stuck.refresh()
    assert [a.outcome for a in stuck.attempt_log] == [
        AttemptOutcome.LOST,
        AttemptOutcome.TIMED_OUT,
    ]
    assert stuck.attempt_log[1].error_message == "the attempt outlived its timeout of 0.5s"
    assert stuck.state == JobState.EXHAUSTED
    assert Worker.objects.count() == 2  # the dead one, and ours: never replaced


def test_worker__writes_short_jobs_claimed_together_in_one_completion(
    pg: None, run_burst: Burst
) -> None:
    """The producer lingers after a claim, so the cycle after it carries the whole batch.

    Without the linger it starts its next cycle at once with the few outcomes
    in by then, and 16 threads settle into half-batches of 8 a cycle. The
    first batch may outlast the linger (threads' first run), so three of the
    four claims must come back whole, not all four. Without attempts claimed
    ahead, so that each claim is one batch of 16.
    """
    with transaction.atomic():
        enqueue_many(tasks.noop, [((), {})] * 64)
    run_burst("--backend", "no_prefetch", "-c", "16")
    per_completion = Counter(Job.objects.values_list("finished_at", flat=True))
    whole = [size for size in per_completion.values() if size == 16]
    assert (Job.objects.filter(state=JobState.SUCCEEDED).count(), len(whole) >= 3) == (64, True)


@pytest.fixture
def task_signals(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[[], list[Any]]:
    """Have the workers the test starts record their task signals; read them once they exit."""
    path = tmp_path / "task-signals.jsonl"
    monkeypatch.setenv("DJANGO_JOBS_TEST_RECEIVERS", str(path))
    return lambda: [json.loads(line) for line in path.read_text().splitlines()]


def test_worker__sends_task_finished_from_its_notifier_thread_once_the_outcome_is_committed(
    pg: None, run_burst: Burst, task_signals: Callable[[], list[Any]]
) -> None:
    with transaction.atomic():
        results = [tasks.echo.enqueue(n) for n in range(20)]
    run_burst("-c", "4")
    finished = [sent for sent in task_signals() if sent["signal"] == "finished"]
    assert sorted(sent["job_id"] for sent in finished) == sorted(r.id for r in results)
    assert {(sent["status"], sent["thread"], sent["state_in_db"]) for sent in finished} == {
        ("SUCCESSFUL", "django-jobs-notifier", "succeeded")
    }


def test_worker__a_task_finished_receiver_that_raises_loses_no_job_and_stops_no_worker(
    pg: None, run_burst: Burst, task_signals: Callable[[], list[Any]]
) -> None:
    with transaction.atomic():
        broken = tasks.echo.enqueue("raise in finished")
        others = [tasks.echo.enqueue(n) for n in range(10)]
    output = run_burst("-c", "4")
    ids = [broken.id, *(r.id for r in others)]
    assert Counter(Job.objects.filter(id__in=ids).values_list("state", "attempts")) == {
        (JobState.SUCCEEDED, 1): 11
    }
    finished = [sent["job_id"] for sent in task_signals() if sent["signal"] == "finished"]
    assert sorted(finished) == sorted(ids)
    assert output.count("A task_finished receiver raised") == 1
    assert "RuntimeError: a broken finished receiver" in output


def test_worker__a_task_started_receiver_that_raises_still_runs_the_task(
    pg: None, run_burst: Burst, task_signals: Callable[[], list[Any]]
) -> None:
    with transaction.atomic():
        result = tasks.echo.enqueue("raise in started")
    output = run_burst()
    job = Job.objects.get(id=result.id)
    assert (job.state, job.attempts) == (JobState.SUCCEEDED, 1)
    assert [sent["signal"] for sent in task_signals()] == ["started", "finished"]
    assert "A task_started receiver raised; the task runs all the same" in output
    assert "RuntimeError: a broken started receiver" in output


def test_worker__an_exception_that_cannot_be_printed_still_ends_its_attempt(
    pg: None, run_burst: Burst
) -> None:
    with transaction.atomic():
        result = tasks.raises_unprintable.enqueue()
    run_burst(timeout=60)
    job = Job.objects.get(id=result.id)
    [attempt] = job.attempt_set.all()
    assert (job.state, attempt.outcome, attempt.error_type) == (
        JobState.EXHAUSTED,
        AttemptOutcome.FAILED,
        "tests.testapp.tasks.Unprintable",
    )
    assert attempt.error_message == "<Unprintable: its str() raised RuntimeError>"


def test_worker__text_postgresql_cannot_store_in_a_result_or_an_error_fails_only_its_own_job(
    pg: None, run_burst: Burst
) -> None:
    # A NUL character or a lone surrogate in a report once failed every later
    # write of the worker (the other jobs' outcomes and claims with it), or
    # ended the worker process; so did an exception's path longer than the
    # attempt's error_type column.
    with transaction.atomic():
        returned = [tasks.returns_nul.enqueue(), tasks.returns_surrogate.enqueue()]
        raised = [tasks.raises_nul.enqueue(), tasks.raises_surrogate.enqueue()]
        long_named = tasks.raises_long_named.enqueue()
        others = [tasks.echo.enqueue(n) for n in range(3)]
    run_burst("-c", "1", timeout=60)
    attempts = {
        str(job_id): (outcome, error_type, message)
        for job_id, outcome, error_type, message in Attempt.objects.values_list(
            "job_id", "outcome", "error_type", "error_message"
        )
    }
    assert [attempts[r.id][:2] for r in returned] == [
        ("failed", "django_jobs.exceptions.ResultNotJSONError")
    ] * 2
    assert [attempts[r.id][2].split(",")[0] for r in returned] == [
        "the return value contains a NUL character (\\x00)",
        "the return value contains a lone surrogate ('\\ud800')",
    ]
    assert [attempts[r.id] for r in raised] == [
        ("failed", "builtins.ValueError", "bad\\x00message"),
        ("failed", "builtins.ValueError", "bad\\ud800message"),
    ]
    path = f"tests.testapp.tasks.{tasks.LongNamed.__qualname__}"
    assert attempts[long_named.id][:2] == ("failed", path[:254] + "…")
    assert [attempts[r.id][0] for r in others] == ["succeeded"] * 3


def test_worker__a_retry_delay_or_a_progress_it_cannot_store_fails_only_its_own_job(
    pg: None, run_burst: Burst
) -> None:
    # Once: a NaN delay ended the worker process (the other attempts of its
    # batch lost), a progress past a bigint failed its every write for good.
    with transaction.atomic():
        nan = tasks.retries_in_nan_seconds.enqueue()
        big = tasks.counts_past_a_bigint.enqueue()
        others = [tasks.echo.enqueue(n) for n in range(3)]
    run_burst("-c", "1", timeout=60)
    attempts = dict(Attempt.objects.values_list("job_id", "error_message"))
    assert attempts[uuid.UUID(nan.id)].startswith("RetryLater delay must be a number of seconds")
    assert attempts[uuid.UUID(big.id)] == f"progress done must be a whole number >= 0, not {2**63}."
    assert set(Attempt.objects.values_list("outcome", flat=True)) == {"failed", "succeeded"}
    assert Attempt.objects.count() == 5
    assert [Job.objects.get(id=r.id).state for r in others] == [JobState.SUCCEEDED] * 3
