"""Settings of the project whose code tests/test_typing.py type-checks; it is never run."""

SECRET_KEY = "type-checking only"
USE_TZ = True
INSTALLED_APPS = [
    "django.contrib.contenttypes",
    "django.contrib.auth",
    "django_jobs",
    "billing",
]
DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}}
TASKS = {
    "default": {
        "BACKEND": "django_jobs.backend.JobsBackend",
        "QUEUES": ["default", "emails", "payments"],
    }
}
