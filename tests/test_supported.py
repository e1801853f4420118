"""Which Django versions django-jobs runs on (supported.py, framework.py)."""

from __future__ import annotations

import re
import subprocess
import sys

import django
import pytest
from django.conf import settings
from django.test import override_settings

from django_jobs.supported import check_backport_installed
from tests.conftest import ROOT


def import_django_jobs_as_if(version: tuple[int, int, int], *, backport: bool) -> str:
    """Import django_jobs in a fresh interpreter told it runs ``version``; its last error line.

    Only the version (and whether the backport can be found) is pretended:
    it is all that is read before anything imports the Tasks framework.
    """
    dotted = ".".join(map(str, version))
    script = (
        "import importlib.util, django\n"
        f"django.VERSION = {(*version, 'final', 0)!r}\n"
        f"django.get_version = lambda: {dotted!r}\n"
        "real_find_spec = importlib.util.find_spec\n"
        f"importlib.util.find_spec = lambda name, *a: (real_find_spec(name, *a) if {backport!r} "
        "or name != 'django_tasks' else None)\n"
        "import django_jobs\n"
    )
    run = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert run.returncode == 1, run.stderr
    return run.stderr.strip().splitlines()[-1]


def test_a_django_older_than_5_2_is_refused_at_import_with_the_reason() -> None:
    assert import_django_jobs_as_if((5, 1, 4), backport=True) == (
        "django.core.exceptions.ImproperlyConfigured: django-jobs needs Django 5.2 or later; "
        "this is Django 5.1.4. Upgrade Django to 5.2 LTS (with the django-tasks package), "
        "6.0 or 6.1."
    )


def test_django_5_2_without_the_backport_is_refused_saying_what_to_install() -> None:
    assert import_django_jobs_as_if((5, 2, 9), backport=False) == (
        "django.core.exceptions.ImproperlyConfigured: django-jobs on Django 5.2.9 needs the "
        "django-tasks package (the backport of django.tasks, which Django 6.0 added): "
        "pip install django-tasks"
    )


@pytest.mark.parametrize("root", ["django_jobs", "tests", "benchmarks/benchapp"])
def test_only_the_framework_module_imports_the_tasks_framework(root: str) -> None:
    # Anything else importing django.tasks would break on Django 5.2, where the
    # framework is the backport's; tests say what runs, so they follow the rule.
    pattern = re.compile(r"^\s*(from|import) (django\.tasks|django_tasks)\b", re.M)
    offenders = [
        str(path.relative_to(ROOT))
        for path in sorted((ROOT / root).rglob("*.py"))
        if pattern.search(path.read_text()) and path != ROOT / "django_jobs" / "framework.py"
    ]

    assert offenders == []


@pytest.mark.skipif(django.VERSION >= (6, 0), reason="Django 6 runs backend checks itself")
def test_django_5_2_without_the_backport_app_fails_the_system_check() -> None:
    installed = [app for app in settings.INSTALLED_APPS if app != "django_tasks"]
    with override_settings(INSTALLED_APPS=installed):
        errors = check_backport_installed()

    assert [(error.id, error.hint) for error in errors] == [
        ("django_jobs.E010", 'Add "django_tasks" to INSTALLED_APPS.')
    ]


def test_the_backport_app_check_passes_where_the_framework_is_in_place() -> None:
    assert check_backport_installed() == []
