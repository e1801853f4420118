"""The REST API: job status and repair over Django REST framework.

Mount it in a project's URLconf::

    path("api/jobs/", include("django_jobs.api.urls"))

It reads jobs, their attempts and audit trail, queue depths and workers, and
acts on jobs only through the operator verbs of ``django_jobs.control``, so the
API can change nothing that the admin and the CLI could not. Who may see and do
what is decided by one pluggable authority policy (``permissions.py``),
configured by the ``DJANGO_JOBS_API`` setting (``conf.py``); ``docs/api.md``
is the user's page.

Importing this subpackage needs djangorestframework, django-filter and
drf-spectacular; the rest of django_jobs does not import it.
"""

from django.apps import apps
from django.core.exceptions import ImproperlyConfigured

if not apps.is_installed("django_jobs"):
    # Said before the views import the models, which would fail with a RuntimeError.
    raise ImproperlyConfigured(
        "django_jobs.api needs 'django_jobs' in INSTALLED_APPS: add it (and "
        "'rest_framework'), then run migrate."
    )
