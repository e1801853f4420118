"""Shared fixtures: databases, real worker processes, and waiting without sleeping blindly.

Every process a test starts is ended by the fixture that started it (SIGTERM,
then SIGKILL of its whole process group), before pytest-django flushes or drops
the databases.
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
import pytest
from django.conf import settings
from django.core.management.color import no_style
from django.db import connections
from django.test import TransactionTestCase

ROOT = Path(__file__).resolve().parent.parent


def pytest_configure(config: pytest.Config) -> None:
    from tests import settings as test_settings

    if test_settings.POSTGRES_AVAILABLE:
        return
    problem = "; ".join(test_settings.POSTGRES_PROBLEM) or "DATABASE_URL is not PostgreSQL"
    if os.environ.get("CI"):
        pytest.exit(f"CI requires PostgreSQL, and none answers: {problem}", returncode=3)
    config.issue_config_time_warning(
        pytest.PytestWarning(f"PostgreSQL does not answer ({problem}): its tests are skipped."),
        stacklevel=2,
    )


# The fixtures that start processes of the test's own: worker processes, a
# browser, a project's manage.py (minimal_project, reload_project), mypy.
# Their tests are marked ``processes``.
PROCESS_FIXTURES = {
    "start_workers",
    "run_burst",
    "minimal_project",
    "reload_project",
    "browser",
    "mypy",
}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    from tests import settings as test_settings

    for item in items:
        if PROCESS_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.processes)
    if test_settings.POSTGRES_AVAILABLE:
        return
    skip = pytest.mark.skip(reason="PostgreSQL does not answer")
    for item in items:
        if "postgres" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup: None, django_db_blocker: Any) -> Iterator[None]:
    """Drop the test databases even if a killed worker left a session behind."""
    yield
    default = connections["default"]
    if default.vendor != "postgresql" or (
        default.settings_dict["NAME"] != default.creation._get_test_db_name()
    ):
        return
    with django_db_blocker.unblock(), connections["default"].cursor() as cursor:
        cursor.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )


@pytest.fixture(scope="session", autouse=True)
def _sqlite_file_removed() -> Iterator[None]:
    """The SQLite file named after this run's process goes when the run ends.

    pytest-django destroys it only when a test asked for the ``sqlite``
    database; a run that only opened it (checks look at every database) left
    it behind in the temporary directory.
    """
    yield
    if "DJANGO_JOBS_TEST_SQLITE" in os.environ:
        return  # another process's file, passed down to this one
    connections["sqlite"].close()
    name = str(settings.DATABASES["sqlite"]["NAME"])
    for path in (name, f"{name}-wal", f"{name}-shm", f"{name}-journal"):
        Path(path).unlink(missing_ok=True)


# Tables whose rows the migrations write and no test changes: emptying them
# would make Django write them again (its post_migrate handlers) after every
# transactional test.
_KEPT_TABLES = frozenset({"django_content_type", "auth_permission", "django_migrations"})


def empty_tables(alias: str) -> None:
    """Empty the tables a test wrote to, as Django's flush would, at a fraction of its cost.

    Django's flush truncates every table and then recreates the content types
    and permissions: 120 ms after each transactional test, most of
    tests/test_engine.py's time. Truncating only the tables that hold rows
    keeps each test's start as clean (no dead tuples, which the plan tests
    would notice) for a few milliseconds.
    """
    connection = connections[alias]
    tables = [
        table
        for table in connection.introspection.django_table_names(only_existing=True)
        if table not in _KEPT_TABLES
    ]
    quote = connection.ops.quote_name
    with connection.cursor() as cursor:
        cursor.execute(
            " UNION ALL ".join(
                f"SELECT {index} WHERE EXISTS (SELECT 1 FROM {quote(table)})"
                for index, table in enumerate(tables)
            )
        )
        written = [tables[index] for (index,) in cursor.fetchall()]
    if written:
        sql = connection.ops.sql_flush(no_style(), written, allow_cascade=True)
        connection.ops.execute_sql_flush(sql)


@pytest.fixture(scope="session", autouse=True)
def _cheap_flush() -> Iterator[None]:
    """Transactional tests end with ``empty_tables`` instead of Django's flush."""

    def fixture_teardown(self: TransactionTestCase) -> None:
        for alias in self._databases_names(include_mirrors=False):
            empty_tables(alias)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(TransactionTestCase, "_fixture_teardown", fixture_teardown)
        yield


# The two engines: what one does, the other must do. A test that takes
# ``alias`` runs on each, with committed data (workers see it).
BOTH_DATABASES = [
    pytest.param(
        "default",
        marks=[pytest.mark.postgres, pytest.mark.django_db(transaction=True)],
        id="postgres",
    ),
    pytest.param(
        "sqlite", marks=pytest.mark.django_db(databases=["sqlite"], transaction=True), id="sqlite"
    ),
]


@pytest.fixture(params=BOTH_DATABASES)
def alias(request: pytest.FixtureRequest) -> str:
    """The database (and backend) alias under test: ``default`` is PostgreSQL."""
    return str(request.param)


@pytest.fixture
def pg(transactional_db: None) -> None:
    """Committed data on PostgreSQL, visible to worker processes."""
    assert connections["default"].vendor == "postgresql"


@pytest.fixture
def job_check(pg: None) -> Iterator[Callable[[str], str]]:
    """Add a CHECK constraint to the job table, as a DBA might; its name. Dropped after."""
    added: list[str] = []

    def add(condition: str) -> str:
        name = f"dba_check_{len(added)}"
        with connections["default"].cursor() as cursor:
            cursor.execute(f"ALTER TABLE django_jobs_job ADD CONSTRAINT {name} CHECK ({condition})")
        added.append(name)
        return name

    try:
        yield add
    finally:
        with connections["default"].cursor() as cursor:
            for name in added:
                cursor.execute(f"ALTER TABLE django_jobs_job DROP CONSTRAINT {name}")


def backend_settings(**options: Any) -> dict[str, Any]:
    """``TASKS`` with one JobsBackend, ``default``, on queue ``default``, with these OPTIONS."""
    return {
        "default": {
            "BACKEND": "django_jobs.backend.JobsBackend",
            "QUEUES": ["default"],
            "OPTIONS": options,
        }
    }


@pytest.fixture
def horizon_held() -> Iterator[None]:
    """A transaction that took an xid and idles: no vacuum may remove what died after it."""
    import psycopg

    dsn = connections["default"].get_connection_params()
    with psycopg.connect(**dsn) as holder:
        holder.execute("SELECT txid_current()")
        yield
        holder.rollback()


@contextmanager
def statement_plans() -> Iterator[list[dict[str, Any]]]:
    """The plans of the statements this connection runs in the block, as PostgreSQL ran them.

    ``auto_explain`` (EXPLAIN ANALYZE, JSON) sent to this client: the plans of
    prepared statements too, and of psycopg cursors Django does not see.
    """
    connection = connections["default"]
    connection.ensure_connection()
    raw = connection.connection
    plans: list[dict[str, Any]] = []

    def collect(diagnostic: Any) -> None:
        text = diagnostic.message_primary or ""
        if text.startswith("duration:") and "plan:" in text:
            plans.append(json.loads(text.split("plan:", 1)[1]))

    raw.add_notice_handler(collect)
    with connection.cursor() as cursor:
        cursor.execute("LOAD 'auto_explain'")
        for name, value in (
            ("auto_explain.log_min_duration", "0"),
            ("auto_explain.log_analyze", "on"),
            ("auto_explain.log_format", "json"),
            ("client_min_messages", "log"),
        ):
            cursor.execute("SELECT set_config(%s, %s, false)", [name, value])
    try:
        yield plans
    finally:
        with connection.cursor() as cursor:
            cursor.execute("SELECT set_config('client_min_messages', 'notice', false)")
            cursor.execute("SELECT set_config('auto_explain.log_min_duration', '-1', false)")
        raw.remove_notice_handler(collect)


def analyse_empty_tables() -> None:
    """Statistics as a new deployment has them: taken while our tables were empty.

    Autovacuum then analyses again only after enough rows changed (never, on
    a server with it off, or while a long transaction holds it back); tests of
    plans and of throughput under a backlog start from here and never ANALYZE.
    """
    from django.apps import apps

    with connections["default"].cursor() as cursor:
        for model in apps.get_app_config("django_jobs").get_models():
            cursor.execute(f"ANALYZE {model._meta.db_table}")


def one_slot_fair_order(db: str, backend: str, queue: str, options: dict[str, Any]) -> list[str]:
    """Tenants in claim order, one job per claim: 2,000 of tenant a's, then 100 of c's arrive.

    What one worker with one thread sees: each job has succeeded before the
    next claim, so nothing runs at any claim and a ranking by what runs now
    cannot tell the tenants apart. Three claims are made before c's jobs
    arrive, 200 after.
    """
    from django_jobs import AttemptOutcome, enqueue_many
    from django_jobs.conf import JobsOptions
    from django_jobs.engine import engine_for
    from django_jobs.values import Report, WorkerIdentity
    from tests.testapp import tasks

    me = WorkerIdentity(uuid.uuid4(), "one slot")
    fair = JobsOptions.from_mapping(backend, options)
    noop = tasks.noop.using(backend=backend, queue_name=queue)

    def claim_one() -> list[str]:
        got = engine_for(db, fair).claim(me, [queue], 1)
        done = [Report(c.job_id, c.token, c.attempt_id, AttemptOutcome.SUCCEEDED) for c in got]
        engine_for(db, fair).finish(me.id, done)
        return [c.tenant for c in got]

    enqueue_many(noop.using(tenant="a"), [((), {})] * 2000)
    order = claim_one() + claim_one() + claim_one()
    enqueue_many(noop.using(tenant="c"), [((), {})] * 100)
    for _ in range(200):
        order += claim_one()
    return order


def run_in_processes(target: Callable[[Any], None], count: int) -> list[Any]:
    """Run ``target(results_queue)`` in ``count`` forked processes at once; return what they put.

    Each process must close its database connections first and put exactly one
    value; the parent's connections are closed before the fork so no socket is shared.
    """
    context = multiprocessing.get_context("fork")
    results = context.Queue()
    connections.close_all()
    processes = [context.Process(target=target, args=(results,)) for _ in range(count)]
    for process in processes:
        process.start()
    out = [results.get(timeout=60) for _ in processes]
    for process in processes:
        process.join(10)
    assert [p.exitcode for p in processes] == [0] * count
    return out


def listen_for_wakeups() -> Any:
    """A connection of its own that LISTENs on the channel workers are woken on.

    Use it as a context manager; ``.notifies(timeout=...)`` yields what arrived.
    """
    import psycopg

    from django_jobs.wakeup import CHANNEL

    params = connections["default"].get_connection_params()
    conn = psycopg.connect(**params, autocommit=True)
    conn.execute(f"LISTEN {CHANNEL}")
    return conn


@contextmanager
def results_sent(signal: Any) -> Iterator[list[Any]]:
    """The ``task_result`` of each sending of a Django Tasks signal while the block runs."""
    sent: list[Any] = []

    def receiver(sender: Any, task_result: Any, **kwargs: Any) -> None:
        sent.append(task_result)

    signal.connect(receiver)
    try:
        yield sent
    finally:
        signal.disconnect(receiver)


def wait_until(predicate: Callable[[], Any], timeout: float = 30.0, interval: float = 0.05) -> Any:
    """Poll ``predicate`` until it returns something truthy; fail after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s: {predicate}")
        time.sleep(interval)


def terminate_backend_of(alias: str) -> None:
    """Have PostgreSQL end the session behind a Django connection, as a restart would.

    Its pid is read from the connection, not asked of it: the connection may be
    in the middle of a statement (a COPY).
    """
    connections[alias].ensure_connection()
    pid = connections[alias].connection.info.backend_pid
    params = connections[alias].get_connection_params()
    with psycopg.connect(**params, autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", [pid])


def waiting_for_a_lock(alias: str = "default") -> int:
    """Sessions of this database waiting for a lock, read afresh: not this transaction's copy."""
    with connections[alias].cursor() as cursor:
        cursor.execute("SELECT pg_stat_clear_snapshot()")
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity "
            "WHERE datname = current_database() AND wait_event_type = 'Lock'"
        )
        (waiting,) = cursor.fetchone()
    return int(waiting)


def subprocess_env() -> dict[str, str]:
    """The environment of a ``manage.py`` subprocess that works on this test's databases."""
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "DJANGO_SETTINGS_MODULE": "tests.settings",
        "DJANGO_JOBS_TEST_SQLITE": str(settings.DATABASES["sqlite"]["NAME"]),
    }
    if connections["default"].vendor == "postgresql":
        env["DJANGO_JOBS_TEST_DB"] = str(connections["default"].settings_dict["NAME"])
    return env


class WorkerProcess:
    """A real ``manage.py runworkers`` process group, started by a test."""

    def __init__(self, args: list[str], log: Path) -> None:
        env = subprocess_env()
        self.log = log
        self._log_file = log.open("ab")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "django", "runworkers", *args],
            cwd=ROOT,
            env=env,
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    @property
    def pid(self) -> int:
        return self.process.pid

    def output(self) -> str:
        self._log_file.flush()
        return self.log.read_text(errors="replace")

    def signal(self, signum: int) -> None:
        self.process.send_signal(signum)

    def wait(self, timeout: float) -> int:
        return self.process.wait(timeout)

    def kill_group(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(10)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(20)
        self.kill_group()
        self._log_file.close()


@pytest.fixture
def start_workers(tmp_path: Path) -> Iterator[Callable[..., WorkerProcess]]:
    """Start ``runworkers`` with the given arguments; every one is stopped afterwards."""
    started: list[WorkerProcess] = []

    def start(*args: str) -> WorkerProcess:
        worker = WorkerProcess(list(args), tmp_path / f"worker-{len(started)}.log")
        started.append(worker)
        return worker

    yield start
    for worker in started:
        worker.stop()


@pytest.fixture
def run_burst(start_workers: Callable[..., WorkerProcess]) -> Callable[..., str]:
    """Run ``runworkers --burst`` to completion and return its output."""

    def run(*args: str, timeout: float = 120.0) -> str:
        worker = start_workers("--burst", *args)
        code = worker.wait(timeout)
        output = worker.output()
        assert code == 0, output
        return output

    return run


# A docs page shows each example file whole, after a marker naming it:
# <!-- example: NAME -->, then a python code block.
EXAMPLE_BLOCK = re.compile(r"<!-- example: (?P<name>\S+) -->\n```python\n(?P<code>.*?)```", re.S)


def examples_shown(page: str) -> dict[str, str]:
    """The example files docs/PAGE shows, by name, as the page shows them."""
    text = (ROOT / "docs" / page).read_text()
    return {m["name"]: m["code"] for m in EXAMPLE_BLOCK.finditer(text)}


def example_files(folder: Path) -> dict[str, str]:
    """The Python files of an examples folder, by name."""
    return {path.name: path.read_text() for path in sorted(folder.glob("*.py"))}


MINIMAL_PROJECT = ROOT / "tests" / "minimal_project"


@pytest.fixture
def minimal_project(tmp_path: Path) -> Callable[..., subprocess.CompletedProcess[str]]:
    """Run ``manage.py`` of tests/minimal_project: the settings the docs give, nothing more.

    ``run(*args, python=..., without=[apps], api=True, db=path)`` returns the
    finished process (text output). It runs with the given Python (this one by
    default, or a fresh virtualenv's) and no PYTHONPATH, so ``django_jobs`` comes
    from wherever that Python has it installed; the database is a SQLite file in
    the test's own temporary directory unless ``db`` says otherwise.
    """

    def run(
        *args: str,
        python: str | Path = sys.executable,
        without: tuple[str, ...] = (),
        api: bool = True,
        db: str | None = None,
        timeout: float = 120,
    ) -> subprocess.CompletedProcess[str]:
        unset = ("PYTHONPATH", "DJANGO_SETTINGS_MODULE")
        env = {k: v for k, v in os.environ.items() if k not in unset}
        env["MINIMAL_DB"] = db if db is not None else str(tmp_path / "minimal.sqlite3")
        env["MINIMAL_APPS_WITHOUT"] = ",".join(without)
        env["MINIMAL_API"] = "1" if api else "0"
        if python == sys.executable:  # this checkout's django_jobs, not an installed one
            env["PYTHONPATH"] = str(ROOT)
        return subprocess.run(
            [str(python), "manage.py", *args],
            cwd=MINIMAL_PROJECT,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    return run
