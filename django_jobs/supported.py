"""The Django versions django-jobs runs on, refused clearly at import otherwise.

pip keeps an older Django out (the package requires 6.0 or later), but an
install forced past that would fail at ``import django.tasks`` with a bare
``ModuleNotFoundError`` that names neither django-jobs nor what to do.
"""

from __future__ import annotations

import django
from django.core.exceptions import ImproperlyConfigured

OLDEST = (6, 0)

if django.VERSION < OLDEST:
    raise ImproperlyConfigured(
        f"django-jobs needs Django 6.0 or later, for django.tasks; this is Django "
        f"{django.get_version()}. Upgrade Django to 6.0 or 6.1."
    )
