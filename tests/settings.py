"""Settings for the test suite.

PostgreSQL is the ``default`` database whenever one answers (``DATABASE_URL``,
else the local server); SQLite is always there as ``sqlite`` for the tests that
run the same engine on one host. Worker processes started by the tests read
the test database names from the environment, so they work on the very
databases pytest-django created.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import django
import environ

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_URL = "postgres://root@127.0.0.1:5432/django_jobs"


def _postgres() -> dict[str, Any] | None:
    url = os.environ.get("DATABASE_URL", DEFAULT_URL)
    config: dict[str, Any] = environ.Env.db_url_config(url)
    if config["ENGINE"] != "django.db.backends.postgresql":
        return None
    if "DJANGO_JOBS_TEST_DB" in os.environ:  # a worker started by a test
        config["NAME"] = os.environ["DJANGO_JOBS_TEST_DB"]
        config["TEST"] = {"NAME": config["NAME"]}
        return config
    import psycopg

    try:
        psycopg.connect(
            dbname="postgres",
            user=config.get("USER") or None,
            password=config.get("PASSWORD") or None,
            host=config.get("HOST") or None,
            port=config.get("PORT") or None,
            connect_timeout=3,
        ).close()
    except psycopg.OperationalError as exc:
        POSTGRES_PROBLEM.append(f"{exc}".strip().splitlines()[0])
        return None
    return config


POSTGRES_PROBLEM: list[str] = []
_SQLITE_FILE = os.environ.get(
    "DJANGO_JOBS_TEST_SQLITE",
    str(Path(tempfile.gettempdir()) / f"django_jobs_test_{os.getpid()}.sqlite3"),
)
SQLITE: dict[str, Any] = {
    "ENGINE": "django.db.backends.sqlite3",
    "NAME": _SQLITE_FILE,
    "TEST": {"NAME": _SQLITE_FILE, "DEPENDENCIES": []},
    "OPTIONS": {
        "transaction_mode": "IMMEDIATE",
        "timeout": 30,
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
    },
}
_pg = _postgres()
POSTGRES_AVAILABLE = _pg is not None
DATABASES = {
    "default": _pg
    or {**SQLITE, "NAME": _SQLITE_FILE + ".default", "TEST": {"NAME": _SQLITE_FILE + ".default"}},
    "sqlite": SQLITE,
}

SECRET_KEY = "tests-only-not-secret"
DEBUG = False
USE_TZ = True
# Users are made in many tests; the real hasher spends 0.4 s of CPU on each.
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
TIME_ZONE = "UTC"
ROOT_URLCONF = "tests.urls"
STATIC_URL = "static/"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
INSTALLED_APPS = [
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.admin",
    "django.contrib.staticfiles",
    "rest_framework",
    "django_jobs",
    "tests.testapp",
]
if django.VERSION < (6, 0):
    INSTALLED_APPS.append("django_tasks")  # the backport of django.tasks, on Django 5.2
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]

TASKS = {
    "default": {
        "BACKEND": "django_jobs.backend.JobsBackend",
        "QUEUES": ["default", "other"],
        "OPTIONS": {"BACKOFF_BASE_SECONDS": 0.05, "BACKOFF_CAP_SECONDS": 0.5},
    },
    # Same database and queues as "default", with leases short enough that the
    # tests of expiry and shutdown take seconds, not the default ten.
    "fast": {
        "BACKEND": "django_jobs.backend.JobsBackend",
        "QUEUES": ["default", "other"],
        "OPTIONS": {
            "LEASE_SECONDS": 2.0,
            "HEARTBEAT_SECONDS": 0.5,
            "REAP_SECONDS": 0.5,
            "SHUTDOWN_GRACE_SECONDS": 1.0,
            "CANCEL_GRACE_SECONDS": 1.0,
            "STOP_GRACE_SECONDS": 1.0,
            "POLL_SECONDS": 0.2,
            "BACKOFF_BASE_SECONDS": 0.05,
            "BACKOFF_CAP_SECONDS": 0.5,
        },
    },
    # As "default", with no attempt claimed ahead of a free thread (worker/prefetch.py).
    "no_prefetch": {
        "BACKEND": "django_jobs.backend.JobsBackend",
        "QUEUES": ["default", "other"],
        "OPTIONS": {"PREFETCH": 0},
    },
    # Flow control: every rule on a queue of its own, and polling instead of LISTEN.
    "flow": {
        "BACKEND": "django_jobs.backend.JobsBackend",
        "QUEUES": ["default", "limited", "keyed", "fair", "rated", "keyrated"],
        "OPTIONS": {
            "LISTEN": False,
            "POLL_SECONDS": 0.2,
            "QUEUE_CONCURRENCY": {"limited": 2},
            "KEY_CONCURRENCY": {"keyed": 1},
            "FAIR_QUEUES": {"fair": {}},
            "RATE_LIMITS": {"rated": (5, 1.0)},
            "KEY_RATE_LIMITS": {"keyrated": (2, 1.0)},
        },
    },
    # A fair queue exactly as docs/flow.md sets one up, every other option at its default.
    "fair": {
        "BACKEND": "django_jobs.backend.JobsBackend",
        "QUEUES": ["default"],
        "OPTIONS": {"FAIR_QUEUES": {"default": {}}},
    },
    "sqlite": {
        "BACKEND": "django_jobs.backend.JobsBackend",
        "QUEUES": ["default", "other"],
        "OPTIONS": {
            "DATABASE": "sqlite",
            "POLL_SECONDS": 0.05,
            "BACKOFF_BASE_SECONDS": 0.05,
            "BACKOFF_CAP_SECONDS": 0.5,
        },
    },
}

# tests/test_tracing.py: a worker process started with this set exports its spans to the file.
if os.environ.get("DJANGO_JOBS_TEST_SPANS"):
    from tests.span_file import export_spans_to

    export_spans_to(os.environ["DJANGO_JOBS_TEST_SPANS"])

# tests/test_tracing.py: a worker process started with this set has a span processor that raises.
if os.environ.get("DJANGO_JOBS_TEST_BROKEN_TRACER"):
    from tests.span_file import break_tracing

    break_tracing()
