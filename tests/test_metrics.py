"""Prometheus metrics: counted in real worker processes, added up and served by the supervisor.

The counts a scrape shows must equal the attempts that ran, whichever of
the forked processes ran them; the database gauges must equal the rows.
"""

from __future__ import annotations

import socket
import urllib.request
import uuid
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.db import transaction
from django.test import Client
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from django_jobs import JobState
from django_jobs.backend import jobs_backend
from django_jobs.metrics import collector as collector_module
from django_jobs.metrics.collector import JobsCollector
from django_jobs.models import Job
from django_jobs.values import WorkerIdentity
from tests.conftest import WorkerProcess, wait_until
from tests.testapp.tasks import add, flaky, gives_up, kill_own_worker_once

pytestmark = [pytest.mark.postgres, pytest.mark.urls("tests.observability_urls")]

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]
ALLOWED_LABELS = {"queue", "task", "outcome", "state", "le"}
ADD = "tests.testapp.tasks.add"
ENQUEUED = "django_jobs_jobs_enqueued_total"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def parse(text: str) -> Samples:
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def scrape(port: int) -> Samples:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        return parse(response.read().decode())


def ours(samples: Samples, name: str) -> dict[frozenset[tuple[str, str]], float]:
    """The samples of one metric, by their labels."""
    return {labels: value for (sample, labels), value in samples.items() if sample == name}


def by(**labels: str) -> frozenset[tuple[str, str]]:
    return frozenset(labels.items())


def make_job(state: JobState, queue: str = "default", db: str = "default", **fields: Any) -> Job:
    """A job row in any state, written directly: test set-up, not a transition."""
    now = timezone.now()
    values: dict[str, Any] = {
        "task_name": ADD,
        "queue": queue,
        "run_after": now - timedelta(seconds=30),
        "state": state,
        "max_attempts": 3,
        "enqueued_at": now - timedelta(minutes=1),
        "updated_at": now,
        "dedup_scope": f"{ADD}|",
        **fields,
    }
    return Job.objects.using(db).create(**values)


def test_runworkers_metrics_port__counts_every_attempt_of_both_processes(
    pg: None, start_workers: Callable[..., WorkerProcess]
) -> None:
    with transaction.atomic():
        for n in range(20):
            add.enqueue(n, 1)
        for _ in range(5):
            gives_up.enqueue()  # KeyError: given up at once, one attempt
        for _ in range(3):
            flaky.enqueue(1)  # fails once, is retried, succeeds
    port = free_port()
    worker = start_workers("-p", "2", "-c", "4", "--metrics-port", f"127.0.0.1:{port}")

    def all_finished() -> Samples | None:
        try:
            samples = scrape(port)
        except OSError:
            return None  # not listening yet
        done = sum(ours(samples, "django_jobs_attempts_finished_total").values())
        return samples if done == 31 else None

    wait_until(all_finished, timeout=60)
    # Once every finish is counted, every duration was observed before it (in
    # each process, the same step, in that order); but a scrape reads the
    # processes' files in the directory's order, not one moment of them all,
    # so the scrape that saw the last finish may have read a histogram first.
    samples = scrape(port)
    worker.stop()

    flaky_name, gives_up_name = "tests.testapp.tasks.flaky", "tests.testapp.tasks.gives_up"
    assert ours(samples, "django_jobs_attempts_started_total") == {
        by(queue="default", task=ADD): 20,
        by(queue="default", task=gives_up_name): 5,
        by(queue="default", task=flaky_name): 6,
    }
    assert ours(samples, "django_jobs_attempts_finished_total") == {
        by(queue="default", task=ADD, outcome="succeeded"): 20,
        by(queue="default", task=gives_up_name, outcome="failed"): 5,
        by(queue="default", task=flaky_name, outcome="failed"): 3,
        by(queue="default", task=flaky_name, outcome="succeeded"): 3,
    }
    assert ours(samples, "django_jobs_retries_total") == {by(queue="default", task=flaky_name): 3}
    assert ours(samples, "django_jobs_attempt_duration_seconds_count") == {
        by(queue="default", task=ADD): 20,
        by(queue="default", task=gives_up_name): 5,
        by(queue="default", task=flaky_name): 6,
    }
    # Only first attempts have a start latency: the retries waited for their backoff.
    assert ours(samples, "django_jobs_start_latency_seconds_count") == {
        by(queue="default", task=ADD): 20,
        by(queue="default", task=gives_up_name): 5,
        by(queue="default", task=flaky_name): 3,
    }
    assert ours(samples, "django_jobs_jobs")[by(queue="default", state="queued")] == 0
    assert ours(samples, "django_jobs_workers") == {by(state="live"): 2, by(state="stale"): 0}


def test_runworkers_metrics_port__counts_the_lease_of_a_killed_worker_as_lost(
    pg: None, start_workers: Callable[..., WorkerProcess]
) -> None:
    job = kill_own_worker_once.enqueue()  # SIGKILLs its worker process on attempt 1
    port = free_port()
    worker = start_workers("-p", "1", "--metrics-port", f"127.0.0.1:{port}")

    def succeeded() -> Samples | None:
        if Job.objects.get(id=job.id).state != JobState.SUCCEEDED:
            return None
        samples = scrape(port)
        return samples if ours(samples, "django_jobs_attempts_finished_total") else None

    samples = wait_until(succeeded, timeout=60)
    worker.stop()

    task = "tests.testapp.tasks.kill_own_worker_once"
    assert ours(samples, "django_jobs_lost_leases_total") == {by(queue="default", task=task): 1}
    assert ours(samples, "django_jobs_attempts_started_total") == {
        by(queue="default", task=task): 2
    }
    assert ours(samples, "django_jobs_attempts_finished_total") == {
        by(queue="default", task=task, outcome="succeeded"): 1
    }


def test_metrics_view__counts_committed_enqueues_and_reads_the_database(pg: None) -> None:
    client = Client()
    before = ours(
        parse(client.get("/metrics/").content.decode()), "django_jobs_jobs_enqueued_total"
    )
    with transaction.atomic():
        add.enqueue(1, 2)
        add.enqueue(3, 4)
    with pytest.raises(RuntimeError), transaction.atomic():
        add.enqueue(5, 6)
        raise RuntimeError("rolled back: this job was never enqueued")

    response = client.get("/metrics/")

    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain")
    samples = parse(response.content.decode())
    key = by(queue="default", task=ADD)
    assert ours(samples, "django_jobs_jobs_enqueued_total")[key] - before.get(key, 0) == 2
    assert ours(samples, "django_jobs_jobs")[by(queue="default", state="queued")] == 2


@pytest.mark.parametrize(
    "db",
    [
        pytest.param("default", marks=pytest.mark.django_db(transaction=True), id="postgres"),
        pytest.param(
            "sqlite",
            marks=pytest.mark.django_db(databases=["sqlite"], transaction=True),
            id="sqlite",
        ),
    ],
)
def test_collector__gauges_equal_the_rows_by_queue_and_state(db: str) -> None:
    now = timezone.now()
    # Due jobs at three priorities: the oldest is neither the first nor the last priority.
    for priority, waited in ((10, 40), (0, 50), (-5, 45)):
        make_job(
            JobState.QUEUED, db=db, priority=priority, run_after=now - timedelta(seconds=waited)
        )
    make_job(JobState.QUEUED, db=db, priority=10, run_after=now + timedelta(hours=1))  # not due
    make_job(JobState.RUNNING, db=db)
    make_job(JobState.CANCELLING, db=db)
    make_job(JobState.WAITING, db=db)
    make_job(JobState.QUARANTINED, queue="other", db=db)
    for state in (JobState.SUCCEEDED, JobState.FAILED, JobState.EXHAUSTED):
        make_job(state, db=db, finished_at=now)  # history: counters' work, not these gauges'
    backend = jobs_backend(db)  # the backend of the same name keeps its jobs there
    backend.engine.set_queue_paused("other", True, actor="ops", note="maintenance")
    identity = WorkerIdentity(id=uuid.uuid4(), name="host:1")
    backend.engine.register_worker(
        identity, backend=db, host="host", pid=1, queues=("default",), concurrency=1
    )
    collector = JobsCollector(backend.db, backend.queues, stale_after=30.0)

    samples = {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in collector.collect()
        for sample in family.samples
    }

    counted = {"waiting", "queued", "running", "cancelling", "quarantined"}
    expected_jobs = {
        by(queue=queue, state=state): 0.0 for queue in ("default", "other") for state in counted
    }
    expected_jobs |= {
        by(queue="default", state="queued"): 4,
        by(queue="default", state="running"): 1,
        by(queue="default", state="cancelling"): 1,
        by(queue="default", state="waiting"): 1,
        by(queue="other", state="quarantined"): 1,
    }
    assert ours(samples, "django_jobs_jobs") == expected_jobs
    assert ours(samples, "django_jobs_queue_due_jobs") == {
        by(queue="default"): 3,
        by(queue="other"): 0,
    }
    assert ours(samples, "django_jobs_queue_paused") == {
        by(queue="default"): 0,
        by(queue="other"): 1,
    }
    assert ours(samples, "django_jobs_workers") == {by(state="live"): 1, by(state="stale"): 0}
    oldest = ours(samples, "django_jobs_queue_oldest_due_age_seconds")
    assert oldest[by(queue="other")] == 0
    assert 50 <= oldest[by(queue="default")] < 3600


def test_collector__counts_queued_jobs_up_to_its_limit(
    pg: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(collector_module, "COUNT_LIMIT", 2)
    now = timezone.now()
    for priority in (5, 0, 0):
        make_job(JobState.QUEUED, priority=priority, run_after=now - timedelta(seconds=60))

    reading = collector_module.read("default", ["default"], now, stale_after=30.0)

    queue = reading.queues["default"]
    assert (queue.by_state[JobState.QUEUED], queue.due) == (2, 2)
    assert queue.oldest_due == now - timedelta(seconds=60)


def test_metrics__label_only_by_queue_task_outcome_and_state(pg: None) -> None:
    # The counters live as long as the process: other tests' series are there
    # already, so what counts is what thirty tenants' jobs add.
    before = set(ours(parse(Client().get("/metrics/").content.decode()), ENQUEUED))
    for tenant in range(30):
        add.using(tenant=f"tenant-{tenant}").enqueue(tenant, 1)

    samples = parse(Client().get("/metrics/").content.decode())

    ours_only = {key: value for key, value in samples.items() if key[0].startswith("django_jobs_")}
    assert {name for (_, labels) in ours_only for name, _ in labels} <= ALLOWED_LABELS
    enqueued = set(ours(samples, ENQUEUED))
    # Thirty tenants, one series.
    assert enqueued - before <= {by(queue="default", task=ADD)}
    assert [
        labels for labels in enqueued if ("queue", "default") in labels and ("task", ADD) in labels
    ] == [by(queue="default", task=ADD)]


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ("http", "'http': the port must be a number from 1 to 65535"),
        ("127.0.0.1:70000", "'127.0.0.1:70000': the port must be a number from 1 to 65535"),
        (":9100", "':9100': the host before ':' is empty"),
        ("example.com:9100", "'example.com' is not an IP address (or localhost)"),
    ],
)
def test_runworkers_metrics_port__refuses_an_address_it_cannot_listen_on(
    given: str, message: str
) -> None:
    with pytest.raises(CommandError, match=message.replace("(", r"\(").replace(")", r"\)")):
        call_command("runworkers", "--metrics-port", given)
