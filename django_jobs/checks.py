"""The backends' system checks, run by ``manage.py check`` and by every command that runs checks.

Each configuration mistake django-jobs can see becomes one ``django_jobs.E0xx``
message with a hint, never a traceback: ``OPTIONS`` mistakes are kept by the
backend (``JobsBackend.problem``) and reported here, with what the jobs
database needs; the API's are in ``api_checks.py``. The ids and what they
mean are listed in docs/configuration.md ("System checks").
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.conf import settings
from django.core import checks

from .engine import vendors

if TYPE_CHECKING:
    from .backend import JobsBackend


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
    vendor = vendors.of_setting(engine)
    if vendor is None:
        errors.append(
            checks.Error(
                f"{where} keeps jobs in {engine}, which django_jobs does not support.",
                hint="Use PostgreSQL (production) or SQLite (one host).",
                id="django_jobs.E003",
            )
        )
    for option, (accepted, why) in vendors.REQUIRED_OPTIONS.get(vendor or "", {}).items():
        value = str(database.get("OPTIONS", {}).get(option, "")).upper()
        if value not in accepted:
            errors.append(
                checks.Error(
                    f"DATABASES[{backend.db!r}] is {vendors.LABELS[vendor or '']} without "
                    f"OPTIONS[{option!r}] = {accepted[0]!r}.",
                    hint=why,
                    id="django_jobs.E004",
                )
            )
    if vendor == "sqlite" and not settings.USE_TZ and settings.TIME_ZONE != "UTC":
        # SQLite's own clock (CURRENT_TIMESTAMP), which claims, heartbeats and
        # leases read, is UTC; with USE_TZ off Django writes TIME_ZONE's local
        # time, so the two disagree by the zone's offset.
        errors.append(
            checks.Error(
                f"DATABASES[{backend.db!r}] is SQLite with USE_TZ = False and TIME_ZONE = "
                f"{settings.TIME_ZONE!r}: SQLite's clock is UTC and Django writes local "
                "times, so jobs would come due hours early or late and live workers would "
                "look dead.",
                hint='Set USE_TZ = True (Django\'s default), or TIME_ZONE = "UTC".',
                id="django_jobs.E011",
            )
        )
    return errors
