"""What a drain costs per job: CPU of the workers and of PostgreSQL, WAL, commits.

Throughput alone does not say where the time goes. On a two-core machine the
workers and the server share the cores, so a job system is as fast as its
CPU per job allows: the worker side (Python, the driver) and the server side
(the backends serving the peer's database) are counted apart, from
``/proc/<pid>/stat``, sampled in a thread because backends and worker
children come and go during the drain (each one's last reading counts).
WAL bytes (``pg_current_wal_lsn``) and committed transactions
(``pg_stat_database``) come from the server; both are server-wide or
database-wide, so the figures hold for a quiet machine only.
"""

from __future__ import annotations

import contextlib
import os
import threading
from pathlib import Path
from typing import Any

from benchmarks import pg
from benchmarks.rss import tree

TICKS = os.sysconf("SC_CLK_TCK")


def _cpu_seconds(pid: int) -> float | None:
    with contextlib.suppress(OSError, ValueError, IndexError):
        stat = Path(f"/proc/{pid}/stat").read_text()
        fields = stat[stat.rindex(")") + 2 :].split()
        return (int(fields[11]) + int(fields[12])) / TICKS  # utime + stime
    return None


def machine_ticks() -> tuple[int, int]:
    """Clock ticks of every core since boot: (busy, all), from ``/proc/stat``.

    Busy is everything but idle and iowait. Differenced over a window, it
    says how much of the machine was in use: on two cores a producer and its
    server backend take their share of the same CPUs the workers need.
    """
    fields = [int(f) for f in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle, iowait
    return sum(fields) - idle, sum(fields)


def _backends(db: str) -> list[int]:
    """The server processes serving ``db`` (their title names the database)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            title = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            words = title.split()
            # "postgres: 15/main: <user> <database> <client> <state>"
            if title.startswith("postgres:") and len(words) > 3 and words[3] == db:
                found.append(int(entry.name))
    return found


class CostMeter:
    """CPU seconds of the worker trees and of ``db``'s backends, WAL bytes and commits."""

    def __init__(self, db: str, roots: list[int], interval: float = 0.05) -> None:
        self.db = db
        self.roots = roots
        self.interval = interval
        # pid -> (first reading, last reading); a pid first seen mid-drain
        # started at zero (it was born during the drain).
        self._workers: dict[int, tuple[float, float]] = {}
        self._server: dict[int, tuple[float, float]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._wal_start = self._commits_start = 0

    def __enter__(self) -> CostMeter:
        self._wal_start, self._commits_start = self._server_counters()
        self._read(self._server, _backends(self.db), born_now=False)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def sample(self) -> None:
        self._read(self._workers, [p for root in self.roots for p in tree(root)], born_now=True)
        self._read(self._server, _backends(self.db), born_now=True)

    def result(self, jobs: int) -> dict[str, Any]:
        """Per job: worker and server CPU in milliseconds, WAL bytes, commits."""
        self.sample()
        wal, commits = self._server_counters()
        worker = sum(last - first for first, last in self._workers.values())
        server = sum(last - first for first, last in self._server.values())
        return {
            "worker_cpu_ms_per_job": 1000 * worker / jobs,
            "server_cpu_ms_per_job": 1000 * server / jobs,
            "wal_bytes_per_job": (wal - self._wal_start) / jobs,
            "commits_per_job": (commits - self._commits_start) / jobs,
        }

    def _read(self, seen: dict[int, tuple[float, float]], pids: list[int], born_now: bool) -> None:
        for pid in pids:
            cpu = _cpu_seconds(pid)
            if cpu is None:
                continue
            first = seen[pid][0] if pid in seen else (0.0 if born_now else cpu)
            seen[pid] = (first, cpu)

    def _server_counters(self) -> tuple[int, int]:
        row = pg.execute(
            self.db,
            "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint, xact_commit "
            "FROM pg_stat_database WHERE datname = current_database()",
        )[0]
        return int(row[0]), int(row[1])

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.interval)
