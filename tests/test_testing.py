"""django_jobs.testing: users' tests of their own tasks, on PostgreSQL and SQLite.

The drain runs in the test's own transaction (pytest-django's ``db``, a
``TestCase``) and with committed rows (``transactional_db``); the pytest
fixtures are tested by running pytest on a tiny test module (``pytester``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
import uuid
from collections import Counter
from datetime import date, timedelta
from decimal import Decimal
from pathlib import Path

import pytest
from django.utils import timezone

from django_jobs import (
    ArgumentsNotJSONError,
    AttemptOutcome,
    JobState,
    PayloadTooLargeError,
    UnknownQueueError,
)
from django_jobs.framework import task_finished
from django_jobs.models import Job
from django_jobs.testing import (
    DrainLimitError,
    Jobs,
    JobsWorker,
    assert_enqueued,
    assert_not_enqueued,
    captured_jobs,
    drain,
)
from django_jobs.testing.drain import Ran
from tests.conftest import ROOT, example_files, examples_shown
from tests.testapp import tasks
from tests.testapp import testing_tasks as ours

# (backend, pytest-django marks): each database, in the test's transaction
# (as a TestCase) and committed (as a TransactionTestCase).
PLACES = [
    pytest.param("default", marks=[pytest.mark.postgres, pytest.mark.django_db], id="pg-testcase"),
    pytest.param(
        "default",
        marks=[pytest.mark.postgres, pytest.mark.django_db(transaction=True)],
        id="pg-committed",
    ),
    pytest.param("sqlite", marks=pytest.mark.django_db(databases=["sqlite"]), id="sqlite-testcase"),
    pytest.param(
        "sqlite",
        marks=pytest.mark.django_db(databases=["sqlite"], transaction=True),
        id="sqlite-committed",
    ),
]
IN_TRANSACTION = [PLACES[0], PLACES[2]]


@pytest.fixture(params=PLACES)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(params=IN_TRANSACTION)
def in_test_transaction(request: pytest.FixtureRequest) -> str:
    """A backend, with the test inside one transaction that is never committed."""
    return str(request.param)


def outcomes(ran: tuple[Ran, ...]) -> list[tuple[str, int, str, str]]:
    return [(r.task_name.rsplit(".", 1)[1], r.attempt, r.outcome, r.state) for r in ran]


# -- drain ---------------------------------------------------------------------


def test_drain__runs_due_jobs_and_returns_their_results(backend: str) -> None:
    first = tasks.add.using(backend=backend).enqueue(1, 2)
    second = tasks.add.using(backend=backend).enqueue(3, 4)

    drained = drain(backend=backend)

    assert (drained.succeeded, drained.counts) == (2, {"succeeded": 2})
    assert [(r.id, r.return_value) for r in drained.results] == [(first.id, 3), (second.id, 7)]


def test_drain__in_the_test_transaction_sees_jobs_enqueued_after_it_began(
    in_test_transaction: str,
) -> None:
    Job.objects.using("sqlite" if in_test_transaction == "sqlite" else "default").count()
    result = tasks.add.using(backend=in_test_transaction).enqueue(2, 2)

    drained = drain(backend=in_test_transaction)

    result.refresh()
    assert (drained.succeeded, result.state, result.return_value) == (1, "succeeded", 4)


def test_drain__retries_at_once_without_sleeping_for_the_backoff(in_test_transaction: str) -> None:
    result = ours.fails_first.using(backend=in_test_transaction).enqueue(2)

    drained = drain(backend=in_test_transaction)

    assert outcomes(drained.ran) == [
        ("fails_first", 1, "failed", "queued"),
        ("fails_first", 2, "failed", "queued"),
        ("fails_first", 3, "succeeded", "succeeded"),
    ]
    assert [r.backoff is not None for r in drained.ran] == [True, True, False]
    assert (drained.retried, drained.results[0].id) == (2, result.id)


def test_drain__exhausts_a_job_that_always_fails(in_test_transaction: str) -> None:
    tasks.always_fails.using(backend=in_test_transaction).enqueue("nope")

    drained = drain(backend=in_test_transaction)

    assert (drained.attempts, drained.failed, drained.counts) == (3, 1, {"exhausted": 1})
    assert [r.error for r in drained.ran] == ["builtins.ValueError: nope"] * 3


def test_drain__waits_for_the_backoff_when_asked(in_test_transaction: str) -> None:
    tasks.flaky.using(backend=in_test_transaction).enqueue(1)  # backoff=0.05s

    drained = drain(backend=in_test_transaction, wait_for_backoff=True)

    assert [(r.outcome, r.state) for r in drained.ran] == [
        ("failed", "queued"),
        ("succeeded", "succeeded"),
    ]


def test_drain__runs_a_dependent_once_its_parents_succeed(in_test_transaction: str) -> None:
    parent = tasks.add.using(backend=in_test_transaction).enqueue(1, 1)
    child = tasks.noop.using(backend=in_test_transaction, after=parent).enqueue()

    drained = drain(backend=in_test_transaction)

    assert [r.job_id for r in drained.ran] == [parent.id, child.id] and drained.succeeded == 2


def test_drain__leaves_the_dependents_of_a_failed_job_waiting(in_test_transaction: str) -> None:
    parent = tasks.gives_up.using(backend=in_test_transaction).enqueue()
    tasks.noop.using(backend=in_test_transaction, after=parent).enqueue()

    drained = drain(backend=in_test_transaction)

    assert [r.job_id for r in drained.ran] == [parent.id]
    assert (
        Job.objects.using(_db(in_test_transaction))
        .filter(task_name=tasks.noop.module_path)
        .values_list("state", flat=True)
        .get()
        == JobState.WAITING
    )


def test_drain__leaves_jobs_scheduled_later(in_test_transaction: str) -> None:
    later = timezone.now() + timedelta(hours=1)
    tasks.add.using(backend=in_test_transaction, run_after=later).enqueue(1, 1)

    drained = drain(backend=in_test_transaction)

    assert drained.attempts == 0
    assert_enqueued(tasks.add, args=[1, 1], backend=in_test_transaction)


def test_drain__with_scheduled_runs_them_in_the_order_they_fall_due(
    in_test_transaction: str,
) -> None:
    now = timezone.now()
    b = tasks.add.using(backend=in_test_transaction)
    in_two_days = b.using(run_after=now + timedelta(days=2)).enqueue(2, 2)
    in_an_hour = b.using(run_after=now + timedelta(hours=1)).enqueue(1, 1)
    due = b.enqueue(0, 0)

    drained = drain(backend=in_test_transaction, with_scheduled=True)

    assert [r.job_id for r in drained.ran] == [due.id, in_an_hour.id, in_two_days.id]


def test_drain__stops_a_task_past_its_timeout(in_test_transaction: str) -> None:
    ours.spins_past_timeout.using(backend=in_test_transaction).enqueue()

    drained = drain(backend=in_test_transaction)

    [ran] = drained.ran
    assert (ran.outcome, ran.state) == (AttemptOutcome.TIMED_OUT, JobState.EXHAUSTED)
    assert ran.error.startswith("django_jobs.exceptions.JobTimedOut: the attempt outlived")


def test_drain__only_the_queue_asked_for(in_test_transaction: str) -> None:
    b = tasks.add.using(backend=in_test_transaction)
    b.enqueue(1, 1)
    other = b.using(queue_name="other").enqueue(2, 2)

    drained = drain("other", backend=in_test_transaction)

    assert [r.job_id for r in drained.ran] == [other.id]


def test_drain__passes_the_job_context(in_test_transaction: str) -> None:
    result = ours.context_summary.using(backend=in_test_transaction).enqueue()

    drained = drain(backend=in_test_transaction)

    assert drained.results[0].return_value == {"job_id": result.id, "attempt": 1, "last": False}


def test_drain__sends_task_finished_as_a_worker_does(in_test_transaction: str) -> None:
    finished: list[tuple[str, str]] = []

    def receiver(sender: object, task_result: object, **kwargs: object) -> None:
        finished.append((task_result.id, task_result.status))  # type: ignore[attr-defined]

    task_finished.connect(receiver)
    try:
        result = tasks.add.using(backend=in_test_transaction).enqueue(1, 1)
        drain(backend=in_test_transaction)
    finally:
        task_finished.disconnect(receiver)

    assert finished == [(result.id, "SUCCESSFUL")]


@pytest.mark.django_db
@pytest.mark.postgres
def test_drain__in_a_testcase_a_tasks_own_sql_error_fails_its_attempt_not_the_drain() -> None:
    result = ours.divides_by_zero_in_sql.enqueue()

    drained = drain()

    assert [r.outcome for r in drained.ran] == [AttemptOutcome.FAILED] * 2
    assert Job.objects.get(id=result.id).state == JobState.EXHAUSTED


@pytest.mark.django_db
@pytest.mark.postgres
def test_jobs_worker__keeps_the_attempts_of_a_call_that_reached_its_limit() -> None:
    worker = JobsWorker(max_attempts=3)
    ours.enqueues_itself.enqueue()

    with pytest.raises(DrainLimitError):
        worker()

    assert [r.outcome for r in worker.ran] == [AttemptOutcome.SUCCEEDED] * 3


@pytest.mark.django_db
@pytest.mark.postgres
def test_drain__stops_at_max_attempts_when_a_task_enqueues_itself_forever() -> None:
    ours.enqueues_itself.enqueue()

    with pytest.raises(DrainLimitError, match=r"drain ran 5 attempts and jobs of"):
        drain(max_attempts=5)

    states = Job.objects.filter(task_name=ours.enqueues_itself.module_path).values_list("state")
    # Five ran; the sixth, claimed past the limit, was given back rather than left running.
    assert Counter(state for (state,) in states) == {"succeeded": 5, "queued": 1}


@pytest.mark.django_db
@pytest.mark.postgres
@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"queue": "nope"}, ValueError, r"Unknown queue\(s\) 'nope' for TASKS\['default'\]"),
        ({"queue": "default", "queues": ["other"]}, TypeError, "not both"),
        ({"queues": "default"}, TypeError, "non-empty list of queue names"),
        ({"backend": "nope"}, Exception, "TASKS has no backend 'nope'"),
        ({"with_scheduled": "yes"}, TypeError, "with_scheduled must be True or False"),
        ({"max_attempts": 0}, ValueError, "max_attempts must be a whole number of at least 1"),
    ],
)
def test_drain__refuses_what_it_cannot_do(
    kwargs: dict[str, object], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        drain(**kwargs)  # type: ignore[arg-type]


# -- enqueue refuses in tests what it refuses in production ----------------------


@pytest.mark.django_db
@pytest.mark.postgres
def test_enqueue__in_a_test_refuses_what_production_refuses() -> None:
    with pytest.raises(ArgumentsNotJSONError):
        tasks.add.enqueue({1, 2}, 3)
    with pytest.raises(UnknownQueueError):
        tasks.add.using(queue_name="nope").enqueue(1, 2)
    with pytest.raises(PayloadTooLargeError):
        tasks.summary.enqueue("x" * 2_000_000)
    assert_not_enqueued(tasks.add)


# -- assertions -------------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.postgres
def test_assert_enqueued__matches_task_arguments_queue_and_count() -> None:
    tasks.add.enqueue(1, 2)
    tasks.add.enqueue(1, 2)
    tasks.add.using(queue_name="other").enqueue(3, 4)

    found = assert_enqueued(tasks.add, args=(1, 2), count=2)
    assert_enqueued(tasks.add, args=[3, 4], queue="other", count=1)
    assert_enqueued("tests.testapp.tasks.add", kwargs={})
    assert [job.args for job in found] == [[1, 2], [1, 2]]


@pytest.mark.django_db
@pytest.mark.postgres
def test_assert_enqueued__compares_uuids_dates_and_decimals_as_they_were_enqueued() -> None:
    order = uuid.UUID("12345678-1234-5678-1234-567812345678")
    tasks.echo.enqueue(order, day=date(2026, 12, 4), total=Decimal("9.90"))

    found = assert_enqueued(
        tasks.echo, args=[order], kwargs={"day": date(2026, 12, 4), "total": Decimal("9.90")}
    )

    assert len(found) == 1
    assert_not_enqueued(tasks.echo, kwargs={"day": date(2026, 12, 4), "total": Decimal("9.9")})


@pytest.mark.django_db
@pytest.mark.postgres
def test_assert_enqueued__failure_lists_what_is_enqueued_for_the_task() -> None:
    tasks.add.enqueue(1, 2)
    tasks.add.using(queue_name="other").enqueue(3, 4)
    tasks.noop.enqueue()

    with pytest.raises(AssertionError) as failure:
        assert_enqueued(tasks.add, args=[5, 6])

    lines = str(failure.value).splitlines()
    assert lines[:2] == [
        "Expected at least 1 job of tests.testapp.tasks.add args=[5, 6] enqueued on backend "
        "'default'; found 0.",
        "Enqueued jobs of tests.testapp.tasks.add (2):",
    ]
    assert [line.split(" run_after=")[0] for line in lines[2:]] == [
        "  queue='default' args=[1, 2] kwargs={} state=queued",
        "  queue='other' args=[3, 4] kwargs={} state=queued",
    ]


@pytest.mark.django_db
@pytest.mark.postgres
def test_assert_enqueued__wrong_count_says_expected_and_found() -> None:
    tasks.add.enqueue(1, 2)

    with pytest.raises(AssertionError, match=r"^Expected 2 job\(s\) of .* found 1\."):
        assert_enqueued(tasks.add, count=2)


@pytest.mark.django_db
@pytest.mark.postgres
def test_assert_enqueued__a_job_that_ran_is_no_longer_enqueued() -> None:
    tasks.add.enqueue(1, 2)
    drain()

    with pytest.raises(AssertionError, match=r"No job of tests\.testapp\.tasks\.add is enqueued\."):
        assert_enqueued(tasks.add)


@pytest.mark.django_db
@pytest.mark.postgres
def test_assert_not_enqueued__failure_lists_the_jobs_found() -> None:
    tasks.add.enqueue(1, 2)

    assert_not_enqueued(tasks.add, args=[9, 9])
    with pytest.raises(AssertionError) as failure:
        assert_not_enqueued(tasks.add)

    assert str(failure.value).startswith(
        "Expected no job of tests.testapp.tasks.add enqueued on backend 'default'; found 1.\n"
        "Enqueued jobs of tests.testapp.tasks.add (1):\n  queue='default' args=[1, 2]"
    )


@pytest.mark.django_db
@pytest.mark.postgres
@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"task": 3}, "task must be a task or its dotted name, not 3"),
        ({"task": None}, "task must be a task or its dotted name, not None"),
        ({"task": tasks.add, "args": "12"}, "args must be a list or tuple"),
        ({"task": tasks.add, "kwargs": [1]}, "kwargs must be a dict"),
        ({"task": tasks.add, "args": [{1}]}, r"args\[0\] is a set, which does not survive"),
        ({"task": tasks.add, "count": -1}, "count must be a whole number >= 0"),
    ],
)
def test_assert_enqueued__refuses_what_it_cannot_compare(
    kwargs: dict[str, object], message: str
) -> None:
    tasks.noop.enqueue()  # a job of another task: None must not match it
    with pytest.raises((TypeError, ValueError), match=message):
        assert_enqueued(**kwargs)  # type: ignore[arg-type]
    if "count" not in kwargs:  # the one argument assert_not_enqueued does not take
        with pytest.raises((TypeError, ValueError), match=message):
            assert_not_enqueued(**kwargs)  # type: ignore[arg-type]


@pytest.mark.django_db
@pytest.mark.postgres
def test_assert_enqueued__compares_arguments_as_json_so_true_is_not_one() -> None:
    tasks.echo.enqueue(True, n=1.5)

    assert_enqueued(tasks.echo, args=[True], kwargs={"n": 1.5}, count=1)
    assert_not_enqueued(tasks.echo, args=[1])
    assert_not_enqueued(tasks.echo, kwargs={"n": 1})


# -- captured_jobs ------------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.postgres
def test_captured_jobs__holds_the_jobs_the_block_enqueued_in_order() -> None:
    tasks.noop.enqueue()
    with captured_jobs() as jobs:
        first = tasks.add.enqueue(1, 2)
        keyed = tasks.add.using(idempotency_key="k").enqueue(3, 4)
        tasks.add.using(idempotency_key="k").enqueue(3, 4)  # the same job: nothing new

    assert [(j.id, j.args, j.state) for j in jobs] == [
        (first.id, [1, 2], "queued"),
        (keyed.id, [3, 4], "queued"),
    ]


@pytest.mark.django_db(databases=["sqlite"])
def test_captured_jobs__includes_jobs_a_drained_task_enqueued() -> None:
    with captured_jobs(backend="sqlite") as jobs:
        ours.fans_out.using(backend="sqlite").enqueue(2, "sqlite")
        drain(backend="sqlite")

    assert [(j.task.name, j.args, j.state) for j in jobs] == [
        ("fans_out", [2, "sqlite"], "succeeded"),
        ("noop", [], "succeeded"),
        ("noop", [], "succeeded"),
    ]


# -- Jobs, bound to a backend -------------------------------------------------------


@pytest.mark.django_db(databases=["sqlite"])
def test_jobs__binds_every_helper_to_its_backend() -> None:
    jobs = Jobs("sqlite")
    with jobs.captured() as captured:
        tasks.add.using(backend="sqlite").enqueue(1, 2)
    jobs.assert_enqueued(tasks.add, args=[1, 2])

    drained = jobs.drain()

    jobs.assert_not_enqueued(tasks.add)
    assert (len(captured), drained.succeeded, jobs.enqueued()) == (1, 1, [])


@pytest.mark.django_db
def test_jobs__refuses_a_backend_that_is_not_ours() -> None:
    with pytest.raises(Exception, match="TASKS has no backend 'nope'"):
        Jobs("nope")


def _db(backend: str) -> str:
    return "sqlite" if backend == "sqlite" else "default"


# -- the pytest plugin ----------------------------------------------------------------


def test_pyproject__registers_the_pytest_plugin_entry_point() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())

    entry_points = project["project"]["entry-points"]["pytest11"]

    assert entry_points == {"django_jobs.pytest_plugin": "django_jobs.pytest_plugin"}


FIXTURE_TESTS = """
import pytest
from tests.testapp import tasks

@pytest.mark.django_db
def test_jobs_fixture(jobs):
    tasks.add.enqueue(1, 2)
    jobs.assert_enqueued(tasks.add, args=[1, 2])
    assert jobs.drain().succeeded == 1

def test_jobs_fixture_without_a_marker(jobs, jobs_worker):
    tasks.add.enqueue(2, 3)
    jobs_worker()
    tasks.add.enqueue(3, 4)
    jobs_worker()
    assert [r.state for r in jobs_worker.ran] == ["succeeded", "succeeded"]
"""


def run_pytest(where: Path, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """pytest in ``where``, a user's project: none of this suite's conftest or settings."""
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args],
        cwd=where,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def user_env(**extra: str) -> dict[str, str]:
    unset = ("DJANGO_SETTINGS_MODULE", "DATABASE_URL", "PYTEST_ADDOPTS")
    return {**{k: v for k, v in os.environ.items() if k not in unset}, **extra}


def test_pytest_plugin__fixtures_run_jobs_in_a_users_test(tmp_path: Path) -> None:
    (tmp_path / "test_user.py").write_text(FIXTURE_TESTS)
    # On SQLite: a second pytest must not create (or drop) this run's PostgreSQL test database.
    env = user_env(PYTHONPATH=str(ROOT), DATABASE_URL=f"sqlite:///{tmp_path / 'unused.db'}")

    done = run_pytest(tmp_path, "-p", "django_jobs.pytest_plugin", "--ds=tests.settings", env=env)

    assert done.stdout.splitlines()[-1].startswith("2 passed"), done.stdout + done.stderr


def test_pytest_plugin__does_not_break_a_project_without_django(tmp_path: Path) -> None:
    (tmp_path / "test_plain.py").write_text("def test_plain():\n    assert True\n")

    done = run_pytest(
        tmp_path, "-p", "django_jobs.pytest_plugin", "-p", "no:django", env=user_env()
    )

    assert done.stdout.splitlines()[-1].startswith("1 passed"), done.stdout + done.stderr


def test_pytest_plugin__imports_no_pytest_at_package_import(tmp_path: Path) -> None:
    """The package imports without pytest: the plugin is only pytest's business."""
    code = (
        "import sys, builtins\n"
        "real = builtins.__import__\n"
        "def guard(name, *a, **k):\n"
        "    if name == 'pytest' or name.startswith('_pytest'):\n"
        "        raise ModuleNotFoundError(\"No module named 'pytest'\")\n"
        "    return real(name, *a, **k)\n"
        "builtins.__import__ = guard\n"
        "import django_jobs.pytest_plugin\n"
        "print('imported')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60
    )

    assert done.stdout.strip() == "imported", done.stderr


# -- the examples of docs/testing.md ---------------------------------------------------

EXAMPLES = ROOT / "docs" / "examples" / "testing"


def test_docs__testing_page_shows_each_example_file_verbatim() -> None:
    shown = examples_shown("testing.md")

    assert shown == example_files(EXAMPLES)


def test_docs__testing_examples_pass_in_a_users_project(tmp_path: Path) -> None:
    for path in EXAMPLES.glob("*.py"):
        shutil.copy(path, tmp_path / path.name)
    env = user_env(PYTHONPATH=str(ROOT), DATABASE_URL=f"sqlite:///{tmp_path / 'unused.db'}")

    done = run_pytest(tmp_path, "-p", "django_jobs.pytest_plugin", "--ds=tests.settings", env=env)

    assert done.stdout.splitlines()[-1].startswith("7 passed"), done.stdout + done.stderr
