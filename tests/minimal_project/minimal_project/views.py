from django.http import HttpRequest, JsonResponse

from .tasks import ping


def enqueue_ping(request: HttpRequest) -> JsonResponse:
    """A view that enqueues, as a project's views do (and so imports its tasks)."""
    return JsonResponse({"job": ping.enqueue().id})
