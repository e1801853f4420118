"""The common interface every peer adapter implements, and the worker processes it starts.

A peer runs inside its own driver process (``python -m benchmarks.driver``),
because Django can be set up only once per process and each Django-integrated
peer needs its own settings. The driver calls, in order: :meth:`Peer.setup_db`,
then per workload :meth:`Peer.reset`, :meth:`Peer.enqueue_one` /
:meth:`Peer.enqueue_bulk` (timed), :meth:`Peer.fill` (untimed),
:meth:`Peer.start_workers` and :meth:`Peer.wait_drained`, and finally
:meth:`Peer.teardown`.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar

from benchmarks import pg

ROOT = Path(__file__).resolve().parent.parent.parent
LOGS = ROOT / "benchmarks" / "results" / "raw" / "logs"


# For the Django-integrated peers' best settings: keep database connections
# (Django's CONN_MAX_AGE) instead of reconnecting on every worker loop.
PERSISTENT = {"BENCH_CONN_MAX_AGE": "600"}


@dataclass(frozen=True)
class WorkerSetting:
    """How a peer's workers are started: ``processes`` copies of ``argv``."""

    name: str
    description: str
    argv: list[str]
    processes: int = 1  # separate OS processes the harness starts (1 when the peer forks its own)
    env: dict[str, str] = field(default_factory=dict)


class Workers:
    """Worker processes, each in its own process group so stopping one ends its children."""

    def __init__(self, name: str, setting: WorkerSetting, env: dict[str, str]) -> None:
        LOGS.mkdir(parents=True, exist_ok=True)
        self.log_path = LOGS / f"{name}-{setting.name}-{int(time.time() * 1000)}.log"
        self._log = self.log_path.open("ab")
        full_env = {**os.environ, "PYTHONPATH": str(ROOT), **env, **setting.env}
        self.processes = [
            subprocess.Popen(
                setting.argv,
                cwd=ROOT,
                env=full_env,
                stdout=self._log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            for _ in range(setting.processes)
        ]

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.processes]

    def all_exited(self) -> bool:
        return all(p.poll() is not None for p in self.processes)

    def stop(self, timeout: float = 5.0) -> None:
        for process in self.processes:
            if process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for process in self.processes:
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(max(0.1, deadline - time.monotonic()))
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(10)
        self._log.close()

    def output(self) -> str:
        self._log.flush()
        return self.log_path.read_text(errors="replace")[-4000:]


class Peer(ABC):
    """One job system under test, in its own PostgreSQL database ``db``."""

    name: ClassVar[str]
    distribution: ClassVar[str]  # the PyPI name whose version is reported
    django_settings: ClassVar[str | None] = None
    burst_argv: ClassVar[list[str] | None] = None  # appended for drains; None: no burst mode
    finished_table: ClassVar[str] = ""  # W4 clones its finished row here
    finished_where: ClassVar[str] = "TRUE"
    job_tables: ClassVar[list[str]] = []  # VACUUM ANALYZE'd before each drain
    has_backlog_table: ClassVar[bool] = True  # W4 applies: finished jobs stay in a table

    def __init__(self, db: str) -> None:
        self.db = db
        self.dsn = pg.dsn(db)

    # -- environment ---------------------------------------------------------

    def worker_env(self) -> dict[str, str]:
        """Variables every process of this peer (driver and workers) needs."""
        env = {"BENCH_DATABASE_URL": self.dsn, "BENCH_RECORD_DSN": self.record_target()}
        if self.django_settings:
            env["DJANGO_SETTINGS_MODULE"] = self.django_settings
        return env

    def record_target(self) -> str:
        """Where the W3 probe task records its start time."""
        return self.dsn

    def python(self) -> list[str]:
        return [sys.executable]

    # -- the interface -------------------------------------------------------

    @abstractmethod
    def settings(self) -> dict[str, WorkerSetting]:
        """``defaults`` (one process, documented defaults) and ``best`` (2 cores)."""

    @abstractmethod
    def setup_db(self) -> None:
        """Create the peer's schema in its (already created, empty) database."""

    @abstractmethod
    def reset(self) -> None:
        """Empty every table (or Redis key) that holds jobs."""

    @abstractmethod
    def enqueue_one(self, count: int) -> None:
        """Enqueue ``count`` no-op jobs one by one, each in its own transaction."""

    def enqueue_bulk(self, count: int) -> bool:
        """Enqueue ``count`` no-op jobs through the bulk API; False when there is none."""
        return False

    def fill(self, count: int) -> None:
        """Queue ``count`` no-op jobs the quickest way the peer allows (not timed)."""
        if not self.enqueue_bulk(count):
            self.enqueue_one(count)

    @abstractmethod
    def enqueue_probe(self, probe: int) -> float:
        """Enqueue the W3 probe task with argument ``probe``; when it was committed.

        Epoch seconds, read as soon as the commit (or the broker's publish)
        returned: whatever the peer's client does after that, such as closing
        a connection or an event loop, is not the pickup's time.
        """

    @abstractmethod
    def pending(self) -> int:
        """Jobs not yet finished."""

    @abstractmethod
    def last_done(self) -> float | None:
        """Epoch seconds when the last job finished, by the peer's own record."""

    def dead_tuples(self) -> dict[str, int]:
        """Dead row versions in each of the peer's job tables (the statistics' view)."""
        if not self.job_tables:
            return {}
        rows = pg.execute(
            self.db,
            "SELECT relname, n_dead_tup FROM pg_stat_user_tables WHERE relname = ANY(%s)",
            [self.job_tables],
        )
        return {str(name): int(dead) for name, dead in rows}

    def analyze(self) -> None:
        """Fresh statistics after queuing, as a running system would have."""
        if self.job_tables:
            pg.vacuum(self.db, *self.job_tables)

    def add_finished(self, count: int) -> None:
        """Put ``count`` finished jobs in the table (W4): run one job, clone its row."""
        self.fill(1)
        workers = self.start_workers(self.settings()["defaults"], drain=True)
        try:
            self.wait_drained(workers, timeout=120)
        finally:
            workers.stop()
        pg.clone_rows(self.db, self.finished_table, count - 1, self.finished_where)

    def start_workers(self, setting: WorkerSetting, drain: bool) -> Workers:
        """Start ``setting``; with ``drain``, in burst mode where the peer has one."""
        if drain and self.burst_argv:
            setting = replace(setting, argv=[*setting.argv, *self.burst_argv])
        return Workers(self.name, setting, self.worker_env())

    def wait_drained(self, workers: Workers, timeout: float) -> float:
        """Wait until every job is done; return the epoch time the last one finished."""
        deadline = time.monotonic() + timeout
        if self.burst_argv is not None:
            while not workers.all_exited():
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{self.name}: workers still running\n{workers.output()}")
                time.sleep(0.05)
            seen = time.time()
            left = self.pending()
            if left:
                raise RuntimeError(f"{self.name}: {left} jobs left\n{workers.output()}")
        else:
            while True:
                left = self.pending()
                seen = time.time()
                if not left:
                    break
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{self.name}: {left} jobs left\n{workers.output()}")
                if workers.all_exited():
                    raise RuntimeError(f"{self.name}: workers exited\n{workers.output()}")
                time.sleep(0.1)
        last = self.last_done()
        return last if last is not None else seen

    def versions(self) -> dict[str, str]:
        from importlib.metadata import version

        return {self.distribution: version(self.distribution)}

    def teardown(self) -> None:  # noqa: B027 - optional hook
        """Close what the driver opened; the orchestrator drops the database."""

    @staticmethod
    def run_sync(coro: Any) -> Any:
        import asyncio

        return asyncio.run(coro)
