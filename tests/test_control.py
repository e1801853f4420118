"""Job control: cancellation, hard timeouts, poison, deadlines, backpressure, budgets."""

from __future__ import annotations

import importlib
import multiprocessing
import threading
import time
import uuid
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.db import connections, transaction
from django.test import override_settings
from django.utils import timezone

from django_jobs import AttemptOutcome, JobState, control
from django_jobs.attempt import AttemptControl
from django_jobs.conf import JobsOptions
from django_jobs.engine import engine_for
from django_jobs.exceptions import (
    ActorRequiredError,
    InvalidTransitionError,
    NoteRequiredError,
    OperatorRequestError,
    QueueFullError,
    QueueNotFoundError,
    UnknownVerbError,
)
from django_jobs.models import Attempt, Job, JobEvent, QueueEvent, RetryWindow, Worker
from django_jobs.retry import Decision, Verdict
from django_jobs.signals import job_cancelled, job_exhausted
from django_jobs.testing import drain
from django_jobs.values import Report, WorkerIdentity
from tests.conftest import (
    ROOT,
    WorkerProcess,
    example_files,
    examples_shown,
    wait_until,
    waiting_for_a_lock,
)
from tests.testapp import tasks

pytestmark = pytest.mark.postgres

Start = Callable[..., WorkerProcess]
FAST = ("--backend", "fast")


def state_of(result: Any) -> str:
    return Job.objects.get(id=result.id).state


def is_running(result: Any) -> bool:
    return Attempt.objects.filter(job_id=result.id, outcome=AttemptOutcome.RUNNING).exists()


# -- cancellation -------------------------------------------------------------


def test_cancel__a_queued_job_is_cancelled_at_once_and_never_runs(
    pg: None, run_burst: Callable[..., str]
) -> None:
    result = tasks.add.enqueue(1, 2)
    taken = control.cancel(result.id, actor="ops", note="not needed")
    run_burst()
    job = Job.objects.get(id=result.id)
    assert (taken, job.state, job.attempts) == ("cancel", JobState.CANCELLED, 0)
    assert JobEvent.objects.get(job=job).note == "not needed"


def test_cancel__a_running_task_that_checks_stops_cooperatively(
    pg: None, start_workers: Start
) -> None:
    result = tasks.cooperative.enqueue(30.0)
    start_workers(*FAST)
    wait_until(lambda: is_running(result))
    control.cancel(result.id, actor="ops")
    wait_until(lambda: state_of(result) == JobState.CANCELLED, timeout=15)
    attempt = Attempt.objects.get(job_id=result.id)
    assert (attempt.outcome, attempt.error_message) == (
        AttemptOutcome.CANCELLED,
        "the job was cancelled; stopped cooperatively",
    )


def test_cancel__a_task_ignoring_it_is_stopped_by_force_after_the_grace(
    pg: None, start_workers: Start
) -> None:
    result = tasks.spins.enqueue(60.0)
    start_workers(*FAST)
    wait_until(lambda: is_running(result))
    control.cancel(result.id, actor="ops")
    assert state_of(result) == JobState.CANCELLING
    wait_until(lambda: state_of(result) == JobState.CANCELLED, timeout=15)
    attempt = Attempt.objects.get(job_id=result.id)
    assert attempt.outcome == AttemptOutcome.CANCELLED
    assert "stopped by force. The effect of the work done so far is unknown" in (
        attempt.error_message
    )


def test_cancel__a_job_that_completes_while_cancelling_succeeds_and_says_so(
    pg: None, start_workers: Start
) -> None:
    result = tasks.sleeps.enqueue(1.5)
    start_workers("--backend", "default")
    wait_until(lambda: is_running(result))
    control.cancel(result.id, actor="ops")
    wait_until(lambda: state_of(result) == JobState.SUCCEEDED, timeout=15)
    job = Job.objects.get(id=result.id)
    assert job.cancel_requested_at is not None
    assert JobEvent.objects.get(job=job).transition == "request_cancel"


def _cancel_all(ids: list[str], results: Any) -> None:
    connections.close_all()
    outcome = control.apply_many("cancel", ids, actor="racer")
    results.put((len(outcome.changed), len(outcome.refused)))
    connections.close_all()


def test_cancel__racing_completion_across_processes_records_one_honest_outcome(
    pg: None, start_workers: Start
) -> None:
    ids = [tasks.sleeps.enqueue(0.4 + n * 0.02).id for n in range(30)]
    start_workers(*FAST, "--concurrency", "30")
    wait_until(lambda: Attempt.objects.count() == 30)
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    connections.close_all()
    racer = context.Process(target=_cancel_all, args=(ids[::-1], queue))
    time.sleep(0.35)
    racer.start()
    changed, refused = queue.get(timeout=30)
    racer.join(10)
    wait_until(lambda: not Job.objects.filter(state=JobState.CANCELLING).exists(), timeout=20)
    pairs = set(Job.objects.values_list("state", "attempt_set__outcome"))
    assert pairs <= {
        (JobState.SUCCEEDED, AttemptOutcome.SUCCEEDED),
        (JobState.CANCELLED, AttemptOutcome.CANCELLED),
    }
    assert changed + refused == 30
    assert JobEvent.objects.count() == changed
    assert (
        Job.objects.filter(state=JobState.SUCCEEDED, cancel_requested_at__isnull=False).count()
        + (Job.objects.filter(state=JobState.CANCELLED).count())
        == changed
    )


# -- hard timeouts ----------------------------------------------------------------


def test_timeout__a_busy_loop_is_stopped_and_the_worker_goes_on(
    pg: None, start_workers: Start
) -> None:
    stuck = tasks.busy_forever.enqueue()
    after = tasks.add.using(priority=-1).enqueue(1, 2)
    start_workers(*FAST, "--concurrency", "1")
    wait_until(lambda: state_of(after) == JobState.SUCCEEDED, timeout=20)
    attempt = Attempt.objects.get(job_id=stuck.id)
    assert (state_of(stuck), attempt.outcome) == (JobState.EXHAUSTED, AttemptOutcome.TIMED_OUT)
    assert attempt.error_message == "the attempt outlived its timeout of 1s"
    assert Worker.objects.count() == 1  # the same process carried on


def test_timeout__a_task_blocked_in_c_gets_its_process_replaced(
    pg: None, start_workers: Start
) -> None:
    stuck = tasks.blocked_past_timeout.enqueue()
    after = tasks.add.using(priority=-1).enqueue(1, 2)
    start_workers(*FAST, "--concurrency", "1")
    wait_until(lambda: state_of(after) == JobState.SUCCEEDED, timeout=30)
    attempt = Attempt.objects.get(job_id=stuck.id)
    assert (state_of(stuck), attempt.outcome) == (JobState.EXHAUSTED, AttemptOutcome.TIMED_OUT)
    assert "its worker process was replaced" in attempt.error_message
    assert Worker.objects.count() == 2


# -- poison, deadlines, backpressure ------------------------------------------------


@pytest.mark.scale
def test_poison__a_job_that_kills_its_worker_is_quarantined_while_others_flow(
    pg: None, start_workers: Start
) -> None:
    poison = tasks.crashes_its_worker.enqueue()
    others = [tasks.add.enqueue(n, n) for n in range(500)]
    start_workers("--processes", "2", "--concurrency", "4")
    wait_until(lambda: state_of(poison) == JobState.QUARANTINED, timeout=60)
    wait_until(
        lambda: Job.objects.filter(state=JobState.SUCCEEDED).count() == len(others), timeout=60
    )
    # A worker may claim the poison ahead and give it back unstarted (its
    # threads all busy): such an attempt is no evidence either way.
    started = Attempt.objects.filter(job_id=poison.id).exclude(outcome=AttemptOutcome.NOT_STARTED)
    event = JobEvent.objects.get(job_id=poison.id)
    assert list(started.values_list("outcome", flat=True)) == [AttemptOutcome.LOST] * 3
    assert (event.transition, event.actor) == ("poison", "system")


def test_deadline__a_job_not_started_in_time_expires_and_never_runs(
    pg: None, start_workers: Start
) -> None:
    now = timezone.now()
    late = tasks.add.using(
        run_after=now + timedelta(seconds=1), expires_at=now + timedelta(seconds=0.5)
    ).enqueue(1, 2)
    start_workers(*FAST)
    wait_until(lambda: state_of(late) == JobState.EXPIRED, timeout=15)
    assert Attempt.objects.filter(job_id=late.id).count() == 0


def test_claim__skips_a_job_whose_deadline_has_passed(pg: None) -> None:
    tasks.add.using(expires_at=timezone.now() - timedelta(seconds=1)).enqueue(1, 2)
    me = WorkerIdentity(uuid.uuid4(), "test")
    assert engine_for("default").claim(me, ["default"], 10) == []


def test_backpressure__enqueue_beyond_the_queue_depth_is_refused(pg: None) -> None:
    limited = {
        "default": {
            "BACKEND": "django_jobs.backend.JobsBackend",
            "QUEUES": ["default"],
            "OPTIONS": {"QUEUE_MAX_DEPTH": {"default": 3}},
        }
    }
    with override_settings(TASKS=limited):
        for n in range(3):
            tasks.add.enqueue(n, n)
        with pytest.raises(QueueFullError, match=r"'default' is full: 3 jobs are queued"):
            tasks.add.enqueue(9, 9)
    assert Job.objects.count() == 3


# -- retry budget -------------------------------------------------------------------


def failing_report(job: Job, attempt: Attempt) -> Report:
    return Report(
        job.id,
        1,
        attempt.pk,
        AttemptOutcome.FAILED,
        error_type="builtins.ConnectionError",
        error_message="down",
        decision=Decision(Verdict.RETRY, 0.0),
    )


def test_retry_budget__retries_beyond_the_budget_are_pushed_to_later_windows(pg: None) -> None:
    me = WorkerIdentity(uuid.uuid4(), "test")
    for n in range(5):
        tasks.add.enqueue(n, n)
    claimed = engine_for("default").claim(me, ["default"], 5)
    reports = [
        failing_report(Job.objects.get(id=c.job_id), Attempt.objects.get(pk=c.attempt_id))
        for c in claimed
    ]
    before = timezone.now()
    budget = JobsOptions.from_mapping("default", {"RETRY_BUDGET": {"default": (2, 60.0)}})
    engine_for("default", budget).finish(me.id, reports)
    delays = sorted((job.run_after - before).total_seconds() for job in Job.objects.all())
    assert [d < 1 for d in delays] == [True, True, False, False, False]
    assert all(d <= 180 for d in delays)
    assert RetryWindow.objects.get().retries == 5


def test_refresh__reads_the_attempt_budget_an_operator_retry_gave(pg: None) -> None:
    result = tasks.add.enqueue(1, 2)
    spent = result.max_attempts
    Job.objects.filter(id=result.id).update(state=JobState.EXHAUSTED, attempts=spent)
    control.retry(result.id, actor="ops")

    result.refresh()

    assert result.max_attempts == tasks.add.get_result(result.id).max_attempts > spent


# -- progress ---------------------------------------------------------------------------


def test_progress__is_stored_with_its_attempt_and_may_not_go_backwards(
    pg: None, run_burst: Callable[..., str]
) -> None:
    result = tasks.reports_progress.enqueue(5)
    run_burst()
    result.refresh()
    assert result.return_value == "progress may not go backwards within an attempt: 1 after 5."
    assert result.progress is not None
    assert (result.progress.done, result.progress.total, result.progress.attempt) == (5, 5, 1)
    assert result.progress.message == "step 5"


def test_progress__many_updates_between_heartbeats_are_written_once() -> None:
    attempt = AttemptControl(timeout=None)
    for step in range(10_000):
        attempt.set_progress(step, 10_000, "")
    written = [attempt.take_progress(), attempt.take_progress()]
    assert written[0] is not None and written[0].done == 9_999
    assert written[1] is None


def test_progress__a_message_with_a_nul_character_is_refused_and_nothing_is_kept() -> None:
    attempt = AttemptControl(timeout=None)
    with pytest.raises(ValueError, match=r"^progress message must not contain a NUL character"):
        attempt.set_progress(1, 2, "a\x00b")
    assert attempt.take_progress() is None


# -- verbs and signals -------------------------------------------------------------------


def test_verbs__bulk_reports_changed_and_refused_with_reasons(pg: None) -> None:
    queued = tasks.add.enqueue(1, 1)
    done = tasks.add.enqueue(2, 2)
    Job.objects.filter(id=done.id).update(state=JobState.SUCCEEDED)
    outcome = control.apply_many("cancel", [queued.id, done.id], actor="ops")
    assert outcome.changed == [uuid.UUID(queued.id)]
    assert outcome.refused == {
        uuid.UUID(done.id): f"Cannot cancel job {done.id}: it is succeeded; cancel applies "
        "only to jobs that are queued, running, waiting."
    }


def test_apply_matching__walks_the_filter_in_batches_and_counts_what_it_skipped(
    alias: str,
) -> None:
    ids = [uuid.UUID(tasks.add.using(backend=alias).enqueue(i, i).id) for i in range(5)]
    jobs = Job.objects.using(alias)
    jobs.filter(id__in=ids[:4]).update(state=JobState.FAILED)

    result = control.apply_matching(
        "retry",
        jobs.filter(id__in=ids),
        actor="ops",
        expected=5,
        batch_size=2,
        backend=alias,
    )

    assert (result.matched, result.applicable, result.skipped) == (5, 4, 1)
    assert sorted(result.changed) == sorted(ids[:4])
    assert set(jobs.values_list("state", flat=True)) == {JobState.QUEUED}
    assert JobEvent.objects.using(alias).filter(transition="retry").count() == 4


def test_apply_matching__skips_a_job_another_operator_moved_between_the_read_and_the_lock(
    pg: None,
) -> None:
    ids = [uuid.UUID(tasks.add.enqueue(i, i).id) for i in range(2)]
    Job.objects.filter(id__in=ids).update(state=JobState.FAILED)
    walked: list[control.MatchingResult] = []

    def retry_the_failed() -> None:
        failed = Job.objects.filter(state=JobState.FAILED)
        walked.append(control.apply_matching("retry", failed, actor="bob", expected=2))
        connections.close_all()

    with transaction.atomic():
        # Alice's quarantine holds the second row's lock until she commits; Bob's
        # walk reads both jobs failed, retries the first and waits on the second.
        control.apply("quarantine", ids[1], actor="alice", note="poison, do not run")
        bob = threading.Thread(target=retry_the_failed)
        bob.start()
        wait_until(lambda: waiting_for_a_lock() == 1)
    bob.join(10)

    [result] = walked
    assert (result.matched, result.changed, result.skipped) == (2, [ids[0]], 1)
    assert Job.objects.get(id=ids[1]).state == JobState.QUARANTINED
    assert list(JobEvent.objects.filter(job_id=ids[1]).values_list("transition", "actor")) == [
        ("quarantine", "alice")
    ]


@pytest.mark.parametrize(
    ("option", "message"),
    [
        ({"expected": -1}, "expected must be a count of jobs"),
        ({"expected": "5"}, "expected must be a count of jobs"),
        ({"batch_size": 0}, "batch_size must be at least 1"),
    ],
)
def test_apply_matching__refuses_a_malformed_count_or_batch_and_changes_nothing(
    pg: None, option: dict[str, Any], message: str
) -> None:
    job = tasks.add.enqueue(1, 1)
    Job.objects.filter(id=job.id).update(state=JobState.FAILED)

    with pytest.raises(OperatorRequestError, match=message):
        control.apply_matching("retry", Job.objects.all(), actor="ops", **option)

    assert Job.objects.get(id=job.id).state == JobState.FAILED


def test_rerun__returns_the_new_job_queued_to_run(pg: None) -> None:
    done = tasks.add.enqueue(2, 3)
    Job.objects.filter(id=done.id).update(state=JobState.SUCCEEDED)

    copy = control.rerun(done.id, actor="ops")

    assert (copy.state, copy.args, copy.rerun_of) == (JobState.QUEUED, [2, 3], uuid.UUID(done.id))


def test_verbs__retry_grants_a_fresh_attempt_budget(pg: None) -> None:
    result = tasks.always_fails.enqueue("x")
    Job.objects.filter(id=result.id).update(state=JobState.EXHAUSTED, attempts=3)
    control.retry(result.id, actor="ops", note="dependency fixed")
    job = Job.objects.get(id=result.id)
    assert (job.state, job.attempts, job.max_attempts) == (JobState.QUEUED, 3, 6)


@pytest.mark.parametrize("verb", ["quarantine", "discard"])
def test_verbs__quarantine_and_discard_need_a_note(pg: None, verb: str) -> None:
    result = tasks.add.enqueue(1, 1)
    with pytest.raises(NoteRequiredError, match=f"{verb} needs a note saying why"):
        control.apply(verb, result.id, actor="ops", note="  ")
    assert (state_of(result), JobEvent.objects.count()) == (JobState.QUEUED, 0)


REFUSALS: list[tuple[Callable[[str], object], type[OperatorRequestError]]] = [
    (lambda job: control.apply("explode", job, actor="ops"), UnknownVerbError),
    (lambda job: control.apply("discard", job, actor="ops"), NoteRequiredError),
    (lambda job: control.cancel(job, actor="   "), ActorRequiredError),
    (lambda job: control.pause_queue("nowhere", actor="ops"), QueueNotFoundError),
    (lambda job: control.pause_queue("q" * 101, actor="ops"), QueueNotFoundError),
]


@pytest.mark.parametrize(("call", "refusal"), REFUSALS)
def test_refusals__each_kind_has_its_class_a_value_error_and_changes_nothing(
    pg: None, call: Callable[[str], object], refusal: type[OperatorRequestError]
) -> None:
    result = tasks.add.enqueue(1, 1)
    with pytest.raises(refusal) as raised:
        call(result.id)
    assert isinstance(raised.value, ValueError)
    assert (state_of(result), JobEvent.objects.count(), QueueEvent.objects.count()) == (
        JobState.QUEUED,
        0,
        0,
    )


def test_verbs__an_invalid_transition_changes_nothing(pg: None) -> None:
    result = tasks.add.enqueue(1, 1)
    with pytest.raises(InvalidTransitionError, match=r"Cannot release job .*: it is queued"):
        control.release(result.id, actor="ops")
    assert (state_of(result), JobEvent.objects.count()) == (JobState.QUEUED, 0)


def test_signals__are_sent_after_commit_with_the_actor(pg: None) -> None:
    seen: list[dict[str, Any]] = []

    def receiver(sender: Any, **kwargs: Any) -> None:
        seen.append(kwargs)

    job_cancelled.connect(receiver)
    try:
        result = tasks.add.enqueue(1, 1)
        control.cancel(result.id, actor="alice", note="dupe")
    finally:
        job_cancelled.disconnect(receiver)
    assert [(s["job_id"], s["actor"], s["note"], s["to_state"]) for s in seen] == [
        (uuid.UUID(result.id), "alice", "dupe", JobState.CANCELLED)
    ]


def test_signals__worker_transitions_send_theirs(pg: None, run_burst: Callable[..., str]) -> None:
    seen: list[str] = []
    job_exhausted.connect(lambda sender, **kw: seen.append(str(kw["job_id"])), weak=False)
    try:
        me = WorkerIdentity(uuid.uuid4(), "test")
        result = tasks.always_fails.enqueue("x")
        [claimed] = engine_for("default").claim(me, ["default"], 1)
        report = Report(
            claimed.job_id,
            claimed.token,
            claimed.attempt_id,
            AttemptOutcome.FAILED,
            error_type="builtins.ValueError",
            error_message="x",
            decision=Decision(Verdict.EXHAUSTED),
        )
        engine_for("default").finish(me.id, [report])
    finally:
        job_exhausted.receivers.clear()
    assert seen == [result.id]


# -- the example of docs/control.md ----------------------------------------------------

EXAMPLES = ROOT / "docs" / "examples" / "control"


def test_docs__the_control_page_shows_the_example_file_verbatim() -> None:
    shown = examples_shown("control.md")

    assert shown == example_files(EXAMPLES)


@pytest.mark.django_db
def test_docs__the_repair_example_starts_reruns_and_retries_what_was_confirmed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.syspath_prepend(str(EXAMPLES))
    repair = importlib.import_module("repair")
    later = tasks.noop.using(run_after=timezone.now() + timedelta(hours=1)).enqueue()
    finished = tasks.noop.enqueue()
    drain()
    mail = [tasks.noop.enqueue().id for _ in range(3)]
    Job.objects.filter(id__in=mail).update(queue="mail", state=JobState.FAILED)

    repair.start_now(uuid.UUID(later.id), "ops:bob")
    copy = repair.run_again(uuid.UUID(finished.id))
    retried = repair.retry_failed_mail()

    assert Job.objects.get(id=later.id).run_after <= timezone.now()
    assert (copy.state, copy.task_name, copy.rerun_of) == (
        JobState.QUEUED,
        finished.task.module_path,
        uuid.UUID(finished.id),
    )
    assert sorted(str(job_id) for job_id in retried.changed) == sorted(mail)
    assert set(Job.objects.filter(id__in=mail).values_list("state", flat=True)) == {"queued"}
