"""Settings for the benchmarks: PostgreSQL from BENCH_DATABASE_URL, one jobs backend."""

from __future__ import annotations

import os

import django
import environ

DATABASES = {
    "default": environ.Env.db_url_config(
        os.environ.get("BENCH_DATABASE_URL", "postgres://root@127.0.0.1:5432/django_jobs_bench")
    )
}
SECRET_KEY = "benchmarks-only"
USE_TZ = True
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
INSTALLED_APPS = [
    "django.contrib.contenttypes",
    "django.contrib.auth",
    "django_jobs",
    "benchmarks.benchapp",
]
if django.VERSION < (6, 0):
    INSTALLED_APPS.append("django_tasks")  # the backport of django.tasks, on Django 5.2
TASKS = {
    "default": {
        "BACKEND": "django_jobs.backend.JobsBackend",
        "QUEUES": ["default"],
        "OPTIONS": {},
    },
    # benchmarks/fairness.py: the same database, a plain and a fair queue. A
    # backend of its own, so the other benchmarks' workers never run the fair
    # claim (each flow-controlled queue costs a statement per claim).
    "fairness": {
        "BACKEND": "django_jobs.backend.JobsBackend",
        "QUEUES": ["plain", "fair"],
        "OPTIONS": {"FAIR_QUEUES": {"fair": {}}},
    },
    # benchmarks/claim_cost.py: one queue per claim path.
    "claims": {
        "BACKEND": "django_jobs.backend.JobsBackend",
        "QUEUES": ["plain", "fair", "limited", "keyed"],
        "OPTIONS": {
            "FAIR_QUEUES": {"fair": {}},
            "QUEUE_CONCURRENCY": {"limited": 100_000},
            "KEY_CONCURRENCY": {"keyed": 1_000},
        },
    },
}
LOGGING = {"version": 1, "disable_existing_loggers": False}
