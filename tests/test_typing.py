"""The typed public API: what a user's project gets from mypy, and that typing changes nothing.

``tests/typed_project/`` is a small Django project that uses every documented
feature through ``django_jobs.task``; mypy ``--strict`` with django-stubs must
accept it, and must refuse each call of its ``wrong_calls.py``. django_jobs is
found on PYTHONPATH, as an installed package is (its own errors are not the
project's). At run time ``django_jobs.task`` must build exactly what Django's
``@task`` builds; and ``pip install -e .`` must give type checkers a path entry.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.test import override_settings

import django_jobs
from django_jobs import Backoff, JobContext, JobTask, framework
from django_jobs.framework import Task
from django_jobs.framework import task as django_task
from django_jobs.tasks import TASK_TAKES_OPTIONS
from tests.conftest import ROOT

PROJECT = ROOT / "tests" / "typed_project"
# "wrong_calls.py:12: error: Argument 1 to ... [arg-type]"
ERROR = re.compile(r"^wrong_calls\.py:(\d+): error: .*\[([a-z-]+)\]$", re.MULTILINE)
EXPECTED = re.compile(r"#\s*wrong:\s*([a-z-]+)$")

Mypy = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture(scope="module")
def mypy(tmp_path_factory: pytest.TempPathFactory) -> Mypy:
    """mypy, run in the typed project on the files named; the runs share one cache."""
    cache = tmp_path_factory.mktemp("mypy-cache")
    # The project's mypy.ini names its settings; the suite's must not leak in.
    env = {k: v for k, v in os.environ.items() if k not in {"MYPYPATH", "DJANGO_SETTINGS_MODULE"}}
    env["PYTHONPATH"] = str(ROOT)

    def run(*targets: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "mypy", "--cache-dir", str(cache), *targets],
            cwd=PROJECT,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )

    return run


def test_typed_project__passes_mypy_strict_with_django_stubs(mypy: Mypy) -> None:
    result = mypy("typedsite", "billing")

    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.startswith("Success: no issues found"), result.stdout


def test_wrong_calls__each_is_refused_with_its_error_and_nothing_else_is(mypy: Mypy) -> None:
    lines = (PROJECT / "wrong_calls.py").read_text().splitlines()
    expected = {n: m.group(1) for n, line in enumerate(lines, 1) if (m := EXPECTED.search(line))}

    result = mypy("wrong_calls.py")

    reported: dict[int, set[str]] = {}
    for number, code in ERROR.findall(result.stdout):
        reported.setdefault(int(number), set()).add(code)
    assert result.returncode == 1, result.stdout + result.stderr
    assert sorted(reported) == sorted(expected), result.stdout
    for number, code in expected.items():
        assert code in reported[number], f"line {number} wants [{code}]:\n{result.stdout}"


# Module-level functions, as Django requires of a task's.
def double(n: int) -> int:
    return 2 * n


def attempt_of(context: JobContext, n: int) -> int:
    return context.attempt + n


async def halve(n: int) -> float:
    return n / 2


def test_task__bare_builds_what_djangos_task_builds() -> None:
    ours = django_jobs.task(double)

    assert type(ours) is JobTask
    assert ours == django_task(double)


OPTIONS: dict[str, Any] = {
    "priority": 5,
    "queue_name": "other",
    "backend": "fast",
    "max_attempts": 4,
    "timeout": 2.5,
    "backoff": Backoff(base=1, cap=8),
    "retry_on": (ConnectionError,),
    "give_up_on": (ValueError,),
    "version": "2",
}
# Django 6.0's @task takes only its own options; django_jobs.task builds the
# backend's task class itself there, so there is nothing of Django's to compare.
needs_task_options = pytest.mark.skipif(
    not TASK_TAKES_OPTIONS, reason="Django 6.0's @task takes only its own options"
)


def test_task__with_options_builds_a_job_task_with_every_option() -> None:
    ours = django_jobs.task(**OPTIONS)(double)

    assert type(ours) is JobTask
    assert (ours.priority, ours.queue_name, ours.backend) == (5, "other", "fast")
    assert (ours.max_attempts, ours.timeout, ours.backoff) == (4, 2.5, Backoff(base=1, cap=8))
    assert (ours.retry_on, ours.give_up_on, ours.version) == (
        (ConnectionError,),
        (ValueError,),
        "2",
    )


@needs_task_options
def test_task__with_options_builds_what_djangos_task_builds() -> None:
    ours = django_jobs.task(**OPTIONS)(double)

    assert ours == django_task(**OPTIONS)(double)


@needs_task_options
def test_task__context_and_coroutine_functions_build_what_djangos_task_builds() -> None:
    ours = django_jobs.task(takes_context=True, max_attempts=2)(attempt_of)
    async_ours = django_jobs.task(halve, backoff=0.5)

    assert ours == django_task(takes_context=True, max_attempts=2)(attempt_of)
    assert ours.takes_context is True
    assert async_ours == django_task(halve, backoff=0.5)


def test_task__passes_on_only_the_options_given_so_another_backend_still_works() -> None:
    tasks = {
        **settings.TASKS,
        "dummy": {"BACKEND": f"{framework.MODULE}.backends.dummy.DummyBackend"},
    }
    with override_settings(TASKS=tasks):
        ours = django_jobs.task(backend="dummy")(double)

        assert type(ours) is Task
        assert ours == django_task(backend="dummy")(double)


def test_task__run_after_is_refused_as_django_refuses_it() -> None:
    with pytest.raises(TypeError, match="run_after cannot be defined statically"):
        django_jobs.task(run_after=None)(double)


def test_editable_install__is_a_path_entry_that_type_checkers_follow(tmp_path: Path) -> None:
    """What ``pip install -e .`` installs (PEP 660's build_editable), built here.

    setuptools' default for a flat layout is an import hook, which mypy cannot
    see; ``package-dir`` in pyproject.toml makes it a ``.pth`` naming the checkout.
    """
    build = "import sys, setuptools.build_meta as b; print(b.build_editable(sys.argv[1]))"
    subprocess.run(
        [sys.executable, "-c", build, str(tmp_path)],
        cwd=ROOT,
        check=True,
        capture_output=True,
        timeout=60,
    )
    (wheel,) = tmp_path.glob("*.whl")
    with zipfile.ZipFile(wheel) as archive:
        pth = [name for name in archive.namelist() if name.endswith(".pth")]
        contents = [archive.read(name).decode().strip() for name in pth]

    assert contents == [str(ROOT)]
