"""The dashboard's charts: per-minute numbers of the last hour, and the JSON that carries them.

The aggregation runs on both databases against the same known rows, with a
fixed ``now``, and must give the same exact series; the endpoint answers only
to who may see the dashboard, and names what is wrong with a query.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.db import connections
from django.test import Client
from django.test.utils import CaptureQueriesContext

from django_jobs.models import Attempt, Job
from django_jobs.states import AttemptOutcome, JobState
from django_jobs.timeseries import MINUTES, percentile_bucket, timeseries

NOW = datetime(2026, 3, 2, 12, 30, 30, tzinfo=UTC)
# The first minute of the window: 59 minutes before the current one.
START = datetime(2026, 3, 2, 11, 31, tzinfo=UTC)


def at(minute: int, second: int = 0, milliseconds: int = 0) -> datetime:
    """A moment in minute ``minute`` of the window (0 is the oldest, 59 the current)."""
    return START + timedelta(minutes=minute, seconds=second, milliseconds=milliseconds)


def series(values: dict[int, Any], empty: Any = 0) -> list[Any]:
    return [values.get(i, empty) for i in range(MINUTES)]


def waiting(*spans: Iterable[int]) -> list[int]:
    """Depth from the minutes each wait was open at: one per wait per minute."""
    depth = [0] * MINUTES
    for span in spans:
        for i in span:
            depth[i] += 1
    return depth


class Rows:
    def __init__(self, alias: str) -> None:
        self.alias = alias

    def job(self, state: JobState, *, run_after: datetime, **fields: Any) -> Job:
        values: dict[str, Any] = {
            "task_name": "tests.testapp.tasks.add",
            "queue": "default",
            "run_after": run_after,
            "state": state,
            "max_attempts": 3,
            "enqueued_at": run_after,
            "updated_at": NOW,
            **fields,
        }
        return Job.objects.using(self.alias).create(**values)

    def attempt(
        self,
        job: Job,
        number: int,
        started: datetime,
        finished: datetime | None = None,
        outcome: AttemptOutcome = AttemptOutcome.SUCCEEDED,
    ) -> Attempt:
        attempt = Attempt.objects.using(self.alias).create(
            job=job,
            number=number,
            started_at=started,
            finished_at=finished,
            outcome=AttemptOutcome.RUNNING if finished is None else outcome,
        )
        if finished is None:
            Job.objects.using(self.alias).filter(id=job.id).update(
                leased_by=uuid.uuid4(), leased_at=started
            )
        return attempt


@pytest.fixture
def rows(alias: str) -> Rows:
    """Rows on each database in turn (``alias``, tests/conftest.py)."""
    return Rows(alias)


def an_hour_of_work(rows: Rows) -> None:
    """Each job a case the charts must count; the comment says where it lands."""
    S, F = JobState, AttemptOutcome
    # Succeeded at once: latency 20 s in minute 10, ended in minute 11.
    quick = rows.job(S.SUCCEEDED, run_after=at(10), attempts=1, finished_at=at(11, 5))
    rows.attempt(quick, 1, at(10, 20), at(11, 5))
    # Two more claims in minute 10 (5 s and 60 s late): its percentiles are 20, 60, 60,
    # reported as their buckets' upper bounds: 20, 100, 100.
    fast = rows.job(S.SUCCEEDED, run_after=at(10, 10), attempts=1, finished_at=at(10, 50))
    rows.attempt(fast, 1, at(10, 15), at(10, 50))
    slow = rows.job(S.SUCCEEDED, run_after=at(9, 20), attempts=1, finished_at=at(12))
    rows.attempt(slow, 1, at(10, 20), at(12))
    # Failed in minute 22, retried, due at 25, claimed at 27 (120 s) and succeeded.
    # Its first wait's due time was overwritten: counted from enqueued_at (minute 20).
    again = rows.job(
        S.SUCCEEDED, run_after=at(25), enqueued_at=at(20), attempts=2, finished_at=at(27, 10)
    )
    rows.attempt(again, 1, at(22), at(22, 30), F.FAILED)
    rows.attempt(again, 2, at(27), at(27, 10))
    # Out of attempts: failed for good in minute 30, 30 s late.
    spent = rows.job(
        S.EXHAUSTED, run_after=at(29, 30), attempts=1, max_attempts=1, finished_at=at(30, 40)
    )
    rows.attempt(spent, 1, at(30), at(30, 40), F.TIMED_OUT)
    # Waiting since before the window, and since minute 50; one scheduled for later.
    rows.job(S.QUEUED, run_after=START - timedelta(minutes=5))
    rows.job(S.QUEUED, run_after=at(50, 10))
    rows.job(S.QUEUED, run_after=NOW + timedelta(hours=1))
    # Running since minute 55, due at 40: 900 s.
    busy = rows.job(S.RUNNING, run_after=at(40), attempts=1)
    rows.attempt(busy, 1, at(55))
    # Left the queue unclaimed: cancelled in minute 8, expired in minute 3.
    rows.job(S.CANCELLED, run_after=at(5), finished_at=at(8))
    rows.job(S.EXPIRED, run_after=START - timedelta(minutes=10), finished_at=at(3))
    # Cancelled while it waited on another job: it never waited in the queue.
    rows.job(S.CANCELLED, run_after=START - timedelta(minutes=1), waiting_on=1, finished_at=at(9))
    # Lost in minute 46 and requeued (due again at once); enqueued at 44.
    lost = rows.job(S.QUEUED, run_after=at(46), enqueued_at=at(44), attempts=1)
    rows.attempt(lost, 1, at(45), at(46), F.LOST)
    # Cancelled while running: claimed at 35 (60 s), ended at 36.
    stopped = rows.job(S.CANCELLED, run_after=at(34), attempts=1, finished_at=at(36))
    rows.attempt(stopped, 1, at(35), at(36), F.CANCELLED)
    # Two hours ago: outside every series.
    old = rows.job(
        S.FAILED,
        run_after=NOW - timedelta(hours=2),
        attempts=1,
        finished_at=NOW - timedelta(hours=2),
    )
    rows.attempt(old, 1, NOW - timedelta(hours=2), NOW - timedelta(hours=2), F.FAILED)
    # Another queue: counted unless the series are for "default" only.
    other = rows.job(S.SUCCEEDED, run_after=at(58), queue="other", attempts=1, finished_at=at(59))
    rows.attempt(other, 1, at(58, 10), at(59))


def test_timeseries__counts_each_minute_of_the_last_hour_exactly(rows: Rows) -> None:
    an_hour_of_work(rows)

    found = timeseries(Job.objects.using(rows.alias), NOW, queue="default")

    assert found.minutes[0] == START
    assert found.minutes[-1] == datetime(2026, 3, 2, 12, 30, tzinfo=UTC)
    assert found.throughput == {
        "succeeded": series({10: 1, 11: 1, 12: 1, 27: 1}),
        "retried": series({22: 1, 46: 1}),
        "failed": series({30: 1}),
        "cancelled": series({36: 1}),
    }
    assert found.failed_jobs == series({3: 1, 30: 1})
    assert found.depth == waiting(
        range(0, 60),  # queued since before the window
        range(50, 60),  # queued since minute 50
        range(46, 60),  # lost, queued again
        range(44, 45),  # the lost one's first wait, from enqueued_at
        range(0, 3),  # expired
        range(5, 8),  # cancelled while queued
        range(9, 10),  # the 60 s claim
        range(20, 22),  # the retried one's first wait, from enqueued_at
        range(25, 27),  # ... and its second
        range(29, 30),  # exhausted
        range(34, 35),  # cancelled while running
        range(40, 55),  # running now
    )
    # Upper bounds of the buckets: 20 s lands in "≤ 20 s" (bounds are inclusive),
    # 60 s in "≤ 100 s", 120 s in "≤ 200 s", 30 s in "≤ 50 s", 900 s in "≤ 1000 s".
    assert found.latency == {
        "p50": series({10: 20.0, 27: 200.0, 30: 50.0, 35: 100.0, 55: 1000.0}, None),
        "p95": series({10: 100.0, 27: 200.0, 30: 50.0, 35: 100.0, 55: 1000.0}, None),
        "p99": series({10: 100.0, 27: 200.0, 30: 50.0, 35: 100.0, 55: 1000.0}, None),
    }
    assert found.claims == series({10: 3, 27: 1, 30: 1, 35: 1, 55: 1})


def test_timeseries__of_every_queue_includes_the_other_queues_work(rows: Rows) -> None:
    an_hour_of_work(rows)

    found = timeseries(Job.objects.using(rows.alias), NOW)

    assert found.throughput["succeeded"] == series({10: 1, 11: 1, 12: 1, 27: 1, 59: 1})
    assert found.claims == series({10: 3, 27: 1, 30: 1, 35: 1, 55: 1, 58: 1})


def test_timeseries__reports_claims_slower_than_an_hour_as_the_minutes_slowest(
    rows: Rows,
) -> None:
    quick = rows.job(JobState.SUCCEEDED, run_after=at(20), attempts=1, finished_at=at(20, 40))
    rows.attempt(quick, 1, at(20, 0, milliseconds=300), at(20, 40))
    for hours in (2, 3):
        late = rows.job(
            JobState.SUCCEEDED,
            run_after=at(20) - timedelta(hours=hours),
            attempts=1,
            finished_at=at(20, 40),
        )
        rows.attempt(late, 1, at(20, 30), at(20, 40))

    found = timeseries(Job.objects.using(rows.alias), NOW)

    # 0.3 s, 2 h 30 s and 3 h 30 s: the median is the second, past the last
    # bound (1 h), so all three read the slowest claim, 3 h 30 s.
    assert [found.latency[name][20] for name in ("p50", "p95", "p99")] == [10830.0] * 3
    assert found.claims[20] == 3


def a_busy_hour(rows: Rows, queue: str, copies: int) -> None:
    """``copies`` of each way a job meets the charts, in minutes 5, 25 and 45 of ``queue``."""
    S, F = JobState, AttemptOutcome
    for minute in (5, 25, 45):
        for _ in range(copies):
            done = rows.job(
                S.SUCCEEDED,
                run_after=at(minute),
                queue=queue,
                attempts=1,
                finished_at=at(minute, 9),
            )
            rows.attempt(done, 1, at(minute, 2), at(minute, 9))
            retried = rows.job(
                S.QUEUED,
                run_after=at(minute + 2),
                enqueued_at=at(minute - 1),
                queue=queue,
                attempts=1,
            )
            rows.attempt(retried, 1, at(minute, 1), at(minute + 1), F.FAILED)
            busy = rows.job(S.RUNNING, run_after=at(minute), queue=queue, attempts=1)
            rows.attempt(busy, 1, at(minute, 40))
            rows.job(S.CANCELLED, run_after=at(minute), queue=queue, finished_at=at(minute + 3))
            rows.job(S.QUEUED, run_after=at(minute, 30), queue=queue)


def rows_fetched(alias: str, read: Callable[[], object]) -> list[int]:
    """How many rows each query of ``read`` returned: its captured SQL, run again."""
    connection = connections[alias]
    with CaptureQueriesContext(connection) as captured:
        read()
    with connection.cursor() as cursor:
        sizes = []
        for query in captured.captured_queries:
            cursor.execute(query["sql"])
            sizes.append(len(cursor.fetchall()))
    return sizes


def test_timeseries__fetches_no_more_rows_for_ten_times_the_jobs(rows: Rows) -> None:
    a_busy_hour(rows, "default", copies=2)
    a_busy_hour(rows, "other", copies=20)
    jobs = Job.objects.using(rows.alias)

    fetched = {
        queue: rows_fetched(rows.alias, partial(timeseries, jobs, NOW, queue=queue))
        for queue in ("default", "other")
    }

    assert fetched["other"] == fetched["default"]


def test_percentile_bucket__is_the_nearest_rank_read_from_cumulative_counts() -> None:
    # 20 values: ranks 10, 19 and 20 fall in buckets 1, 2 and 3.
    counts = [4, 6, 9, 1]

    assert [percentile_bucket(counts, p) for p in (50, 95, 99)] == [1, 2, 3]


def test_percentile_bucket__refuses_an_empty_histogram() -> None:
    with pytest.raises(ValueError, match=r"No percentile of an empty histogram: \[0, 0\]\."):
        percentile_bucket([0, 0], 50)


URL = "/admin/django_jobs/job/dashboard/timeseries/"


def staff(*codenames: str) -> Client:
    user = User.objects.create_user(f"staff-{uuid.uuid4().hex[:6]}", is_staff=True)
    user.user_permissions.set(
        Permission.objects.filter(content_type__app_label="django_jobs", codename__in=codenames)
    )
    client = Client()
    client.force_login(user)
    return client


@pytest.mark.postgres
@pytest.mark.django_db
def test_timeseries_endpoint__sends_anonymous_visitors_to_the_login_page() -> None:
    response = Client().get(URL)

    assert (response.status_code, response["Location"]) == (302, f"/admin/login/?next={URL}")


@pytest.mark.postgres
@pytest.mark.django_db
def test_timeseries_endpoint__refuses_staff_who_may_not_view_jobs() -> None:
    response = staff("view_worker").get(URL)

    assert response.status_code == 403


@pytest.mark.postgres
@pytest.mark.django_db
def test_timeseries_endpoint__answers_whoever_may_see_the_dashboard() -> None:
    response = staff("view_job").get(URL)

    body = response.json()
    assert response.status_code == 200
    assert "no-store" in response["Cache-Control"]
    assert sorted(body) == [
        "claims",
        "depth",
        "failed_jobs",
        "latency",
        "minutes",
        "now",
        "throughput",
    ]
    assert [len(body["depth"]), len(body["latency"]["p99"])] == [MINUTES, MINUTES]


@pytest.mark.postgres
@pytest.mark.django_db
@pytest.mark.parametrize(
    ("query", "error"),
    [
        (
            "?queue=nope",
            "Unknown queue 'nope'; the configured queues are default, other.",
        ),
        ("?queues=default", "Unknown parameter queues; the only one is 'queue'."),
    ],
)
def test_timeseries_endpoint__names_what_is_wrong_with_a_query(query: str, error: str) -> None:
    response = staff("view_job").get(URL + query)

    assert (response.status_code, response.json()) == (400, {"error": error})
