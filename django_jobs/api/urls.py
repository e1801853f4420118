"""The API's URLs; include them under a prefix of your choice::

    path("api/jobs/", include("django_jobs.api.urls"))

gives ``api/jobs/`` (list), ``api/jobs/<id>/`` (detail),
``api/jobs/<id>/<verb>/`` (POST), ``api/jobs/queues/``,
``api/jobs/queues/<name>/pause/`` and ``.../resume/`` (POST), ``api/jobs/workers/``,
``api/jobs/batches/`` and ``api/jobs/batches/<id>/``, and ``api/jobs/schema/``
(OpenAPI 3). ``DJANGO_JOBS_API`` is checked by
``manage.py check`` (``django_jobs.E008``, so ``runserver`` and ``migrate``
stop on a broken setting) and again at the first request.
"""

from __future__ import annotations

from django.urls import URLPattern, URLResolver, path
from rest_framework.routers import SimpleRouter

from .schema import SchemaView
from .views import (
    BatchViewSet,
    JobViewSet,
    QueuePauseView,
    QueueResumeView,
    QueueStatsView,
    WorkerViewSet,
)

app_name = "django_jobs_api"

router = SimpleRouter()
router.register("workers", WorkerViewSet, basename="worker")
router.register("batches", BatchViewSet, basename="batch")
router.register("", JobViewSet, basename="job")

urlpatterns: list[URLPattern | URLResolver] = [
    path("queues/", QueueStatsView.as_view(), name="queues"),
    path("queues/<str:name>/pause/", QueuePauseView.as_view(), name="queue-pause"),
    path("queues/<str:name>/resume/", QueueResumeView.as_view(), name="queue-resume"),
    path("schema/", SchemaView.as_view(), name="schema"),
    *router.urls,
]
