"""Unique jobs with a window, and debounce: one live job per key, or the last call wins."""

from __future__ import annotations

import datetime as dt
import multiprocessing
import time
import uuid
from typing import Any

import pytest
from django.db import connections, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from django_jobs import EnqueueOutcome, InvalidJobOptionError, JobState, enqueue_many
from django_jobs.backend import jobs_backend
from django_jobs.framework import task_enqueued
from django_jobs.models import Job, JobEvent
from django_jobs.testing import drain
from django_jobs.values import WorkerIdentity
from django_jobs.worker.runner import given_back
from tests.conftest import ROOT, listen_for_wakeups, results_sent, run_in_processes
from tests.testapp import tasks

HOUR = dt.timedelta(hours=1)
MOMENT = dt.timedelta(milliseconds=50)
EXAMPLE = ROOT / "docs" / "examples" / "unique" / "search_index.py"


def jobs(alias: str) -> list[Job]:
    return list(Job.objects.using(alias).order_by("enqueued_at"))


# -- unique keys --------------------------------------------------------------------


def test_unique__a_live_job_of_the_key_is_returned_and_nothing_is_written(alias: str) -> None:
    first = tasks.add.using(backend=alias, unique_key="sync:7").enqueue(1, 2)
    second = tasks.add.using(backend=alias, unique_key="sync:7").enqueue(3, 4)

    assert (first.enqueue_outcome, second.enqueue_outcome) == (
        EnqueueOutcome.CREATED,
        EnqueueOutcome.EXISTING,
    )
    assert (second.id, second.args, [j.args for j in jobs(alias)]) == (first.id, [1, 2], [[1, 2]])


def test_unique__a_new_keys_job_wakes_workers_once_from_its_insert(pg: None) -> None:
    with (
        listen_for_wakeups() as listener,
        CaptureQueriesContext(connections["default"]) as queries,
    ):
        tasks.add.using(unique_key="sync:8").enqueue(1, 2)
        notes = [n.payload for n in listener.notifies(timeout=0.5)]
    sent = [q["sql"] for q in queries.captured_queries if "pg_notify" in q["sql"]]
    assert notes == ["default"]
    assert len(sent) == 1
    assert sent[0].startswith("WITH job AS (INSERT INTO django_jobs_job ")


def test_unique__the_key_enqueues_again_once_its_job_has_finished(alias: str) -> None:
    first = tasks.add.using(backend=alias, unique_key="sync:7").enqueue(1, 2)
    drain(backend=alias)

    second = tasks.add.using(backend=alias, unique_key="sync:7").enqueue(1, 2)

    assert second.enqueue_outcome == EnqueueOutcome.CREATED
    assert [(str(j.id), j.state) for j in jobs(alias)] == [
        (first.id, JobState.SUCCEEDED),
        (second.id, JobState.QUEUED),
    ]


def test_unique__within_unique_for_a_finished_job_still_holds_the_key(alias: str) -> None:
    first = tasks.add.using(backend=alias, unique_key="report", unique_for=HOUR).enqueue(1, 2)
    drain(backend=alias)

    second = tasks.add.using(backend=alias, unique_key="report", unique_for=HOUR).enqueue(1, 2)

    assert (second.enqueue_outcome, second.id, second.state) == (
        EnqueueOutcome.EXISTING,
        first.id,
        JobState.SUCCEEDED,
    )


def test_unique__past_unique_for_only_the_states_hold_the_key(alias: str) -> None:
    window = dt.timedelta(milliseconds=1)
    old = tasks.add.using(backend=alias, unique_key="k", unique_for=window, unique_states=[])
    first = old.enqueue(1, 2)
    Job.objects.using(alias).update(enqueued_at=timezone.now() - HOUR)

    second = old.enqueue(1, 2)

    assert second.enqueue_outcome == EnqueueOutcome.CREATED
    assert {str(j.id) for j in jobs(alias)} == {first.id, second.id}


def test_unique__unique_states_name_the_states_that_hold_the_key(alias: str) -> None:
    done_once = tasks.add.using(
        backend=alias, unique_key="k", unique_states=[JobState.SUCCEEDED, "failed"]
    )
    first = done_once.enqueue(1, 2)
    second = done_once.enqueue(1, 2)  # the first is queued: not a state that holds the key
    drain(backend=alias)

    third = done_once.enqueue(1, 2)

    outcomes = [r.enqueue_outcome for r in (first, second, third)]
    assert outcomes == [EnqueueOutcome.CREATED, EnqueueOutcome.CREATED, EnqueueOutcome.EXISTING]
    assert third.id == second.id  # the newest of the key's jobs


def test_unique__the_scope_is_the_task_and_the_tenant(alias: str) -> None:
    a = tasks.add.using(backend=alias, unique_key="k", tenant="a").enqueue(1, 2)
    b = tasks.add.using(backend=alias, unique_key="k", tenant="b").enqueue(1, 2)
    c = tasks.noop.using(backend=alias, unique_key="k", tenant="a").enqueue()

    assert len({a.id, b.id, c.id}) == 3


def test_unique__a_rolled_back_enqueue_leaves_the_key_free(alias: str) -> None:
    with pytest.raises(ZeroDivisionError), transaction.atomic(using=alias):
        tasks.add.using(backend=alias, unique_key="k").enqueue(1, 2)
        1 / 0  # noqa: B018

    result = tasks.add.using(backend=alias, unique_key="k").enqueue(1, 2)

    assert (result.enqueue_outcome, len(jobs(alias))) == (EnqueueOutcome.CREATED, 1)


@pytest.mark.postgres
def test_unique__an_idempotency_keys_job_is_reported_existing_too(pg: None) -> None:
    tasks.add.using(idempotency_key="order-1").enqueue(1, 2)

    again = tasks.add.using(idempotency_key="order-1").enqueue(1, 2)

    assert again.enqueue_outcome == EnqueueOutcome.EXISTING


@pytest.mark.postgres
@pytest.mark.django_db(databases=["default", "sqlite"], transaction=True)
def test_unique__jobs_in_another_database_are_decided_again_at_the_deferred_insert() -> None:
    with transaction.atomic():  # on default: the sqlite backend's inserts wait for its commit
        first = tasks.add.using(backend="sqlite", unique_key="k").enqueue(1, 2)
        second = tasks.add.using(backend="sqlite", unique_key="k").enqueue(3, 4)

    assert [r.enqueue_outcome for r in (first, second)] == [EnqueueOutcome.CREATED] * 2
    assert [(str(j.id), j.args) for j in jobs("sqlite")] == [(first.id, [1, 2])]


@pytest.mark.postgres
@pytest.mark.django_db(databases=["default", "sqlite"], transaction=True)
def test_unique__a_deferred_insert_announces_only_the_job_it_wrote() -> None:
    # The atomic() is on default: the sqlite backend's inserts wait for its commit.
    with results_sent(task_enqueued) as sent, transaction.atomic():
        first = tasks.add.using(backend="sqlite", unique_key="k").enqueue(1, 2)
        tasks.add.using(backend="sqlite", unique_key="k").enqueue(3, 4)

    assert len(sent) == 1
    assert (sent[0] is first, first.id) == (True, str(jobs("sqlite")[0].id))


@pytest.mark.postgres
@pytest.mark.django_db(databases=["default", "sqlite"], transaction=True)
def test_debounce__a_deferred_call_whose_job_started_meanwhile_announces_its_new_job() -> None:
    debounced = tasks.add.using(backend="sqlite", unique_key="k", debounce=HOUR)
    first = debounced.enqueue(1, 2)

    # The atomic() is on default: the sqlite backend's insert waits for its commit,
    # and the first job starts before it.
    with results_sent(task_enqueued) as sent, transaction.atomic():
        predicted = debounced.enqueue(3, 4)
        drain(backend="sqlite", with_scheduled=True)

    written = jobs("sqlite")[-1]
    assert (predicted.enqueue_outcome, predicted.id) == (EnqueueOutcome.DEBOUNCED, first.id)
    assert [(r.id, r.args, r.enqueue_outcome) for r in sent] == [
        (str(written.id), [3, 4], EnqueueOutcome.CREATED)
    ]
    assert written.id != uuid.UUID(first.id)


# -- debounce -----------------------------------------------------------------------


def test_debounce__a_new_key_enqueues_a_job_that_waits_the_debounce(alias: str) -> None:
    before = timezone.now()

    result = tasks.add.using(backend=alias, unique_key="k", debounce=HOUR).enqueue(1, 2)

    assert result.enqueue_outcome == EnqueueOutcome.CREATED
    assert before + HOUR <= result.run_after <= timezone.now() + HOUR
    assert Job.objects.using(alias).get().run_after == result.run_after


def test_debounce__the_last_call_sets_the_arguments_and_pushes_the_start(alias: str) -> None:
    debounced = tasks.add.using(backend=alias, unique_key="k", debounce=HOUR)
    first = debounced.enqueue(1, 2)

    last = debounced.enqueue(5, b=6)

    job = Job.objects.using(alias).get()
    event = JobEvent.objects.using(alias).get()
    assert (last.enqueue_outcome, last.id, str(job.id)) == (
        EnqueueOutcome.DEBOUNCED,
        first.id,
        first.id,
    )
    assert (job.args, job.kwargs, job.run_after) == ([5], {"b": 6}, last.run_after)
    assert last.run_after > first.run_after
    assert (event.transition, event.from_state, event.to_state, event.actor) == (
        "debounce",
        JobState.QUEUED,
        JobState.QUEUED,
        "system",
    )
    assert event.note == (
        f"arguments replaced by a later call; runs after {job.run_after.isoformat()}"
    )


def test_debounce__a_job_that_started_keeps_its_arguments_and_a_new_job_takes_the_call(
    alias: str,
) -> None:
    debounced = tasks.add.using(backend=alias, unique_key="k", debounce=HOUR)
    first = debounced.enqueue(1, 2)
    drain(backend=alias, with_scheduled=True)

    second = debounced.enqueue(3, 4)

    assert second.enqueue_outcome == EnqueueOutcome.CREATED
    assert [(str(j.id), j.args, j.state) for j in jobs(alias)] == [
        (first.id, [1, 2], JobState.SUCCEEDED),
        (second.id, [3, 4], JobState.QUEUED),
    ]


def test_debounce__a_job_claimed_ahead_and_given_back_unstarted_still_takes_the_call(
    alias: str,
) -> None:
    first = tasks.add.using(backend=alias, unique_key="k", debounce=MOMENT).enqueue(1, 2)
    time.sleep(MOMENT.total_seconds() * 2)  # due
    engine, me = jobs_backend(alias).engine, WorkerIdentity(uuid.uuid4(), "test")
    (ahead,) = engine.claim(me, ["default"], 0, 1)
    engine.finish(me.id, [given_back((ahead.job_id, ahead.token), ahead.attempt_id, "waited")])

    second = tasks.add.using(backend=alias, unique_key="k", debounce=HOUR).enqueue(5, 6)

    assert (second.enqueue_outcome, second.id) == (EnqueueOutcome.DEBOUNCED, first.id)
    assert [(str(j.id), j.args, j.state) for j in jobs(alias)] == [
        (first.id, [5, 6], JobState.QUEUED)
    ]


# -- validation ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"unique_key": ""}, "unique_key must not be empty"),
        ({"unique_key": "k" * 256}, "unique_key is 256 characters long; at most 255 fit"),
        ({"unique_key": "k", "unique_for": dt.timedelta(0)}, "unique_for must be a positive"),
        ({"unique_key": "k", "unique_for": -HOUR}, "unique_for must be a positive"),
        ({"unique_key": "k", "unique_for": 60}, "unique_for must be a timedelta, not int"),
        ({"unique_key": "k", "debounce": dt.timedelta(0)}, "debounce must be a positive"),
        (
            {"unique_key": "k", "unique_for": dt.timedelta(days=999_999_999)},
            "unique_for must be at most a hundred years",
        ),
        (
            {"unique_key": "k", "debounce": dt.timedelta(days=36_501)},
            "debounce must be at most a hundred years",
        ),
        ({"unique_key": "k", "unique_states": ["done"]}, "'done' is not a job state"),
        ({"unique_key": "k", "unique_states": "queued"}, "collection of job states"),
        ({"unique_key": "k", "unique_states": []}, "no job would ever match"),
        ({"unique_for": HOUR}, "unique_for needs a unique_key"),
        ({"unique_states": ["queued"]}, "unique_states needs a unique_key"),
        ({"debounce": HOUR}, "debounce needs a unique_key"),
        ({"unique_key": "k", "debounce": HOUR, "unique_for": HOUR}, "cannot be combined"),
        (
            {"unique_key": "k", "debounce": HOUR, "run_after": timezone.now()},
            "debounce sets run_after",
        ),
    ],
)
def test_unique__options_are_refused_with_what_is_wrong(
    options: dict[str, Any], message: str
) -> None:
    with pytest.raises(InvalidJobOptionError, match=message):
        tasks.add.using(**options)


@pytest.mark.postgres
def test_unique__enqueue_many_refuses_a_unique_key(pg: None) -> None:
    with pytest.raises(InvalidJobOptionError, match="does not take a unique key"):
        enqueue_many(tasks.add.using(unique_key="k"), [((1, 2), {})])
    assert Job.objects.count() == 0


# -- races across processes ----------------------------------------------------------

CALLS = 50
PROCESSES = 4
_context = multiprocessing.get_context("fork")


def _race(barrier: Any, alias: str, options: dict[str, Any]) -> Any:
    def run(results: Any) -> None:
        connections.close_all()
        barrier.wait()
        me = multiprocessing.current_process().pid
        task = tasks.add.using(backend=alias, unique_key="race", **options)
        got = [task.enqueue(me, n) for n in range(CALLS)]
        results.put([(r.id, r.args, r.run_after, r.enqueue_outcome) for r in got])
        connections.close_all()

    return run


def test_unique__processes_racing_with_one_key_make_exactly_one_job(alias: str) -> None:
    barrier = _context.Barrier(PROCESSES)

    calls = [c for out in run_in_processes(_race(barrier, alias, {}), PROCESSES) for c in out]

    created = [c for c in calls if c[3] == EnqueueOutcome.CREATED]
    assert (len(created), {c[0] for c in calls}) == (1, {created[0][0]})
    assert [str(j.id) for j in jobs(alias)] == [created[0][0]]


def test_debounce__processes_racing_leave_one_job_with_the_last_calls_arguments(
    alias: str,
) -> None:
    barrier = _context.Barrier(PROCESSES)
    options = {"debounce": HOUR}

    calls = [c for out in run_in_processes(_race(barrier, alias, options), PROCESSES) for c in out]

    job = Job.objects.using(alias).get()
    last = max(calls, key=lambda c: c[2])
    assert (job.args, job.run_after) == (last[1], last[2])
    assert {c[0] for c in calls} == {str(job.id)}
    assert JobEvent.objects.using(alias).filter(transition="debounce").count() == len(calls) - 1


# -- the example of docs/unique.md ---------------------------------------------------


def test_docs__the_unique_page_shows_its_example_verbatim() -> None:
    page = (ROOT / "docs" / "unique.md").read_text()

    assert f"```python\n{EXAMPLE.read_text()}```" in page


@pytest.mark.postgres
def test_docs__the_example_syncs_once_and_reindexes_once_with_the_last_title(
    pg: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(EXAMPLE.parent))
    import search_index  # type: ignore[import-not-found]

    clicks = [search_index.sync_now_clicked(7) for _ in range(3)]
    for title in ("Draft", "Draft, fixed", "Final"):
        search_index.document_saved(1, title)
    done = drain(with_scheduled=True)

    assert clicks == ["sync started", *["a sync is already on its way (queued)"] * 2]
    assert sorted(r.return_value for r in done.results) == [
        "indexed document 1: Final",
        "synced account 7",
    ]
    assert search_index.sync_now_clicked(7) == "a sync is already on its way (succeeded)"
