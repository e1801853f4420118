"""The OpenAPI schema: the committed copy is current, and no request it allows makes a 5xx.

Regenerate ``docs/openapi.yaml`` after changing the API with::

    DJANGO_JOBS_WRITE_OPENAPI=1 .venv/bin/pytest tests/test_api_schema.py -k committed
"""

from __future__ import annotations

import base64
import os
from collections import Counter
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from django.contrib.auth.models import User
from django.core.wsgi import get_wsgi_application
from django.utils import timezone
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st
from schemathesis import GenerationMode

from django_jobs.api.schema import generate, render_yaml
from django_jobs.models import Attempt, Job, Worker
from django_jobs.states import AttemptOutcome, JobState

OPENAPI = Path(__file__).resolve().parent.parent / "docs" / "openapi.yaml"
URLCONF = "tests.api_urls"


@pytest.mark.urls(URLCONF)
def test_committed_schema__matches_the_generated_one() -> None:
    generated = render_yaml(generate(URLCONF))
    if os.environ.get("DJANGO_JOBS_WRITE_OPENAPI"):
        OPENAPI.write_text(generated)
    assert OPENAPI.read_text() == generated, (
        "docs/openapi.yaml is stale; regenerate it: "
        "DJANGO_JOBS_WRITE_OPENAPI=1 pytest tests/test_api_schema.py -k committed"
    )


def _jobs() -> list[Job]:
    """One job in each state, with an attempt and progress, so detail and verbs have work."""
    now = timezone.now()
    jobs = []
    for i, state in enumerate(JobState):
        job = Job.objects.create(
            task_name="tests.testapp.tasks.add",
            args=[1, 2],
            tenant="A",
            state=state,
            attempts=1,
            max_attempts=3,
            run_after=now - timedelta(seconds=i),
            enqueued_at=now - timedelta(minutes=i),
            updated_at=now,
            progress_done=1,
            progress_total=2,
        )
        Attempt.objects.create(
            job=job, number=1, outcome=AttemptOutcome.FAILED, started_at=now, error_type="E"
        )
        jobs.append(job)
    Worker.objects.create(
        host="h", pid=1, concurrency=1, queues=["default"], started_at=now, heartbeat_at=now
    )
    return jobs


@pytest.mark.postgres
@pytest.mark.urls(URLCONF)
def test_fuzz__no_request_the_schema_allows_or_breaks_makes_a_5xx(pg: None, settings: Any) -> None:
    # Real WSGI requests (committed data, real authentication), not the test
    # client: an operator with Basic auth, which DRF checks without CSRF.
    settings.ALLOWED_HOSTS = ["*"]
    User.objects.create_superuser("fuzz", password="fuzz")
    auth = {"Authorization": "Basic " + base64.b64encode(b"fuzz:fuzz").decode()}
    jobs = _jobs()

    schema = schemathesis.openapi.from_dict(generate(URLCONF))
    app = get_wsgi_application()
    cases = st.one_of(
        schema.as_strategy(GenerationMode.POSITIVE),
        schema.as_strategy(GenerationMode.NEGATIVE),
        # Random ids are all 404s; these reach the verbs and the detail view.
        *(schema.as_strategy(path_parameters={"id": str(job.id)}) for job in jobs[::3]),
        # Random queue names too; this one pauses and resumes a configured queue.
        schema.as_strategy(path_parameters={"name": "other"}),
    )

    seen: Counter[int] = Counter()

    @hypothesis_settings(
        max_examples=300,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(case=cases)
    def no_5xx(case: schemathesis.Case) -> None:
        response = case.call(app=app, headers=auth)
        seen[response.status_code] += 1
        assert response.status_code < 500, (
            f"{case.as_curl_command(headers=auth)}\n-> {response.status_code}\n"
            f"{response.text[:2000]}"
        )

    no_5xx()
    # A fuzz that only ever met 404s would prove nothing: it must have read,
    # refused bad input, and met the state machine.
    assert {200, 400, 404, 409} <= set(seen), seen
