"""Django settings for the Django-integrated peers, chosen by ``BENCH_PEER``.

Each peer's documented minimal configuration; database from
``BENCH_DATABASE_URL`` (its own database, made by the harness). django-jobs
itself uses ``benchmarks.settings``.
"""

from __future__ import annotations

import os
from typing import Any

import environ

PEER = os.environ.get("BENCH_PEER", "django-tasks-db")

DATABASES = {"default": environ.Env.db_url_config(os.environ["BENCH_DATABASE_URL"])}
# Django's default CONN_MAX_AGE (0) makes every close_old_connections() call in
# a worker loop open a new PostgreSQL connection; a best setting may keep them.
DATABASES["default"]["CONN_MAX_AGE"] = int(os.environ.get("BENCH_CONN_MAX_AGE", "0"))
SECRET_KEY = "benchmarks-only"
USE_TZ = True
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
INSTALLED_APPS = ["django.contrib.contenttypes", "django.contrib.auth", "benchmarks.benchapp"]
LOGGING = {"version": 1, "disable_existing_loggers": False}
TASKS: dict[str, Any] = {}
Q_CLUSTER: dict[str, Any] = {}

if PEER == "django-tasks-db":
    INSTALLED_APPS.append("django_tasks_db")
    TASKS = {"default": {"BACKEND": "django_tasks_db.DatabaseBackend"}}
elif PEER == "django-ox":
    INSTALLED_APPS.append("django_ox")
    TASKS = {"default": {"BACKEND": "django_ox.backend.OxBackend"}}
elif PEER == "django-q2":
    INSTALLED_APPS.append("django_q")
    # The ORM broker; workers from BENCH_Q2_WORKERS (one process, or the best
    # setting). BENCH_Q2_SAVE_LIMIT unset keeps q2's default save_limit (250).
    Q_CLUSTER = {
        "name": "bench",
        "orm": "default",
        "workers": int(os.environ.get("BENCH_Q2_WORKERS", "1")),
        **(
            {"save_limit": int(os.environ["BENCH_Q2_SAVE_LIMIT"])}
            if "BENCH_Q2_SAVE_LIMIT" in os.environ
            else {}
        ),
        "timeout": 60,
        "retry": 120,
        "log_level": "WARNING",
    }
    TASKS = {"default": {"BACKEND": "django.tasks.backends.dummy.DummyBackend"}}
