"""The dashboard: is work flowing, and who is doing it.

Per queue: how many jobs wait (due now, or scheduled for later), run, and are
held in quarantine; how long the oldest due job has waited; how many jobs
finished in the last 5 minutes and the last hour, and how many of those ended
in failure. Then the live workers, with the stale ones marked.

The numbers come from ``statistics.queue_stats``, as the API's and ``jobs
stats``'s do, limited to the live states: each is read with a bounded query
that an index serves (live states through the partial claim/lease indexes,
finished work through the ``finished_at`` index limited to the last hour).
Nothing here counts the whole history, which is most of a production table.

Above the tables, four charts of the last hour (``timeseries.py``: throughput,
failures, due depth, pickup latency), drawn by ``django_jobs/charts.js`` from
``timeseries_view``'s JSON, which the page polls every ``REFRESH_SECONDS``.
The JSON answers to the dashboard's own permission.

Each queue row has Pause/Resume (``pause_view``, permission
``django_jobs.pause_queue``, through ``control.pause_queue``). Schedules are
listed soonest first, with when each fires next (at most ``SCHEDULES_SHOWN``;
the schedules page has them all).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import (
    HttpRequest,
    HttpResponse,
    HttpResponseNotAllowed,
    HttpResponseRedirect,
    JsonResponse,
)
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from .. import control
from ..backend import jobs_backend
from ..exceptions import OperatorRequestError
from ..models import Job, Schedule, Worker, leases_held, paused_queues
from ..states import JobState
from ..statistics import WINDOWS, QueueStats, queue_stats
from ..timeseries import timeseries

if TYPE_CHECKING:
    from django_stubs_ext import StrOrPromise

    from .jobs import JobAdmin

# States an operator must look at: they will not move on their own.
HELD_STATES = (JobState.QUARANTINED,)
SHOWN_STATES = (
    JobState.QUEUED,
    JobState.WAITING,
    JobState.RUNNING,
    JobState.CANCELLING,
    *HELD_STATES,
)
SCHEDULES_SHOWN = 50
# How often the open page asks for fresh charts: a minute bucket fills in a
# dozen steps, and each ask costs a handful of indexed queries.
REFRESH_SECONDS = 5


@dataclass(frozen=True)
class Chart:
    key: str
    title: StrOrPromise
    # (key, label) per series, in the order charts.js stacks or draws them.
    series: tuple[tuple[str, StrOrPromise], ...]
    help: StrOrPromise


# The words around each chart; charts.js draws the same keys.
CHARTS = (
    Chart(
        "throughput",
        gettext_lazy("Throughput: attempts ended per minute"),
        (
            ("succeeded", gettext_lazy("succeeded")),
            ("retried", gettext_lazy("retried")),
            ("failed", gettext_lazy("failed")),
            ("cancelled", gettext_lazy("cancelled")),
        ),
        gettext_lazy(
            "Retried: failed, timed out or lost, and the job runs again. Failed: the same, "
            "and the job will not run again unless someone retries it."
        ),
    ),
    Chart(
        "failures",
        gettext_lazy("Failures per minute"),
        (
            ("failed_attempts", gettext_lazy("failed attempts")),
            ("failed_jobs", gettext_lazy("jobs failed")),
        ),
        gettext_lazy(
            "Failed attempts: retried plus failed above. Jobs failed: jobs that ended "
            "failed, exhausted or expired, as the failures column counts them."
        ),
    ),
    Chart(
        "depth",
        gettext_lazy("Queue depth: due jobs waiting"),
        (("depth", gettext_lazy("due jobs waiting")),),
        gettext_lazy(
            "At the end of each minute (the last point is now), rebuilt from when jobs became "
            "due and were claimed; a retry's backoff counts as waiting."
        ),
    ),
    Chart(
        "latency",
        gettext_lazy("Pickup latency: claim time minus due time"),
        (("p50", gettext_lazy("p50")), ("p95", gettext_lazy("p95")), ("p99", gettext_lazy("p99"))),
        gettext_lazy(
            "Percentiles (the upper bound of the histogram bucket each falls in), in seconds, "
            "of the claims started in each minute; a gap is a "
            "minute with no claim measured."
        ),
    ),
)


@dataclass(frozen=True)
class WorkerRow:
    worker: Worker
    running: int
    stale: bool
    heartbeat_age: timedelta


def live_workers(db: str, now: datetime, stale_after: timedelta) -> list[WorkerRow]:
    workers = (
        Worker.objects.using(db)
        .filter(stopped_at__isnull=True)
        .annotate(running=leases_held(db))
        .order_by("host", "pid")
    )
    return [
        WorkerRow(
            worker=worker,
            running=worker.running,
            stale=now - worker.heartbeat_at > stale_after,
            heartbeat_age=now - worker.heartbeat_at,
        )
        for worker in workers
    ]


def _row(queue: QueueStats, paused: set[str]) -> dict[str, Any]:
    """One table row, every cell computed here so the template only prints."""
    return {
        "name": queue.queue,
        "due": queue.ready,
        "scheduled": queue.scheduled,
        "depth": [queue.by_state[s] for s in SHOWN_STATES if s != JobState.QUEUED],
        "oldest_due": queue.oldest_due,
        "finished": [queue.finished[key] for key in WINDOWS],
        "succeeded": [queue.succeeded[key] for key in WINDOWS],
        "failures": [queue.failed[key] for key in WINDOWS],
        "failing": any(queue.failed.values()),
        "paused": queue.queue in paused,
    }


def view(model_admin: JobAdmin, request: HttpRequest) -> TemplateResponse:
    if not model_admin.has_view_permission(request):
        raise PermissionDenied
    backend = jobs_backend("default")
    now = timezone.now()
    stale_after = timedelta(seconds=backend.settings.WORKER_STALE_SECONDS)
    queues = queue_stats(
        Job.objects.using(backend.db), backend.queues or (), now, states=SHOWN_STATES
    )
    workers = live_workers(backend.db, now, stale_after)
    paused = paused_queues(backend.db)
    opts = model_admin.model._meta
    context = {
        **model_admin.admin_site.each_context(request),
        "title": _("Jobs dashboard"),
        "subtitle": None,
        "opts": opts,
        "now": now,
        "queues": [_row(queue, paused) for queue in queues],
        "can_pause": request.user.has_perm("django_jobs.pause_queue"),
        "depth_states": [state for state in SHOWN_STATES if state != JobState.QUEUED],
        "workers": workers,
        "stale_seconds": backend.settings.WORKER_STALE_SECONDS,
        # Enabled first, soonest first; a disabled schedule's next_fire_at is stale.
        "schedules": list(
            Schedule.objects.using(backend.db).order_by("-enabled", "next_fire_at", "name")[
                :SCHEDULES_SHOWN
            ]
        ),
        "media": model_admin.media,
        "timeseries_url": reverse("admin:django_jobs_dashboard_timeseries"),
        "charts": CHARTS,
        "refresh_seconds": REFRESH_SECONDS,
    }
    return TemplateResponse(request, "django_jobs/admin/dashboard.html", context)


def timeseries_view(model_admin: JobAdmin, request: HttpRequest) -> JsonResponse:
    """The charts' numbers as JSON; ``?queue=NAME`` limits them to one queue."""
    if not model_admin.has_view_permission(request):
        raise PermissionDenied
    if request.method != "GET":
        return JsonResponse({"error": "Only GET is allowed here."}, status=405)
    unknown = sorted(set(request.GET) - {"queue"})
    if unknown:
        return JsonResponse(
            {"error": f"Unknown parameter {', '.join(unknown)}; the only one is 'queue'."},
            status=400,
        )
    backend = jobs_backend("default")
    queue = request.GET.get("queue")
    if queue is not None and backend.queues and queue not in backend.queues:
        configured = ", ".join(sorted(backend.queues))
        return JsonResponse(
            {"error": f"Unknown queue {queue!r}; the configured queues are {configured}."},
            status=400,
        )
    # admin_view marks it never_cache: a poll never reads a stale copy.
    series = timeseries(Job.objects.using(backend.db), timezone.now(), queue=queue)
    return JsonResponse(series.as_json())


def pause_view(model_admin: JobAdmin, request: HttpRequest, queue: str) -> HttpResponse:
    """Pause or resume one queue from the dashboard, through control.pause_queue/resume_queue."""
    if request.method != "POST":
        return HttpResponseNotAllowed(["POST"])
    if not request.user.has_perm("django_jobs.pause_queue"):
        raise PermissionDenied
    pause = request.POST.get("pause") == "1"
    note = request.POST.get("note", "")
    verb = control.pause_queue if pause else control.resume_queue
    try:
        changed = verb(queue, actor=request.user, note=note)
    except OperatorRequestError as exc:
        messages.error(request, str(exc))
    else:
        done = _("paused") if pause else _("resumed")
        if changed:
            messages.success(
                request, _("Queue %(queue)s %(done)s.") % {"queue": queue, "done": done}
            )
        else:
            messages.info(
                request, _("Queue %(queue)s was already %(done)s.") % {"queue": queue, "done": done}
            )
    return HttpResponseRedirect(reverse("admin:django_jobs_dashboard"))
