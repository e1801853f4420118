"""``runworkers --reload``: real processes of a project of their own, whose code a test edits.

Each test copies tests/minimal_project into its temporary directory (so the
module it edits is a copy), migrates a SQLite file there, and starts
``manage.py runworkers --reload`` in a process group of its own, which the
test ends in a ``finally`` whatever happened.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from tests.conftest import MINIMAL_PROJECT, ROOT, wait_until

TASKS = """
from django_jobs import task

VERSION = "{version}"


@task()
def ping() -> str:
    return "pong"


@task()
def stamp() -> str:
    return VERSION
"""


# The reloader's debug lines say when it has first seen each file: a change
# before that would be its starting point, not a change.
WATCH_LOG = """
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "loggers": {"django.utils.autoreload": {"handlers": ["console"], "level": "DEBUG"}},
}
"""


class Project:
    """A copy of the minimal project whose ``stamp`` task returns its module's VERSION."""

    def __init__(self, root: Path) -> None:
        shutil.copytree(MINIMAL_PROJECT, root, ignore=shutil.ignore_patterns("__pycache__"))
        self.root = root
        self.tasks = root / "minimal_project" / "tasks.py"
        self.db = root / "jobs.sqlite3"
        self.log = root / "runworkers.log"
        self.env = {
            **{k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"},
            "PYTHONPATH": str(ROOT),
            "MINIMAL_DB": str(self.db),
            "MINIMAL_APPS_WITHOUT": "",
            "MINIMAL_API": "1",
        }
        self.write_tasks("one")
        with (root / "minimal_project" / "settings.py").open("a") as settings:
            settings.write(WATCH_LOG)
        self.manage("migrate", "-v", "0")

    def write_tasks(self, version: str) -> None:
        before = self.tasks.stat().st_mtime
        self.tasks.write_text(TASKS.format(version=version))
        # Later than any time the reloader saw, however coarse the file system's clock.
        os.utime(self.tasks, (before + 10, before + 10))

    def manage(self, *args: str) -> str:
        done = subprocess.run(
            [sys.executable, "manage.py", *args],
            cwd=self.root,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    @contextlib.contextmanager
    def runworkers(self, *args: str) -> Iterator[subprocess.Popen[bytes]]:
        with self.log.open("ab") as log:
            process = subprocess.Popen(
                [sys.executable, "manage.py", "runworkers", "--reload", *args],
                cwd=self.root,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            try:
                yield process
            finally:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait(10)

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def stamped(self, job_id: str) -> str | None:
        """The job's return value once it succeeded, else None; read with sqlite3 itself."""
        with contextlib.closing(sqlite3.connect(self.db)) as db:
            row = db.execute(
                "SELECT state, result FROM django_jobs_job WHERE id = ?", [uuid.UUID(job_id).hex]
            ).fetchone()
        return row[1] if row and row[0] == "succeeded" else None

    def enqueue_stamp(self) -> str:
        return self.manage("jobs", "enqueue", "minimal_project.tasks.stamp", "--quiet").strip()


@pytest.fixture
def reload_project(tmp_path: Path) -> Project:
    return Project(tmp_path / "project")


def started(project: Project) -> None:
    """Until the workers ran a job and the reloader has seen the task module as it is."""
    first = project.enqueue_stamp()
    wait_until(lambda: project.stamped(first), timeout=60)
    wait_until(lambda: f"File {project.tasks} first seen with mtime" in project.output(), 60)


def test_reload__a_changed_task_module_restarts_the_workers_which_run_the_new_code(
    reload_project: Project,
) -> None:
    with reload_project.runworkers():
        started(reload_project)

        reload_project.write_tasks("two")

        wait_until(
            lambda: len(re.findall(r"Supervisor \d+ starting", reload_project.output())) == 2, 60
        )
        output = reload_project.output()
        assert f"{reload_project.tasks} changed; stopping the workers to restart them" in output
        assert re.search(r"Supervisor \d+ stopped", output)
        second = reload_project.enqueue_stamp()
        assert wait_until(lambda: reload_project.stamped(second), timeout=60) == '"two"'


@pytest.mark.parametrize(
    "stop",
    [
        pytest.param(lambda p: p.send_signal(signal.SIGTERM), id="sigterm-to-the-parent"),
        pytest.param(lambda p: os.killpg(p.pid, signal.SIGINT), id="ctrl-c-to-the-group"),
    ],
)
def test_reload__stopping_it_stops_the_workers_and_leaves_no_process_behind(
    reload_project: Project, stop: Callable[[subprocess.Popen[bytes]], None]
) -> None:
    with reload_project.runworkers("--processes", "2") as process:
        started(reload_project)

        stop(process)

        assert process.wait(60) == 0
        with pytest.raises(ProcessLookupError):
            os.killpg(process.pid, 0)  # the group is empty: no worker was left running
        assert len(re.findall(r"Worker \S+ stopped after", reload_project.output())) == 2


def test_reload__is_refused_with_burst() -> None:
    with pytest.raises(
        CommandError,
        match=r"^--reload keeps the workers running to restart them on code changes, and "
        r"--burst exits once the queues are empty: use one or the other\.$",
    ):
        call_command("runworkers", "--reload", "--burst")
