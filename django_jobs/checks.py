"""System checks, run by ``manage.py check`` and by every command that runs checks.

Each configuration mistake django-jobs can see becomes one ``django_jobs.E0xx``
message with a hint, never a traceback: ``OPTIONS`` mistakes are kept by the
backend (``JobsBackend.problem``) and reported here; the database and the API
are looked at here. The ids and what they mean are listed in
docs/configuration.md ("System checks").
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from django.apps import AppConfig, apps
from django.conf import settings
from django.core import checks
from django.core.exceptions import ImproperlyConfigured
from django.urls import URLPattern, URLResolver, get_resolver

if TYPE_CHECKING:
    from .backend import JobsBackend

SUPPORTED_VENDORS = ("postgresql", "sqlite3")
API_URLCONF = "django_jobs.api.urls"
API_HINT = "See 'Configuration: DJANGO_JOBS_API' in django-jobs' docs/api.md."


def check_backend(backend: JobsBackend) -> list[checks.CheckMessage]:
    """The backend's own checks; Django's Tasks framework calls them through ``check()``."""
    problem = backend.problem
    if problem is not None:
        return [checks.Error(str(problem), hint=problem.hint, id=problem.check_id)]
    where = f"TASKS[{backend.alias!r}]"
    errors: list[checks.CheckMessage] = []
    database = settings.DATABASES.get(backend.db)
    if database is None:
        errors.append(
            checks.Error(
                f"{where}['OPTIONS']['DATABASE'] is {backend.db!r}, which is not in DATABASES.",
                hint=f"Use an alias of DATABASES: {', '.join(sorted(settings.DATABASES))}.",
                id="django_jobs.E002",
            )
        )
        return errors
    engine = database.get("ENGINE", "")
    vendor = engine.rsplit(".", 1)[-1].replace("postgresql_psycopg2", "postgresql")
    if vendor not in SUPPORTED_VENDORS:
        errors.append(
            checks.Error(
                f"{where} keeps jobs in {engine}, which django_jobs does not support.",
                hint="Use PostgreSQL (production) or SQLite (one host).",
                id="django_jobs.E003",
            )
        )
    if vendor == "sqlite3":
        mode = str(database.get("OPTIONS", {}).get("transaction_mode", "")).upper()
        if mode not in ("IMMEDIATE", "EXCLUSIVE"):
            errors.append(
                checks.Error(
                    f"DATABASES[{backend.db!r}] is SQLite without "
                    "OPTIONS['transaction_mode'] = 'IMMEDIATE'.",
                    hint="SQLite has no row locks; django_jobs serialises claims with "
                    "BEGIN IMMEDIATE. Without it, concurrent workers fail with "
                    "'database is locked'.",
                    id="django_jobs.E004",
                )
            )
    return errors


@checks.register("django_jobs")
def check_api(
    *,
    app_configs: Sequence[AppConfig] | None = None,
    databases: Sequence[str] | None = None,
    **kwargs: Any,
) -> list[checks.CheckMessage]:
    """``DJANGO_JOBS_API`` and the browsable API, where the API is mounted or configured."""
    configured = hasattr(settings, "DJANGO_JOBS_API")
    mounted = api_mounted()
    if not (configured or mounted):
        return []
    from .api.conf import SETTING, load

    errors: list[checks.CheckMessage] = []
    try:
        load(getattr(settings, SETTING, None))
    except ImproperlyConfigured as exc:
        errors.append(checks.Error(str(exc), hint=API_HINT, id="django_jobs.E008"))
    if mounted and not apps.is_installed("rest_framework") and _browsable():
        errors.append(
            checks.Error(
                f"{API_URLCONF} is mounted and renders the browsable API, but "
                "'rest_framework' is not in INSTALLED_APPS, so its pages cannot find "
                "their templates.",
                hint="Add 'rest_framework' to INSTALLED_APPS, or leave "
                "rest_framework.renderers.BrowsableAPIRenderer out of "
                "REST_FRAMEWORK['DEFAULT_RENDERER_CLASSES'].",
                id="django_jobs.E009",
            )
        )
    return errors


def api_mounted() -> bool:
    """Whether the project's URLconf includes ``django_jobs.api.urls`` anywhere."""
    if not getattr(settings, "ROOT_URLCONF", None):
        return False
    try:
        patterns = get_resolver().url_patterns
    except Exception:  # a URLconf that does not import: Django's URL check says why
        return False
    return _includes_api(patterns)


def _includes_api(patterns: list[URLPattern | URLResolver]) -> bool:
    for pattern in patterns:
        if isinstance(pattern, URLResolver):
            module = pattern.urlconf_module
            if getattr(module, "__name__", module) == API_URLCONF:
                return True
            if _includes_api(pattern.url_patterns):
                return True
    return False


def _browsable() -> bool:
    from rest_framework.renderers import BrowsableAPIRenderer
    from rest_framework.settings import api_settings

    return any(
        isinstance(renderer, type) and issubclass(renderer, BrowsableAPIRenderer)
        for renderer in api_settings.DEFAULT_RENDERER_CLASSES  # classes: DRF imports them
    )
