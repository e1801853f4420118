"""OpenTelemetry spans for enqueues and attempts (optional extra: ``django-jobs[otel]``).

Following the messaging semantic conventions, an enqueue is a ``send
{queue}`` span (kind PRODUCER) and every attempt a ``process {queue}`` span
(kind CONSUMER), with ``messaging.system`` = ``django_jobs``,
``messaging.destination.name`` = the queue, ``messaging.message.id`` = the
job id, ``messaging.operation.name`` = ``send`` or ``process`` and, when an
attempt does not succeed, ``error.type`` (the exception's class, or the
outcome). The enqueuer's context is stored on the job (``Job.trace_context``,
the W3C ``traceparent`` as the configured propagator writes it), and each
attempt's span is its child, and links to it: the request that enqueued a
job and every run of that job are one trace, however many workers and
retries later. The task runs inside the ``process`` span, so its own spans
(database calls, HTTP clients) nest under it.

Zero cost when unused: whether to trace is decided once per process, at the
first enqueue or attempt. Without the ``opentelemetry`` package, or with no
tracer provider configured by then (OpenTelemetry's default is a no-op),
nothing is traced, no context is stored (the column stays NULL), and each
enqueue and attempt pays one cached call. Configure the provider at start-up
(``opentelemetry-instrument``, or in settings), or call ``refresh()`` after
configuring it later.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from functools import cache
from typing import TYPE_CHECKING

from .exceptions import error_type
from .states import AttemptOutcome

if TYPE_CHECKING:
    from opentelemetry.trace import Span, Tracer

    from .models import Job
    from .values import Claimed, Report

SYSTEM = "django_jobs"


@cache
def tracer() -> Tracer | None:
    """Our tracer, or None when nothing would record its spans."""
    try:
        from opentelemetry import trace
    except ImportError:
        return None
    provider = trace.get_tracer_provider()
    if isinstance(provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider):
        return None
    return provider.get_tracer("django_jobs")


def refresh() -> None:
    """Decide again whether to trace: for a tracer provider configured after the first job."""
    tracer.cache_clear()


def _messaging(queue: str, operation: str) -> dict[str, str]:
    return {
        "messaging.system": SYSTEM,
        "messaging.destination.name": queue,
        "messaging.operation.name": operation,
        "messaging.operation.type": operation,
    }


def sending(job: Job, write: Callable[[], Job]) -> Job:
    """Run ``write`` (the insert of ``job``) in a ``send`` span whose context the job carries."""
    if (active := tracer()) is None:
        return write()
    with _send_span(active, job, {"messaging.message.id": str(job.id)}) as span:
        stored = _recording_error(span, write)
        if stored.id != job.id:  # the idempotency key's job: that is the message
            span.set_attribute("messaging.message.id", str(stored.id))
        return stored


def sending_many(prototype: Job, count: int, write: Callable[[], None]) -> None:
    """``sending`` for an ``enqueue_many`` batch: one span, its context on every job."""
    if (active := tracer()) is None:
        write()
        return
    with _send_span(active, prototype, {"messaging.batch.message_count": count}) as span:
        _recording_error(span, write)


@contextlib.contextmanager
def _send_span(active: Tracer, job: Job, attributes: dict[str, str | int]) -> Iterator[Span]:
    """The ``send`` span of ``job`` (or of a batch's prototype), its context stored on it."""
    from opentelemetry import propagate, trace

    with active.start_as_current_span(
        f"send {job.queue}",
        kind=trace.SpanKind.PRODUCER,
        attributes={
            **_messaging(job.queue, "send"),
            **attributes,
            "django_jobs.task": job.task_name,
        },
    ) as span:
        carrier: dict[str, str] = {}
        propagate.inject(carrier)
        job.trace_context = carrier or None
        yield span


def _recording_error[T](span: Span, write: Callable[[], T]) -> T:
    try:
        return write()
    except BaseException as exc:
        span.set_attribute("error.type", error_type(type(exc)))
        raise


def processing(claimed: Claimed, run: Callable[[], Report]) -> Report:
    """Run one attempt in a ``process`` span, the child of its enqueuer's context."""
    if (active := tracer()) is None:
        return run()
    from opentelemetry import propagate, trace

    parent = propagate.extract(claimed.trace_context) if claimed.trace_context else None
    sent = trace.get_current_span(parent).get_span_context() if parent is not None else None
    links = [trace.Link(sent)] if sent is not None and sent.is_valid else []
    attributes: dict[str, str | int] = {
        **_messaging(claimed.queue, "process"),
        "messaging.message.id": str(claimed.job_id),
        "django_jobs.task": claimed.task_name,
        "django_jobs.attempt": claimed.token,
    }
    with active.start_as_current_span(
        f"process {claimed.queue}",
        context=parent,
        kind=trace.SpanKind.CONSUMER,
        attributes=attributes,
        links=links,
    ) as span:
        report = run()
        if report.outcome not in (AttemptOutcome.SUCCEEDED, AttemptOutcome.SLEPT):
            span.set_attribute("error.type", report.error_type or report.outcome.value)
            span.set_status(trace.Status(trace.StatusCode.ERROR, report.error_message[:500]))
        return report
