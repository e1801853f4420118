"""The API's system checks: ``DJANGO_JOBS_API`` and the browsable API's needs.

Outside the ``api`` package on purpose: that package needs Django REST
framework to import, and these checks must run, and explain, where it is
missing. Registered by the app (``apps.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.apps import AppConfig, apps
from django.conf import settings
from django.core import checks
from django.core.exceptions import ImproperlyConfigured
from django.urls import URLPattern, URLResolver, get_resolver

API_URLCONF = "django_jobs.api.urls"
API_HINT = "See 'Configuration: DJANGO_JOBS_API' in django-jobs' docs/api.md."


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
