"""Settings as docs/quickstart.md and docs/api.md give them, and nothing more.

The tests set three variables (``tests/conftest.py``, ``minimal_project``):
``MINIMAL_DB`` is the SQLite database's NAME; ``MINIMAL_APPS_WITHOUT`` drops
apps from INSTALLED_APPS, so a test can show what a user who forgot one is
told; ``MINIMAL_API=0`` leaves the API out of the URLconf.
"""

import os

import django

SECRET_KEY = "minimal-project-not-secret"
DEBUG = True
ALLOWED_HOSTS = ["localhost", "127.0.0.1", "testserver"]
USE_TZ = True

_without = set(filter(None, os.environ.get("MINIMAL_APPS_WITHOUT", "").split(",")))
INSTALLED_APPS = [
    app
    for app in [
        "django.contrib.admin",
        "django.contrib.auth",
        "django.contrib.contenttypes",
        "django.contrib.sessions",
        "django.contrib.messages",
        "django.contrib.staticfiles",
        "rest_framework",
        "django_jobs",
        "minimal_project",
        # Django 5.2 has django.tasks from the django-tasks backport, an app.
        *(["django_tasks"] if django.VERSION < (6, 0) else []),
    ]
    if app not in _without
]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]
ROOT_URLCONF = "minimal_project.urls"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": os.environ.get("MINIMAL_DB", "db.sqlite3"),
        "OPTIONS": {"transaction_mode": "IMMEDIATE"},
    }
}
TASKS = {"default": {"BACKEND": "django_jobs.backend.JobsBackend"}}
STATIC_URL = "static/"
