"""The ``DJANGO_JOBS_API`` setting, read through one object and checked strictly.

Like ``TASKS[...]["OPTIONS"]`` (``django_jobs.conf``), an unknown key or a
value of the wrong kind raises ``ImproperlyConfigured`` instead of being
ignored: a misspelt ``AUTHORITY_POLICY`` silently falling back to the default
would change who may discard jobs. The setting is read again when tests
change it (``setting_changed``). ``manage.py check`` validates it
(``django_jobs.E008``), so ``runserver``, ``migrate`` and the workers stop on
a broken setting before the API serves anything.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed
from django.dispatch import receiver
from django.utils.module_loading import import_string

from django_jobs.exceptions import NotAJobsBackendError

if TYPE_CHECKING:
    from .authority import Authority

SETTING = "DJANGO_JOBS_API"

DEFAULTS: dict[str, Any] = {
    # Dotted path of the Authority subclass that decides who sees and does what.
    "AUTHORITY_POLICY": "django_jobs.api.permissions.DefaultAuthority",
    # Dotted path of a callable(user) -> iterable of tenant names the user may act for.
    "TENANTS_FOR_USER": "django_jobs.api.permissions.no_tenants",
    # The TASKS alias whose jobs the API serves: its database, and the backend
    # the operator verbs are applied through.
    "BACKEND": "default",
    # Jobs and workers per page, unless the client asks for ?page_size= (at most MAX_PAGE_SIZE).
    "PAGE_SIZE": 50,
    "MAX_PAGE_SIZE": 500,
}

TenantsForUser = Callable[[Any], Iterable[str]]


@dataclass(frozen=True, slots=True)
class APISettings:
    authority: Authority
    tenants_for_user: TenantsForUser
    backend: str
    database: str
    page_size: int
    max_page_size: int


def _where(key: str) -> str:
    return f"{SETTING}[{key!r}]"


def _import(key: str, value: Any) -> Any:
    if not isinstance(value, str) or not value:
        raise ImproperlyConfigured(f"{_where(key)} must be a dotted path, not {value!r}.")
    try:
        return import_string(value)
    except ImportError as exc:
        raise ImproperlyConfigured(f"{_where(key)} = {value!r} cannot be imported: {exc}") from exc


def load(user_settings: Any) -> APISettings:
    """Validate ``DJANGO_JOBS_API`` and build what the views use."""
    from django_jobs.backend import jobs_backend

    from .authority import Authority

    if user_settings is None:
        user_settings = {}
    if not isinstance(user_settings, dict):
        raise ImproperlyConfigured(f"{SETTING} must be a dict, not {user_settings!r}.")
    unknown = sorted(set(user_settings) - set(DEFAULTS))
    if unknown:
        raise ImproperlyConfigured(
            f"{SETTING} has unknown key(s) {', '.join(unknown)}; "
            f"known keys are {', '.join(sorted(DEFAULTS))}."
        )
    values = {**DEFAULTS, **user_settings}

    policy = _import("AUTHORITY_POLICY", values["AUTHORITY_POLICY"])
    if not (isinstance(policy, type) and issubclass(policy, Authority)):
        raise ImproperlyConfigured(
            f"{_where('AUTHORITY_POLICY')} must name a subclass of "
            f"django_jobs.api.permissions.Authority, not {policy!r}."
        )
    tenants_for_user = _import("TENANTS_FOR_USER", values["TENANTS_FOR_USER"])
    if not callable(tenants_for_user):
        raise ImproperlyConfigured(
            f"{_where('TENANTS_FOR_USER')} must name a callable(user) -> tenant names."
        )

    alias = values["BACKEND"]
    if not isinstance(alias, str):
        raise ImproperlyConfigured(f"{_where('BACKEND')} must be a TASKS alias, not {alias!r}.")
    try:
        backend = jobs_backend(alias)
    except NotAJobsBackendError as exc:
        raise NotAJobsBackendError(f"{_where('BACKEND')}: {exc}") from exc

    sizes = {}
    for key in ("PAGE_SIZE", "MAX_PAGE_SIZE"):
        value = values[key]
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ImproperlyConfigured(f"{_where(key)} must be a whole number >= 1, not {value!r}.")
        sizes[key] = value
    if sizes["PAGE_SIZE"] > sizes["MAX_PAGE_SIZE"]:
        raise ImproperlyConfigured(
            f"{_where('PAGE_SIZE')} ({sizes['PAGE_SIZE']}) must not exceed "
            f"MAX_PAGE_SIZE ({sizes['MAX_PAGE_SIZE']})."
        )
    return APISettings(
        authority=policy(),
        tenants_for_user=tenants_for_user,
        backend=alias,
        database=backend.db,
        page_size=sizes["PAGE_SIZE"],
        max_page_size=sizes["MAX_PAGE_SIZE"],
    )


_cached: APISettings | None = None


def api_settings() -> APISettings:
    """The validated settings, loaded on first use and after every change."""
    global _cached
    if _cached is None:
        _cached = load(getattr(settings, SETTING, None))
    return _cached


@receiver(setting_changed)
def _reset(*, setting: str, **kwargs: Any) -> None:
    global _cached
    if setting in (SETTING, "TASKS"):
        _cached = None
