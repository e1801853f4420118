"""The admin as a repair console: list, job page, the five verbs and their permissions,
the dashboard and the workers page, through Django's test client on PostgreSQL."""

from __future__ import annotations

import re
import uuid
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.contrib.messages import get_messages
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from django_jobs.admin import actions
from django_jobs.admin.pagination import EstimatedCountPaginator
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
from django_jobs.states import TRANSITIONS, AttemptOutcome, JobState
from django_jobs.verbs import VERBS
from tests.testapp import tasks

pytestmark = pytest.mark.postgres

LIST_URL = "/admin/django_jobs/job/"
DASHBOARD_URL = "/admin/django_jobs/job/dashboard/"
TASK = "tests.testapp.tasks.add"

# verb -> (a state it applies to, the state it leads to, a state it refuses)
VERB_CASES = {
    "retry": (JobState.FAILED, JobState.QUEUED, JobState.SUCCEEDED),
    "cancel": (JobState.QUEUED, JobState.CANCELLED, JobState.SUCCEEDED),
    "quarantine": (JobState.EXHAUSTED, JobState.QUARANTINED, JobState.SUCCEEDED),
    "release": (JobState.QUARANTINED, JobState.QUEUED, JobState.FAILED),
    "discard": (JobState.EXHAUSTED, JobState.DISCARDED, JobState.SUCCEEDED),
}


def make_job(state: JobState = JobState.QUEUED, **fields: Any) -> Job:
    """A job row in any state, written directly: test set-up, not a transition."""
    now = timezone.now()
    values: dict[str, Any] = {
        "task_name": TASK,
        "args": [1, 2],
        "kwargs": {},
        "queue": "default",
        "run_after": now - timedelta(seconds=1),
        "state": state,
        "attempts": 0,
        "max_attempts": 3,
        "enqueued_at": now,
        "updated_at": now,
        **fields,
    }
    return Job.objects.create(**values)


def make_worker(*, heartbeat_age: float = 0.0, **fields: Any) -> Worker:
    now = timezone.now()
    values: dict[str, Any] = {
        "host": "web-1",
        "pid": 4242,
        "queues": ["default"],
        "concurrency": 4,
        "started_at": now - timedelta(minutes=5),
        "heartbeat_at": now - timedelta(seconds=heartbeat_age),
        **fields,
    }
    return Worker.objects.create(**values)


def lease(job: Job, worker: Worker) -> Job:
    """``job``'s current attempt, running on ``worker`` and holding the lease."""
    now = timezone.now()
    Attempt.objects.create(
        job=job, number=job.attempts, worker_id=worker.id, worker_name=str(worker), started_at=now
    )
    Job.objects.filter(id=job.id).update(leased_by=worker.id, leased_at=now)
    job.refresh_from_db()
    return job


def operator(*codenames: str) -> Client:
    """A logged-in staff user holding view_job plus the given job permissions."""
    user = User.objects.create_user(f"op-{uuid.uuid4().hex[:6]}", is_staff=True)
    perms = Permission.objects.filter(
        content_type__app_label="django_jobs", codename__in=["view_job", *codenames]
    )
    user.user_permissions.set(perms)
    client = Client()
    client.force_login(user)
    return client


def response_events(html: str) -> list[tuple[str, str, str]]:
    """(transition, actor, note) of each row of the audit-trail inline."""
    cells = re.findall(
        r'<td class="field-(transition|actor|note)">\s*<p>(.*?)</p>', html, flags=re.S
    )
    values = [value for _, value in cells]
    return [(values[i], values[i + 1], values[i + 2]) for i in range(0, len(values), 3)]


def texts(response: Any) -> list[str]:
    return [str(m) for m in get_messages(response.wsgi_request)]


def state(job: Job) -> str:
    return Job.objects.values_list("state", flat=True).get(pk=job.pk)


def bulk(client: Client, verb: str, jobs: list[Job], **extra: str) -> Any:
    data = {
        "action": f"{verb}_jobs",
        "_selected_action": [str(j.pk) for j in jobs],
        **extra,
    }
    return client.post(LIST_URL, data, follow=True)


def confirm_bulk(client: Client, verb: str, jobs: list[Job], note: str) -> Any:
    """The second post, from the confirmation page: ids and action again, no "index"."""
    data = {
        "action": f"{verb}_jobs",
        "_selected_action": [str(j.pk) for j in jobs],
        "confirm": "yes",
        "note": note,
    }
    return client.post(LIST_URL, data, follow=True)


def button_url(job: Job, verb: str) -> str:
    return reverse("admin:django_jobs_job_verb", args=[job.pk, verb])


# -- the list -------------------------------------------------------------------------


def test_list__shows_state_task_queue_tenant_attempts_progress_and_short_error(
    admin_client: Client,
) -> None:
    make_job(
        JobState.FAILED,
        tenant="acme",
        attempts=3,
        max_attempts=3,
        progress_done=5,
        progress_total=10,
        progress_message="halfway",
        last_error="Traceback ...\nValueError: card declined",
    )

    html = admin_client.get(LIST_URL).content.decode()

    assert '<span class="dj-badge dj-state-failed">Failed</span>' in html
    assert f'<span title="{TASK}">add</span>' in html
    assert '<td class="field-tenant">acme</td>' in html
    assert '<td class="field-attempts_used">3/3</td>' in html
    assert "5/10 (50%) halfway" in html
    assert "ValueError: card declined</span>" in html


def test_list__shows_when_a_scheduled_job_will_run(admin_client: Client) -> None:
    make_job(run_after=timezone.now() + timedelta(hours=2, minutes=1))

    html = admin_client.get(LIST_URL).content.decode()

    assert "runs in 2\xa0hours" in html


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("state=failed", {"failed-acme"}),
        ("queue=other", {"queued-other"}),
        ("task=tests.testapp.tasks.noop", {"noop"}),
        ("tenant=acme", {"failed-acme"}),
        ("unique_key=sync:7", {"keyed"}),
        (
            "enqueued_at__gte=2000-01-01+00:00:00%2B00:00"
            "&enqueued_at__lt=2000-01-02+00:00:00%2B00:00",
            {"old"},
        ),
    ],
)
def test_list__filters_by_state_queue_task_tenant_unique_key_and_date(
    admin_client: Client, query: str, expected: set[str]
) -> None:
    jobs = {
        "failed-acme": make_job(JobState.FAILED, tenant="acme"),
        "keyed": make_job(unique_key="sync:7"),
        "queued-other": make_job(queue="other"),
        "noop": make_job(task_name="tests.testapp.tasks.noop"),
        "old": make_job(
            JobState.SUCCEEDED, enqueued_at=timezone.now().replace(year=2000, month=1, day=1)
        ),
    }

    response = admin_client.get(f"{LIST_URL}?{query}")

    shown = {j.pk for j in response.context["cl"].result_list}
    assert shown == {jobs[name].pk for name in expected}


@pytest.mark.parametrize("field", ["id", "idempotency_key", "unique_key", "tenant"])
def test_list__search_finds_a_job_by_exact_id_idempotency_key_unique_key_or_tenant(
    admin_client: Client, field: str
) -> None:
    wanted = make_job(idempotency_key="order-17", unique_key="sync:7", tenant="acme")
    make_job(idempotency_key="order-170", unique_key="sync:70", tenant="acme-2")
    term = {
        "id": str(wanted.pk),
        "idempotency_key": "order-17",
        "unique_key": "sync:7",
        "tenant": "acme",
    }[field]

    response = admin_client.get(LIST_URL, {"q": term})

    assert [j.pk for j in response.context["cl"].result_list] == [wanted.pk]


def test_list__never_counts_the_whole_table(admin_client: Client) -> None:
    make_job()

    with CaptureQueriesContext(connection) as queries:
        admin_client.get(LIST_URL)

    counts = [q["sql"] for q in queries.captured_queries if "COUNT(" in q["sql"].upper()]
    assert all("LIMIT" in sql or "pg_class" in sql for sql in counts), counts


def test_list__an_unfiltered_large_table_shows_the_planner_estimate(
    admin_client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    for _ in range(3):
        make_job()
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE django_jobs_job")
    monkeypatch.setattr(EstimatedCountPaginator, "EXACT_BELOW", 1)

    response = admin_client.get(LIST_URL)

    assert response.context["cl"].paginator.count_kind == "estimate"
    assert "about 3 jobs (estimated)" in response.content.decode()


def test_list__a_broad_filter_counts_up_to_a_cap(
    admin_client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    for _ in range(3):
        make_job(JobState.FAILED)
    monkeypatch.setattr(EstimatedCountPaginator, "COUNT_CAP", 2)

    response = admin_client.get(LIST_URL, {"state": "failed"})

    assert "more than 2 jobs" in response.content.decode()


def test_list__offers_no_add_and_no_delete(admin_client: Client) -> None:
    response = admin_client.get(LIST_URL)

    assert response.context["has_add_permission"] is False
    assert "delete_selected" not in dict(response.context["action_form"].fields["action"].choices)


# -- the job page -----------------------------------------------------------------------


def test_job_page__shows_arguments_and_result_as_formatted_json(admin_client: Client) -> None:
    job = make_job(JobState.SUCCEEDED, args=[1, {"b": 2}], kwargs={"x": "y"}, result={"ok": True})

    html = admin_client.get(reverse("admin:django_jobs_job_change", args=[job.pk])).content.decode()

    assert '<pre class="dj-json">[\n  1,\n  {\n    &quot;b&quot;: 2\n  }\n]</pre>' in html
    assert '<pre class="dj-json">{\n  &quot;x&quot;: &quot;y&quot;\n}</pre>' in html
    assert '<pre class="dj-json">{\n  &quot;ok&quot;: true\n}</pre>' in html


def test_job_page__shows_every_attempt_with_outcome_worker_duration_error_and_traceback(
    admin_client: Client,
) -> None:
    job = make_job(JobState.FAILED, attempts=1)
    start = timezone.now() - timedelta(seconds=3)
    Attempt.objects.create(
        job=job,
        number=1,
        worker_id=uuid.uuid4(),
        worker_name="web-1:4242",
        outcome=AttemptOutcome.LOST,
        started_at=start,
        finished_at=start + timedelta(seconds=2.5),
        error_type="builtins.ValueError",
        error_message="card declined",
        traceback="Traceback (most recent call last):\n  boom",
        late_report={"outcome": "succeeded"},
    )

    html = admin_client.get(reverse("admin:django_jobs_job_change", args=[job.pk])).content.decode()

    assert '<span class="dj-badge dj-outcome-lost">Lost</span>' in html
    assert ">web-1:4242</a>" in html
    assert "2.5 s" in html
    assert "builtins.ValueError: card declined" in html
    assert "Traceback (most recent call last):\n  boom</pre>" in html
    assert "&quot;outcome&quot;: &quot;succeeded&quot;" in html


def test_job_page__shows_each_step_with_its_attempt_time_and_a_result_preview(
    admin_client: Client,
) -> None:
    job = make_job(JobState.QUEUED, attempts=2)
    now = timezone.now()
    Step.objects.create(job=job, name="charge", attempt=1, result={"id": "ch_1"}, recorded_at=now)
    Step.objects.create(job=job, name="receipt", attempt=2, result="x" * 300, recorded_at=now)

    html = admin_client.get(reverse("admin:django_jobs_job_change", args=[job.pk])).content.decode()

    assert re.search(r"<h2[^>]*>\s*Steps\s*</h2>", html)
    assert html.index("charge") < html.index("receipt")
    assert '<code class="dj-json">{&quot;id&quot;: &quot;ch_1&quot;}</code>' in html
    assert f'<code class="dj-json">&quot;{"x" * 198}…</code>' in html


def test_job_page__shows_the_lease_and_the_progress(admin_client: Client) -> None:
    job = make_job(JobState.RUNNING, attempts=1, progress_done=3, progress_total=4)
    held = lease(job, make_worker())

    html = admin_client.get(reverse("admin:django_jobs_job_change", args=[job.pk])).content.decode()

    assert (
        f'token 1 held by worker <a href="/admin/django_jobs/worker/{held.leased_by}/change/">'
        in html
    )
    assert '<progress value="3" max="4"></progress> 3/4 (75%)' in html


def test_job_page__links_the_jobs_it_waits_for_and_the_jobs_waiting_for_it(
    admin_client: Client,
) -> None:
    parent = make_job(JobState.EXHAUSTED)
    job = make_job(JobState.WAITING, waiting_on=1)
    child = make_job(JobState.WAITING, waiting_on=1)
    Dependency.objects.create(job=job, depends_on=parent)
    Dependency.objects.create(job=child, depends_on=job)

    html = admin_client.get(reverse("admin:django_jobs_job_change", args=[job.pk])).content.decode()

    for other, state in ((parent, "exhausted"), (child, "waiting")):
        url = reverse("admin:django_jobs_job_change", args=[other.pk])
        assert (
            f'<a href="{url}">{str(other.id)[:8]}</a> add '
            f'<span class="dj-badge dj-state-{state}">{state.capitalize()}</span>'
        ) in html
    assert '<span class="dj-badge dj-state-waiting">Waiting</span>' in html


def test_job_page__shows_the_audit_trail_of_manual_actions(admin_client: Client) -> None:
    job = make_job(JobState.EXHAUSTED)
    admin_client.post(button_url(job, "quarantine"), {"note": "poison: bad payload"})

    html = admin_client.get(reverse("admin:django_jobs_job_change", args=[job.pk])).content.decode()

    events = response_events(html)
    assert events == [("quarantine", "admin", "poison: bad payload")]


def test_job_page__shows_the_unique_key_and_each_debounce_in_the_audit_trail(
    admin_client: Client,
) -> None:
    debounced = tasks.add.using(unique_key="sync:7", debounce=timedelta(minutes=5))
    first = debounced.enqueue(1, 2)
    last = debounced.enqueue(3, 4)

    html = admin_client.get(reverse("admin:django_jobs_job_change", args=[first.id])).content
    page = html.decode()

    assert '<div class="readonly">sync:7</div>' in page
    note = f"arguments replaced by a later call; runs after {last.run_after.isoformat()}"
    assert response_events(page) == [("debounce", "system", note)]


def test_job_page__is_read_only(admin_client: Client) -> None:
    job = make_job()

    response = admin_client.post(
        reverse("admin:django_jobs_job_change", args=[job.pk]), {"queue": "other"}
    )

    assert response.status_code == 403
    assert Job.objects.get(pk=job.pk).queue == "default"


# -- bulk actions -------------------------------------------------------------------------


@pytest.mark.parametrize("verb", ["retry", "cancel", "release"])
def test_bulk__changes_the_jobs_it_applies_to_and_says_why_it_refused_the_rest(
    admin_client: Client, verb: str
) -> None:
    source, target, wrong = VERB_CASES[verb]
    good, bad = make_job(source), make_job(wrong)

    response = bulk(admin_client, verb, [good, bad])

    assert (state(good), state(bad)) == (target, wrong)
    assert texts(response) == [
        f"1 job {VERBS[verb].done}.",
        f"1 job refused: Cannot {verb} job {bad.pk}: it is {wrong}; {verb} applies only to "
        f"jobs that are {', '.join(s for s in _sources(verb))}.",
    ]


def _sources(verb: str) -> list[str]:
    return sorted({str(s) for t in VERBS[verb].transitions for s in TRANSITIONS[t].sources})


@pytest.mark.parametrize("verb", ["quarantine", "discard"])
def test_bulk__quarantine_and_discard_ask_for_a_reason_before_changing_anything(
    admin_client: Client, verb: str
) -> None:
    job = make_job(VERB_CASES[verb][0])

    response = bulk(admin_client, verb, [job])

    assert response.templates[0].name == "django_jobs/admin/job/confirm.html"
    assert 'name="note"' in response.content.decode()
    assert state(job) == VERB_CASES[verb][0]


@pytest.mark.parametrize("verb", ["quarantine", "discard"])
def test_bulk__quarantine_and_discard_apply_with_the_reason_from_the_confirmation_page(
    admin_client: Client, verb: str
) -> None:
    source, target, _ = VERB_CASES[verb]
    job = make_job(source)

    response = confirm_bulk(admin_client, verb, [job], note="customer asked")

    assert state(job) == target
    assert texts(response) == [f"1 job {VERBS[verb].done}."]
    event = JobEvent.objects.get(job=job)
    assert (event.actor, event.note) == ("admin", "customer asked")


def test_bulk__an_empty_reason_is_asked_for_again(admin_client: Client) -> None:
    job = make_job(JobState.EXHAUSTED)

    response = confirm_bulk(admin_client, "discard", [job], note="  ")

    assert "Say why: a reason is required." in response.content.decode()
    assert state(job) == JobState.EXHAUSTED


def test_bulk__records_the_user_as_the_actor(admin_client: Client) -> None:
    job = make_job(JobState.FAILED)

    bulk(admin_client, "retry", [job])

    assert list(JobEvent.objects.filter(job=job).values_list("actor", "transition")) == [
        ("admin", "retry")
    ]


def test_bulk__refuses_more_jobs_than_its_limit(
    admin_client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    jobs = [make_job(JobState.FAILED), make_job(JobState.FAILED)]
    monkeypatch.setattr(actions, "BULK_LIMIT", 1)

    response = bulk(admin_client, "retry", jobs)

    assert texts(response) == [
        "Retry takes at most 1 jobs at a time; narrow the filter, or use manage.py jobs for more."
    ]
    assert {state(j) for j in jobs} == {JobState.FAILED}


def test_bulk__the_confirmation_posts_back_every_selected_job_not_only_the_100_it_lists(
    admin_client: Client,
) -> None:
    jobs = [make_job(JobState.FAILED) for _ in range(150)]
    page = bulk(admin_client, "discard", jobs).content.decode()
    posted_back = re.findall(r'<input type="hidden" name="_selected_action" value="([^"]*)">', page)

    response = admin_client.post(
        LIST_URL,
        {"action": "discard_jobs", "_selected_action": posted_back, "confirm": "yes", "note": "x"},
        follow=True,
    )

    assert texts(response) == ["150 jobs discarded."]
    assert {state(j) for j in jobs} == {JobState.DISCARDED}


def test_bulk__cancel_counts_the_running_jobs_it_only_asked_to_stop_apart(
    admin_client: Client,
) -> None:
    queued = make_job(JobState.QUEUED)
    running = lease(make_job(JobState.RUNNING, attempts=1), make_worker())

    response = bulk(admin_client, "cancel", [queued, running])

    assert (state(queued), state(running)) == (JobState.CANCELLED, JobState.CANCELLING)
    assert texts(response) == ["1 job cancelled; 1 running job asked to stop (cancelling)."]


def across(client: Client, verb: str, filters: str, one: Job, **extra: str) -> Any:
    """The changelist's action with "Select all N" ticked: the filter, not the ticked rows."""
    data = {"action": f"{verb}_jobs", "select_across": "1", "_selected_action": [str(one.pk)]}
    return client.post(f"{LIST_URL}?{filters}", {**data, **extra}, follow=True)


def acme_jobs() -> tuple[list[Job], Job, Job]:
    """Three failed jobs and a succeeded one of tenant acme; a failed one of another tenant."""
    failed = [make_job(JobState.FAILED, tenant="acme") for _ in range(3)]
    return (
        failed,
        make_job(JobState.SUCCEEDED, tenant="acme"),
        make_job(JobState.FAILED, tenant="other"),
    )


def test_across__the_confirmation_says_how_many_jobs_match_and_how_many_it_applies_to(
    admin_client: Client,
) -> None:
    failed, succeeded, other = acme_jobs()

    response = across(admin_client, "retry", "tenant=acme", failed[0], index="0")

    html = response.content.decode()
    assert response.templates[0].name == "django_jobs/admin/job/confirm.html"
    assert 'data-matched="4" data-applicable="3"' in html
    assert '<input type="hidden" name="expected" value="4">' in html
    assert {state(j) for j in [*failed, succeeded, other]} == {JobState.FAILED, JobState.SUCCEEDED}


def test_across__the_confirmed_count_applies_the_verb_to_every_matching_job(
    admin_client: Client,
) -> None:
    failed, succeeded, other = acme_jobs()

    response = across(admin_client, "retry", "tenant=acme", failed[0], confirm="yes", expected="4")

    assert [state(j) for j in failed] == [JobState.QUEUED] * 3
    assert (state(succeeded), state(other)) == (JobState.SUCCEEDED, JobState.FAILED)
    assert texts(response) == ["3 of 4 matching jobs retried; 1 skipped."]


def test_across__cancel_counts_the_running_jobs_it_only_asked_to_stop_apart(
    admin_client: Client,
) -> None:
    queued = make_job(JobState.QUEUED, tenant="acme")
    running = lease(make_job(JobState.RUNNING, attempts=1, tenant="acme"), make_worker())
    succeeded = make_job(JobState.SUCCEEDED, tenant="acme")

    response = across(admin_client, "cancel", "tenant=acme", queued, confirm="yes", expected="3")

    assert (state(queued), state(running), state(succeeded)) == (
        JobState.CANCELLED,
        JobState.CANCELLING,
        JobState.SUCCEEDED,
    )
    assert texts(response) == [
        "1 of 3 matching jobs cancelled; 1 running job asked to stop (cancelling); 1 skipped."
    ]


def test_across__a_filter_that_matches_more_than_was_confirmed_changes_nothing(
    admin_client: Client,
) -> None:
    failed, _, _ = acme_jobs()

    response = across(admin_client, "retry", "tenant=acme", failed[0], confirm="yes", expected="3")

    assert [state(j) for j in failed] == [JobState.FAILED] * 3
    assert texts(response) == [
        "The filter matches 4 jobs now, not the 3 confirmed; nothing was changed. "
        "Look again, and confirm 4 to go on."
    ]


def test_across__a_filter_beyond_the_admins_limit_points_to_the_cli(
    admin_client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    failed, _, _ = acme_jobs()
    monkeypatch.setattr(actions, "ACROSS_LIMIT", 2)

    response = across(admin_client, "retry", "tenant=acme", failed[0], index="0")

    assert texts(response) == [
        "The filter matches 4 jobs; the admin acts on at most 2 at a time. Narrow the "
        "filter, or use manage.py jobs retry with the same filters."
    ]
    assert [state(j) for j in failed] == [JobState.FAILED] * 3


@pytest.mark.parametrize("verb", list(VERB_CASES))
def test_bulk__each_action_is_offered_only_with_its_permission(db: None, verb: str) -> None:
    others = [f"{v}_job" for v in VERB_CASES if v != verb]

    without = operator(*others).get(LIST_URL).context["action_form"].fields["action"].choices
    with_it = operator(f"{verb}_job").get(LIST_URL).context["action_form"].fields["action"].choices

    assert f"{verb}_jobs" not in dict(without)
    assert [name for name, _ in with_it if name] == [f"{verb}_jobs"]


def test_bulk__a_user_without_retry_job_cannot_retry_by_posting(db: None) -> None:
    job = make_job(JobState.FAILED)

    bulk(operator("cancel_job"), "retry", [job])

    assert state(job) == JobState.FAILED
    assert not JobEvent.objects.exists()


def test_list__a_view_only_operator_sees_jobs_and_no_actions(db: None) -> None:
    make_job()

    response = operator().get(LIST_URL)

    assert response.status_code == 200
    assert response.context["action_form"] is None or not [
        name for name, _ in response.context["action_form"].fields["action"].choices if name
    ]


# -- buttons on the job page ----------------------------------------------------------------


@pytest.mark.parametrize("verb", list(VERB_CASES))
def test_button__applies_its_verb_to_the_job_and_says_the_new_state(
    admin_client: Client, verb: str
) -> None:
    source, target, _ = VERB_CASES[verb]
    job = make_job(source)

    response = admin_client.post(button_url(job, verb), {"note": "by hand"}, follow=True)

    assert state(job) == target
    assert texts(response) == [f"Job {VERBS[verb].done}: it is now {target.label}."]
    assert response.redirect_chain == [
        (reverse("admin:django_jobs_job_change", args=[job.pk]), 302)
    ]


def test_button__run_now_makes_a_scheduled_job_due_and_is_offered_only_while_scheduled(
    admin_client: Client,
) -> None:
    job = make_job(run_after=timezone.now() + timedelta(hours=1))
    page = reverse("admin:django_jobs_job_change", args=[job.pk])
    offered = [b["verb"].name for b in admin_client.get(page).context["verb_buttons"]]

    response = admin_client.post(button_url(job, "run_now"), follow=True)

    after = [b["verb"].name for b in response.context["verb_buttons"]]
    assert ("run_now" in offered, "run_now" in after) == (True, False)
    assert Job.objects.get(pk=job.pk).run_after <= timezone.now()
    assert texts(response) == ["Job made due now: it is now Queued."]


def test_button__rerun_takes_the_operator_to_the_new_job_linked_to_the_original(
    admin_client: Client,
) -> None:
    job = make_job(JobState.SUCCEEDED, attempts=1, idempotency_key="k-1")

    response = admin_client.post(button_url(job, "rerun"), follow=True)

    copy = Job.objects.get(rerun_of=job.pk)
    html = response.content.decode()
    assert response.redirect_chain == [
        (reverse("admin:django_jobs_job_change", args=[copy.pk]), 302)
    ]
    assert texts(response) == ["Job rerun: this is the new job."]
    assert reverse("admin:django_jobs_job_change", args=[job.pk]) in html  # rerun of
    assert (state(job), copy.state, copy.idempotency_key) == ("succeeded", "queued", None)


def test_button__cancel_of_a_running_job_asks_it_to_stop(admin_client: Client) -> None:
    job = make_job(JobState.RUNNING, attempts=1)

    response = admin_client.post(button_url(job, "cancel"), follow=True)

    assert state(job) == JobState.CANCELLING
    assert texts(response) == ["Job cancelled: it is now Cancelling."]


def test_button__a_verb_the_state_does_not_allow_is_refused_with_the_reason(
    admin_client: Client,
) -> None:
    job = make_job(JobState.SUCCEEDED)

    response = admin_client.post(button_url(job, "retry"), follow=True)

    assert state(job) == JobState.SUCCEEDED
    assert texts(response) == [
        f"Refused: Cannot retry job {job.pk}: it is succeeded; retry applies only to jobs that "
        "are cancelled, exhausted, expired, failed, quarantined."
    ]


@pytest.mark.parametrize("verb", ["quarantine", "discard"])
def test_button__quarantine_and_discard_show_a_confirmation_page_first(
    admin_client: Client, verb: str
) -> None:
    job = make_job(JobState.EXHAUSTED)

    response = admin_client.get(button_url(job, verb))

    assert response.status_code == 200
    assert '<textarea name="note" id="id_note"' in response.content.decode()
    assert state(job) == JobState.EXHAUSTED


def test_button__discard_without_a_reason_changes_nothing(admin_client: Client) -> None:
    job = make_job(JobState.EXHAUSTED)

    response = admin_client.post(button_url(job, "discard"), {"note": ""})

    assert "Say why: a reason is required." in response.content.decode()
    assert state(job) == JobState.EXHAUSTED


def test_button__a_user_without_retry_job_is_forbidden(db: None) -> None:
    job = make_job(JobState.FAILED)

    response = operator("cancel_job", "discard_job").post(button_url(job, "retry"))

    assert response.status_code == 403
    assert state(job) == JobState.FAILED


def test_job_page__a_user_without_retry_job_sees_no_retry_button(db: None) -> None:
    job = make_job(JobState.FAILED)

    html = (
        operator("discard_job")
        .get(reverse("admin:django_jobs_job_change", args=[job.pk]))
        .content.decode()
    )

    assert "dj-verb-retry" not in html
    assert "dj-verb-discard" in html


def test_job_page__shows_only_the_buttons_its_state_allows(admin_client: Client) -> None:
    job = make_job(JobState.QUARANTINED)

    response = admin_client.get(reverse("admin:django_jobs_job_change", args=[job.pk]))

    assert [b["verb"].name for b in response.context["verb_buttons"]] == [
        "retry",
        "release",
        "discard",
    ]


def test_job_page__a_finished_job_offers_rerun_and_a_held_one_does_not(
    admin_client: Client,
) -> None:
    offered = {
        held: "rerun"
        in [
            b["verb"].name
            for b in admin_client.get(
                reverse("admin:django_jobs_job_change", args=[make_job(held).pk])
            ).context["verb_buttons"]
        ]
        for held in (JobState.SUCCEEDED, JobState.DISCARDED, JobState.QUARANTINED)
    }

    assert offered == {
        JobState.SUCCEEDED: True,
        JobState.DISCARDED: True,
        JobState.QUARANTINED: False,
    }


# -- dashboard and workers --------------------------------------------------------------------


def test_dashboard__is_linked_from_the_jobs_section_and_the_job_list(admin_client: Client) -> None:
    app_index = admin_client.get("/admin/django_jobs/").content.decode()
    job_list = admin_client.get(LIST_URL).content.decode()

    assert f'href="{DASHBOARD_URL}"' in app_index
    assert f'href="{DASHBOARD_URL}"' in job_list


def test_dashboard__shows_depth_by_state_oldest_due_job_throughput_and_failures(
    admin_client: Client,
) -> None:
    now = timezone.now()
    make_job(enqueued_at=now - timedelta(minutes=10), run_after=now - timedelta(minutes=10))
    make_job(run_after=now + timedelta(hours=1))
    make_job(JobState.RUNNING)
    make_job(JobState.QUARANTINED)
    make_job(JobState.SUCCEEDED, finished_at=now - timedelta(minutes=1))
    make_job(JobState.SUCCEEDED, finished_at=now - timedelta(minutes=30))
    make_job(JobState.EXHAUSTED, finished_at=now - timedelta(minutes=2))
    make_job(JobState.SUCCEEDED, finished_at=now - timedelta(hours=3))

    response = admin_client.get(DASHBOARD_URL)

    default = next(q for q in response.context["queues"] if q["name"] == "default")
    assert {
        k: default[k] for k in ("due", "scheduled", "depth", "finished", "succeeded", "failures")
    } == {
        "due": 1,
        "scheduled": 1,
        "depth": [0, 1, 0, 1],  # waiting, running, cancelling, quarantined
        "finished": [2, 3],  # last 5 minutes, last hour
        "succeeded": [1, 2],
        "failures": [1, 1],
    }
    assert timedelta(minutes=9) < now - default["oldest_due"] < timedelta(minutes=11)


def test_dashboard__a_retry_due_now_has_waited_since_its_run_after_not_its_enqueue(
    admin_client: Client,
) -> None:
    now = timezone.now()
    make_job(enqueued_at=now - timedelta(hours=2), run_after=now - timedelta(minutes=1))

    response = admin_client.get(DASHBOARD_URL)

    default = next(q for q in response.context["queues"] if q["name"] == "default")
    assert timedelta(seconds=50) < now - default["oldest_due"] < timedelta(seconds=70)


def test_dashboard__lists_live_workers_with_running_jobs_and_marks_stale_ones(
    admin_client: Client,
) -> None:
    busy = make_worker(host="web-1")
    make_worker(host="web-2", heartbeat_age=120)
    make_worker(host="web-3", stopped_at=timezone.now())
    lease(make_job(JobState.RUNNING, attempts=1), busy)

    response = admin_client.get(DASHBOARD_URL)

    rows = [(r.worker.host, r.running, r.stale) for r in response.context["workers"]]
    assert rows == [("web-1", 1, False), ("web-2", 0, True)]
    assert '<span class="dj-badge dj-worker-stale">stale</span>' in response.content.decode()


def test_dashboard__pauses_and_resumes_a_queue_with_audit(admin_client: Client) -> None:
    url = reverse("admin:django_jobs_queue_pause", args=["other"])

    admin_client.post(url, {"pause": "1", "note": "provider down"})
    paused_html = admin_client.get(DASHBOARD_URL).content.decode()
    admin_client.post(url, {"pause": "0"})

    events = list(QueueEvent.objects.order_by("at").values_list("action", "note"))
    assert events == [("pause", "provider down"), ("resume", "")]
    assert 'value="Resume"' in paused_html
    assert QueueState.objects.get(queue="other").paused is False


def test_dashboard__a_queue_whose_name_holds_a_slash_is_shown_and_paused(
    admin_client: Client, settings: Any
) -> None:
    settings.TASKS = {
        **settings.TASKS,
        "default": {**settings.TASKS["default"], "QUEUES": ["default", "reports/daily"]},
    }
    url = reverse("admin:django_jobs_queue_pause", args=["reports/daily"])

    page = admin_client.get(DASHBOARD_URL)
    admin_client.post(url, {"pause": "1"})

    assert (page.status_code, url in page.content.decode()) == (200, True)
    assert QueueState.objects.get(queue="reports/daily").paused is True


def test_dashboard__a_note_with_a_nul_character_is_refused_and_nothing_is_paused(
    admin_client: Client,
) -> None:
    url = reverse("admin:django_jobs_queue_pause", args=["other"])

    done = admin_client.post(url, {"pause": "1", "note": "a\x00b"}, follow=True)

    assert texts(done) == ["The note must not contain a NUL character (\\x00)."]
    assert (QueueState.objects.count(), QueueEvent.objects.count()) == (0, 0)


def test_job_page__a_note_with_a_nul_character_is_asked_for_again_and_nothing_changes(
    admin_client: Client,
) -> None:
    job = make_job(JobState.EXHAUSTED)

    answer = admin_client.post(f"{LIST_URL}{job.pk}/do/quarantine/", {"note": "a\x00b"})

    assert answer.status_code == 200
    assert "The note must not contain a NUL character" in answer.content.decode()
    assert (state(job), JobEvent.objects.count()) == (JobState.EXHAUSTED, 0)


def test_list__a_tenant_filter_with_a_nul_character_is_the_admins_bad_parameter_answer(
    admin_client: Client,
) -> None:
    make_job(tenant="acme")

    answer = admin_client.get(LIST_URL, {"tenant": "a\x00b"})

    assert (answer.status_code, answer["Location"]) == (302, f"{LIST_URL}?e=1")


def test_dashboard__pausing_needs_its_permission(db: None) -> None:
    user = User.objects.create_user("viewer", is_staff=True)
    user.user_permissions.add(Permission.objects.get(codename="view_job"))
    client = Client()
    client.force_login(user)
    url = reverse("admin:django_jobs_queue_pause", args=["other"])

    html = client.get(DASHBOARD_URL).content.decode()
    response = client.post(url, {"pause": "1"})

    assert (response.status_code, 'value="Pause"' in html) == (403, False)
    assert not QueueState.objects.exists()


def test_dashboard__needs_permission_to_view_jobs(db: None) -> None:
    user = User.objects.create_user("nobody", is_staff=True)
    client = Client()
    client.force_login(user)

    response = client.get(DASHBOARD_URL)

    assert response.status_code == 403


def test_worker_page__is_read_only_and_shows_status_and_held_leases(admin_client: Client) -> None:
    worker = make_worker()
    held = lease(make_job(JobState.RUNNING, attempts=1), worker)

    html = admin_client.get(
        reverse("admin:django_jobs_worker_change", args=[worker.pk])
    ).content.decode()

    assert '<span class="dj-badge dj-worker-live">live</span>' in html
    assert f'/admin/django_jobs/job/{held.id}/change/">{held.id}</a> token 1' in html
    assert 'name="_save"' not in html
