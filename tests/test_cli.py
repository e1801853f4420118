"""``manage.py jobs``: every subcommand's happy path, its errors, and its exit codes."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import uuid
from datetime import timedelta

import pytest
from django.conf import settings
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connections
from django.utils import timezone

from django_jobs import control
from django_jobs.models import Attempt, Job, JobEvent, QueueEvent, QueueState
from django_jobs.states import AttemptOutcome, JobState
from tests.conftest import ROOT

pytestmark = pytest.mark.postgres

ADD = "tests.testapp.tasks.add"


def make_job(
    state: JobState = JobState.QUEUED,
    *,
    queue: str = "default",
    task_name: str = ADD,
    tenant: str = "",
    enqueued_seconds_ago: float = 0,
    run_after_seconds_ago: float = 0,
    finished_seconds_ago: float | None = None,
) -> Job:
    """A job row in any state, written directly: test set-up, not a transition."""
    now = timezone.now()
    finished = (
        None if finished_seconds_ago is None else now - timedelta(seconds=finished_seconds_ago)
    )
    return Job.objects.create(
        task_name=task_name,
        args=[1, 2],
        queue=queue,
        tenant=tenant,
        state=state,
        max_attempts=3,
        run_after=now - timedelta(seconds=run_after_seconds_ago),
        enqueued_at=now - timedelta(seconds=enqueued_seconds_ago),
        finished_at=finished,
        updated_at=finished or now,
    )


def jobs(*args: str) -> tuple[str, str]:
    """Run ``manage.py jobs ARGS`` in this process; return (stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    call_command("jobs", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def jobs_failing(*args: str) -> tuple[str, str, str]:
    """Run a ``jobs`` command that must fail; return (error, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with pytest.raises(CommandError) as failure:
        call_command("jobs", *args, stdout=out, stderr=err)
    return str(failure.value), out.getvalue(), err.getvalue()


def jobs_process(*args: str) -> subprocess.CompletedProcess[str]:
    """Run ``python -m django jobs ARGS`` as its own process, on the test databases."""
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "DJANGO_SETTINGS_MODULE": "tests.settings",
        "DJANGO_JOBS_TEST_SQLITE": str(settings.DATABASES["sqlite"]["NAME"]),
        "DJANGO_JOBS_TEST_DB": str(connections["default"].settings_dict["NAME"]),
    }
    return subprocess.run(
        [sys.executable, "-m", "django", "jobs", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


# -- list -----------------------------------------------------------------------


def test_list__shows_jobs_newest_first_in_a_table(pg: None) -> None:
    old = make_job(JobState.FAILED, enqueued_seconds_ago=120)
    new = make_job(JobState.QUEUED, queue="other", tenant="acme")

    out, _ = jobs("list")

    assert out.splitlines() == [
        "ID                                    STATE   QUEUE    PRI  TRIES  AGE  TENANT  TASK",
        f"{new.id}  queued  other    0    0/3    0s   acme    {ADD}",
        f"{old.id}  failed  default  0    0/3    2m   -       {ADD}",
    ]


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("--state", "failed"),
        ("--queue", "other"),
        ("--task", "tests.testapp.tasks.noop"),
        ("--tenant", "acme"),
    ],
)
def test_list__filters_by_option(pg: None, option: str, value: str) -> None:
    make_job()
    wanted = {
        "--state": lambda: make_job(JobState.FAILED),
        "--queue": lambda: make_job(queue="other"),
        "--task": lambda: make_job(task_name="tests.testapp.tasks.noop"),
        "--tenant": lambda: make_job(tenant="acme"),
    }[option]()

    out, _ = jobs("list", option, value)

    assert [line.split()[0] for line in out.splitlines()[1:]] == [str(wanted.id)]


def test_list__says_when_more_jobs_match_than_the_limit(pg: None) -> None:
    for _ in range(3):
        make_job()

    out, _ = jobs("list", "--limit", "2")

    assert (len(out.splitlines()), out.splitlines()[-1]) == (
        4,
        "(first 2 shown; more match: narrow the filters or --limit)",
    )


def test_list__says_so_when_nothing_matches(pg: None) -> None:
    out, _ = jobs("list", "--state", "running")

    assert out == "No jobs match.\n"


def test_list__rejects_an_unknown_state(pg: None) -> None:
    error, _, _ = jobs_failing("list", "--state", "stuck")

    assert "argument --state: invalid choice: 'stuck'" in error


# -- show -----------------------------------------------------------------------


def test_show__prints_the_job_its_progress_attempts_with_errors_and_audit_events(
    pg: None,
) -> None:
    job = make_job(JobState.EXHAUSTED)
    now = timezone.now()
    Job.objects.filter(id=job.id).update(
        attempts=1,
        progress_done=3,
        progress_total=10,
        progress_message="rows",
        progress_attempt=1,
        progress_at=now,
        last_error="builtins.ValueError: boom",
    )
    Attempt.objects.create(
        job=job,
        number=1,
        worker_name="host:42",
        outcome=AttemptOutcome.FAILED,
        started_at=now,
        finished_at=now + timedelta(seconds=1.5),
        error_type="builtins.ValueError",
        error_message="boom",
        traceback="Traceback (most recent call last):\nValueError: boom",
    )
    control.apply("quarantine", job.id, actor="alice", note="bad payload")

    out, _ = jobs("show", str(job.id))

    lines = out.splitlines()
    assert lines[0] == f"Job {job.id}"
    assert "  state            quarantined" in lines
    assert "  attempts         1 of 3" in lines
    assert any(line.startswith("  progress         3/10 rows (attempt 1, ") for line in lines)
    assert "  last error       builtins.ValueError: boom" in lines
    assert any(
        line.startswith("  1  failed   host:42")
        and line.endswith("1.500s  builtins.ValueError: boom")
        for line in lines
    )
    assert any("quarantine  exhausted -> quarantined  alice  bad payload" in line for line in lines)
    assert "Traceback" not in out


def test_show__full_prints_each_attempts_traceback(pg: None) -> None:
    job = make_job(JobState.FAILED)
    Attempt.objects.create(
        job=job,
        number=1,
        outcome=AttemptOutcome.FAILED,
        started_at=timezone.now(),
        traceback="Traceback (most recent call last):\nValueError: boom",
    )

    out, _ = jobs("show", str(job.id), "--full")

    assert "  traceback of attempt 1:\n    Traceback (most recent call last):\n" in out


def test_show__an_unknown_id_is_an_error(pg: None) -> None:
    missing = uuid.uuid4()

    error, _, _ = jobs_failing("show", str(missing))

    assert error == f"No job with id {missing} in database 'default'."


def test_show__a_malformed_id_is_an_error(pg: None) -> None:
    error, _, _ = jobs_failing("show", "42")

    assert error == "Not a job id (a UUID): '42'."


# -- enqueue --------------------------------------------------------------------


def test_enqueue__writes_a_job_of_a_registered_task_with_its_options(pg: None) -> None:
    out, _ = jobs(
        "enqueue",
        ADD,
        "--args",
        "[1]",
        "--kwargs",
        '{"b": 2}',
        "--queue",
        "other",
        "--priority",
        "5",
        "--tenant",
        "acme",
        "--idempotency-key",
        "order-7",
        "--actor",
        "ops:bob",
    )

    job = Job.objects.get()
    assert out.startswith(f"{job.id}  queued on other, runs after ")
    assert (
        job.task_name,
        job.args,
        job.kwargs,
        job.queue,
        job.priority,
        job.tenant,
        job.idempotency_key,
        job.initiator,
    ) == (ADD, [1], {"b": 2}, "other", 5, "acme", "order-7", "ops:bob")


def test_enqueue__delay_holds_the_job_back(pg: None) -> None:
    before = timezone.now()

    jobs("enqueue", "tests.testapp.tasks.noop", "--delay", "60")

    job = Job.objects.get()
    assert before + timedelta(seconds=60) <= job.run_after <= timezone.now() + timedelta(seconds=60)


def test_enqueue__the_same_idempotency_key_returns_the_existing_job(pg: None) -> None:
    first, _ = jobs("enqueue", ADD, "--args", "[1, 2]", "--idempotency-key", "k", "--quiet")

    second, _ = jobs("enqueue", ADD, "--args", "[1, 2]", "--idempotency-key", "k", "--quiet")

    assert (second, Job.objects.count()) == (first, 1)


def test_enqueue__a_unique_keys_live_job_is_returned_and_said_to_exist(pg: None) -> None:
    first, _ = jobs("enqueue", ADD, "--args", "[1, 2]", "--unique-key", "k", "--quiet")

    out, _ = jobs(
        "enqueue", ADD, "--args", "[3, 4]", "--unique-key", "k", "--unique-states", "queued"
    )

    assert out.startswith(f"{first.strip()}  queued on default, runs after ")
    assert out.endswith("  (an existing job; nothing written)\n")
    assert [(j.args, j.unique_key) for j in Job.objects.all()] == [([1, 2], "k")]


def test_enqueue__unique_for_holds_the_key_past_the_jobs_end(pg: None) -> None:
    first, _ = jobs("enqueue", ADD, "--args", "[1, 2]", "--unique-key", "k", "--quiet")
    Job.objects.update(state=JobState.SUCCEEDED)

    again, _ = jobs("enqueue", ADD, "--unique-key", "k", "--unique-for", "3600", "--quiet")

    assert (again, Job.objects.count()) == (first, 1)


def test_enqueue__debounce_replaces_the_arguments_and_pushes_the_start(pg: None) -> None:
    jobs("enqueue", ADD, "--args", "[1, 2]", "--unique-key", "k", "--debounce", "60")
    before = timezone.now()

    out, _ = jobs("enqueue", ADD, "--args", "[3, 4]", "--unique-key", "k", "--debounce", "60")

    job = Job.objects.get()
    assert out.startswith(f"{job.id}  queued on default, runs after ")
    assert out.endswith("  (debounced: this call's arguments, started later)\n")
    assert job.args == [3, 4]
    assert before + timedelta(seconds=60) <= job.run_after <= timezone.now() + timedelta(seconds=60)


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (
            ["--debounce", "5"],
            "Enqueue refused, nothing written: tests.testapp.tasks.add: "
            "debounce needs a unique_key.",
        ),
        (
            ["--unique-key", "k", "--unique-states", "queued,done"],
            "Enqueue refused, nothing "
            "written: tests.testapp.tasks.add: unique_states: 'done' is not a job state",
        ),
    ],
)
def test_enqueue__unique_options_that_mean_nothing_are_refused(
    pg: None, args: list[str], expected: str
) -> None:
    error, _, _ = jobs_failing("enqueue", ADD, "--args", "[1, 2]", *args)

    assert error.startswith(expected)
    assert Job.objects.count() == 0


def test_enqueue__a_unique_window_of_zero_seconds_is_refused_by_the_parser(pg: None) -> None:
    error, _, _ = jobs_failing("enqueue", ADD, "--unique-key", "k", "--unique-for", "0")

    assert error == "Error: argument --unique-for: 0 must be more than zero."


def test_enqueue__after_makes_the_job_wait_for_the_jobs_named(pg: None) -> None:
    first = jobs("enqueue", ADD, "--args", "[1, 2]", "--quiet")[0].strip()
    second = jobs("enqueue", ADD, "--args", "[3, 4]", "--quiet")[0].strip()

    out, _ = jobs("enqueue", ADD, "--args", "[5, 6]", "--after", first, "--after", second)

    waiting = Job.objects.get(args=[5, 6])
    shown, _ = jobs("show", str(waiting.id))
    assert out.startswith(f"{waiting.id}  waiting on default, runs after ")
    assert (waiting.state, waiting.waiting_on) == (JobState.WAITING, 2)
    lines = [line.strip().split("  ", 1) for line in shown.splitlines()]
    assert [line[1].strip() for line in lines if line[0] == "after"] == [
        f"{first} (queued)",
        f"{second} (queued)",
    ]


def test_enqueue__after_a_job_that_does_not_exist_is_refused(pg: None) -> None:
    missing = "00000000-0000-4000-8000-000000000000"

    error, _, _ = jobs_failing("enqueue", ADD, "--args", "[1, 2]", "--after", missing)

    assert error == (
        f"Enqueue refused, nothing written: after: there is no job {missing}; nothing was enqueued."
    )
    assert Job.objects.count() == 0


def test_enqueue__an_unknown_task_is_refused_and_writes_nothing(pg: None) -> None:
    error, _, _ = jobs_failing("enqueue", "tests.testapp.tasks.ad")

    assert error.startswith(
        "Unknown task 'tests.testapp.tasks.ad': it is not registered with django_jobs. "
        "Did you mean tests.testapp.tasks.add"
    )
    assert Job.objects.count() == 0


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--args", "[1,"], "--args is not valid JSON: "),
        (["--args", '{"a": 1}'], "--args must be a JSON array, not dict."),
        (["--kwargs", "[1]"], "--kwargs must be a JSON object, not list."),
    ],
)
def test_enqueue__bad_json_is_refused_and_writes_nothing(
    pg: None, args: list[str], expected: str
) -> None:
    error, _, _ = jobs_failing("enqueue", ADD, *args)

    assert error.startswith(expected)
    assert Job.objects.count() == 0


def test_enqueue__a_refusal_of_the_backend_is_an_error_and_writes_nothing(pg: None) -> None:
    error, _, _ = jobs_failing("enqueue", ADD, "--queue", "nowhere")

    assert error.startswith("Enqueue refused, nothing written: Queue 'nowhere' is not one of")
    assert Job.objects.count() == 0


# -- operator verbs ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("verb", "state", "target"),
    [
        ("cancel", JobState.QUEUED, JobState.CANCELLED),
        ("cancel", JobState.RUNNING, JobState.CANCELLING),
        ("retry", JobState.EXHAUSTED, JobState.QUEUED),
        ("release", JobState.QUARANTINED, JobState.QUEUED),
        ("quarantine", JobState.FAILED, JobState.QUARANTINED),
        ("discard", JobState.FAILED, JobState.DISCARDED),
    ],
)
def test_verb__changes_the_job_and_audits_actor_and_note(
    pg: None, verb: str, state: JobState, target: JobState
) -> None:
    job = make_job(state)

    out, _ = jobs(verb, str(job.id), "--note", "ticket 12", "--actor", "ops:bob")

    job.refresh_from_db()
    event = JobEvent.objects.get(job=job)
    assert out.startswith(f"{job.id}  {target} (")
    assert (job.state, event.actor, event.note) == (target, "ops:bob", "ticket 12")


def test_verb__the_default_actor_is_cli_and_the_os_user(pg: None) -> None:
    job = make_job()

    jobs("cancel", str(job.id))

    assert JobEvent.objects.get(job=job).actor.startswith("cli:")


def test_retry__a_queued_job_is_refused_with_the_reason(pg: None) -> None:
    job = make_job(JobState.QUEUED)

    error, out, err = jobs_failing("retry", str(job.id))

    job.refresh_from_db()
    assert err.startswith(f"{job.id}  refused: Cannot retry job {job.id}: it is queued; ")
    assert (error, out, job.state) == ("retry: 1 of 1 job(s) refused; 0 changed.", "", "queued")


def test_verb__applies_to_the_allowed_jobs_and_reports_each_refusal(pg: None) -> None:
    failed, queued, missing = make_job(JobState.FAILED), make_job(), uuid.uuid4()

    error, out, err = jobs_failing("retry", str(failed.id), str(queued.id), str(missing))

    assert out == f"{failed.id}  queued (retry)\n"
    assert err.splitlines()[1] == f"{missing}  refused: No job with id {missing}."
    assert error == "retry: 2 of 3 job(s) refused; 1 changed."
    assert Job.objects.get(id=failed.id).state == JobState.QUEUED


def test_verb__a_malformed_id_changes_nothing(pg: None) -> None:
    job = make_job()

    error, _, _ = jobs_failing("cancel", str(job.id), "not-a-uuid")

    job.refresh_from_db()
    assert (error, job.state) == (
        "Not a job id (a UUID): 'not-a-uuid'. Nothing was changed.",
        JobState.QUEUED,
    )


@pytest.mark.parametrize("verb", ["quarantine", "discard"])
def test_verb__quarantine_and_discard_require_a_note(pg: None, verb: str) -> None:
    job = make_job()

    error, _, _ = jobs_failing(verb, str(job.id))

    assert error == "Error: the following arguments are required: --note"
    assert Job.objects.get(id=job.id).state == JobState.QUEUED


@pytest.mark.parametrize("verb", ["quarantine", "discard"])
def test_verb__a_blank_note_is_refused(pg: None, verb: str) -> None:
    job = make_job()

    error, _, _ = jobs_failing(verb, str(job.id), "--note", "  ")

    assert error == f"{verb} needs --note saying why. Nothing was changed."
    assert JobEvent.objects.count() == 0


# -- stats ------------------------------------------------------------------------


def test_stats__counts_by_state_per_queue_with_backlog_age_and_last_hour(pg: None) -> None:
    make_job(run_after_seconds_ago=300)
    make_job(run_after_seconds_ago=-600)  # scheduled: not ready, not in the backlog age
    make_job(JobState.RUNNING)
    make_job(JobState.SUCCEEDED, finished_seconds_ago=60)
    make_job(JobState.SUCCEEDED, finished_seconds_ago=7200)
    make_job(JobState.EXHAUSTED, queue="other", finished_seconds_ago=60)

    out, _ = jobs("stats")

    header, *queues, _, summary = out.splitlines()
    rows = {
        line.split()[0]: dict(zip(header.split(), line.split(), strict=True)) for line in queues
    }
    assert list(rows["default"]) == [
        "QUEUE",
        *(s.upper() for s in JobState.values),
        "SCHEDULED",
        "OLDEST-READY",
        "SUCCEEDED-1H",
        "FAILED-1H",
        "PAUSED",
    ]
    assert rows["default"] == {
        **{state.upper(): "0" for state in JobState.values},
        "QUEUE": "default",
        "QUEUED": "2",
        "RUNNING": "1",
        "SUCCEEDED": "2",
        "SCHEDULED": "1",
        "OLDEST-READY": "5m",
        "SUCCEEDED-1H": "1",
        "FAILED-1H": "0",
        "PAUSED": "no",
    }
    assert rows["other"] == {
        **{state.upper(): "0" for state in JobState.values},
        "QUEUE": "other",
        "EXHAUSTED": "1",
        "SCHEDULED": "0",
        "OLDEST-READY": "-",
        "SUCCEEDED-1H": "0",
        "FAILED-1H": "1",
        "PAUSED": "no",
    }
    assert summary.startswith("1 job(s) running or cancelling; workers: 0 live, 0 stale")


# -- pause and resume ---------------------------------------------------------------


def test_pause__stops_claims_from_the_queue_and_records_who_and_why(pg: None) -> None:
    out, _ = jobs("pause", "other", "--note", "supplier API down", "--actor", "ops:ann")

    stats, _ = jobs("stats")
    assert out == "other  paused\n"
    assert QueueState.objects.get(queue="other").paused is True
    assert list(QueueEvent.objects.values_list("queue", "action", "actor", "note")) == [
        ("other", "pause", "ops:ann", "supplier API down")
    ]
    assert [line.split()[-1] for line in stats.splitlines() if line.startswith("other ")] == ["yes"]


def test_pause__a_paused_queue_stays_paused_and_nothing_is_recorded(pg: None) -> None:
    jobs("pause", "other")

    out, _ = jobs("pause", "other")

    assert out == "other  already paused; nothing changed\n"
    assert QueueEvent.objects.count() == 1


def test_resume__lets_workers_claim_again(pg: None) -> None:
    jobs("pause", "other")

    out, _ = jobs("resume", "other", "--note", "supplier back")

    assert out == "other  resumed\n"
    assert QueueState.objects.get(queue="other").paused is False
    assert list(QueueEvent.objects.order_by("at", "id").values_list("action", "note")) == [
        ("pause", ""),
        ("resume", "supplier back"),
    ]


def test_pause__an_unknown_queue_is_refused_and_nothing_is_recorded(pg: None) -> None:
    error, _, _ = jobs_failing("pause", "nope")

    assert error == "Unknown queue 'nope'; the queues are default, other. Nothing was changed."
    assert (QueueState.objects.count(), QueueEvent.objects.count()) == (0, 0)


# -- prune --------------------------------------------------------------------------


def test_prune__deletes_jobs_older_than_retention_days_and_keeps_held_ones(pg: None) -> None:
    fifteen_days = 15 * 86400
    make_job(JobState.SUCCEEDED, finished_seconds_ago=fifteen_days)
    held = make_job(JobState.EXHAUSTED, finished_seconds_ago=fifteen_days)
    young = make_job(JobState.SUCCEEDED, finished_seconds_ago=86400)

    out, _ = jobs("prune")

    assert out.splitlines()[0].startswith("Deleted 1 job(s) finished before ")
    assert out.splitlines()[0].endswith(" (exhausted and quarantined kept): succeeded 1.")
    assert set(Job.objects.values_list("id", flat=True)) == {held.id, young.id}


def test_prune__options_choose_age_held_jobs_and_batch_size(pg: None) -> None:
    for state in (JobState.SUCCEEDED, JobState.QUARANTINED, JobState.FAILED):
        make_job(state, finished_seconds_ago=3 * 86400)

    out, _ = jobs("prune", "--older-than", "2", "--include-held", "--batch-size", "1")

    assert out.splitlines()[1].startswith(
        "Deleted with them 0 attempt(s) and 0 audit event(s) in 3 batch(es)"
    )
    assert Job.objects.count() == 0


def test_prune__dry_run_deletes_nothing(pg: None) -> None:
    make_job(JobState.SUCCEEDED, finished_seconds_ago=30 * 86400)

    out, _ = jobs("prune", "--dry-run")

    assert out.startswith("Would delete 1 job(s) finished before ")
    assert Job.objects.count() == 1


def test_prune__a_non_positive_age_is_refused(pg: None) -> None:
    error, _, _ = jobs_failing("prune", "--older-than", "0")

    assert error == "Error: argument --older-than: 0 must be more than zero."


# -- every subcommand -----------------------------------------------------------------


def test_an_unknown_backend_is_an_error(pg: None) -> None:
    error, _, _ = jobs_failing("list", "--backend", "nope")

    assert error == (
        "TASKS has no backend 'nope'; the configured aliases are "
        "default, fair, fast, flow, no_prefetch, sqlite."
    )


def test_no_subcommand_is_an_error(pg: None) -> None:
    error, _, _ = jobs_failing()

    assert error == "Error: the following arguments are required: SUBCOMMAND"


# -- exit codes, from a real process ----------------------------------------------------


def test_exit_code__0_when_every_id_was_changed(pg: None) -> None:
    job = make_job()

    done = jobs_process("cancel", str(job.id), "--actor", "ops:bob")

    assert (done.returncode, done.stdout, done.stderr) == (0, f"{job.id}  cancelled (cancel)\n", "")


def test_exit_code__1_when_a_bulk_verb_refused_some_ids(pg: None) -> None:
    failed, queued = make_job(JobState.FAILED), make_job()

    done = jobs_process("retry", str(failed.id), str(queued.id))

    assert (done.returncode, done.stdout) == (1, f"{failed.id}  queued (retry)\n")
    assert done.stderr.endswith("CommandError: retry: 1 of 2 job(s) refused; 1 changed.\n")


def test_exit_code__1_for_a_malformed_id(pg: None) -> None:
    done = jobs_process("show", "42")

    assert (done.returncode, done.stderr) == (1, "CommandError: Not a job id (a UUID): '42'.\n")


def test_exit_code__2_for_a_missing_note(pg: None) -> None:
    done = jobs_process("discard", str(uuid.uuid4()))

    assert done.returncode == 2
    assert done.stderr.endswith("error: the following arguments are required: --note\n")


# -- a verb over a filter, and --json ------------------------------------------------------


def test_filter__applies_the_verb_to_every_matching_job_in_batches_with_yes(pg: None) -> None:
    failed = [make_job(JobState.FAILED, queue="mail") for _ in range(3)]
    done, elsewhere = make_job(JobState.SUCCEEDED, queue="mail"), make_job(JobState.FAILED)

    out, _ = jobs("retry", "--queue", "mail", "--yes", "--batch-size", "2", "--actor", "ops")

    states = dict(Job.objects.values_list("id", "state"))
    assert [states[j.id] for j in failed] == ["queued"] * 3
    assert (states[done.id], states[elsewhere.id]) == ("succeeded", "failed")
    assert out == "retry: 3 of 4 matching job(s) retried; 1 skipped.\n"


def test_filter__cancel_counts_the_running_jobs_it_only_asked_to_stop_apart(pg: None) -> None:
    queued = make_job(JobState.QUEUED, queue="mail")
    running = make_job(JobState.RUNNING, queue="mail")

    out, _ = jobs("cancel", "--queue", "mail", "--yes")

    assert out == (
        "cancel: 1 of 2 matching job(s) cancelled; 1 running job(s) asked to stop "
        "(cancelling); 0 skipped.\n"
    )
    states = dict(Job.objects.values_list("id", "state"))
    assert (states[queued.id], states[running.id]) == ("cancelled", "cancelling")


def test_filter__without_a_terminal_asks_for_the_count_and_changes_nothing(pg: None) -> None:
    make_job(JobState.FAILED), make_job(JobState.SUCCEEDED)

    error, _, _ = jobs_failing("retry", "--state", "failed", "--state", "succeeded")

    assert error == (
        "retry: the filter matches 2 job(s); retry applies to 1 of them now. Nothing was "
        "changed: confirm with --expect 2 (or --yes) when not at a terminal."
    )
    assert set(Job.objects.values_list("state", flat=True)) == {"failed", "succeeded"}


def test_filter__a_count_the_filter_no_longer_matches_is_refused(pg: None) -> None:
    make_job(JobState.FAILED), make_job(JobState.FAILED)

    error, _, _ = jobs_failing("retry", "--state", "failed", "--expect", "1")

    assert error.startswith("The filter matches 2 jobs now, not the 1 confirmed; nothing")
    assert set(Job.objects.values_list("state", flat=True)) == {"failed"}


def test_filter__ids_and_a_filter_together_are_refused(pg: None) -> None:
    job = make_job(JobState.FAILED)

    error, _, _ = jobs_failing("retry", str(job.id), "--state", "failed", "--yes")

    assert error == "retry takes job ids or filters, not both. Nothing was changed."


def test_json__a_verb_on_ids_prints_one_document_with_changes_and_refusals(pg: None) -> None:
    done, scheduled = make_job(JobState.SUCCEEDED), make_job(run_after_seconds_ago=-3600)

    error, out, _ = jobs_failing("rerun", str(done.id), str(scheduled.id), "--json")

    copy = Job.objects.get(rerun_of=done.id)
    assert json.loads(out) == {
        "verb": "rerun",
        "jobs": [
            {"id": str(done.id), "transition": "rerun", "state": "succeeded", "rerun": str(copy.id)}
        ],
        "refused": {
            str(scheduled.id): f"Cannot rerun job {scheduled.id}: it is queued; rerun applies "
            "only to jobs that are cancelled, discarded, exhausted, expired, failed, succeeded."
        },
    }
    assert error == "rerun: 1 of 2 job(s) refused; 1 changed."


def test_json__run_now_over_a_filter_reports_counts(pg: None) -> None:
    later = make_job(run_after_seconds_ago=-3600)
    make_job()  # queued and already due: run_now skips it

    out, _ = jobs("run_now", "--state", "queued", "--expect", "2", "--json")

    assert json.loads(out) == {
        "verb": "run_now",
        "matched": 2,
        "applicable": 1,
        "changed": 1,
        "stopping": 0,
        "skipped": 1,
        "reruns": {},
    }
    assert Job.objects.get(id=later.id).run_after <= timezone.now()


def test_json__prune_counts_what_it_would_delete_by_state(pg: None) -> None:
    month = 30 * 86400
    make_job(JobState.SUCCEEDED, finished_seconds_ago=month)
    make_job(JobState.FAILED, finished_seconds_ago=month)

    pruned = json.loads(jobs("prune", "--dry-run", "--json")[0])

    assert (pruned["jobs"], pruned["jobs_by_state"]) == (2, {"failed": 1, "succeeded": 1})


def test_json__list_show_stats_pause_and_prune_each_print_one_document(pg: None) -> None:
    job = make_job(JobState.FAILED, tenant="acme")
    control.apply("retry", job.id, actor="alice")

    listed = json.loads(jobs("list", "--json")[0])
    shown = json.loads(jobs("show", str(job.id), "--json")[0])
    stats = json.loads(jobs("stats", "--json")[0])
    paused = json.loads(jobs("pause", "default", "--json")[0])
    pruned = json.loads(jobs("prune", "--dry-run", "--json")[0])

    assert [(j["id"], j["state"], j["tenant"]) for j in listed["jobs"]] == [
        (str(job.id), "queued", "acme")
    ]
    assert listed["more"] is False
    assert (shown["id"], shown["state"], shown["rerun_of"]) == (str(job.id), "queued", None)
    assert [(e["transition"], e["actor"]) for e in shown["events"]] == [("retry", "alice")]
    assert {q["queue"]: q["depth"]["queued"] for q in stats["queues"]} == {"default": 1, "other": 0}
    assert paused == {"queue": "default", "paused": True, "changed": True}
    assert (pruned["dry_run"], pruned["jobs"]) == (True, 0)
