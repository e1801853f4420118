"""Every configuration mistake is a ``django_jobs.E0xx`` system-check message, never a traceback.

What ``manage.py check`` says is what ``runserver``, ``migrate`` and
``runworkers`` say before they start. The tests that need a project set up
differently from the suite's (an app left out of INSTALLED_APPS, an in-memory
database) run ``manage.py`` of tests/minimal_project in a process of its own.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from typing import Any

import pytest
from django.core import checks
from django.core.management import call_command
from django.core.management.base import CommandError, SystemCheckError
from django.test import override_settings

from django_jobs.backend import jobs_backend
from django_jobs.exceptions import ConfigurationError
from django_jobs.framework import task_backends
from tests.conftest import backend_settings
from tests.testapp.tasks import add

Run = Callable[..., subprocess.CompletedProcess[str]]


def messages(**options: Any) -> list[checks.CheckMessage]:
    with override_settings(TASKS=backend_settings(**options)):
        return task_backends["default"].check()


def test_check__a_misspelt_option_is_e005_naming_the_closest_option() -> None:
    (message,) = messages(LEASE_SECOND=5)

    assert message.id == "django_jobs.E005"
    assert message.msg == (
        "TASKS['default']['OPTIONS'] has unknown option(s) LEASE_SECOND "
        "(did you mean LEASE_SECONDS?)."
    )
    assert message.hint is not None and message.hint.startswith(
        "Known options are BACKOFF_BASE_SECONDS, BACKOFF_CAP_SECONDS, CANCEL_GRACE_SECONDS,"
    )


def test_check__a_wrong_value_is_e006_naming_the_option() -> None:
    (message,) = messages(MAX_ATTEMPTS=0)

    assert (message.id, message.msg) == (
        "django_jobs.E006",
        "TASKS['default']['OPTIONS']['MAX_ATTEMPTS'] must be at least 1.",
    )
    assert message.hint == "See the OPTIONS table in django-jobs' docs/configuration.md."


def test_check__a_bad_cron_is_e007_naming_the_schedule() -> None:
    schedules = {"nightly": {"task": "tests.testapp.tasks.add", "cron": "61 * * * *"}}

    (message,) = messages(SCHEDULES=schedules)

    assert message.id == "django_jobs.E007"
    assert message.msg.startswith(
        "TASKS['default']['OPTIONS']['SCHEDULES']['nightly']: cron '61 * * * *' is not valid"
    )
    assert message.hint == "See 'Declaring schedules in code' in django-jobs' docs/schedules.md."


@pytest.mark.django_db(databases=["default", "sqlite"])
def test_check__manage_py_check_reports_the_message_not_a_traceback() -> None:
    with (
        override_settings(TASKS=backend_settings(LEASE_SECOND=5)),
        pytest.raises(SystemCheckError) as reported,
    ):
        call_command("check")

    assert "django_jobs.E005" in str(reported.value)
    assert "(did you mean LEASE_SECONDS?)" in str(reported.value)


def test_enqueue__on_a_misconfigured_backend_raises_the_check_message() -> None:
    with (
        override_settings(TASKS=backend_settings(MAX_ATTEMPTS=0)),
        pytest.raises(ConfigurationError, match=r"\['MAX_ATTEMPTS'\] must be at least 1\.$"),
    ):
        add.enqueue(1, 2)


def test_runworkers__on_a_misconfigured_backend_stops_with_the_check_message() -> None:
    with (
        override_settings(TASKS=backend_settings(MAX_ATTEMPTS=0)),
        pytest.raises(CommandError, match=r"\['MAX_ATTEMPTS'\] must be at least 1\.$"),
    ):
        call_command("runworkers", skip_checks=True)


def test_jobs_backend__raises_the_configuration_problem() -> None:
    with (
        override_settings(TASKS=backend_settings(LEASE_SECOND=5)),
        pytest.raises(ConfigurationError) as refused,
    ):
        jobs_backend("default")

    assert refused.value.check_id == "django_jobs.E005"


@pytest.mark.django_db(databases=["default", "sqlite"])
def test_check__a_broken_api_setting_is_e008(settings: Any) -> None:
    settings.DJANGO_JOBS_API = {"AUTHORITY": "x"}

    with pytest.raises(SystemCheckError) as reported:
        call_command("check")

    assert "django_jobs.E008) DJANGO_JOBS_API has unknown key(s) AUTHORITY; known keys are" in str(
        reported.value
    )


def test_minimal_project__passes_every_check(minimal_project: Run) -> None:
    done = minimal_project("check")

    assert (done.returncode, done.stdout.strip()) == (
        0,
        "System check identified no issues (0 silenced).",
    ), done.stderr


def test_check__without_the_app_installed_is_e001_not_a_traceback(minimal_project: Run) -> None:
    done = minimal_project("check", without=("django_jobs",), api=False)

    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    assert (
        "?: (django_jobs.E001) TASKS['default'] uses django_jobs, but 'django_jobs' is not in "
        "INSTALLED_APPS.\n\tHINT: Add 'django_jobs' to INSTALLED_APPS and run migrate."
    ) in done.stderr


def test_enqueue__without_the_app_installed_says_so(minimal_project: Run) -> None:
    code = "from minimal_project.tasks import ping; ping.enqueue()"

    done = minimal_project("shell", "-c", code, without=("django_jobs",), api=False)

    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1] == (
        "django_jobs.exceptions.ConfigurationError: TASKS['default'] uses django_jobs, "
        "but 'django_jobs' is not in INSTALLED_APPS."
    )


def test_api__mounted_without_the_app_installed_says_so(minimal_project: Run) -> None:
    done = minimal_project("check", without=("django_jobs",))

    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1] == (
        "django.core.exceptions.ImproperlyConfigured: django_jobs.api needs 'django_jobs' "
        "in INSTALLED_APPS: add it (and 'rest_framework'), then run migrate."
    )


def test_check__browsable_api_without_rest_framework_installed_is_e009(
    minimal_project: Run,
) -> None:
    done = minimal_project("check", without=("rest_framework",))

    assert done.returncode == 1
    assert "(django_jobs.E009) django_jobs.api.urls is mounted and renders" in done.stderr
    assert "HINT: Add 'rest_framework' to INSTALLED_APPS" in done.stderr


@pytest.mark.parametrize("name", [":memory:", "file:memorydb_default?mode=memory&cache=shared"])
def test_runworkers__refuses_an_in_memory_sqlite_database(minimal_project: Run, name: str) -> None:
    done = minimal_project("runworkers", "--burst", db=name)

    assert done.returncode == 1
    assert done.stderr.strip() == (
        f"CommandError: DATABASES['default'] is an in-memory SQLite database ({name!r}): "
        "each worker process would work on a copy of its own, and no job would change for "
        "anyone else. Give DATABASES['default'] a file NAME (in tests, set "
        "DATABASES['default']['TEST']['NAME'] to a file path)."
    )
