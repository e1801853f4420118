"""The metrics view, and a view that enqueues inside a traced request (test_tracing.py)."""

from django.http import HttpRequest, HttpResponse
from django.urls import path

from django_jobs.metrics.views import metrics
from tests.testapp.tasks import add


def enqueue_add(request: HttpRequest) -> HttpResponse:
    """Enqueue one job, inside the request's span when tracing is on (as instrumentation makes)."""
    from opentelemetry import trace

    with trace.get_tracer("tests").start_as_current_span(
        "GET /enqueue/", kind=trace.SpanKind.SERVER
    ):
        result = add.enqueue(2, 3)
    return HttpResponse(result.id)


urlpatterns = [
    path("metrics/", metrics),
    path("enqueue/", enqueue_add),
]
