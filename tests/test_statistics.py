"""The numbers operators read: one module counts them for the dashboard, the API and the CLI."""

from __future__ import annotations

import io
from datetime import timedelta
from typing import Any

import pytest
from django.core.management import call_command
from django.test import Client
from django.utils import timezone

from django_jobs import JobState
from django_jobs.models import Job

pytestmark = [pytest.mark.postgres, pytest.mark.urls("tests.all_urls")]


def make_job(state: JobState, **fields: Any) -> Job:
    """A job row in any state, written directly: test set-up, not a transition."""
    now = timezone.now()
    values: dict[str, Any] = {
        "task_name": "tests.testapp.tasks.add",
        "queue": "default",
        "run_after": now - timedelta(seconds=30),
        "state": state,
        "max_attempts": 3,
        "enqueued_at": now - timedelta(minutes=1),
        "updated_at": now,
        "dedup_scope": "tests.testapp.tasks.add|",
        **fields,
    }
    return Job.objects.create(**values)


def test_dashboard_api_and_cli__count_the_same_rows_the_same_way(admin_client: Client) -> None:
    now = timezone.now()
    recently, long_ago = now - timedelta(minutes=10), now - timedelta(hours=3)
    for state in (JobState.FAILED, JobState.EXHAUSTED, JobState.EXPIRED):
        make_job(state, finished_at=recently)
    make_job(JobState.FAILED, finished_at=long_ago)
    for _ in range(3):
        make_job(JobState.SUCCEEDED, finished_at=recently)
    make_job(JobState.QUEUED)
    make_job(JobState.QUEUED, run_after=now + timedelta(hours=1))
    make_job(JobState.RUNNING)

    row = next(
        q
        for q in admin_client.get("/admin/django_jobs/job/dashboard/").context["queues"]
        if q["name"] == "default"
    )
    dashboard = {
        "ready": row["due"],
        "scheduled": row["scheduled"],
        "succeeded_last_hour": row["succeeded"][1],
        "failed_last_hour": row["failures"][1],
    }
    api = next(q for q in admin_client.get("/api/jobs/queues/").json() if q["queue"] == "default")
    out = io.StringIO()
    call_command("jobs", "stats", stdout=out)
    lines = out.getvalue().splitlines()
    header = lines[0].split()
    cells = dict(
        zip(header, next(ln for ln in lines if ln.startswith("default")).split(), strict=True)
    )
    cli = {
        "ready": int(cells["QUEUED"]) - int(cells["SCHEDULED"]),
        "scheduled": int(cells["SCHEDULED"]),
        "succeeded_last_hour": int(cells["SUCCEEDED-1H"]),
        "failed_last_hour": int(cells["FAILED-1H"]),
    }

    expected = {"ready": 1, "scheduled": 1, "succeeded_last_hour": 3, "failed_last_hour": 3}
    assert dashboard == expected
    assert {key: api[key] for key in expected} == expected
    assert cli == expected
