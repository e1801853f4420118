"""The metrics view, as a project's URLconf would include it."""

from django.urls import path

from django_jobs.metrics.views import metrics

urlpatterns = [path("metrics/", metrics)]
