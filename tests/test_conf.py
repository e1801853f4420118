"""Options are checked strictly when the backend is built, and by manage.py check.

An alias that names no django-jobs backend is refused the same way wherever it is given.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command
from django.core.management.base import CommandError, SystemCheckError
from django.test import override_settings

from django_jobs import framework
from django_jobs.backend import JobsBackend, jobs_backend
from django_jobs.conf import JobsOptions
from django_jobs.exceptions import NotAJobsBackendError
from django_jobs.framework import InvalidTaskBackend, task_backends
from tests.conftest import backend_settings


def test_options__defaults_give_quick_recovery() -> None:
    options = JobsOptions.from_mapping("default", {})
    assert (options.LEASE_SECONDS, options.HEARTBEAT_SECONDS, options.REAP_SECONDS) == (
        10.0,
        2.0,
        2.0,
    )


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"LEASE_SECOND": 5}, r"unknown option\(s\) LEASE_SECOND \(did you mean LEASE_SECONDS\?\)"),
        ({"LEASE_SECONDS": "10"}, r"\['LEASE_SECONDS'\] must be a number of seconds"),
        ({"MAX_ATTEMPTS": 0}, r"\['MAX_ATTEMPTS'\] must be at least 1"),
        ({"MAX_ATTEMPTS": 2**31}, r"\['MAX_ATTEMPTS'\] must be at most 2147483647"),
        ({"RETRY_BUDGET": {"default": (2, float("nan"))}}, r"a window of more than 0 and at most"),
        ({"RATE_LIMITS": {"default": (2, float("inf"))}}, r"a window of more than 0 and at most"),
        ({"FAIR_QUEUES": {"fair": {"a": float("inf")}}}, r"positive weight"),
        ({"LEASE_SECONDS": float("nan")}, r"\['LEASE_SECONDS'\] must be a finite number, not nan"),
        ({"RETENTION_DAYS": float("inf")}, r"\['RETENTION_DAYS'\] must be a finite number"),
        ({"PREFETCH": -1}, r"\['PREFETCH'\] must not be negative"),
        ({"PREFETCH": 0.5}, r"\['PREFETCH'\] must be"),
        ({"LISTEN": "yes"}, r"\['LISTEN'\] must be True or False"),
        ({"TASK_MODULES": "app.tasks"}, r"must be a list of module paths"),
        (
            {"LEASE_SECONDS": 3, "HEARTBEAT_SECONDS": 2},
            r"HEARTBEAT_SECONDS \(2.0\) must be at most half of LEASE_SECONDS \(3.0\)",
        ),
    ],
)
def test_options__refuse_mistakes_with_the_option_named(
    options: dict[str, Any], message: str
) -> None:
    with pytest.raises(ImproperlyConfigured, match=message):
        JobsOptions.from_mapping("default", options)


def test_backend__is_refused_at_first_use_when_misconfigured() -> None:
    with (
        override_settings(TASKS=backend_settings(POLL_SECONDS=-1)),
        pytest.raises(ImproperlyConfigured, match="POLL_SECONDS'\\] must be positive"),
    ):
        jobs_backend("default")


def check_ids(**options: Any) -> list[str]:
    with override_settings(TASKS=backend_settings(**options)):
        return [message.id or "" for message in task_backends["default"].check()]


def test_check__sqlite_without_immediate_transactions_is_an_error(settings: Any) -> None:
    settings.DATABASES["plain"] = {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}
    assert check_ids(DATABASE="plain") == ["django_jobs.E004"]


def test_check__sqlite_with_immediate_transactions_passes() -> None:
    assert check_ids(DATABASE="sqlite") == []


@pytest.mark.parametrize(
    ("use_tz", "zone", "ids"),
    [(False, "Asia/Tokyo", ["django_jobs.E011"]), (False, "UTC", []), (True, "Asia/Tokyo", [])],
)
def test_check__sqlite_with_local_times_other_than_utc_is_an_error(
    settings: Any, use_tz: bool, zone: str, ids: list[str]
) -> None:
    settings.USE_TZ, settings.TIME_ZONE = use_tz, zone
    assert check_ids(DATABASE="sqlite") == ids


def test_check__a_missing_jobs_database_is_an_error() -> None:
    assert check_ids(DATABASE="jobs") == ["django_jobs.E002"]


@pytest.mark.django_db(databases=["default", "sqlite"])
def test_check__runs_with_manage_py_check() -> None:
    with (
        override_settings(TASKS=backend_settings(DATABASE="jobs")),
        pytest.raises(SystemCheckError, match=r"django_jobs\.E002"),
    ):
        call_command("check", "django_jobs")


class SubclassedBackend(JobsBackend):
    """A project's own JobsBackend: still a django-jobs backend."""


def refusal(tasks: dict[str, Any], alias: str) -> NotAJobsBackendError:
    """What ``jobs_backend(alias)`` raises under these ``TASKS``."""
    with override_settings(TASKS=tasks), pytest.raises(NotAJobsBackendError) as refused:
        jobs_backend(alias)
    return refused.value


def test_jobs_backend__an_unknown_alias_is_refused_with_the_configured_aliases() -> None:
    jobs = backend_settings()["default"]

    refused = refusal({"emails": jobs, "default": jobs}, "nope")

    assert str(refused) == (
        "TASKS has no backend 'nope'; the configured aliases are default, emails."
    )
    assert isinstance(refused.__cause__, InvalidTaskBackend)


def test_jobs_backend__a_backend_of_another_class_is_refused_with_its_class() -> None:
    immediate = {"BACKEND": f"{framework.MODULE}.backends.immediate.ImmediateBackend"}

    refused = refusal({"jobs": immediate}, "jobs")

    assert str(refused) == (
        f"TASKS['jobs'] uses {framework.MODULE}.backends.immediate.ImmediateBackend, "
        "not django_jobs.backend.JobsBackend or a subclass of it."
    )


def test_jobs_backend__a_backend_that_does_not_import_is_refused_with_why() -> None:
    refused = refusal({"jobs": {"BACKEND": "nowhere.JobsBackend"}}, "jobs")

    assert str(refused) == (
        "TASKS['jobs']: Could not find backend 'nowhere.JobsBackend': No module named 'nowhere'"
    )
    assert isinstance(refused.__cause__, InvalidTaskBackend)


def test_jobs_backend__a_subclass_of_jobs_backend_is_accepted() -> None:
    subclassed = {"jobs": {"BACKEND": "tests.test_conf.SubclassedBackend"}}
    with override_settings(TASKS=subclassed):
        backend = jobs_backend("jobs")

    assert type(backend) is SubclassedBackend


def test_runworkers__refuses_an_unknown_queue() -> None:
    with pytest.raises(CommandError, match=r"Unknown queue\(s\): nope\. .* has default, other"):
        call_command("runworkers", queues="nope")


def test_runworkers__refuses_a_backend_that_is_not_ours() -> None:
    immediate = {"default": {"BACKEND": f"{framework.MODULE}.backends.immediate.ImmediateBackend"}}
    with (
        override_settings(TASKS=immediate),
        pytest.raises(CommandError) as refused,
    ):
        call_command("runworkers")

    assert str(refused.value) == (
        f"TASKS['default'] uses {framework.MODULE}.backends.immediate.ImmediateBackend, "
        "not django_jobs.backend.JobsBackend or a subclass of it."
    )
