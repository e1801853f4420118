"""System checks for a JobsBackend, run by ``manage.py check`` and at start-up."""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.apps import apps
from django.conf import settings
from django.core import checks

if TYPE_CHECKING:
    from .backend import JobsBackend

SUPPORTED_VENDORS = ("postgresql", "sqlite3")


def check_backend(backend: JobsBackend) -> list[checks.CheckMessage]:
    where = f"TASKS[{backend.alias!r}]"
    errors: list[checks.CheckMessage] = []
    if not apps.is_installed("django_jobs"):
        errors.append(
            checks.Error(
                f"{where} uses django_jobs, but 'django_jobs' is not in INSTALLED_APPS.",
                hint="Add 'django_jobs' to INSTALLED_APPS and run migrate.",
                id="django_jobs.E001",
            )
        )
    database = settings.DATABASES.get(backend.db)
    if database is None:
        errors.append(
            checks.Error(
                f"{where}['OPTIONS']['DATABASE'] is {backend.db!r}, which is not in DATABASES.",
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
