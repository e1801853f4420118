"""The test suite's URLconf for the REST API, mounted where docs/api.md says."""

from django.urls import include, path

urlpatterns = [path("api/jobs/", include("django_jobs.api.urls"))]
