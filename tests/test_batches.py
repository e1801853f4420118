"""Batches: every job enqueued in a ``batch()`` block is a member; its callbacks run once.

The logic runs through ``drain`` (the worker's own claim, runner and
completer, in this thread) on both engines; the race across real worker
processes, with SIGKILLs, is the last test.
"""

from __future__ import annotations

import importlib
import os
import signal
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from django.db import transaction
from django.test import Client
from django.urls import reverse

from django_jobs import (
    BatchError,
    JobState,
    batch,
    callback,
    control,
    enqueue_many,
)
from django_jobs.engine import engine_for
from django_jobs.models import Batch, Job, Worker
from django_jobs.states import BatchState
from django_jobs.testing import drain
from django_jobs.values import WorkerIdentity
from tests.conftest import ROOT, WorkerProcess, example_files, examples_shown, wait_until
from tests.testapp import tasks


def callbacks(alias: str, batch_id: uuid.UUID) -> list[tuple[str, dict[str, Any]]]:
    """The callback jobs of a batch: (which, the kwargs they were enqueued with)."""
    jobs = Job.objects.using(alias).filter(idempotency_key__startswith=f"batch:{batch_id}:")
    return sorted((job.idempotency_key.rsplit(":", 1)[1], job.kwargs) for job in jobs)


def counts(alias: str, batch_id: uuid.UUID) -> tuple[str, int, int, int, int]:
    b = Batch.objects.using(alias).get(id=batch_id)
    return b.state, b.total, b.succeeded, b.failed, b.cancelled


def summary(b: Batch, total: int, succeeded: int, failed: int, cancelled: int) -> dict[str, Any]:
    return {
        "batch": {
            "id": str(b.id),
            "label": b.label,
            "total": total,
            "succeeded": succeeded,
            "failed": failed,
            "cancelled": cancelled,
        }
    }


# -- callbacks ----------------------------------------------------------------------------------


def test_batch__all_members_succeed_enqueues_each_callback_once_with_the_counts(
    alias: str,
) -> None:
    done = tasks.batch_done.using(backend=alias)
    with batch(on_success=callback(done, note="ok"), on_finish=done, backend=alias, label="b") as b:
        tasks.noop.using(backend=alias).enqueue()
        enqueue_many(tasks.add.using(backend=alias), [((1, 2), {}), ((3, 4), {})])

    drained = drain(backend=alias)

    assert counts(alias, b.id) == (BatchState.SUCCEEDED, 3, 3, 0, 0)
    assert callbacks(alias, b.id) == [
        ("on_finish", summary(b, 3, 3, 0, 0)),
        ("on_success", {"note": "ok", **summary(b, 3, 3, 0, 0)}),
    ]
    # The callbacks ran in the same drain, as a worker would pick them up.
    assert drained.succeeded == 5


def test_batch__a_failed_member_enqueues_on_finish_and_not_on_success(alias: str) -> None:
    done = tasks.batch_done.using(backend=alias)
    with batch(on_success=done, on_finish=done, backend=alias) as b:
        tasks.noop.using(backend=alias).enqueue()
        tasks.gives_up.using(backend=alias).enqueue()

    drain(backend=alias)

    assert counts(alias, b.id) == (BatchState.FINISHED, 2, 1, 1, 0)
    assert callbacks(alias, b.id) == [("on_finish", summary(b, 2, 1, 1, 0))]


def test_batch__cancelled_and_discarded_members_count_as_cancelled(alias: str) -> None:
    done = tasks.batch_done.using(backend=alias)
    with batch(on_finish=done, backend=alias) as b:
        first = tasks.noop.using(backend=alias).enqueue()
        second = tasks.noop.using(backend=alias).enqueue()

    control.apply("cancel", first.id, actor="ops", backend=alias)
    control.apply("discard", second.id, actor="ops", note="not needed", backend=alias)

    assert counts(alias, b.id) == (BatchState.FINISHED, 2, 0, 0, 2)
    assert callbacks(alias, b.id) == [("on_finish", summary(b, 2, 0, 0, 2))]


def test_batch__retrying_a_failed_member_after_the_finish_can_still_bring_on_success(
    alias: str,
) -> None:
    done = tasks.batch_done.using(backend=alias)
    with batch(on_success=done, on_finish=done, backend=alias) as b:
        tasks.noop.using(backend=alias).enqueue()
        failed = tasks.flaky.using(backend=alias).enqueue(failures=10)  # exhausts its 4
    drain(backend=alias)
    assert counts(alias, b.id) == (BatchState.FINISHED, 2, 1, 1, 0)

    control.apply("retry", failed.id, actor="ops", backend=alias)
    pending = counts(alias, b.id)
    Job.objects.using(alias).filter(id=failed.id).update(args=[], kwargs={"failures": 0})
    drain(backend=alias)

    assert pending == (BatchState.FINISHED, 2, 1, 0, 0)  # out of "failed" while it runs again
    assert counts(alias, b.id) == (BatchState.SUCCEEDED, 2, 2, 0, 0)
    assert callbacks(alias, b.id) == [
        ("on_finish", summary(b, 2, 1, 1, 0)),
        ("on_success", summary(b, 2, 2, 0, 0)),
    ]


def test_batch__an_expired_member_counts_as_failed(alias: str) -> None:
    with batch(on_finish=tasks.batch_done.using(backend=alias), backend=alias) as b:
        job = tasks.noop.using(backend=alias).enqueue()
    Job.objects.using(alias).filter(id=job.id).update(expires_at="2000-01-01T00:00:00Z")

    engine_for(alias).expire_overdue()

    assert counts(alias, b.id) == (BatchState.FINISHED, 1, 0, 1, 0)
    assert [kind for kind, _ in callbacks(alias, b.id)] == ["on_finish"]


def test_batch__a_member_whose_last_attempt_is_lost_counts_as_failed(alias: str) -> None:
    with batch(on_finish=tasks.batch_done.using(backend=alias), backend=alias) as b:
        tasks.sleeps.using(backend=alias).enqueue(1.0)  # max_attempts=1
    worker = WorkerIdentity(uuid.uuid4(), "test:1")
    engine = engine_for(alias)
    engine.claim(worker, ["default"], 1)

    engine.release_worker(worker.id, "killed")

    assert counts(alias, b.id) == (BatchState.FINISHED, 1, 0, 1, 0)
    assert [kind for kind, _ in callbacks(alias, b.id)] == ["on_finish"]


def test_batch__an_empty_batch_enqueues_its_callbacks_when_the_block_ends(alias: str) -> None:
    done = tasks.batch_done.using(backend=alias)

    with batch(on_success=done, on_finish=done, backend=alias) as b:
        pass

    assert counts(alias, b.id) == (BatchState.SUCCEEDED, 0, 0, 0, 0)
    assert callbacks(alias, b.id) == [
        ("on_finish", summary(b, 0, 0, 0, 0)),
        ("on_success", summary(b, 0, 0, 0, 0)),
    ]


def test_batch__without_callbacks_only_counts(alias: str) -> None:
    with batch(backend=alias) as b:
        tasks.noop.using(backend=alias).enqueue()

    drain(backend=alias)

    assert counts(alias, b.id) == (BatchState.SUCCEEDED, 1, 1, 0, 0)
    assert Job.objects.using(alias).count() == 1


# -- the block ----------------------------------------------------------------------------------


def test_batch__members_carry_the_batch_and_other_jobs_do_not(alias: str) -> None:
    outside = tasks.noop.using(backend=alias).enqueue()
    with batch(backend=alias) as b:
        inside = tasks.noop.using(backend=alias).enqueue()

    members = set(Job.objects.using(alias).filter(batch=b).values_list("id", flat=True))
    assert (members, b.total, b.state) == ({uuid.UUID(inside.id)}, 1, BatchState.RUNNING)
    assert Job.objects.using(alias).get(id=outside.id).batch_id is None


def test_batch__a_block_that_raises_writes_neither_the_batch_nor_its_jobs(alias: str) -> None:
    with pytest.raises(RuntimeError, match="boom"), batch(backend=alias):
        tasks.noop.using(backend=alias).enqueue()
        raise RuntimeError("boom")

    assert (Batch.objects.using(alias).count(), Job.objects.using(alias).count()) == (0, 0)


def test_batch__follows_the_callers_transaction(alias: str) -> None:
    with pytest.raises(RuntimeError), transaction.atomic(using=alias):
        with batch(backend=alias):
            tasks.noop.using(backend=alias).enqueue()
        raise RuntimeError("the business change failed")

    assert (Batch.objects.using(alias).count(), Job.objects.using(alias).count()) == (0, 0)


def test_batch__nested_batches_are_refused(alias: str) -> None:
    with batch(backend=alias) as outer:
        with pytest.raises(BatchError, match=f"do not nest.*{outer.id}"), batch(backend=alias):
            pass  # pragma: no cover  (refused on entry)
        tasks.noop.using(backend=alias).enqueue()

    assert outer.total == 1


@pytest.mark.postgres
@pytest.mark.django_db(databases=["default", "sqlite"], transaction=True)
def test_batch__a_member_in_another_database_is_refused() -> None:
    with batch(backend="default") as b, pytest.raises(BatchError, match="share its database"):
        tasks.noop.using(backend="sqlite").enqueue()
    assert (b.total, Job.objects.using("sqlite").count()) == (0, 0)


@pytest.mark.parametrize(
    ("given", "error", "message"),
    [
        (tasks.noop, BatchError, "cannot be called with these arguments and batch="),
        (callback(tasks.batch_done, 1, 2), BatchError, "cannot be called"),
        (callback(tasks.batch_done, batch={}), BatchError, "batch is the batch's"),
        (tasks.batch_done.using(idempotency_key="k"), BatchError, "does not take idempotency"),
        (callback(tasks.batch_done, object()), Exception, "args"),
        ("tests.testapp.tasks.batch_done", BatchError, "must be a task"),
    ],
)
def test_batch__a_bad_callback_is_refused_before_anything_is_written(
    pg: None, given: Any, error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message), batch(on_success=given):
        tasks.noop.enqueue()

    assert (Batch.objects.count(), Job.objects.count()) == (0, 0)


# -- admin and API -------------------------------------------------------------------------------


def test_admin__the_batch_page_shows_progress_callbacks_and_members(
    pg: None, admin_client: Client
) -> None:
    with batch(on_finish=tasks.batch_done, label="march invoices") as b:
        member = tasks.gives_up.enqueue()
        tasks.noop.enqueue()
    drain(queue="default")
    b.refresh_from_db()

    html = admin_client.get(reverse("admin:django_jobs_batch_change", args=[b.pk])).content.decode()
    listing = admin_client.get(reverse("admin:django_jobs_batch_changelist")).content.decode()
    job_page = admin_client.get(reverse("admin:django_jobs_job_change", args=[member.id]))

    assert "2/2 settled: 1 succeeded, 1 failed, 0 cancelled" in html
    assert reverse("admin:django_jobs_job_change", args=[b.on_finish_job]) in html
    assert reverse("admin:django_jobs_job_change", args=[member.id]) in html
    assert f"?batch={b.pk}" in html
    assert "march invoices" in listing and "2/2" in listing
    assert reverse("admin:django_jobs_batch_change", args=[b.pk]) in job_page.content.decode()


def test_admin__the_job_list_filters_by_batch(pg: None, admin_client: Client) -> None:
    tasks.noop.enqueue()
    with batch() as b:
        member = tasks.noop.enqueue()

    html = admin_client.get(reverse("admin:django_jobs_job_changelist"), {"batch": b.pk})

    assert html.status_code == 200
    assert html.context["cl"].result_count == 1
    assert str(member.id)[:8] in html.content.decode()


@pytest.mark.urls("tests.api_urls")
def test_api__lists_batches_with_their_counts(pg: None, admin_client: Client) -> None:
    with batch(on_success=tasks.batch_done, label="nightly") as b:
        tasks.noop.enqueue()
        tasks.noop.enqueue()
    drain(queue="default")

    listed = admin_client.get("/api/jobs/batches/").json()
    one = admin_client.get(f"/api/jobs/batches/{b.id}/").json()

    assert listed["results"] == [one]
    b.refresh_from_db()
    assert {key: one[key] for key in ("label", "state", "total", "settled", "pending")} == {
        "label": "nightly",
        "state": "succeeded",
        "total": 2,
        "settled": 2,
        "pending": 0,
    }
    assert (one["succeeded"], one["failed"], one["cancelled"]) == (2, 0, 0)
    assert (one["on_success"], one["on_success_job"]) == (
        "tests.testapp.tasks.batch_done",
        str(b.on_success_job),
    )
    assert (one["on_finish"], one["on_finish_job"]) == (None, None)


@pytest.mark.urls("tests.api_urls")
def test_api__a_batch_with_a_member_outside_the_users_tenants_is_absent(
    pg: None, settings: Any
) -> None:
    from django.contrib.auth.models import User
    from rest_framework.test import APIClient

    settings.DJANGO_JOBS_API = {"TENANTS_FOR_USER": "tests.test_batches.tenant_a"}
    with batch() as mine:
        tasks.noop.using(tenant="A").enqueue()
    with batch() as mixed:
        tasks.noop.using(tenant="A").enqueue()
        tasks.noop.using(tenant="B").enqueue()
    client = APIClient()
    client.force_login(User.objects.create(username="alice"))

    listed = client.get("/api/jobs/batches/").json()
    hidden = client.get(f"/api/jobs/batches/{mixed.id}/")

    assert [row["id"] for row in listed["results"]] == [str(mine.id)]
    assert hidden.status_code == 404


def tenant_a(user: Any) -> list[str]:
    """TENANTS_FOR_USER of the API test above: everyone acts for tenant A."""
    return ["A"]


# -- the example of docs/batches.md ------------------------------------------------------------

EXAMPLE = ROOT / "docs" / "examples" / "batches" / "invoices.py"


def test_docs__the_batches_page_shows_the_example_file_verbatim() -> None:
    shown = examples_shown("batches.md")

    assert shown == example_files(EXAMPLE.parent)


def test_docs__the_billing_example_reports_once_when_every_bill_has_settled(
    pg: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(EXAMPLE.parent))
    invoices = importlib.import_module(EXAMPLE.stem)
    billing = invoices.bill_month("2026-03", [1, 2, -3])

    drain()

    results = dict(Job.objects.exclude(batch=billing).values_list("task_name", "result"))
    assert counts("default", billing.id) == (BatchState.FINISHED, 3, 2, 1, 0)
    assert results == {"invoices.send_report": "2026-03: 2 of 3 billed, 1 failed"}


# -- across real processes ----------------------------------------------------------------------

Start = Callable[..., WorkerProcess]


def live_worker_pids() -> list[int]:
    live = Worker.objects.filter(stopped_at__isnull=True, jobs_done__gt=0)
    return list(live.values_list("pid", flat=True))


@pytest.mark.postgres
@pytest.mark.scale
def test_batch__1000_members_4_processes_and_sigkills_enqueue_exactly_one_callback(
    pg: None, start_workers: Start
) -> None:
    members, kills = 1000, 3
    with batch(on_success=tasks.batch_done, on_finish=tasks.batch_done) as b:
        enqueue_many(tasks.naps, [((0.01,), {})] * members)
    started = time.monotonic()
    supervisor = start_workers("--backend", "fast", "--processes", "4", "--concurrency", "4")
    killed: list[int] = []
    for settled_at in (100, 350, 600)[:kills]:
        wait_until(lambda: Batch.objects.get(id=b.id).succeeded >= settled_at, timeout=90)  # noqa: B023
        victim = next(pid for pid in live_worker_pids() if pid not in killed)
        os.kill(victim, signal.SIGKILL)  # the supervisor releases its leases, forks another
        killed.append(victim)
    # Generous bounds: 15 s here alone, but CI runs it beside three other runs.
    wait_until(lambda: callbacks("default", b.id) and len(callbacks("default", b.id)) == 2, 90)
    elapsed = time.monotonic() - started
    supervisor.stop()

    lost = Job.objects.filter(batch=b, attempts__gt=1).count()
    assert counts("default", b.id) == (BatchState.SUCCEEDED, members, members, 0, 0)
    assert callbacks("default", b.id) == [
        ("on_finish", summary(b, members, members, 0, 0)),
        ("on_success", summary(b, members, members, 0, 0)),
    ]
    assert Job.objects.filter(batch=b, state=JobState.SUCCEEDED).count() == members
    assert len(killed) == kills and lost > 0
    print(f"{members} members, {kills} SIGKILLs, {lost} members re-run, {elapsed:.1f}s")
