"""Durable steps inside a job: ``context.step`` and ``context.sleep``, through drain().

Each test runs on PostgreSQL and on SQLite, in the test's transaction: the
drain uses the worker's own claim, runner and completer, so what a step
records here is what a worker records. The crash of a real worker between
two steps is in tests/test_processes.py; the engine call in tests/test_engine.py.
"""

from __future__ import annotations

import importlib
import uuid
from collections.abc import Callable
from datetime import datetime, timedelta

import pytest
from django.utils import timezone

from django_jobs import AttemptOutcome, JobState, control
from django_jobs.backend import jobs_backend
from django_jobs.codec import from_json
from django_jobs.exceptions import StepError
from django_jobs.models import Attempt, Job, Step
from django_jobs.steps import Steps
from django_jobs.testing import drain
from tests.conftest import ROOT, example_files, examples_shown
from tests.testapp import step_tasks
from tests.testapp.models import Ledger

PLACES = [
    pytest.param("default", marks=[pytest.mark.postgres, pytest.mark.django_db], id="postgres"),
    pytest.param("sqlite", marks=pytest.mark.django_db(databases=["sqlite"]), id="sqlite"),
]


@pytest.fixture(params=PLACES)
def place(request: pytest.FixtureRequest) -> str:
    """The backend (and database) alias: ``default`` is PostgreSQL."""
    return str(request.param)


def steps_of(place: str, job_id: str) -> list[tuple[str, int]]:
    return list(
        Step.objects.using(place)
        .filter(job_id=job_id)
        .order_by("id")
        .values_list("name", "attempt")
    )


def effects_of(place: str, job_id: str) -> dict[str, int]:
    """Each step's side effect, by step name, with the attempt that did it."""
    rows = Ledger.objects.using(place).filter(job_key__startswith=f"{job_id}:")
    return {
        key.split(":", 1)[1]: attempt for key, attempt in rows.values_list("job_key", "attempt")
    }


def test_step__a_completed_step_returns_its_record_and_does_not_run_again_on_a_retry(
    place: str,
) -> None:
    result = step_tasks.three_steps.using(backend=place).enqueue(fail_after=2)

    drained = drain(backend=place)

    assert [r.outcome for r in drained.ran] == [AttemptOutcome.FAILED, AttemptOutcome.SUCCEEDED]
    assert effects_of(place, result.id) == {"one": 1, "two": 1, "three": 2}
    assert steps_of(place, result.id) == [("one", 1), ("two", 1), ("three", 2)]
    # Step two's Decimal came back from its record as a Decimal.
    assert drained.results[0].return_value == ["one", "9.90", "Decimal", "three"]


def test_step__the_first_run_and_a_replay_see_the_same_type(place: str) -> None:
    result = step_tasks.big_number_step.using(backend=place).enqueue()

    drained = drain(backend=place)

    first = Attempt.objects.using(place).get(job_id=result.id, number=1)
    assert (first.error_message, first.error_type) == (
        drained.results[0].return_value,
        "builtins.RuntimeError",
    )


def test_step__a_name_used_twice_in_one_run_fails_the_job_for_good_at_the_second(
    place: str,
) -> None:
    result = step_tasks.same_name_twice.using(backend=place).enqueue()

    drained = drain(backend=place)

    job = Job.objects.using(place).get(id=result.id)
    assert (job.state, job.attempts) == (JobState.FAILED, 1)
    assert drained.ran[0].error.startswith("django_jobs.exceptions.DuplicateStepError: step 'send'")
    assert effects_of(place, result.id) == {"first": 1}
    assert steps_of(place, result.id) == [("send", 1)]


def test_step__a_result_that_does_not_encode_is_refused_before_anything_is_recorded(
    place: str,
) -> None:
    result = step_tasks.step_returns_a_set.using(backend=place).enqueue()

    drained = drain(backend=place)

    # Not retried, though three attempts are allowed: the same code would fail the same way.
    assert [(r.state, r.attempt) for r in drained.ran] == [(JobState.FAILED, 1)]
    assert drained.ran[0].error.startswith(
        "django_jobs.exceptions.StepResultNotJSONError: the result of step 'tags' is a set"
    )
    assert steps_of(place, result.id) == []


def test_step__a_stale_attempt_cannot_record_and_its_task_stops_though_it_catches_exceptions(
    place: str,
) -> None:
    result = step_tasks.loses_its_lease_after_step_one.using(backend=place).enqueue()

    drained = drain(backend=place)

    first, second = Attempt.objects.using(place).filter(job_id=result.id).order_by("number")
    assert (first.outcome, second.outcome) == (AttemptOutcome.LOST, AttemptOutcome.SUCCEEDED)
    assert first.late_report is not None
    assert first.late_report["error_type"] == "django_jobs.exceptions.StaleAttemptError"
    assert steps_of(place, result.id) == [("one", 1), ("two", 2)]
    assert effects_of(place, result.id) == {"one": 1}
    assert drained.results[0].return_value == "two by attempt 2"


def test_sleep__requeues_the_job_and_its_next_run_resumes_past_its_steps_without_using_an_attempt(
    place: str,
) -> None:
    result = step_tasks.sleeps_between_steps.using(backend=place).enqueue()
    before = timezone.now()

    drained = drain(backend=place)  # a drain does not wait: it runs the job again at once

    assert [(r.outcome, r.state) for r in drained.ran] == [
        (AttemptOutcome.SLEPT, JobState.QUEUED),
        (AttemptOutcome.SUCCEEDED, JobState.SUCCEEDED),
    ]
    assert (drained.slept, drained.retried) == (1, 0)
    job = Job.objects.using(place).get(id=result.id)
    assert (job.attempts, job.max_attempts, job.result) == (2, 2, "woke")
    assert steps_of(place, result.id) == [("before", 1), ("sleep-1", 1), ("after", 2)]
    assert effects_of(place, result.id) == {"before": 1, "after": 2}
    wake = from_json(Step.objects.using(place).get(job_id=result.id, name="sleep-1").result, "")
    assert isinstance(wake, datetime)
    assert before + timedelta(hours=1) <= wake <= timezone.now() + timedelta(hours=1)


def test_operator_retry__keeps_the_steps_so_a_fixed_job_does_not_repeat_them(place: str) -> None:
    result = step_tasks.fails_after_charging.using(backend=place).enqueue()
    drain(backend=place)
    control.retry(result.id, actor="ops", backend=place)

    drained = drain(backend=place)

    assert [(r.attempt, r.state) for r in drained.ran] == [(2, JobState.SUCCEEDED)]
    assert effects_of(place, result.id) == {"charge": 1}
    assert steps_of(place, result.id) == [("charge", 1)]


def _no_op() -> None:
    return None


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda s: s.run(5, _no_op), "a step's name must be a non-empty string .* not 5"),
        (lambda s: s.run("", _no_op), "a step's name must be a non-empty string .* not ''"),
        (lambda s: s.run("x" * 201, _no_op), "at most 200 characters"),
        (lambda s: s.run("charge", "charge_card"), "step 'charge': 'charge_card' is not callable"),
        (lambda s: s.sleep_until(datetime(2030, 1, 1)), "needs a timezone-aware datetime"),
        (lambda s: s.sleep(-1), "finite number of seconds >= 0, not -1"),
        (lambda s: s.sleep(True), "finite number of seconds >= 0, not True"),
        (lambda s: s.sleep(float("inf")), "finite number of seconds >= 0, not inf"),
        (lambda s: s.sleep(60, name=""), "a sleep's name must be a non-empty string"),
        (lambda s: s.run("a\x00b", _no_op), "a step's name must not contain a NUL character"),
        (lambda s: s.sleep(60, name="a\x00"), "a sleep's name must not contain a NUL character"),
    ],
    ids=[
        *("name", "empty", "long", "fn", "naive", "negative", "bool", "inf", "sleep-name"),
        *("nul-name", "nul-sleep-name"),
    ],
)
def test_steps__refuse_a_wrong_call_before_reading_or_writing_anything(
    call: Callable[[Steps], object], message: str
) -> None:
    """No database here: a query would fail this test (it has no database access)."""
    steps = Steps(jobs_backend("default").engine, uuid.uuid4(), uuid.uuid4(), 1, 1000)
    with pytest.raises(StepError, match=message):
        call(steps)


# -- the example of docs/steps.md ------------------------------------------------------

EXAMPLES = ROOT / "docs" / "examples" / "steps"


def test_docs__steps_page_shows_the_example_file_verbatim() -> None:
    shown = examples_shown("steps.md")

    assert shown == example_files(EXAMPLES)


@pytest.mark.postgres
@pytest.mark.django_db
def test_docs__steps_example_charges_and_emails_once_across_its_sleep(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.syspath_prepend(str(EXAMPLES))
    welcome = importlib.import_module("welcome")
    monkeypatch.setattr(welcome, "CHARGES", [])
    monkeypatch.setattr(welcome, "EMAILS", [])
    result = welcome.welcome.enqueue("ada@example.com")

    drained = drain()

    assert [r.outcome for r in drained.ran] == [AttemptOutcome.SLEPT, AttemptOutcome.SUCCEEDED]
    assert welcome.CHARGES == [("ada@example.com", 900)]
    assert welcome.EMAILS == [
        ("ada@example.com", "Your receipt ch_1"),
        ("ada@example.com", "How is it going?"),
    ]
    assert drained.results[0].return_value == "ch_1"
    assert [name for name, _ in steps_of("default", result.id)] == [
        "charge",
        "receipt",
        "sleep-1",
        "check-in",
    ]
