"""The Django versions django-jobs runs on, refused clearly at import otherwise.

Django 6.0 and 6.1 have ``django.tasks``; Django 5.2 LTS has the same API
from the ``django-tasks`` backport package, which pip cannot install for it
(a requirement cannot depend on the Django version installed). pip keeps an
older Django out, but an install forced past that, or a 5.2 project without
the backport, would fail at an import with a bare ``ModuleNotFoundError``
that names neither django-jobs nor what to do.
"""

from __future__ import annotations

import importlib.util

import django
from django.apps import apps
from django.core import checks
from django.core.exceptions import ImproperlyConfigured

if django.VERSION < (5, 2):
    raise ImproperlyConfigured(
        f"django-jobs needs Django 5.2 or later; this is Django {django.get_version()}. "
        "Upgrade Django to 5.2 LTS (with the django-tasks package), 6.0 or 6.1."
    )
if django.VERSION < (6, 0) and importlib.util.find_spec("django_tasks") is None:
    raise ImproperlyConfigured(
        f"django-jobs on Django {django.get_version()} needs the django-tasks package "
        "(the backport of django.tasks, which Django 6.0 added): pip install django-tasks"
    )


def check_backport_installed(**kwargs: object) -> list[checks.CheckMessage]:
    """On Django 5.2, the backport as an installed app: it runs the backends' checks.

    Django 6 runs every backend's system checks itself; the backport does it
    (and logs task events) only from its app's ``ready``, so without it in
    ``INSTALLED_APPS`` none of django-jobs' configuration checks would run.
    """
    if django.VERSION >= (6, 0) or apps.is_installed("django_tasks"):
        return []
    return [
        checks.Error(
            f"Django {django.get_version()} takes django.tasks from the django-tasks "
            "package, which must be in INSTALLED_APPS.",
            hint='Add "django_tasks" to INSTALLED_APPS.',
            id="django_jobs.E010",
        )
    ]
