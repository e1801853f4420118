import os

from django.contrib import admin
from django.urls import URLPattern, URLResolver, include, path

from .views import enqueue_ping

urlpatterns: list[URLPattern | URLResolver] = [
    path("admin/", admin.site.urls),
    path("ping/", enqueue_ping),
]
if os.environ.get("MINIMAL_API", "1") == "1":
    urlpatterns.append(path("api/jobs/", include("django_jobs.api.urls")))
