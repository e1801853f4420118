"""The REST API: who sees and does what, filters and pages, the verbs, and bad input.

The authority matrix is the spec of the default policy: every (user, operation)
cell is one test case, and the table below reads as the documentation does.
"""

from __future__ import annotations

import base64
import uuid
from collections.abc import Callable, Iterable
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import urlencode

import pytest
from django.contrib.auth.models import AbstractBaseUser, Permission, User
from django.core.exceptions import ImproperlyConfigured
from django.utils import timezone
from rest_framework.test import APIClient

from django_jobs import control, framework
from django_jobs.api import conf
from django_jobs.api.permissions import Action, DefaultAuthority
from django_jobs.exceptions import NotAJobsBackendError
from django_jobs.models import (
    Attempt,
    Dependency,
    Job,
    JobEvent,
    QueueEvent,
    QueueState,
    Step,
    Worker,
)
from django_jobs.states import AttemptOutcome, JobState

pytestmark = [pytest.mark.postgres, pytest.mark.urls("tests.api_urls")]

URL = "/api/jobs/"
TENANTS = {"alice": ["A"], "bob": ["B"]}


def tenants_for_user(user: AbstractBaseUser) -> Iterable[str]:
    """The TENANTS_FOR_USER hook of these tests: alice acts for tenant A, bob for B."""
    return TENANTS.get(user.get_username(), [])


@pytest.fixture(autouse=True)
def api_settings(settings: Any) -> None:
    settings.DJANGO_JOBS_API = {"TENANTS_FOR_USER": "tests.test_api.tenants_for_user"}


def make_job(
    state: JobState = JobState.QUEUED,
    *,
    tenant: str = "A",
    queue: str = "default",
    task_name: str = "tests.testapp.tasks.add",
    priority: int = 0,
    enqueued_at: Any = None,
    finished_at: Any = None,
    run_after: Any = None,
    idempotency_key: str | None = None,
    **fields: Any,
) -> Job:
    """A job row in any state, written directly: test set-up, not a transition."""
    now = timezone.now()
    return Job.objects.create(
        task_name=task_name,
        args=[1, 2],
        queue=queue,
        priority=priority,
        tenant=tenant,
        run_after=run_after or now,
        state=state,
        max_attempts=3,
        enqueued_at=enqueued_at or now,
        finished_at=finished_at,
        updated_at=now,
        idempotency_key=idempotency_key,
        dedup_scope=f"{task_name}|{tenant}",
        **fields,
    )


def make_user(name: str, *, staff: bool = False, perms: Iterable[str] = ()) -> User:
    user = User.objects.create(username=name, is_staff=staff)
    for codename in perms:
        user.user_permissions.add(
            Permission.objects.get(content_type__app_label="django_jobs", codename=codename)
        )
    return user


def client_for(user: User | None) -> APIClient:
    client = APIClient()
    if user is not None:
        client.force_login(user)
    return client


@pytest.fixture
def operator(db: None) -> APIClient:
    """A staff user holding every django_jobs permission."""
    perms = ["view_job", "view_worker", "cancel_job", "retry_job", "quarantine_job"]
    perms += ["release_job", "discard_job", "run_now_job", "rerun_job", "pause_queue"]
    return client_for(make_user("op", staff=True, perms=perms))


# -- the authority matrix ---------------------------------------------------------

# What each verb needs the job to be, so that "allowed" means 200, not 409.
STATE_FOR = {
    "cancel": JobState.QUEUED,
    "retry": JobState.FAILED,
    "quarantine": JobState.FAILED,
    "release": JobState.QUARANTINED,
    "discard": JobState.FAILED,
}
VERBS = tuple(STATE_FOR)
OPERATIONS = ("list", "detail", *VERBS)

# Users: how to make them. The job under test is always in tenant A.
USERS: dict[str, Callable[[], User | None]] = {
    "anonymous": lambda: None,
    "tenant A user": lambda: make_user("alice"),
    "tenant B user": lambda: make_user("bob"),
    "user with every permission, not staff": lambda: make_user(
        "carol", perms=["view_job", *(f"{v}_job" for v in VERBS)]
    ),
    "staff, no permission": lambda: make_user("dave", staff=True),
    **{
        f"staff with {perm}": (lambda perm=perm: make_user("erin", staff=True, perms=[perm]))
        for perm in ("view_job", *(f"{v}_job" for v in VERBS))
    },
}

# list: "sees" / "hidden" (200 without the job) / a status; others: the status code.
# A job outside the user's scope is 404, never 403: its existence does not leak.
_ = "hidden"
MATRIX: dict[str, tuple[object, ...]] = {
    #                                          list    detail cancel retry quar. release discard
    "anonymous":                              (403,    403,   403,   403,  403,  403,    403),
    "tenant A user":                          ("sees", 200,   200,   200,  200,  200,    200),
    "tenant B user":                          (_,      404,   404,   404,  404,  404,    404),
    "user with every permission, not staff":  (_,      404,   404,   404,  404,  404,    404),
    "staff, no permission":                   (_,      404,   404,   404,  404,  404,    404),
    "staff with view_job":                    ("sees", 200,   403,   403,  403,  403,    403),
    "staff with cancel_job":                  (_,      404,   200,   404,  404,  404,    404),
    "staff with retry_job":                   (_,      404,   404,   200,  404,  404,    404),
    "staff with quarantine_job":              (_,      404,   404,   404,  200,  404,    404),
    "staff with release_job":                 (_,      404,   404,   404,  404,  200,    404),
    "staff with discard_job":                 (_,      404,   404,   404,  404,  404,    200),
}  # fmt: skip


def test_matrix__covers_every_user_and_operation() -> None:
    assert set(MATRIX) == set(USERS)
    assert all(len(row) == len(OPERATIONS) for row in MATRIX.values())


@pytest.mark.parametrize("operation", OPERATIONS)
@pytest.mark.parametrize("who", list(MATRIX))
def test_authority_matrix(db: None, who: str, operation: str) -> None:
    expected = MATRIX[who][OPERATIONS.index(operation)]
    job = make_job(STATE_FOR.get(operation, JobState.FAILED), tenant="A")
    client = client_for(USERS[who]())

    if operation == "list":
        response = client.get(URL)
        if expected in ("sees", "hidden"):
            assert response.status_code == 200, response.content
            ids = {row["id"] for row in response.json()["results"]}
            assert (str(job.id) in ids) == (expected == "sees")
        else:
            assert response.status_code == expected
        return
    if operation == "detail":
        response = client.get(f"{URL}{job.id}/")
    else:
        response = client.post(f"{URL}{job.id}/{operation}/", {"note": "matrix"}, format="json")
    assert response.status_code == expected, response.content
    job.refresh_from_db()
    if operation in VERBS:
        changed = job.state != STATE_FOR[operation]
        assert changed == (expected == 200), "only an allowed verb changes the job"


def test_authority__jobs_without_a_tenant_are_in_no_tenant_scope(db: None) -> None:
    job = make_job(tenant="")
    alice = client_for(make_user("alice"))
    assert alice.get(f"{URL}{job.id}/").status_code == 404


def test_authority__the_tenant_hook_must_return_names_not_one_string(
    db: None, settings: Any
) -> None:
    settings.DJANGO_JOBS_API = {"TENANTS_FOR_USER": "tests.test_api.one_string"}
    alice = client_for(make_user("alice"))
    with pytest.raises(TypeError, match="iterable of tenant names"):
        alice.get(URL)


def test_authority__a_tenant_hook_may_return_a_generator(db: None, settings: Any) -> None:
    settings.DJANGO_JOBS_API = {"TENANTS_FOR_USER": "tests.test_api.tenants_generated"}
    job = make_job(tenant="A")
    alice = client_for(make_user("alice"))

    assert alice.get(f"{URL}{job.id}/").status_code == 200


def tenants_generated(user: AbstractBaseUser) -> Iterable[str]:
    return (tenant for tenant in TENANTS.get(user.get_username(), []))


def one_string(user: AbstractBaseUser) -> str:
    return "A"


class OperatorsOnlyCancel(DefaultAuthority):
    tenant_actions = frozenset({Action.VIEW, "cancel"})


def test_authority__a_subclass_narrows_what_tenants_may_do(db: None, settings: Any) -> None:
    settings.DJANGO_JOBS_API = {
        "TENANTS_FOR_USER": "tests.test_api.tenants_for_user",
        "AUTHORITY_POLICY": "tests.test_api.OperatorsOnlyCancel",
    }
    job = make_job(JobState.FAILED)
    alice = client_for(make_user("alice"))
    assert alice.get(f"{URL}{job.id}/").status_code == 200
    # Visible, so refusing says nothing new: 403, not 404.
    response = alice.post(f"{URL}{job.id}/discard/", {"note": "no"}, format="json")
    assert response.status_code == 403


def test_workers__only_staff_with_view_worker(db: None) -> None:
    assert client_for(None).get(f"{URL}workers/").status_code == 403
    assert client_for(make_user("alice")).get(f"{URL}workers/").status_code == 403
    assert client_for(make_user("dave", staff=True)).get(f"{URL}workers/").status_code == 403
    staff = client_for(make_user("erin", staff=True, perms=["view_worker"]))
    assert staff.get(f"{URL}workers/").status_code == 200


# -- the verbs ----------------------------------------------------------------------


def test_verb__records_the_user_and_note_in_the_audit_trail(operator: APIClient) -> None:
    job = make_job(JobState.FAILED)
    response = operator.post(f"{URL}{job.id}/quarantine/", {"note": "poison input"}, format="json")
    assert response.status_code == 200, response.content
    assert response.json() == {
        "id": str(job.id),
        "verb": "quarantine",
        "transition": "quarantine",
        "state": "quarantined",
        "status": "FAILED",
        "rerun": None,
    }
    event = JobEvent.objects.get(job=job)
    assert (event.actor, event.note, event.from_state, event.to_state) == (
        "op",
        "poison input",
        "failed",
        "quarantined",
    )


def test_verb__cancel_of_a_running_job_asks_it_to_stop(operator: APIClient) -> None:
    job = make_job(JobState.RUNNING, attempts=1)
    response = operator.post(f"{URL}{job.id}/cancel/")
    assert response.status_code == 200
    assert response.json()["transition"] == "request_cancel"
    assert response.json()["state"] == "cancelling"


@pytest.mark.parametrize(
    ("verb", "state"),
    [
        ("cancel", JobState.SUCCEEDED),
        ("retry", JobState.QUEUED),
        ("release", JobState.FAILED),
        ("quarantine", JobState.RUNNING),
        ("discard", JobState.SUCCEEDED),
    ],
)
def test_verb__an_invalid_transition_is_409_and_changes_nothing(
    operator: APIClient, verb: str, state: JobState
) -> None:
    job = make_job(state)
    response = operator.post(f"{URL}{job.id}/{verb}/", {"note": "why"}, format="json")
    assert response.status_code == 409
    assert f"it is {state}" in response.json()["detail"]
    job.refresh_from_db()
    assert job.state == state
    assert not JobEvent.objects.filter(job=job).exists()


@pytest.mark.parametrize("verb", ["quarantine", "discard"])
@pytest.mark.parametrize("body", [{}, {"note": ""}, {"note": "   "}])
def test_verb__quarantine_and_discard_need_a_note(
    operator: APIClient, verb: str, body: dict[str, str]
) -> None:
    job = make_job(JobState.FAILED)
    response = operator.post(f"{URL}{job.id}/{verb}/", body, format="json")
    assert response.status_code == 400
    assert "note" in response.json()
    job.refresh_from_db()
    assert job.state == JobState.FAILED


@pytest.mark.parametrize("verb", ["retry", "discard"])  # the note optional, and required
@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"note": 5 * "x" * 1000}, "note"),
        ({"note": "a\x00b"}, "note"),
        ({"note": 5}, "note"),
        ({"note": ["why"]}, "note"),
        (["x"], "non_field_errors"),
    ],
)
def test_verb__a_malformed_body_is_400_naming_the_field_and_changes_nothing(
    operator: APIClient, verb: str, body: Any, field: str
) -> None:
    job = make_job(JobState.FAILED)
    response = operator.post(f"{URL}{job.id}/{verb}/", body, format="json")
    assert response.status_code == 400
    assert list(response.json()) == [field]
    job.refresh_from_db()
    assert job.state == JobState.FAILED
    assert not JobEvent.objects.filter(job=job).exists()


def test_verb__unknown_job_is_404(operator: APIClient) -> None:
    assert operator.post(f"{URL}{uuid.uuid4()}/cancel/").status_code == 404
    assert operator.post(f"{URL}not-a-uuid/cancel/").status_code == 404


# -- reading ----------------------------------------------------------------------------


def test_detail__shows_attempts_progress_errors_and_django_names(operator: APIClient) -> None:
    now = timezone.now()
    job = make_job(
        JobState.SUCCEEDED,
        attempts=2,
        result={"total": 3},
        progress_done=5,
        progress_total=10,
        progress_message="half",
        progress_attempt=2,
        progress_at=now,
        started_at=now,
        finished_at=now,
    )
    worker = uuid.uuid4()
    Attempt.objects.create(
        job=job,
        number=1,
        worker_id=worker,
        outcome=AttemptOutcome.LOST,
        started_at=now - timedelta(seconds=30),
        finished_at=now - timedelta(seconds=20),
        error_type="django_jobs.LeaseLost",
        error_message="lease expired",
    )
    Attempt.objects.create(
        job=job, number=2, worker_id=worker, outcome=AttemptOutcome.SUCCEEDED, started_at=now
    )
    body = operator.get(f"{URL}{job.id}/").json()
    assert body["status"] == "SUCCESSFUL"
    assert body["state"] == "succeeded"
    assert body["return_value"] == {"total": 3}
    assert body["errors"] == [
        {"exception_class_path": "django_jobs.LeaseLost", "traceback": "lease expired"}
    ]
    assert [a["number"] for a in body["attempt_log"]] == [1, 2]
    assert body["attempt_log"][0]["outcome"] == "lost"
    assert body["attempt_log"][0]["duration"] == 10.0
    assert body["worker_ids"] == [str(worker), str(worker)]
    assert body["progress"] == {
        "done": 5,
        "total": 10,
        "message": "half",
        "attempt": 2,
        "at": body["progress"]["at"],
        "fraction": 0.5,
    }
    for name in ("enqueued_at", "started_at", "finished_at", "last_attempted_at"):
        assert body[name] is not None


def test_detail__lists_the_steps_in_the_order_they_were_recorded(operator: APIClient) -> None:
    job = make_job(JobState.QUEUED, attempts=2)
    now = timezone.now()
    Step.objects.create(job=job, name="charge", attempt=1, result={"id": "ch_1"}, recorded_at=now)
    Step.objects.create(
        job=job,
        name="sleep-1",
        attempt=2,
        result={"$datetime": "2030-01-01T00:00:00+00:00"},
        recorded_at=now,
    )

    body = operator.get(f"{URL}{job.id}/").json()

    assert [(s["name"], s["attempt"], s["result"]) for s in body["steps"]] == [
        ("charge", 1, {"id": "ch_1"}),
        ("sleep-1", 2, {"$datetime": "2030-01-01T00:00:00+00:00"}),
    ]
    assert body["steps"][0]["recorded_at"] is not None


def test_detail__return_value_is_null_unless_the_job_succeeded(operator: APIClient) -> None:
    job = make_job(JobState.FAILED, result={"partial": True})
    body = operator.get(f"{URL}{job.id}/").json()
    assert body["return_value"] is None
    assert body["status"] == "FAILED"
    assert body["progress"] is None


def test_detail__a_waiting_job_shows_what_it_waits_for(operator: APIClient) -> None:
    first, second = make_job(JobState.SUCCEEDED), make_job(JobState.EXHAUSTED)
    waiting = make_job(JobState.WAITING, waiting_on=1)
    Dependency.objects.create(job=waiting, depends_on=first)
    Dependency.objects.create(job=waiting, depends_on=second)

    body = operator.get(f"{URL}{waiting.id}/").json()

    assert (body["state"], body["status"], body["waiting_on"], body["waits_for"]) == (
        "waiting",
        "READY",
        1,
        [str(first.id), str(second.id)],
    )


def test_detail__list_filters_do_not_apply_to_a_job_url(operator: APIClient) -> None:
    job = make_job(JobState.FAILED)
    assert operator.get(f"{URL}{job.id}/", {"state": "queued"}).status_code == 200


def ids(response: Any) -> set[str]:
    assert response.status_code == 200, response.content
    return {row["id"] for row in response.json()["results"]}


def test_list__filters(operator: APIClient) -> None:
    now = timezone.now()
    old = make_job(
        JobState.FAILED,
        queue="other",
        tenant="B",
        enqueued_at=now - timedelta(days=2),
        finished_at=now - timedelta(days=1),
        idempotency_key="order-7",
        task_name="tests.testapp.tasks.noop",
    )
    new = make_job(JobState.QUEUED, unique_key="sync:7")
    running = make_job(JobState.RUNNING)
    day_ago = (now - timedelta(days=1, hours=1)).isoformat()
    assert ids(operator.get(URL, {"state": "failed"})) == {str(old.id)}
    assert ids(operator.get(f"{URL}?state=failed&state=running")) == {str(old.id), str(running.id)}
    assert ids(operator.get(URL, {"status": "READY"})) == {str(new.id)}
    assert ids(operator.get(URL, {"status": "RUNNING"})) == {str(running.id)}
    assert ids(operator.get(URL, {"queue": "other"})) == {str(old.id)}
    assert ids(operator.get(URL, {"task": "tests.testapp.tasks.noop"})) == {str(old.id)}
    assert ids(operator.get(URL, {"tenant": "B"})) == {str(old.id)}
    assert ids(operator.get(URL, {"idempotency_key": "order-7"})) == {str(old.id)}
    assert ids(operator.get(URL, {"unique_key": "sync:7"})) == {str(new.id)}
    assert ids(operator.get(URL, {"enqueued_before": day_ago})) == {str(old.id)}
    assert ids(operator.get(URL, {"enqueued_after": day_ago})) == {str(new.id), str(running.id)}
    assert ids(operator.get(URL, {"finished_after": (now - timedelta(days=3)).isoformat()})) == {
        str(old.id)
    }
    assert ids(operator.get(URL, {"finished_before": day_ago})) == set()


def test_list__filters_apply_within_the_users_scope(db: None) -> None:
    make_job(tenant="A")
    b = make_job(tenant="B")
    bob = client_for(make_user("bob"))
    assert ids(bob.get(URL)) == {str(b.id)}
    assert ids(bob.get(URL, {"tenant": "A"})) == set()


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ({"stat": "failed"}, "stat"),
        ({"tenat": "A"}, "tenat"),
        ({"state": "bogus"}, "state"),
        ({"status": "failed"}, "status"),
        ({"enqueued_after": "yesterday"}, "enqueued_after"),
        ({"finished_before": "2026-13-01"}, "finished_before"),
        ({"tenant": "a\x00b"}, "tenant"),
        ({"ordering": "tenant"}, "ordering"),
        ({"ordering": "-enqueued_at,priority"}, "ordering"),
        ({"page_size": "0"}, "page_size"),
        ({"page_size": "ten"}, "page_size"),
        ({"cursor": "garbage!"}, "cursor"),
        ({"cursor": base64.b64encode(b"p=not-a-date").decode()}, "cursor"),
        ({"cursor": base64.b64encode(b"p=\x00").decode()}, "cursor"),
        ({"cursor": base64.b64encode(b"p=9999-12-31 23:59:59-05:00").decode()}, "cursor"),
        ({"enqueued_after": "0001-01-01T00:00:00+01:00"}, "enqueued_after"),
    ],
)
def test_list__bad_input_is_400_naming_the_parameter(
    operator: APIClient, query: dict[str, str], field: str
) -> None:
    make_job()
    response = operator.get(URL, query)
    assert response.status_code == 400, response.content
    assert field in response.json()


def test_list__a_cursor_with_an_offset_postgresql_refuses_still_pages(
    operator: APIClient,
) -> None:
    job = make_job(enqueued_at=timezone.now() - timedelta(days=1))
    position = urlencode({"p": "2100-01-01 00:00:00+16:00"})  # beyond PG's +-15:59
    cursor = base64.b64encode(position.encode()).decode()
    assert ids(operator.get(URL, {"cursor": cursor})) == {str(job.id)}
    assert ids(operator.get(URL, {"enqueued_before": "2100-01-01T00:00:00+16:00"})) == {str(job.id)}


def test_list__cursor_pages_through_every_job_once_in_order(operator: APIClient) -> None:
    start = timezone.now() - timedelta(hours=1)
    made = [make_job(enqueued_at=start + timedelta(minutes=i)) for i in range(7)]
    seen: list[str] = []
    url: str | None = f"{URL}?page_size=3"
    pages = 0
    while url:
        body = operator.get(url).json()
        seen += [row["id"] for row in body["results"]]
        url = body["next"]
        pages += 1
    assert seen == [str(job.id) for job in reversed(made)]  # newest first by default
    assert pages == 3


def test_list__ordering_by_priority_pages_through_ties_without_repeats(
    operator: APIClient,
) -> None:
    made = [make_job(priority=p) for p in (5, 5, 5, 0, 0, 9)]
    seen: list[str] = []
    url: str | None = f"{URL}?page_size=2&ordering=-priority"
    while url:
        body = operator.get(url).json()
        seen += [row["id"] for row in body["results"]]
        url = body["next"]
    assert sorted(seen) == sorted(str(job.id) for job in made)
    priorities = {str(job.id): job.priority for job in made}
    assert [priorities[i] for i in seen] == [9, 5, 5, 5, 0, 0]


def test_list__a_page_size_above_the_cap_is_served_at_the_cap(
    operator: APIClient, settings: Any
) -> None:
    settings.DJANGO_JOBS_API = {"PAGE_SIZE": 1, "MAX_PAGE_SIZE": 2}
    for _ in range(3):
        make_job()
    assert len(operator.get(URL).json()["results"]) == 1
    assert len(operator.get(URL, {"page_size": 100}).json()["results"]) == 2


def test_queues__depth_by_state_and_the_oldest_ready_job(operator: APIClient) -> None:
    now = timezone.now()
    make_job(queue="default", run_after=now - timedelta(seconds=60))
    make_job(queue="default", run_after=now - timedelta(seconds=5))
    make_job(queue="default", run_after=now + timedelta(hours=1))
    make_job(JobState.FAILED, queue="default", finished_at=now)
    make_job(JobState.RUNNING, queue="reports")
    body = {row["queue"]: row for row in operator.get(f"{URL}queues/").json()}
    assert set(body) == {"default", "other", "reports"}  # configured queues, even empty
    default = body["default"]
    assert default["depth"]["queued"] == 3
    assert default["depth"]["failed"] == 1
    assert default["depth"]["succeeded"] == 0
    assert (default["ready"], default["scheduled"]) == (2, 1)
    assert 60 <= default["oldest_ready_age"] < 120
    assert body["other"]["oldest_ready_age"] is None
    assert body["reports"]["depth"]["running"] == 1
    assert (default["succeeded_last_hour"], default["failed_last_hour"]) == (0, 1)


def test_queues__count_only_the_jobs_the_user_may_see(db: None) -> None:
    make_job(tenant="A")
    make_job(tenant="B")
    make_job(tenant="B")
    bob = client_for(make_user("bob"))
    body = {row["queue"]: row for row in bob.get(f"{URL}queues/").json()}
    assert body["default"]["depth"]["queued"] == 2
    assert client_for(None).get(f"{URL}queues/").status_code == 403
    assert client_for(make_user("alice")).get(f"{URL}queues/", {"x": "1"}).status_code == 400


def test_queues__show_which_are_paused(operator: APIClient) -> None:
    control.pause_queue("other", actor="ops")
    body = {row["queue"]: row["paused"] for row in operator.get(f"{URL}queues/").json()}
    assert body == {"default": False, "other": True}


# -- pausing and resuming queues ---------------------------------------------------------


def queue_url(queue: str, verb: str) -> str:
    return f"{URL}queues/{queue}/{verb}/"


def test_queue_pause__then_resume_records_the_user_and_note(operator: APIClient) -> None:
    paused = operator.post(queue_url("other", "pause"), {"note": "provider down"}, format="json")
    resumed = operator.post(queue_url("other", "resume"))

    events = list(QueueEvent.objects.order_by("at", "id"))
    assert [(e.queue, e.action, e.actor, e.note) for e in events] == [
        ("other", "pause", "op", "provider down"),
        ("other", "resume", "op", ""),
    ]
    assert (paused.status_code, resumed.status_code) == (200, 200)
    bodies = [
        {**r.json(), "changed_at": datetime.fromisoformat(r.json()["changed_at"])}
        for r in (paused, resumed)
    ]
    shared = {"queue": "other", "changed": True, "changed_by": "op"}
    assert bodies == [
        {**shared, "paused": True, "changed_at": events[0].at, "note": "provider down"},
        {**shared, "paused": False, "changed_at": events[1].at, "note": ""},
    ]
    assert QueueState.objects.get(queue="other").paused is False


def test_queue_pause__of_a_paused_queue_changes_nothing(operator: APIClient) -> None:
    control.pause_queue("other", actor="ops", note="maintenance")

    response = operator.post(queue_url("other", "pause"), {"note": "again"}, format="json")

    assert response.status_code == 200
    event = QueueEvent.objects.get()  # the set-up's pause, and no other
    body = {**response.json(), "changed_at": datetime.fromisoformat(response.json()["changed_at"])}
    assert body == {
        "queue": "other",
        "paused": True,
        "changed": False,
        "changed_at": event.at,
        "changed_by": "ops",
        "note": "maintenance",
    }


@pytest.mark.parametrize("verb", ["pause", "resume"])
def test_queue_pause__an_unknown_queue_is_404_naming_the_queues(
    operator: APIClient, verb: str
) -> None:
    response = operator.post(queue_url("nope", verb), {"note": "x"}, format="json")

    assert response.status_code == 404
    assert response.json() == {"detail": "Unknown queue 'nope'; the queues are default, other."}
    assert not QueueState.objects.exists()
    assert not QueueEvent.objects.exists()


@pytest.mark.parametrize("name", ["x" * 101, "a%00b"])
def test_queue_pause__without_configured_queues_a_name_no_queue_can_have_is_404(
    operator: APIClient, settings: Any, name: str
) -> None:
    settings.TASKS = {**settings.TASKS, "default": {**settings.TASKS["default"], "QUEUES": []}}

    response = operator.post(queue_url(name, "pause"))

    assert response.status_code == 404
    assert "cannot be a queue" in response.json()["detail"]
    assert not QueueState.objects.exists()


# Who may pause: staff holding django_jobs.pause_queue, as in the admin. A queue
# serves every tenant, so a tenant scope never grants it, permission or not.
PAUSERS: dict[str, tuple[Callable[[], User | None], int]] = {
    "anonymous": (lambda: None, 403),
    "tenant A user": (lambda: make_user("alice"), 403),
    "tenant A user with pause_queue, not staff": (
        lambda: make_user("alice", perms=["pause_queue"]),
        403,
    ),
    "staff, no permission": (lambda: make_user("dave", staff=True), 403),
    "staff with every job permission": (
        lambda: make_user("erin", staff=True, perms=["view_job", *(f"{v}_job" for v in VERBS)]),
        403,
    ),
    "staff with pause_queue": (lambda: make_user("op", staff=True, perms=["pause_queue"]), 200),
}


@pytest.mark.parametrize("verb", ["pause", "resume"])
@pytest.mark.parametrize("who", list(PAUSERS))
def test_queue_pause__needs_staff_with_the_pause_queue_permission(
    db: None, who: str, verb: str
) -> None:
    make_user_or_none, expected = PAUSERS[who]
    if verb == "resume":
        control.pause_queue("other", actor="ops")
    client = client_for(make_user_or_none())

    response = client.post(queue_url("other", verb), {"note": "why"}, format="json")

    assert response.status_code == expected, response.content
    allowed = expected == 200
    paused_now = QueueState.objects.filter(queue="other", paused=True).exists()
    assert paused_now == ((verb == "pause") == allowed), "only an allowed call changes the queue"
    assert QueueEvent.objects.count() == (verb == "resume") + allowed
    if not allowed:
        assert list(response.json()) == ["detail"]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"note": 5}, "note"),
        ({"note": ["why"]}, "note"),
        ({"note": None}, "note"),
        ({"note": "x" * 2001}, "note"),
        ({"note": "a\x00b"}, "note"),
        (["why"], "non_field_errors"),
    ],
)
def test_queue_pause__a_malformed_note_is_400_naming_the_field(
    operator: APIClient, body: Any, field: str
) -> None:
    response = operator.post(queue_url("other", "pause"), body, format="json")

    assert response.status_code == 400
    assert list(response.json()) == [field]
    assert not QueueState.objects.exists()
    assert not QueueEvent.objects.exists()


def test_workers__list_who_is_alive(operator: APIClient) -> None:
    now = timezone.now()
    fields = {"host": "h", "concurrency": 4, "queues": ["default"]}
    live = Worker.objects.create(pid=1, started_at=now, heartbeat_at=now, **fields)
    stale = Worker.objects.create(
        pid=2, started_at=now - timedelta(hours=1), heartbeat_at=now - timedelta(hours=1), **fields
    )
    body = operator.get(f"{URL}workers/").json()
    rows = {row["id"]: row for row in body["results"]}
    assert [row["id"] for row in body["results"]] == [str(live.id), str(stale.id)]
    assert rows[str(live.id)]["alive"] is True
    assert rows[str(stale.id)]["alive"] is False
    assert rows[str(live.id)]["leases"] == 0
    assert operator.get(f"{URL}workers/", {"state": "x"}).status_code == 400


def test_browsable_api__renders_the_job_list_and_its_filter_form(operator: APIClient) -> None:
    """With the settings docs/api.md gives: rest_framework installed, django_filters not."""
    make_job(queue="emails")

    response = operator.get(URL, {"queue": "emails"}, HTTP_ACCEPT="text/html")

    assert response.status_code == 200
    assert response["Content-Type"] == "text/html; charset=utf-8"
    html = response.content.decode()
    assert "<h2>Field filters</h2>" in html
    assert 'name="queue" value="emails"' in html


def test_schema__is_served_at_the_documented_url(db: None) -> None:
    response = APIClient().get(f"{URL}schema/", {"format": "json"})
    assert response.status_code == 200
    schema = response.json()
    assert schema["openapi"].startswith("3.")
    assert f"{URL}{{id}}/cancel/" in schema["paths"]


# -- the setting ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({"AUTHORITY": "x"}, "unknown key"),
        ({"AUTHORITY_POLICY": "django_jobs.nope.Policy"}, "cannot be imported"),
        ({"AUTHORITY_POLICY": "django_jobs.models.Job"}, "subclass of"),
        ({"TENANTS_FOR_USER": "django_jobs.api.permissions.JOB_ACTIONS"}, "callable"),
        ({"BACKEND": "nope"}, r"^DJANGO_JOBS_API\['BACKEND'\]: TASKS has no backend 'nope'"),
        ({"BACKEND": 5}, r"^DJANGO_JOBS_API\['BACKEND'\] must be a TASKS alias, not 5\.$"),
        ({"PAGE_SIZE": 0}, "PAGE_SIZE"),
        ({"PAGE_SIZE": 10, "MAX_PAGE_SIZE": 5}, "must not exceed"),
        (["x"], "must be a dict"),
    ],
)
def test_setting__is_checked_strictly(value: Any, message: str) -> None:
    with pytest.raises(ImproperlyConfigured, match=message):
        conf.load(value)


def test_setting__a_backend_of_another_class_is_refused_naming_the_setting(
    settings: Any,
) -> None:
    settings.TASKS = {
        **settings.TASKS,
        "immediate": {"BACKEND": f"{framework.MODULE}.backends.immediate.ImmediateBackend"},
    }
    with pytest.raises(NotAJobsBackendError) as refused:
        conf.load({"BACKEND": "immediate"})

    assert str(refused.value) == (
        "DJANGO_JOBS_API['BACKEND']: TASKS['immediate'] uses "
        f"{framework.MODULE}.backends.immediate.ImmediateBackend, "
        "not django_jobs.backend.JobsBackend or a subclass of it."
    )


def test_setting__defaults_are_valid() -> None:
    loaded = conf.load(None)
    assert isinstance(loaded.authority, DefaultAuthority)
    assert list(loaded.tenants_for_user(object())) == []
    assert loaded.database == "default"


# -- run now, rerun, and a verb over a filter ---------------------------------------------


def test_run_now__makes_a_scheduled_job_due(operator: APIClient) -> None:
    job = make_job(run_after=timezone.now() + timedelta(hours=1))

    response = operator.post(f"{URL}{job.id}/run_now/", {}, format="json")

    assert response.status_code == 200
    assert (response.json()["transition"], response.json()["state"]) == ("run_now", "queued")
    assert Job.objects.get(id=job.id).run_after <= timezone.now()


def test_rerun__answers_with_the_new_job(operator: APIClient) -> None:
    job = make_job(JobState.SUCCEEDED, idempotency_key="k")

    response = operator.post(f"{URL}{job.id}/rerun/", {"note": "again"}, format="json")

    copy = Job.objects.get(rerun_of=job.id)
    assert response.status_code == 200
    assert response.json() == {
        "id": str(job.id),
        "verb": "rerun",
        "transition": "rerun",
        "state": "succeeded",
        "status": "SUCCESSFUL",
        "rerun": str(copy.id),
    }


def test_bulk__cancel_counts_the_running_jobs_it_only_asked_to_stop(operator: APIClient) -> None:
    queued = make_job(JobState.QUEUED, queue="mail")
    running = make_job(JobState.RUNNING, queue="mail")

    response = operator.post(f"{URL}bulk/cancel/?queue=mail", {"expected_count": 2}, format="json")

    assert response.status_code == 200
    assert {k: response.json()[k] for k in ("changed", "stopping", "skipped")} == {
        "changed": 2,
        "stopping": 1,
        "skipped": 0,
    }
    states = dict(Job.objects.values_list("id", "state"))
    assert (states[queued.id], states[running.id]) == ("cancelled", "cancelling")


def test_bulk__applies_the_verb_to_every_job_the_filter_matches(operator: APIClient) -> None:
    failed = [make_job(JobState.FAILED, queue="mail") for _ in range(3)]
    done = make_job(JobState.SUCCEEDED, queue="mail")
    elsewhere = make_job(JobState.FAILED, queue="default")

    response = operator.post(
        f"{URL}bulk/retry/?queue=mail", {"expected_count": 4, "note": "smtp back"}, format="json"
    )

    assert response.status_code == 200
    assert response.json() == {
        "verb": "retry",
        "matched": 4,
        "applicable": 3,
        "changed": 3,
        "stopping": 0,
        "skipped": 1,
        "reruns": {},
    }
    states = dict(Job.objects.values_list("id", "state"))
    assert [states[j.id] for j in failed] == ["queued"] * 3
    assert (states[done.id], states[elsewhere.id]) == ("succeeded", "failed")


@pytest.mark.parametrize("parameter", ["ordering=-priority", "cursor=cD0x", "page_size=10"])
def test_bulk__refuses_the_lists_ordering_and_pages_and_changes_nothing(
    operator: APIClient, parameter: str
) -> None:
    make_job(JobState.FAILED)

    response = operator.post(f"{URL}bulk/retry/?{parameter}", {"expected_count": 1}, format="json")

    assert (response.status_code, list(response.json())) == (400, [parameter.split("=")[0]])
    assert set(Job.objects.values_list("state", flat=True)) == {"failed"}


def test_bulk__refuses_a_count_the_filter_no_longer_matches_and_changes_nothing(
    operator: APIClient,
) -> None:
    for _ in range(3):
        make_job(JobState.FAILED, queue="mail")

    response = operator.post(f"{URL}bulk/retry/?queue=mail", {"expected_count": 2}, format="json")

    assert response.status_code == 409
    assert (response.json()["matched"], response.json()["expected"]) == (3, 2)
    assert "matches 3 jobs now, not the 2 confirmed" in response.json()["detail"]
    assert set(Job.objects.values_list("state", flat=True)) == {"failed"}


def test_bulk__needs_the_expected_count_and_a_known_filter(operator: APIClient) -> None:
    make_job(JobState.FAILED)

    missing = operator.post(f"{URL}bulk/retry/", {}, format="json")
    typo = operator.post(f"{URL}bulk/retry/?tenat=A", {"expected_count": 1}, format="json")

    assert (missing.status_code, list(missing.json())) == (400, ["expected_count"])
    assert (typo.status_code, list(typo.json())) == (400, ["tenat"])
    assert set(Job.objects.values_list("state", flat=True)) == {"failed"}


def test_bulk__a_tenant_user_acts_only_on_their_tenants_jobs(db: None) -> None:
    mine, theirs = make_job(JobState.FAILED, tenant="A"), make_job(JobState.FAILED, tenant="B")

    response = client_for(make_user("alice")).post(
        f"{URL}bulk/retry/?state=failed", {"expected_count": 1}, format="json"
    )

    assert (response.status_code, response.json()["changed"]) == (200, 1)
    states = dict(Job.objects.values_list("id", "state"))
    assert (states[mine.id], states[theirs.id]) == ("queued", "failed")
