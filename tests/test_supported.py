"""Which Django versions django-jobs runs on (supported.py)."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import ROOT


def test_an_older_django_is_refused_at_import_with_the_reason() -> None:
    # A Django without django.tasks, as a forced install would leave it: the
    # version is all we read before importing django.tasks.
    script = (
        "import django\n"
        "django.VERSION = (5, 1, 4, 'final', 0)\n"
        "django.get_version = lambda: '5.1.4'\n"
        "import django_jobs\n"
    )

    run = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=60
    )

    assert run.returncode == 1
    assert run.stderr.strip().splitlines()[-1] == (
        "django.core.exceptions.ImproperlyConfigured: django-jobs needs Django 6.0 or later, "
        "for django.tasks; this is Django 5.1.4. Upgrade Django to 6.0 or 6.1."
    )
