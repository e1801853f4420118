"""OpenTelemetry: the request that enqueues a job and the worker's run of it are one trace.

The web side is this test process, with the SDK's in-memory exporter; the
worker is a real ``runworkers`` process that writes its spans to a file
(tests/span_file.py).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import opentelemetry.trace
import pytest
from django.test import Client
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.util._once import Once

from django_jobs import JobState, enqueue_many, tracing
from django_jobs.models import Job
from tests.span_file import as_dict
from tests.testapp.tasks import add, gives_up

pytestmark = [pytest.mark.postgres, pytest.mark.urls("tests.observability_urls")]


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    """A tracer provider for this process, recording in memory; none again afterwards."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    tracing.refresh()
    yield exporter
    # OpenTelemetry sets the global provider once per process; its own test
    # utilities (reset_trace_globals) undo it like this, so later tests run untraced.
    opentelemetry.trace._TRACER_PROVIDER = None
    opentelemetry.trace._TRACER_PROVIDER_SET_ONCE = Once()
    tracing.refresh()


@pytest.fixture
def worker_spans(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[[], list[Any]]:
    """Have the workers the test starts export their spans; read them once they exit."""
    path = tmp_path / "worker-spans.jsonl"
    monkeypatch.setenv("DJANGO_JOBS_TEST_SPANS", str(path))
    return lambda: [json.loads(line) for line in path.read_text().splitlines()]


def by_name(found: list[dict[str, Any]], name: str) -> dict[str, Any]:
    [span] = [span for span in found if span["name"] == name]
    return span


def test_enqueue_in_a_request_and_the_workers_run__are_one_trace(
    pg: None,
    spans: InMemorySpanExporter,
    worker_spans: Callable[[], list[Any]],
    run_burst: Callable[..., str],
) -> None:
    job_id = Client().get("/enqueue/").content.decode()
    run_burst("-p", "1")

    web = [as_dict(span) for span in spans.get_finished_spans()]
    request, send = by_name(web, "GET /enqueue/"), by_name(web, "send default")
    process = by_name(worker_spans(), "process default")
    assert send["parent_id"] == request["span_id"]
    assert process["trace_id"] == request["trace_id"]
    assert process["parent_id"] == send["span_id"]
    assert process["links"] == [send["span_id"]]
    assert (send["kind"], process["kind"]) == ("PRODUCER", "CONSUMER")
    assert send["attributes"] == {
        "messaging.system": "django_jobs",
        "messaging.destination.name": "default",
        "messaging.operation.name": "send",
        "messaging.operation.type": "send",
        "messaging.message.id": job_id,
        "django_jobs.task": "tests.testapp.tasks.add",
    }
    assert process["attributes"] == {
        "messaging.system": "django_jobs",
        "messaging.destination.name": "default",
        "messaging.operation.name": "process",
        "messaging.operation.type": "process",
        "messaging.message.id": job_id,
        "django_jobs.task": "tests.testapp.tasks.add",
        "django_jobs.attempt": 1,
    }
    assert process["status"] == "UNSET"


def test_a_failed_attempts_span__carries_the_error_type(
    pg: None,
    spans: InMemorySpanExporter,
    worker_spans: Callable[[], list[Any]],
    run_burst: Callable[..., str],
) -> None:
    gives_up.enqueue()  # raises KeyError, which it gives up on
    run_burst("-p", "1")

    process = by_name(worker_spans(), "process default")
    assert process["attributes"]["error.type"] == "builtins.KeyError"
    assert process["status"] == "ERROR"


def test_a_span_processor_that_raises__fails_the_attempt_and_the_worker_goes_on(
    pg: None, run_burst: Callable[..., str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DJANGO_JOBS_TEST_BROKEN_TRACER", "1")
    result = add.enqueue(2, 3)
    output = run_burst("-p", "1")

    job = Job.objects.get(id=result.id)
    attempts = job.attempt_set.order_by("number").values_list(
        "outcome", "error_type", "error_message"
    )
    assert (job.state, list(attempts)) == (
        JobState.EXHAUSTED,
        [("failed", "builtins.RuntimeError", "a broken span processor")] * job.max_attempts,
    )
    assert "something around its task call raised; the attempt is recorded failed" in output


def test_enqueue_many__one_send_span_whose_context_every_job_carries(
    pg: None, spans: InMemorySpanExporter
) -> None:
    enqueue_many(add, [((n, 1), {}) for n in range(3)])

    [send] = [as_dict(span) for span in spans.get_finished_spans()]
    assert send["attributes"]["messaging.batch.message_count"] == 3
    # traceparent: version-trace id-parent id-flags (the flags are the sampler's).
    stored = [job.trace_context["traceparent"].rsplit("-", 1)[0] for job in Job.objects.all()]
    assert stored == [f"00-{send['trace_id']}-{send['span_id']}"] * 3


def test_without_a_tracer_provider__nothing_is_traced_or_stored(pg: None) -> None:
    tracing.refresh()

    result = add.enqueue(1, 2)

    assert tracing.tracer() is None
    assert Job.objects.get(id=result.id).trace_context is None
