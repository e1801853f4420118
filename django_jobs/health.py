"""Is this host's django-jobs healthy? The checks behind ``manage.py jobs health``.

Each check returns a ``Check`` with a status and a one-line detail; the
report's status is the worst of them, and its exit code follows the
monitoring-plugin convention (Nagios, Icinga, Sensu, Datadog's
``check_status``): 0 ok, 1 warning, 2 critical.

* **database** (critical): the jobs database answers a query. When it does
  not, nothing else can be checked, and the report stops there.
* **workers** (critical): at least one worker of the backend on this host
  heartbeated within ``WORKER_STALE_SECONDS``. A worker row that stopped
  heartbeating while its process still runs here is stuck (warning); one whose
  process is gone died without saying so (SIGKILL, OOM killer) and is only
  counted — its jobs were reaped already.
* **listen** (warning, PostgreSQL with ``LISTEN``): each live worker's LISTEN
  connection is in ``pg_stat_activity`` (it names itself
  ``django_jobs listen <worker id>``). Without it the worker still polls, so
  jobs are picked up, later.
* **backlog** (warning): no queue's oldest due job has waited longer than
  ``max_age`` seconds, and no queue holds more than ``max_depth`` ready jobs.
  Paused queues are left out: their backlog is on purpose.

"This host" is ``socket.gethostname()``, as the workers register it; run the
command where the workers run (in their container, for a pid namespace of
its own), or name the host. Another host's silent workers cannot be told
stuck from gone from here: they are counted as silent.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field
from datetime import timedelta
from enum import IntEnum
from pathlib import Path
from typing import Any

from django.db import DatabaseError, connections
from django.utils import timezone

from .backend import JobsBackend
from .models import Job, Worker, paused_queues
from .states import JobState
from .statistics import queue_stats
from .wakeup import LISTENER_PREFIX


class Status(IntEnum):
    OK = 0
    WARNING = 1
    CRITICAL = 2

    @property
    def label(self) -> str:
        return self.name.lower()


@dataclass(frozen=True, slots=True)
class Check:
    name: str
    status: Status
    detail: str


@dataclass(slots=True)
class Report:
    checks: list[Check] = field(default_factory=list)

    @property
    def status(self) -> Status:
        return max((check.status for check in self.checks), default=Status.OK)

    @property
    def reason(self) -> str:
        """One line: what is wrong (the worst checks' details), or what was found fine."""
        worst = [check.detail for check in self.checks if check.status == self.status]
        return f"{self.status.name}: {'; '.join(worst)}"

    def as_dict(self) -> dict[str, Any]:
        return {
            "status": self.status.label,
            "code": int(self.status),
            "reason": self.reason,
            "checks": [
                {"name": c.name, "status": c.status.label, "detail": c.detail} for c in self.checks
            ],
        }


def database_problem(db: str) -> str | None:
    """Why the database ``db`` does not answer, in one line, or None if it does."""
    try:
        with connections[db].cursor() as cursor:
            cursor.execute("SELECT 1")
    except DatabaseError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return f"database {db!r} unreachable: {first}"
    return None


def check_health(
    backend: JobsBackend, host: str, max_age: float | None, max_depth: int | None
) -> Report:
    """Run every check for ``backend``'s workers on ``host``; see the module docstring."""
    report = Report()
    problem = database_problem(backend.db)
    if problem is not None:
        report.checks.append(Check("database", Status.CRITICAL, problem))
        return report
    report.checks.append(Check("database", Status.OK, f"database {backend.db!r} reachable"))
    live = _workers(backend, host, report)
    if live and backend.settings.LISTEN and backend.engine.listens:
        report.checks.append(_listen(backend, live))
    report.checks.extend(_backlog(backend, max_age, max_depth))
    return report


def _workers(backend: JobsBackend, host: str, report: Report) -> list[Worker]:
    """Add the workers check; return the live workers."""
    stale_after = backend.settings.WORKER_STALE_SECONDS
    now = timezone.now()
    fresh = now - timedelta(seconds=stale_after)
    rows = list(
        Worker.objects.using(backend.db).filter(
            backend=backend.alias, host=host, stopped_at__isnull=True
        )
    )
    live = [w for w in rows if w.heartbeat_at >= fresh]
    silent = [w for w in rows if w.heartbeat_at < fresh]
    if host == socket.gethostname():
        stuck = [w for w in silent if _process_exists(w.pid)]
        dead = len(silent) - len(stuck)
        gone = f"; {dead} gone without stopping" if dead else ""
    else:
        # Their pids are another host's: looked up here, they named whatever
        # process of ours had the number, and a dead worker was called stuck.
        stuck = []
        gone = f"; {len(silent)} silent, their processes not checked from here" if silent else ""
    if not live:
        report.checks.append(
            Check(
                "workers",
                Status.CRITICAL,
                f"no worker of backend {backend.alias!r} on host {host} has heartbeated in "
                f"the last {stale_after:g}s{gone}",
            )
        )
    for worker in stuck:
        silence = (now - worker.heartbeat_at).total_seconds()
        report.checks.append(
            Check(
                "workers",
                Status.WARNING,
                f"worker {worker} has not heartbeated for {silence:.0f}s but its process "
                "still runs: stuck",
            )
        )
    if live:
        report.checks.append(
            Check("workers", Status.OK, f"{len(live)} worker(s) heartbeating on {host}{gone}")
        )
    return live


def _process_exists(pid: int) -> bool:
    """Whether ``pid`` still runs. A zombie does not: a worker killed with its
    supervisor stays one until the host's init reaps it, and it is gone, not stuck.
    """
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: it exists
        pass
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:  # no /proc (macOS, BSD): os.kill's answer stands
        return True
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


def _listen(backend: JobsBackend, live: list[Worker]) -> Check:
    with connections[backend.db].cursor() as cursor:
        cursor.execute(
            "SELECT application_name FROM pg_stat_activity WHERE application_name LIKE %s",
            [LISTENER_PREFIX + "%"],
        )
        listening = {row[0].removeprefix(LISTENER_PREFIX) for row in cursor.fetchall()}
    deaf = [w for w in live if str(w.id) not in listening]
    if deaf:
        names = ", ".join(str(w) for w in deaf)
        return Check(
            "listen",
            Status.WARNING,
            f"no LISTEN connection for worker(s) {names}: they poll every "
            f"{backend.settings.POLL_SECONDS:g}s instead of being woken",
        )
    return Check("listen", Status.OK, f"LISTEN connected for {len(live)} worker(s)")


def _backlog(backend: JobsBackend, max_age: float | None, max_depth: int | None) -> list[Check]:
    now = timezone.now()
    paused = paused_queues(backend.db) & backend.queues
    queues = sorted(backend.queues - paused)
    stats = queue_stats(
        Job.objects.using(backend.db).filter(queue__in=queues),
        queues,
        now,
        states=[JobState.QUEUED],
    )
    checks: list[Check] = []
    oldest, deepest = timedelta(0), (0, "")
    for queue in stats:
        waited = queue.waited(now) or timedelta(0)
        oldest = max(oldest, waited)
        deepest = max(deepest, (queue.ready, queue.queue))
        if max_age is not None and waited.total_seconds() > max_age:
            checks.append(
                Check(
                    "backlog",
                    Status.WARNING,
                    f"queue {queue.queue}: oldest due job has waited "
                    f"{waited.total_seconds():.0f}s (max {max_age:g}s)",
                )
            )
        if max_depth is not None and queue.ready > max_depth:
            checks.append(
                Check(
                    "backlog",
                    Status.WARNING,
                    f"queue {queue.queue}: {queue.ready} ready jobs (max {max_depth})",
                )
            )
    if not checks:
        where = f" (queue {deepest[1]})" if deepest[0] else ""
        skipped = f"; paused, not checked: {', '.join(sorted(paused))}" if paused else ""
        checks.append(
            Check(
                "backlog",
                Status.OK,
                f"oldest due job waited {oldest.total_seconds():.0f}s, "
                f"most ready jobs {deepest[0]}{where}{skipped}",
            )
        )
    return checks
