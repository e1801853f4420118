"""The admin and the REST API side by side, for tests that compare what they show."""

from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/jobs/", include("django_jobs.api.urls")),
]
